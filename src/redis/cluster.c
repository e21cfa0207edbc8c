/* SPDX-License-Identifier: MIT */
/*
 * Redis Cluster: which master serves a key, and what to do when a node
 * says another does (docs/redis.md, "Redis Cluster").
 *
 * Every key and channel of a resource carries the hash tag {R}, so one
 * slot -- CRC16-XMODEM of the tag, mod 16384 -- holds all of them, and
 * every script runs on the master of that slot.  The slot map comes from
 * CLUSTER SHARDS (CLUSTER SLOTS on a server without it), asked of a known
 * master or a seed, and is refreshed on demand: a node that moved a slot
 * says so (-MOVED: that slot's owner is updated and the command sent
 * there); a slot being migrated sends a missing key's command on
 * (-ASK: ASKING and the command back to back on the target, the map
 * unchanged); a script whose keys are split by a migration waits for its
 * end (-TRYAGAIN: a short pause); a cluster without a majority, or a
 * master gone (-CLUSTERDOWN, a connection refused or lost), refreshes the
 * map after a growing pause.  At most ROUTE_REDIRECTS_MAX of these per
 * command (a migration's TRYAGAIN is waited out, not counted), all within
 * the caller's deadline.
 *
 * The nodes once seen stay known until the backend closes (a handful):
 * a connection can point at its node without counting references, and
 * each node keeps its own pool of idle connections (guarded by the
 * backend's pool_mu).
 */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "error.h"
#include "internal.h"
#include "log.h"
#include "mutex.h"

#define SLOTS 16384
#define DEFAULT_PORT 6379
/* A -TRYAGAIN's pause: a migration moves a slot's keys in milliseconds. */
#define TRYAGAIN_PAUSE_US (50 * 1000)
/* After a master was lost: the first pause before the map is asked
 * again, doubling up to the cap (a replica is promoted in seconds). */
#define LOST_PAUSE_FIRST_US (100 * 1000)
#define LOST_PAUSE_CAP_US (1000 * 1000)

struct redis_cluster {
	GPtrArray *seeds;         /* redis_node *, from the URI */
	GMutex mu;                /* guards the fields below (rank REDIS_CLUSTER) */
	GPtrArray *nodes;         /* redis_node *, every node seen (seeds too) */
	redis_node *owner[SLOTS]; /* the master of each slot, or NULL */
	guint generation;         /* counts the changes of the map */
};

/* ---- slots --------------------------------------------------------------- */

/* CRC16-XMODEM: polynomial 0x1021, initial value 0, no reflection. */
static uint16_t crc16(const char *data, size_t len)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)((uint8_t)data[i] << 8);
		for (int bit = 0; bit < 8; bit++)
			crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
	}
	return crc;
}

uint16_t dlock__redis_crc16(const char *data, size_t len)
{
	return crc16(data, len);
}

/* The part of a key that is hashed: between the first '{' and the next
 * '}' when that is not empty, else the whole key. */
int dlock__redis_slot(const char *key)
{
	const char *open = strchr(key, '{');
	size_t len = strlen(key);

	if (open) {
		const char *close = strchr(open + 1, '}');

		if (close && close > open + 1)
			return crc16(open + 1, (size_t)(close - open - 1)) % SLOTS;
	}
	return crc16(key, len) % SLOTS;
}

/* ---- nodes --------------------------------------------------------------- */

static redis_node *node_new(const char *host, int port)
{
	redis_node *n = g_new0(redis_node, 1);

	n->host = g_strdup(host);
	n->port = port;
	/* An IPv6 literal in brackets, as MOVED does not write it but a
	 * reader needs it to tell the port. */
	n->addr = strchr(host, ':') ? g_strdup_printf("[%s]:%d", host, port)
	                            : g_strdup_printf("%s:%d", host, port);
	g_queue_init(&n->pool);
	return n;
}

static void node_free(gpointer data)
{
	redis_node *n = data;

	g_free(n->host);
	g_free(n->addr);
	g_free(n);
}

/* The node at host:port, added if new.  c->mu held. */
static redis_node *node_at_locked(redis_cluster *c, const char *host, int port)
{
	redis_node *n;

	for (guint i = 0; i < c->nodes->len; i++) {
		n = c->nodes->pdata[i];
		if (n->port == port && g_ascii_strcasecmp(n->host, host) == 0)
			return n;
	}
	n = node_new(host, port);
	g_ptr_array_add(c->nodes, n);
	return n;
}

