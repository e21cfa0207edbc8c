/* SPDX-License-Identifier: MIT */
/* Slots of the Redis Cluster test setup: hashing, the map, migration.
 * See test-cluster.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

#include "test-cluster-map.h"

/* How long every node may take to name a migrated slot's new owner:
 * SETSLOT NODE tells the masters at once, their replicas hear it with
 * the next ping, within a second. */
#define AGREE_MS 10000
/* Keys moved per MIGRATE, and how long one may take. */
#define MIGRATE_BATCH 100
#define MIGRATE_TIMEOUT_MS 5000

/* ---- hashing ------------------------------------------------------------ */

/* CRC16-XMODEM, bit by bit: the test's own, to check the library's
 * table-driven one against. */
static unsigned crc16_xmodem(const unsigned char *data, size_t len)
{
	unsigned crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (unsigned)data[i] << 8;
		for (int bit = 0; bit < 8; bit++)
			crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
	}
	return crc;
}

int test_cluster_keyslot(const char *key)
{
	size_t len = strlen(key);
	const char *open = strchr(key, '{');
	const char *close = open ? strchr(open + 1, '}') : NULL;

	/* "{}" or an unclosed "{" hash the whole key. */
	if (close && close > open + 1)
		return (int)(crc16_xmodem((const unsigned char *)open + 1, (size_t)(close - open - 1)) %
		             TEST_CLUSTER_SLOTS);
	return (int)(crc16_xmodem((const unsigned char *)key, len) % TEST_CLUSTER_SLOTS);
}

/* ---- the map ------------------------------------------------------------ */

bool test_cluster__askable(const test_cluster *tc, int i)
{
	return tc->nodes[i] && tc->nodes[i]->pid > 0 && !tc->frozen[i];
}

/* One entry of CLUSTER SLOTS: start, end, then the master as [ip, port,
 * id, ...] and its replicas.  Fills ports; false with why. */
static bool slot_range(const redisReply *entry, uint16_t *ports, GString *why)
{
	const redisReply *master;

	if (entry->type != REDIS_REPLY_ARRAY || entry->elements < 3 || entry->element[0]->type != REDIS_REPLY_INTEGER ||
	    entry->element[1]->type != REDIS_REPLY_INTEGER || entry->element[2]->type != REDIS_REPLY_ARRAY) {
		g_string_printf(why, "an entry of CLUSTER SLOTS is not [start, end, [ip, port, ...], ...]");
		return false;
	}
	master = entry->element[2];
	if (master->elements < 2 || master->element[0]->type != REDIS_REPLY_STRING ||
	    master->element[1]->type != REDIS_REPLY_INTEGER || entry->element[0]->integer < 0 ||
	    entry->element[1]->integer >= TEST_CLUSTER_SLOTS ||
	    entry->element[0]->integer > entry->element[1]->integer) {
		g_string_printf(why, "an entry of CLUSTER SLOTS has a bad range or master");
		return false;
	}
	if (strcmp(master->element[0]->str, "127.0.0.1") != 0) {
		g_string_printf(why, "CLUSTER SLOTS names slots %lld-%lld's master at '%s', not 127.0.0.1",
		                entry->element[0]->integer, entry->element[1]->integer, master->element[0]->str);
		return false;
	}
	for (long long s = entry->element[0]->integer; s <= entry->element[1]->integer; s++)
		ports[s] = (uint16_t)master->element[1]->integer;
	return true;
}

bool test_cluster__slot_map(test_cluster *tc, int i, uint16_t *ports, GString *why)
{
	redisReply *reply = test_redis_cmd(tc->nodes[i], "CLUSTER SLOTS");
	bool ok = reply && reply->type == REDIS_REPLY_ARRAY;

	memset(ports, 0, TEST_CLUSTER_SLOTS * sizeof(*ports));
	if (!ok)
		g_string_printf(why, "node %d (port %d) does not answer CLUSTER SLOTS: %s", i, tc->nodes[i]->port,
		                reply && reply->str ? reply->str : "no reply");
	for (size_t k = 0; ok && k < reply->elements; k++)
		ok = slot_range(reply->element[k], ports, why);
	if (reply)
		freeReplyObject(reply);
	return ok;
}

bool test_cluster__agreed_map(test_cluster *tc, uint16_t *ports, GString *why)
{
	uint16_t *other = g_new(uint16_t, TEST_CLUSTER_SLOTS);
	int first = -1;
	bool ok = true;

	for (int i = 0; i < tc->n_nodes && ok; i++) {
		if (!test_cluster__askable(tc, i))
			continue;
		if (first < 0) {
			first = i;
			ok = test_cluster__slot_map(tc, i, ports, why);
			continue;
		}
		ok = test_cluster__slot_map(tc, i, other, why);
		for (int s = 0; ok && s < TEST_CLUSTER_SLOTS; s++) {
			if (other[s] != ports[s]) {
				g_string_printf(why, "node %d names port %u as slot %d's master, node %d port %u",
				                first, ports[s], s, i, other[s]);
				ok = false;
			}
		}
	}
	if (first < 0) {
		g_string_printf(why, "no node runs unfrozen");
		ok = false;
	}
	g_free(other);
	return ok;
}

bool test_cluster__poll(bool (*cond)(void *), void *arg, int64_t timeout_ms)
{
	int64_t until = test_now_ms() + test_slack(timeout_ms);

	for (;;) {
		if (cond(arg))
			return true;
		if (test_now_ms() > until)
			return false;
		g_usleep(TEST_CLUSTER_POLL_MS * 1000);
	}
}

int test_cluster_owner(test_cluster *tc, int slot)
{
	uint16_t *ports = g_new(uint16_t, TEST_CLUSTER_SLOTS);
	GString *why = g_string_new(NULL);
	int owner = -1;

	assert_true(slot >= 0 && slot < TEST_CLUSTER_SLOTS);
	for (int i = 0; i < tc->n_nodes; i++) {
		if (test_cluster__askable(tc, i) && test_cluster__slot_map(tc, i, ports, why)) {
			owner = test_cluster_node_on(tc, ports[slot]);
			break;
		}
	}
	g_string_free(why, TRUE);
	g_free(ports);
	return owner;
}

int test_cluster_resource_on(test_cluster *tc, int node, const char *prefix, char *buf, size_t size)
{
	uint16_t *ports = g_new(uint16_t, TEST_CLUSTER_SLOTS);
	GString *why = g_string_new(NULL);
	int port = test_cluster_port(tc, node);
	int slot = -1;

	if (!prefix)
		prefix = "r";
	assert_null(strpbrk(prefix, "{}"));
	if (!test_cluster__agreed_map(tc, ports, why))
		fail_msg("no slot map to find a resource on node %d in: %s", node, why->str);
	/* About n_masters tries: the slots are spread evenly. */
	for (int n = 0; n < 1000000 && slot < 0; n++) {
		char key[512];
		int s;

		assert_true((size_t)g_snprintf(buf, size, "%s%d", prefix, n) < size);
		g_snprintf(key, sizeof(key), "dlock:{%s}", buf);
		s = test_cluster_keyslot(key);
		if (ports[s] == port)
			slot = s;
	}
	g_string_free(why, TRUE);
	g_free(ports);
	if (slot < 0)
		fail_msg("node %d (port %d) serves no slot: no resource lands on it", node, port);
	return slot;
}

/* ---- migration ---------------------------------------------------------- */

void test_cluster_migrate_begin(test_cluster *tc, int slot, int to)
{
	int from;

	assert_true(slot >= 0 && slot < TEST_CLUSTER_SLOTS);
	assert_true(to >= 0 && to < tc->n_nodes);
	assert_int_equal(tc->migrating_to[slot], -1);
	from = test_cluster_owner(tc, slot);
	if (from < 0)
		fail_msg("slot %d has no owner to migrate it from", slot);
	if (from == to)
		fail_msg("slot %d is on node %d already", slot, to);
	/* The target first, as an operator does: once the source says
	 * MIGRATING it sends clients there with -ASK. */
	test_cluster__expect_ok(tc, to, "CLUSTER SETSLOT IMPORTING",
	          test_redis_cmd(tc->nodes[to], "CLUSTER SETSLOT %d IMPORTING %s", slot, tc->ids[from]));
	test_cluster__expect_ok(tc, from, "CLUSTER SETSLOT MIGRATING",
	          test_redis_cmd(tc->nodes[from], "CLUSTER SETSLOT %d MIGRATING %s", slot, tc->ids[to]));
	tc->migrating_from[slot] = (int16_t)from;
	tc->migrating_to[slot] = (int16_t)to;
}

/* MIGRATE the keys of reply (CLUSTER GETKEYSINSLOT's) from source to
 * target in one command. */
static void migrate_batch(test_cluster *tc, int from, int to, const redisReply *keys)
{
	GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);
	char *what;
	redisReply *reply;

	g_ptr_array_add(argv, g_strdup("MIGRATE"));
	g_ptr_array_add(argv, g_strdup("127.0.0.1"));
	g_ptr_array_add(argv, g_strdup_printf("%d", tc->nodes[to]->port));
	g_ptr_array_add(argv, g_strdup(""));
	g_ptr_array_add(argv, g_strdup("0"));
	g_ptr_array_add(argv, g_strdup_printf("%d", MIGRATE_TIMEOUT_MS));
	if (tc->password) {
		g_ptr_array_add(argv, g_strdup("AUTH2"));
		g_ptr_array_add(argv, g_strdup("default"));
		g_ptr_array_add(argv, g_strdup(tc->password));
	}
	g_ptr_array_add(argv, g_strdup("KEYS"));
	for (size_t k = 0; k < keys->elements; k++)
		g_ptr_array_add(argv, g_strndup(keys->element[k]->str, keys->element[k]->len));
	reply = test_redis_cmd_argv(tc->nodes[from], (int)argv->len, (const char *const *)argv->pdata);
	g_ptr_array_unref(argv);
	/* NOKEY: every key expired since it was listed. */
	if (reply && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "NOKEY") == 0) {
		freeReplyObject(reply);
		return;
	}
	what = g_strdup_printf("MIGRATE of %zu keys to node %d", keys->elements, to);
	test_cluster__expect_ok(tc, from, what, reply);
	g_free(what);
}