redis_cluster *dlock__redis_cluster_new(const dlock__uri *uri)
{
	redis_cluster *c = g_new0(redis_cluster, 1);

	g_mutex_init(&c->mu);
	c->nodes = g_ptr_array_new_with_free_func(node_free);
	c->seeds = g_ptr_array_new();
	for (guint i = 0; i < uri->hosts->len; i++) {
		const dlock__host *h = uri->hosts->pdata[i];
		redis_node *n = node_at_locked(c, h->host, h->port ? h->port : DEFAULT_PORT);

		if (!g_ptr_array_find(c->seeds, n, NULL))
			g_ptr_array_add(c->seeds, n);
	}
	return c;
}

void dlock__redis_cluster_free(redis_cluster *c)
{
	if (!c)
		return;
	g_ptr_array_unref(c->seeds);
	g_ptr_array_unref(c->nodes);
	g_mutex_clear(&c->mu);
	g_free(c);
}

void dlock__redis_cluster_each_node(redis_cluster *c, void (*fn)(redis_node *n, void *arg), void *arg)
{
	GPtrArray *nodes;

	dlock__mutex_lock(&c->mu, DLOCK__RANK_REDIS_CLUSTER);
	/* Not g_ptr_array_copy(): the copy would free the nodes. */
	nodes = g_ptr_array_sized_new(c->nodes->len);
	for (guint i = 0; i < c->nodes->len; i++)
		g_ptr_array_add(nodes, c->nodes->pdata[i]);
	dlock__mutex_unlock(&c->mu);
	for (guint i = 0; i < nodes->len; i++)
		fn(nodes->pdata[i], arg);
	g_ptr_array_unref(nodes);
}

redis_node *dlock__redis_cluster_owner(redis_cluster *c, int slot, guint *ret_generation)
{
	redis_node *n;

	dlock__mutex_lock(&c->mu, DLOCK__RANK_REDIS_CLUSTER);
	n = c->owner[slot];
	if (ret_generation)
		*ret_generation = c->generation;
	dlock__mutex_unlock(&c->mu);
	return n;
}

guint dlock__redis_cluster_generation(redis_cluster *c)
{
	guint generation;

	dlock__mutex_lock(&c->mu, DLOCK__RANK_REDIS_CLUSTER);
	generation = c->generation;
	dlock__mutex_unlock(&c->mu);
	return generation;
}

/* "host:port", "[v6]:port" or "v6:port" (the last colon's): host
 * without brackets into a new string.  False if it is none of these. */
static bool split_addr(const char *addr, char **ret_host, int *ret_port)
{
	const char *colon = strrchr(addr, ':');
	char *end;
	long port;

	if (!colon || colon == addr)
		return false;
	port = strtol(colon + 1, &end, 10);
	if (*end || port <= 0 || port > 65535)
		return false;
	if (addr[0] == '[' && colon[-1] == ']')
		*ret_host = g_strndup(addr + 1, (size_t)(colon - addr - 2));
	else
		*ret_host = g_strndup(addr, (size_t)(colon - addr));
	*ret_port = (int)port;
	return true;
}

redis_node *dlock__redis_cluster_moved(redis_cluster *c, int slot, const char *addr)
{
	redis_node *n = NULL;
	char *host;
	int port;

	if (slot < 0 || slot >= SLOTS || !split_addr(addr, &host, &port))
		return NULL;
	dlock__mutex_lock(&c->mu, DLOCK__RANK_REDIS_CLUSTER);
	n = node_at_locked(c, host, port);
	if (c->owner[slot] != n) {
		c->owner[slot] = n;
		c->generation++;
	}
	dlock__mutex_unlock(&c->mu);
	g_free(host);
	return n;
}

redis_node *dlock__redis_cluster_node(redis_cluster *c, const char *addr)
{
	redis_node *n;
	char *host;
	int port;

	if (!split_addr(addr, &host, &port))
		return NULL;
	dlock__mutex_lock(&c->mu, DLOCK__RANK_REDIS_CLUSTER);
	n = node_at_locked(c, host, port);
	dlock__mutex_unlock(&c->mu);
	g_free(host);
	return n;
}

/* ---- the map ------------------------------------------------------------- */

/* A RESP2 map (a flat array of names and values): the value of name. */
static const redisReply *field(const redisReply *map, const char *name)
{
	if (map->type != REDIS_REPLY_ARRAY)
		return NULL;
	for (size_t i = 0; i + 1 < map->elements; i += 2)
		if (map->element[i]->type == REDIS_REPLY_STRING && strcmp(map->element[i]->str, name) == 0)
			return map->element[i + 1];
	return NULL;
}

/* A usable address: not empty, not "?" (a node that does not know its
 * own), and for a node that gave "" the one we asked. */
static const char *address_of(const redisReply *r, const redis_node *asked)
{
	if (!r || r->type != REDIS_REPLY_STRING || strcmp(r->str, "?") == 0)
		return NULL;
	return r->len > 0 ? r->str : asked->host;
}

/*
 * The map in a CLUSTER SHARDS reply, into owner (NULL for a slot no
 * online master serves).  Each shard: "slots" (start, end pairs) and
 * "nodes", each with "endpoint", "ip", "port", "role", "health".  Nodes
 * are added under c->mu.  Returns how many slots got an owner.
 */
static int map_from_shards(redis_cluster *c, const redisReply *reply, const redis_node *asked,
                           redis_node **owner)
{
	int covered = 0;

	for (size_t s = 0; s < reply->elements; s++) {
		const redisReply *shard = reply->element[s], *slots = field(shard, "slots"),
		                 *nodes = field(shard, "nodes");
		redis_node *master = NULL;

		if (!slots || !nodes || slots->type != REDIS_REPLY_ARRAY || nodes->type != REDIS_REPLY_ARRAY)
			continue;
		for (size_t i = 0; i < nodes->elements && !master; i++) {
			const redisReply *node = nodes->element[i], *role = field(node, "role"),
			                 *health = field(node, "health"), *port = field(node, "port");
			/* The endpoint is what redirections name (an IP, or a
			 * host name where the cluster prefers those). */
			const char *host = address_of(field(node, "endpoint"), asked);

			if (!host)
				host = address_of(field(node, "ip"), asked);

			if (!role || role->type != REDIS_REPLY_STRING || strcmp(role->str, "master") != 0 ||
			    (health && health->type == REDIS_REPLY_STRING && strcmp(health->str, "online") != 0) ||
			    !port || port->type != REDIS_REPLY_INTEGER || !host)
				continue;
			master = node_at_locked(c, host, (int)port->integer);
		}
		for (size_t i = 0; master && i + 1 < slots->elements; i += 2) {
			long long from = slots->element[i]->integer, to = slots->element[i + 1]->integer;

			for (long long slot = MAX(from, 0); slot <= to && slot < SLOTS; slot++) {
				owner[slot] = master;
				covered++;
			}
		}
	}
	return covered;
}

/* The same from CLUSTER SLOTS: [start, end, [ip, port, id], replicas...]. */
static int map_from_slots(redis_cluster *c, const redisReply *reply, const redis_node *asked,
                          redis_node **owner)
{
	int covered = 0;

	for (size_t s = 0; s < reply->elements; s++) {
		const redisReply *range = reply->element[s], *master;
		const char *host;
		redis_node *n;

		if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
		    range->element[0]->type != REDIS_REPLY_INTEGER ||
		    range->element[1]->type != REDIS_REPLY_INTEGER)
			continue;
		master = range->element[2];
		if (master->type != REDIS_REPLY_ARRAY || master->elements < 2 ||
		    master->element[1]->type != REDIS_REPLY_INTEGER)
			continue;
		host = address_of(master->element[0], asked);
		if (!host)
			continue;
		n = node_at_locked(c, host, (int)master->element[1]->integer);
		for (long long slot = MAX(range->element[0]->integer, 0);
		     slot <= range->element[1]->integer && slot < SLOTS; slot++) {
			owner[slot] = n;
			covered++;
		}
	}
	return covered;
}

static bool error_starts(const redisReply *reply, const char *prefix)
{
	return reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, prefix, strlen(prefix)) == 0;
}