int test_cluster_migrate_keys(test_cluster *tc, int slot)
{
	int from, to, moved = 0;

	assert_true(slot >= 0 && slot < TEST_CLUSTER_SLOTS);
	from = tc->migrating_from[slot];
	to = tc->migrating_to[slot];
	if (to < 0)
		fail_msg("slot %d is not being migrated (test_cluster_migrate_begin first)", slot);
	for (;;) {
		redisReply *keys = test_redis_cmd(tc->nodes[from], "CLUSTER GETKEYSINSLOT %d %d", slot, MIGRATE_BATCH);
		size_t n;

		if (!keys || keys->type != REDIS_REPLY_ARRAY)
			fail_msg("CLUSTER GETKEYSINSLOT %d on node %d: %s", slot, from,
			         keys && keys->str ? keys->str : "no reply");
		n = keys->elements;
		if (n)
			migrate_batch(tc, from, to, keys);
		freeReplyObject(keys);
		if (!n)
			return moved;
		moved += (int)n;
	}
}

typedef struct agree_wait {
	test_cluster *tc;
	int slot;
	int port;
	GString *why;
} agree_wait;

/* Every askable node names port as the slot's master. */
static bool agreed_now(void *arg)
{
	agree_wait *w = arg;
	uint16_t *ports = g_new(uint16_t, TEST_CLUSTER_SLOTS);
	bool ok = test_cluster__agreed_map(w->tc, ports, w->why);

	if (ok && ports[w->slot] != w->port) {
		g_string_printf(w->why, "the nodes name port %u as slot %d's master, not %d", ports[w->slot], w->slot,
		                w->port);
		ok = false;
	}
	g_free(ports);
	return ok;
}

void test_cluster_migrate_end(test_cluster *tc, int slot)
{
	agree_wait w = { tc, slot, 0, NULL };
	int from, to;

	assert_true(slot >= 0 && slot < TEST_CLUSTER_SLOTS);
	from = tc->migrating_from[slot];
	to = tc->migrating_to[slot];
	if (to < 0)
		fail_msg("slot %d is not being migrated (test_cluster_migrate_begin first)", slot);
	/* The source refuses SETSLOT NODE while it holds keys of the slot. */
	test_cluster_migrate_keys(tc, slot);
	/* The target first: once the source lets go, clients that it sends
	 * on with -MOVED must find the slot served. */
	test_cluster__expect_ok(tc, to, "CLUSTER SETSLOT NODE",
	          test_redis_cmd(tc->nodes[to], "CLUSTER SETSLOT %d NODE %s", slot, tc->ids[to]));
	test_cluster__expect_ok(tc, from, "CLUSTER SETSLOT NODE",
	          test_redis_cmd(tc->nodes[from], "CLUSTER SETSLOT %d NODE %s", slot, tc->ids[to]));
	for (int i = 0; i < tc->n_nodes; i++)
		if (i != to && i != from && test_cluster_is_master(tc, i))
			test_cluster__expect_ok(tc, i, "CLUSTER SETSLOT NODE",
			          test_redis_cmd(tc->nodes[i], "CLUSTER SETSLOT %d NODE %s", slot, tc->ids[to]));
	tc->migrating_from[slot] = -1;
	tc->migrating_to[slot] = -1;
	w.port = tc->nodes[to]->port;
	w.why = g_string_new(NULL);
	if (!test_cluster__poll(agreed_now, &w, AGREE_MS))
		fail_msg("slot %d migrated to node %d, but not every node says so within %lld ms: %s", slot, to,
		         (long long)test_slack(AGREE_MS), w.why->str);
	g_string_free(w.why, TRUE);
}

void test_cluster_migrate_slot(test_cluster *tc, int slot, int to)
{
	test_cluster_migrate_begin(tc, slot, to);
	test_cluster_migrate_keys(tc, slot);
	test_cluster_migrate_end(tc, slot);
}

/* ---- waiting for a new owner -------------------------------------------- */

typedef struct owner_wait {
	test_cluster *tc;
	int slot;
	int old_owner;
	int owner;
} owner_wait;

static bool owner_changed_now(void *arg)
{
	owner_wait *w = arg;
	uint16_t *ports = g_new(uint16_t, TEST_CLUSTER_SLOTS);
	GString *why = g_string_new(NULL);
	int owner = -1;

	if (test_cluster__agreed_map(w->tc, ports, why))
		owner = test_cluster_node_on(w->tc, ports[w->slot]);
	g_string_free(why, TRUE);
	g_free(ports);
	if (owner < 0 || owner == w->old_owner || !test_cluster_is_master(w->tc, owner))
		return false;
	w->owner = owner;
	return true;
}

int test_cluster_wait_owner_change(test_cluster *tc, int slot, int old_owner, int64_t timeout_ms)
{
	owner_wait w = { tc, slot, old_owner, -1 };

	assert_true(slot >= 0 && slot < TEST_CLUSTER_SLOTS);
	return test_cluster__poll(owner_changed_now, &w, timeout_ms) ? w.owner : -1;
}