/*
 * Ask node n for the map, by deadline_us: connect, AUTH, CLUSTER SHARDS
 * (CLUSTER SLOTS where the server does not know SHARDS); the map replaces
 * the one in use.  DLOCK_ECONFIG for a server that is no cluster node.
 */
static int ask_node(redis_backend *b, redis_node *n, dlock__waiter *waiter, int64_t deadline_us)
{
	redis_cluster *c = b->cluster;
	char label[300];
	const char *shards[2] = { "CLUSTER", "SHARDS" }, *slots[2] = { "CLUSTER", "SLOTS" };
	redisReply *reply = NULL;
	redisContext *ctx;
	redis_node **owner;
	bool from_shards = true;
	int rc, covered;

	g_snprintf(label, sizeof(label), "redis+cluster node %s", n->addr);
	ctx = dlock__redis_dial_host(b, label, n->host, n->port, waiter, deadline_us, &rc);
	if (!ctx)
		return rc;
	/* A cancel (the subscriber stopping) ends the questions at once: a
	 * frozen node would take a command timeout each. */
	rc = dlock__waiter_io_begin(waiter, ctx->fd) ? DLOCK_OK : DLOCK_ECANCELED;
	if (rc == DLOCK_OK)
		rc = dlock__redis_authenticate(b, ctx, deadline_us);
	if (rc == DLOCK_OK)
		rc = dlock__redis_setup_command(b, label, ctx, deadline_us, "CLUSTER SHARDS", 2, shards, &reply);
	if (rc == DLOCK_OK && error_starts(reply, "ERR") && strstr(reply->str, "cluster support disabled")) {
		rc = dlock__error(DLOCK_ECONFIG, "%s: the server is not in cluster mode "
		                  "(cluster-enabled no): use redis://", label);
	} else if (rc == DLOCK_OK && reply->type == REDIS_REPLY_ERROR) {
		freeReplyObject(reply);
		reply = NULL;
		from_shards = false;
		rc = dlock__redis_setup_command(b, label, ctx, deadline_us, "CLUSTER SLOTS", 2, slots, &reply);
	}
	if (dlock__waiter_io_end(waiter) || rc == DLOCK_ECANCELED)
		rc = dlock__error(DLOCK_ECANCELED, "%s: canceled", label);
	redisFree(ctx);
	if (rc == DLOCK_OK && reply->type != REDIS_REPLY_ARRAY)
		rc = reply->type == REDIS_REPLY_ERROR
		         ? dlock__redis_reply_error(b, reply, "CLUSTER SLOTS")
		         : dlock__error(DLOCK_EBACKEND, "%s: CLUSTER SLOTS: not a slot map", label);
	if (rc != DLOCK_OK) {
		if (reply)
			freeReplyObject(reply);
		return rc;
	}
	owner = g_new0(redis_node *, SLOTS);
	dlock__mutex_lock(&c->mu, DLOCK__RANK_REDIS_CLUSTER);
	covered = from_shards ? map_from_shards(c, reply, n, owner) : map_from_slots(c, reply, n, owner);
	/* A node that serves no slot yet (a cluster being formed) or knows
	 * none says nothing about where keys are: keep the map in use. */
	if (covered > 0) {
		if (memcmp(c->owner, owner, sizeof(c->owner)) != 0)
			c->generation++;
		memcpy(c->owner, owner, sizeof(c->owner));
	}
	dlock__mutex_unlock(&c->mu);
	g_free(owner);
	freeReplyObject(reply);
	if (covered == 0)
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: serves no slot (the cluster is not formed)", label);
	if (covered < SLOTS)
		dlock__log(b->logger, DLOCK_LOG_INFO, "%s: %d of %d slots have an online master", label,
		           covered, SLOTS);
	return DLOCK_OK;
}

/*
 * The nodes to ask for the map, in order: the masters of the map in use
 * (most likely to know), then the seeds, then any other node seen.
 */
static GPtrArray *nodes_to_ask(redis_cluster *c)
{
	GPtrArray *order = g_ptr_array_new();

	dlock__mutex_lock(&c->mu, DLOCK__RANK_REDIS_CLUSTER);
	for (int slot = 0; slot < SLOTS; slot++)
		if (c->owner[slot] && !g_ptr_array_find(order, c->owner[slot], NULL))
			g_ptr_array_add(order, c->owner[slot]);
	for (guint i = 0; i < c->seeds->len; i++)
		if (!g_ptr_array_find(order, c->seeds->pdata[i], NULL))
			g_ptr_array_add(order, c->seeds->pdata[i]);
	for (guint i = 0; i < c->nodes->len; i++)
		if (!g_ptr_array_find(order, c->nodes->pdata[i], NULL))
			g_ptr_array_add(order, c->nodes->pdata[i]);
	dlock__mutex_unlock(&c->mu);
	return order;
}

int dlock__redis_cluster_refresh(redis_backend *b, dlock__waiter *waiter, int64_t deadline_us)
{
	GPtrArray *order = nodes_to_ask(b->cluster);
	GString *tried = g_string_new(NULL);
	int rc = DLOCK_EUNAVAILABLE;

	for (guint i = 0; i < order->len; i++) {
		redis_node *n = order->pdata[i];
		int64_t left = dlock__remaining_us(deadline_us);
		/* A share of what is left, so a silent node leaves time for
		 * the next; at least 250 ms, at most a command timeout. */
		int64_t share = MAX(MIN(left / (int64_t)(order->len - i), b->command_timeout_ms * 1000),
		                    MIN(left, 250 * 1000));

		if (left <= 0)
			break;
		rc = ask_node(b, n, waiter, dlock__mono_us() + share);
		if (rc == DLOCK_OK || rc == DLOCK_ECANCELED || rc == DLOCK_ECONFIG || rc == DLOCK_EACCES)
			break;
		g_string_append_printf(tried, "%s%s", tried->len ? "; " : "", dlock_last_error_message());
	}
	g_ptr_array_unref(order);
	if (rc != DLOCK_OK && rc != DLOCK_ECANCELED && rc != DLOCK_ECONFIG && rc != DLOCK_EACCES)
		rc = dlock__error(DLOCK_EUNAVAILABLE, "%s: no node gave the slot map (%s)", b->label,
		                  tried->len ? tried->str : "no time left to ask");
	g_string_free(tried, TRUE);
	return rc;
}

int dlock__redis_cluster_route(redis_backend *b, int slot, dlock__waiter *waiter, int64_t deadline_us,
                               redis_node **ret)
{
	redis_node *n = dlock__redis_cluster_owner(b->cluster, slot, NULL);
	int rc;

	if (n) {
		*ret = n;
		return DLOCK_OK;
	}
	rc = dlock__redis_cluster_refresh(b, waiter, deadline_us);
	if (rc != DLOCK_OK)
		return rc;
	n = dlock__redis_cluster_owner(b->cluster, slot, NULL);
	if (!n)
		return dlock__error(DLOCK_EUNAVAILABLE, "%s: no master serves slot %d (the cluster is "
		                    "down or being changed)", b->label, slot);
	*ret = n;
	return DLOCK_OK;
}

/* ---- redirections -------------------------------------------------------- */

redis_redirect dlock__redis_redirect_of(const redisReply *reply)
{
	redis_redirect r = { REDIRECT_NONE, -1, "" };
	const char *text;
	char *end;

	if (!reply || reply->type != REDIS_REPLY_ERROR)
		return r;
	if (error_starts(reply, "TRYAGAIN")) {
		r.kind = REDIRECT_TRYAGAIN;
	} else if (error_starts(reply, "CLUSTERDOWN")) {
		r.kind = REDIRECT_DOWN;
	} else if (error_starts(reply, "MOVED ") || error_starts(reply, "ASK ")) {
		text = strchr(reply->str, ' ') + 1;
		r.slot = (int)strtol(text, &end, 10);
		if (*end == ' ' && r.slot >= 0 && r.slot < SLOTS && strlen(end + 1) < sizeof(r.addr)) {
			r.kind = reply->str[0] == 'M' ? REDIRECT_MOVED : REDIRECT_ASK;
			g_strlcpy(r.addr, end + 1, sizeof(r.addr));
		}
	}
	return r;
}

void dlock__redis_route_init(redis_route *route, const char *key)
{
	memset(route, 0, sizeof(*route));
	route->slot = key ? dlock__redis_slot(key) : -1;
}

/* A pause within the deadline, which a cancel of waiter ends. */
static int pause_for(redis_backend *b, dlock__waiter *waiter, int64_t us, int64_t deadline_us)
{
	int64_t until = MIN(dlock__mono_us() + us, deadline_us);

	if (!waiter) {
		int64_t left = until - dlock__mono_us();

		if (left > 0)
			g_usleep((gulong)left);
		return DLOCK_OK;
	}
	if (dlock__waiter_sleep(waiter, dlock__waiter_seq(waiter), until) == DLOCK_ECANCELED)
		return dlock__error(DLOCK_ECANCELED, "%s: canceled", b->label);
	return DLOCK_OK;
}

/* Count one more redirection or retry; the error that ends the command
 * when it is one too many, or its time is up. */
static int count_one(redis_backend *b, redis_route *route, const char *what)
{
	if (++route->redirects > ROUTE_REDIRECTS_MAX)
		return dlock__error(DLOCK_EUNAVAILABLE, "%s (slot %d), still after %d redirections",
		                    what, route->slot, ROUTE_REDIRECTS_MAX);
	return DLOCK_OK;
}

int dlock__redis_route_follow(redis_backend *b, redis_route *route, const redis_redirect *r,
                              dlock__waiter *waiter, int64_t deadline_us)
{
	char what[256];
	int rc;

	switch (r->kind) {
	case REDIRECT_MOVED:
	case REDIRECT_ASK:
		route->ask = NULL;
		g_snprintf(what, sizeof(what), "%s: sent on to %s", b->label, r->addr);
		if ((rc = count_one(b, route, what)) != DLOCK_OK)
			return rc;
		if (r->kind == REDIRECT_ASK) {
			route->ask = dlock__redis_cluster_node(b->cluster, r->addr);
		} else if (dlock__redis_cluster_moved(b->cluster, r->slot, r->addr)) {
			route->lost_pause_us = 0;
			break;
		}
		if (!route->ask)
			return dlock__error(DLOCK_EBACKEND, "%s: sent on to '%s', which is no address",
			                    b->label, r->addr);
		break;
	case REDIRECT_TRYAGAIN:
		/* The migration's end is not a redirection: it is waited for
		 * within the deadline, however many pauses that takes.  An
		 * ASK's target answers it too (the keys a script names are
		 * split, or none is there yet): tried there again, and the
		 * ASK that led there not counted. */
		if (route->ask && route->redirects > 0)
			route->redirects--;
		if (dlock__remaining_us(deadline_us) <= TRYAGAIN_PAUSE_US)
			return dlock__error(DLOCK_EUNAVAILABLE, "%s: slot %d is being migrated (TRYAGAIN) "
			                    "and the time ran out", b->label, route->slot);
		return pause_for(b, waiter, TRYAGAIN_PAUSE_US, deadline_us);
	case REDIRECT_DOWN:
		route->ask = NULL;
		g_snprintf(what, sizeof(what), "%s: the cluster is down (CLUSTERDOWN)", b->label);
		return dlock__redis_route_lost(b, route, waiter, deadline_us, what);
	case REDIRECT_NONE:
		break;
	}
	return DLOCK_OK;
}

int dlock__redis_route_lost(redis_backend *b, redis_route *route, dlock__waiter *waiter,
                            int64_t deadline_us, const char *what)
{
	int rc;

	route->ask = NULL;
	if ((rc = count_one(b, route, what)) != DLOCK_OK)
		return rc;
	if (route->lost_pause_us > 0) {
		if (dlock__remaining_us(deadline_us) <= route->lost_pause_us)
			return dlock__error(DLOCK_EUNAVAILABLE, "%s, and the time ran out", what);
		rc = pause_for(b, waiter, route->lost_pause_us, deadline_us);
		if (rc != DLOCK_OK)
			return rc;
	}
	route->lost_pause_us = route->lost_pause_us ? MIN(route->lost_pause_us * 2, LOST_PAUSE_CAP_US)
	                                            : LOST_PAUSE_FIRST_US;
	rc = dlock__redis_cluster_refresh(b, waiter, deadline_us);
	return rc == DLOCK_EUNAVAILABLE ? DLOCK_OK : rc; /* the next try says what is wrong */
}
