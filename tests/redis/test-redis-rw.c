/* SPDX-License-Identifier: MIT */
/*
 * Read-write locks on Redis (docs/redis.md, "Read-write locks"): READ
 * holds are a sorted set at the lock's key, EXCLUSIVE and WRITE holds the
 * string; readers and writers wait in the one queue in arrival order.
 * Readers share, a writer or a mutex holder excludes every other hold, a
 * reader that comes after a queued writer waits behind it, a downgrade
 * lets no queued writer in, an upgrade is refused at once, tokens
 * increase across modes, read holds are renewed and reported lost when
 * their member goes.  After each test nothing but the fencing counter is
 * left.
 *
 * Readers in other processes are this program run as a worker ("reader
 * URI RESOURCE"): it takes a READ hold, says "granted TOKEN", and holds
 * until its stdin ends (then releases and says "released CODE").
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "dlock.h"
#include "test-proxy.h"
#include "test-redis.h"
#include "test-rw.h"
#include "test-waiters.h"

#define READERS 3
#define BOUND_MS 5000

static test_redis *server;
static char *uri;
static char *marker;

/* ---- the reader worker ------------------------------------------------ */

static int reader_worker(const char *worker_uri, const char *resource)
{
	dlock_client *client;
	dlock_lock *lock;
	char buf[16];
	int rc;

	if (dlock_client_new(worker_uri, &client) != DLOCK_OK ||
	    dlock_lock_new(client, resource, &lock) != DLOCK_OK ||
	    dlock_lock_set_mode(lock, DLOCK_MODE_READ) != DLOCK_OK)
		return 2;
	rc = dlock_acquire(lock, 10000);
	/* Each last line flushed, and the client's threads joined, before
	 * the exit: the leak check at exit of the sanitized build must not
	 * meet a thread of the client, nor lose the line if it aborts. */
	if (rc != DLOCK_OK) {
		printf("failed %s\n", dlock_code_name(rc));
		fflush(stdout);
		dlock_lock_free(lock);
		dlock_client_free(client);
		return 0;
	}
	printf("granted %llu\n", (unsigned long long)dlock_fencing_token(lock));
	fflush(stdout);
	while (fgets(buf, sizeof(buf), stdin))
		;
	printf("released %s\n", dlock_code_name(dlock_release(lock)));
	fflush(stdout);
	dlock_lock_free(lock);
	dlock_client_free(client);
	return 0;
}

typedef struct reader_proc {
	pid_t pid;
	int in_fd;
	int out_fd;
	uint64_t token;
} reader_proc;

static void reader_start(reader_proc *r, const char *worker_uri, const char *resource)
{
	const char *args[] = { "reader", worker_uri, resource, NULL };
	char line[64];

	r->pid = test_spawn_worker_io(args, &r->in_fd, &r->out_fd);
	if (!test_read_line(r->out_fd, line, sizeof(line), BOUND_MS) || !g_str_has_prefix(line, "granted "))
		fail_msg("reader %d: no grant (\"%s\")", (int)r->pid, line);
	r->token = g_ascii_strtoull(line + 8, NULL, 10);
}

/* Close its stdin: it releases, says so, and ends. */
static void reader_finish(reader_proc *r)
{
	char line[64] = "";

	close(r->in_fd);
	if (!test_read_line(r->out_fd, line, sizeof(line), BOUND_MS))
		fail_msg("reader %d did not say it released", (int)r->pid);
	assert_string_equal(line, "released DLOCK_OK");
	close(r->out_fd);
	assert_int_equal(test_wait_worker(r->pid), 0);
}

static void reader_kill(reader_proc *r)
{
	kill(r->pid, SIGKILL);
	test_wait_child(r->pid, NULL);
	close(r->in_fd);
	close(r->out_fd);
}

/* ---- this process's holds --------------------------------------------- */

/* A handle-owned lock in mode on a client of its own (so every handle is
 * an owner, as another process would be). */
static void open_mode(test_holder *h, const char *resource, dlock_mode mode)
{
	test_holder_open(h, uri, resource, NULL);
	assert_int_equal(dlock_lock_set_mode(h->lock, mode), DLOCK_OK);
}

static char *key_of(const char *resource)
{
	return g_strdup_printf("dlock:{%s}", resource);
}

static char *key_type(const char *key)
{
	redisReply *reply = test_redis_cmd(server, "TYPE %s", key);
	char *type;

	assert_non_null(reply);
	type = g_strdup(reply->str);
	freeReplyObject(reply);
	return type;
}

static void assert_key_type(const char *key, const char *want)
{
	char *type = key_type(key);

	assert_string_equal(type, want);
	g_free(type);
}

/* The end of a test: close the holders given (NULL-terminated), check
 * that nothing but the fencing counter is left of key, and free key. */
static void finish(char *key, ...)
{
	test_holder *h;
	va_list ap;

	va_start(ap, key);
	while ((h = va_arg(ap, test_holder *)))
		test_holder_close(h);
	va_end(ap);
	test_queue_assert_only_fence(server, key);
	g_free(key);
}

/* What a query says: the mode and the number of holders. */
static void assert_query(dlock_lock *lock, dlock_held_as mode, size_t holders)
{
	dlock_info *info;

	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_mode(info), mode);
	assert_int_equal(dlock_info_holders(info), holders);
	dlock_info_free(info);
}

/* ---- tests ------------------------------------------------------------ */

static void test_readers_share_across_processes(void **state)
{
	const char *resource = "rw/share";
	char *key = key_of(resource);
	reader_proc rs[READERS];
	test_holder mine, writer, mutex;

	for (int i = 0; i < READERS; i++)
		reader_start(&rs[i], uri, resource);
	open_mode(&mine, resource, DLOCK_MODE_READ);
	open_mode(&writer, resource, DLOCK_MODE_WRITE);
	open_mode(&mutex, resource, DLOCK_MODE_EXCLUSIVE);
	assert_int_equal(dlock_acquire(mine.lock, 0), DLOCK_OK);
	/* Every reader is one member of the set at the lock's key. */
	assert_key_type(key, "zset");
	assert_int_equal(test_redis_int(server, "ZCARD %s", key), READERS + 1);
	assert_true(test_redis_int(server, "PTTL %s", key) > 0);
	assert_query(mine.lock, DLOCK_HELD_SHARED, READERS + 1);
	/* Readers keep writers and mutex holders out. */
	assert_int_equal(dlock_acquire(writer.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_acquire(mutex.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_acquire(mutex.lock, 200), DLOCK_ETIMEDOUT);
	for (int i = 0; i < READERS; i++)
		reader_finish(&rs[i]);
	/* Still held by us alone. */
	assert_int_equal(dlock_acquire(writer.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(mine.lock), DLOCK_OK);
	assert_int_equal(test_redis_int(server, "EXISTS %s", key), 0);
	assert_int_equal(dlock_acquire(writer.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(writer.lock), DLOCK_OK);
	finish(key, &mutex, &writer, &mine, NULL);
}

static void test_writer_excludes_readers_and_writers(void **state)
{
	const char *resource = "rw/writer";
	char *key = key_of(resource);
	test_holder writer, reader, other, mutex;
	test_acquire_thread *t;

	open_mode(&writer, resource, DLOCK_MODE_WRITE);
	open_mode(&reader, resource, DLOCK_MODE_READ);
	open_mode(&other, resource, DLOCK_MODE_WRITE);
	open_mode(&mutex, resource, DLOCK_MODE_EXCLUSIVE);
	assert_int_equal(dlock_acquire(writer.lock, 0), DLOCK_OK);
	assert_key_type(key, "string");
	assert_query(reader.lock, DLOCK_HELD_EXCLUSIVE, 1);
	assert_int_equal(dlock_acquire(reader.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_acquire(other.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_acquire(mutex.lock, 0), DLOCK_EBUSY);
	/* A waiting reader gets it from the writer's release. */
	t = test_acquire_thread_start(reader.lock, 30000);
	test_queue_wait_len(server, key, 1, BOUND_MS);
	assert_false(test_acquire_thread_done(t));
	assert_int_equal(dlock_release(writer.lock), DLOCK_OK);
	assert_int_equal(test_acquire_thread_join(t, BOUND_MS), DLOCK_OK);
	assert_true(dlock_fencing_token(reader.lock) > 0);
	assert_key_type(key, "zset");
	assert_int_equal(dlock_release(reader.lock), DLOCK_OK);
	/* A mutex holder keeps readers out too. */
	assert_int_equal(dlock_acquire(mutex.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(reader.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(mutex.lock), DLOCK_OK);
	finish(key, &mutex, &other, &reader, &writer, NULL);
}

static void test_reader_after_a_queued_writer_waits_behind_it(void **state)
{
	const char *resource = "rw/fair";
	char *key = key_of(resource);
	test_holder r1, w, r2, r3, w2;
	test_acquire_thread *tw, *tr2, *tr3, *tw2;

	open_mode(&r1, resource, DLOCK_MODE_READ);
	open_mode(&w, resource, DLOCK_MODE_WRITE);
	open_mode(&r2, resource, DLOCK_MODE_READ);
	open_mode(&r3, resource, DLOCK_MODE_READ);
	open_mode(&w2, resource, DLOCK_MODE_EXCLUSIVE);
	assert_int_equal(dlock_acquire(r1.lock, 0), DLOCK_OK);
	tw = test_acquire_thread_start(w.lock, 30000);
	test_queue_wait_len(server, key, 1, BOUND_MS);
	/* The lock is held by a reader only, yet a reader that comes now
	 * waits: a writer is queued ahead of it. */
	assert_int_equal(dlock_acquire(r2.lock, 0), DLOCK_EBUSY);
	tr2 = test_acquire_thread_start(r2.lock, 30000);
	test_queue_wait_len(server, key, 2, BOUND_MS);
	tr3 = test_acquire_thread_start(r3.lock, 30000);
	test_queue_wait_len(server, key, 3, BOUND_MS);
	tw2 = test_acquire_thread_start(w2.lock, 30000);
	test_queue_wait_len(server, key, 4, BOUND_MS);
	assert_false(test_acquire_thread_done(tr2));

	/* The last reader's release hands it to the writer alone. */
	assert_int_equal(dlock_release(r1.lock), DLOCK_OK);
	assert_int_equal(test_acquire_thread_join(tw, BOUND_MS), DLOCK_OK);
	assert_true(dlock_fencing_token(w.lock) > dlock_fencing_token(r1.lock));
	assert_false(test_acquire_thread_done(tr2));
	assert_int_equal(test_queue_len(server, key), 3);

	/* The writer's release hands it to both readers at the head, and not
	 * to the writer behind them. */
	assert_int_equal(dlock_release(w.lock), DLOCK_OK);
	assert_int_equal(test_acquire_thread_join(tr2, BOUND_MS), DLOCK_OK);
	assert_int_equal(test_acquire_thread_join(tr3, BOUND_MS), DLOCK_OK);
	assert_true(dlock_fencing_token(r2.lock) > dlock_fencing_token(w.lock));
	assert_true(dlock_fencing_token(r3.lock) > dlock_fencing_token(w.lock));
	assert_int_equal(test_redis_int(server, "ZCARD %s", key), 2);
	assert_false(test_acquire_thread_done(tw2));

	/* One reader leaving does not let the writer in; the last does. */
	assert_int_equal(dlock_release(r2.lock), DLOCK_OK);
	assert_false(test_acquire_thread_done(tw2));
	assert_int_equal(test_queue_len(server, key), 1);
	assert_int_equal(dlock_release(r3.lock), DLOCK_OK);
	assert_int_equal(test_acquire_thread_join(tw2, BOUND_MS), DLOCK_OK);
	assert_true(dlock_fencing_token(w2.lock) > dlock_fencing_token(r3.lock));
	assert_int_equal(dlock_release(w2.lock), DLOCK_OK);
	finish(key, &w2, &r3, &r2, &w, &r1, NULL);
}

/* Two handles of one thread owner, WRITE and READ, on their own client. */
typedef struct owner {
	dlock_client *client;
	dlock_lock *write;
	dlock_lock *read;
} owner;

static void owner_open(owner *o, const char *owner_uri, const char *resource)
{
	assert_int_equal(dlock_client_new(owner_uri, &o->client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(o->client, resource, &o->write), DLOCK_OK);
	assert_int_equal(dlock_lock_new(o->client, resource, &o->read), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(o->write, DLOCK_MODE_WRITE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(o->read, DLOCK_MODE_READ), DLOCK_OK);
}

static void owner_close(owner *o)
{
	dlock_lock_free(o->read);
	dlock_lock_free(o->write);
	dlock_client_free(o->client);
}

static void test_downgrade_keeps_the_read_hold_and_lets_no_queued_writer_in(void **state)
{
	const char *resource = "rw/downgrade";
	char *key = key_of(resource);
	test_holder w2, late;
	test_acquire_thread *tw2;
	int64_t start;
	owner o;

	owner_open(&o, uri, resource);
	open_mode(&w2, resource, DLOCK_MODE_WRITE);
	open_mode(&late, resource, DLOCK_MODE_READ);
	assert_int_equal(dlock_acquire(o.write, 0), DLOCK_OK);
	tw2 = test_acquire_thread_start(w2.lock, 30000);
	test_queue_wait_len(server, key, 1, BOUND_MS);

	/* Granted at once, although a writer is queued. */
	start = test_now_ms();
	assert_int_equal(dlock_acquire(o.read, 30000), DLOCK_OK);
	assert_true(test_now_ms() - start < 1000);
	assert_true(dlock_fencing_token(o.read) > dlock_fencing_token(o.write));
	assert_true(dlock_held(o.write));
	assert_true(dlock_held(o.read));

	/* The write's release keeps the read hold, alone in the set. */
	assert_int_equal(dlock_release(o.write), DLOCK_OK);
	assert_key_type(key, "zset");
	assert_int_equal(test_redis_int(server, "ZCARD %s", key), 1);
	assert_true(dlock_held(o.read));
	assert_false(test_acquire_thread_done(tw2));
	/* A reader arriving now is behind the queued writer. */
	assert_int_equal(dlock_acquire(late.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(o.read), DLOCK_OK);
	assert_int_equal(test_acquire_thread_join(tw2, BOUND_MS), DLOCK_OK);
	assert_true(dlock_fencing_token(w2.lock) > dlock_fencing_token(o.read));

	/* A read hold released before the write: the write's release is then
	 * a plain one, and the queued writer gets it. */
	tw2 = NULL;
	assert_int_equal(dlock_release(w2.lock), DLOCK_OK);
	assert_int_equal(dlock_acquire(o.write, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(o.read, 0), DLOCK_OK);
	tw2 = test_acquire_thread_start(w2.lock, 30000);
	test_queue_wait_len(server, key, 2, BOUND_MS);
	assert_int_equal(dlock_release(o.read), DLOCK_OK);
	assert_int_equal(test_queue_len(server, key), 1);
	assert_int_equal(dlock_release(o.write), DLOCK_OK);
	assert_int_equal(test_acquire_thread_join(tw2, BOUND_MS), DLOCK_OK);
	assert_key_type(key, "string");
	assert_int_equal(dlock_release(w2.lock), DLOCK_OK);
	owner_close(&o);
	finish(key, &late, &w2, NULL);
}

static void test_downgraded_read_hold_is_renewed_under_the_write_and_after(void **state)
{
	const char *resource = "rw/downgrade-renew";
	char *short_uri = test_redis_uri(server, "?ttl=300ms");
	char *key = key_of(resource);
	test_holder other;
	owner o;

	owner_open(&o, short_uri, resource);
	open_mode(&other, resource, DLOCK_MODE_WRITE);
	assert_int_equal(dlock_acquire(o.write, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(o.read, 0), DLOCK_OK);
	/* Several leases long, under the write... */
	g_usleep(1200 * 1000);
	assert_true(dlock_held(o.write));
	assert_true(dlock_held(o.read));
	assert_int_equal(dlock_release(o.write), DLOCK_OK);
	/* ...and as a reader of its own. */
	g_usleep(1200 * 1000);
	assert_true(dlock_held(o.read));
	assert_key_type(key, "zset");
	assert_int_equal(dlock_acquire(other.lock, 0), DLOCK_EBUSY);
	assert_int_equal(dlock_release(o.read), DLOCK_OK);
	assert_int_equal(dlock_acquire(other.lock, 0), DLOCK_OK);
	assert_int_equal(dlock_release(other.lock), DLOCK_OK);
	owner_close(&o);
	finish(key, &other, NULL);
	g_free(short_uri);
}

/* The checks shared with the other backends (tests/helpers/test-rw.c),
 * the downgrade's in its fair form: Redis serves arrival order. */
static void test_modes_share_and_exclude_as_on_every_backend(void **state)
{
	test_rw_share_and_exclude(uri, "rw/contract");
	finish(key_of("rw/contract"), NULL);
}

static void test_downgrade_as_on_every_fair_backend(void **state)
{
	test_rw_downgrade(uri, "rw/down-shared", true);
	finish(key_of("rw/down-shared"), NULL);
}

static void test_upgrade_returns_edeadlk_at_once(void **state)
{
	test_rw_upgrade_refused(uri, "rw/upgrade");
	finish(key_of("rw/upgrade"), NULL);
}

static void test_tokens_increase_across_modes(void **state)
{
	const dlock_mode modes[] = { DLOCK_MODE_WRITE, DLOCK_MODE_READ, DLOCK_MODE_EXCLUSIVE,
	                             DLOCK_MODE_READ, DLOCK_MODE_READ, DLOCK_MODE_WRITE };
	const char *resource = "rw/tokens";
	char *key = key_of(resource);
	uint64_t last = 0;

	for (size_t i = 0; i < G_N_ELEMENTS(modes); i++) {
		test_holder h;

		open_mode(&h, resource, modes[i]);
		assert_int_equal(dlock_acquire(h.lock, 0), DLOCK_OK);
		assert_true(dlock_fencing_token(h.lock) > last);
		last = dlock_fencing_token(h.lock);
		assert_int_equal(dlock_release(h.lock), DLOCK_OK);
		test_holder_close(&h);
	}
	finish(key, NULL);
}

static bool not_held(void *arg)
{
	return !dlock_held(arg);
}

static void test_read_holds_survive_the_watchdog_and_are_lost_when_removed(void **state)
{
	const char *resource = "rw/watchdog";
	char *short_uri = test_redis_uri(server, "?ttl=300ms");
	char *key = key_of(resource);
	dlock_client *client;
	dlock_lock *a, *b;
	redisReply *reply;
	char *member;

	assert_int_equal(dlock_client_new(short_uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &a), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &b), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(a, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_owner(b, DLOCK_OWNER_HANDLE), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(a, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(b, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_acquire(a, 0), DLOCK_OK);
	/* a's member, the only one yet. */
	reply = test_redis_cmd(server, "ZRANGE %s 0 -1", key);
	assert_non_null(reply);
	assert_int_equal(reply->type, REDIS_REPLY_ARRAY);
	assert_int_equal(reply->elements, 1);
	member = g_strdup(reply->element[0]->str);
	freeReplyObject(reply);
	assert_int_equal(dlock_acquire(b, 0), DLOCK_OK);
	/* Held for several leases: each reader is renewed. */
	g_usleep(1500 * 1000);
	assert_true(dlock_held(a));
	assert_true(dlock_held(b));
	assert_int_equal(test_redis_int(server, "ZCARD %s", key), 2);
	assert_true(test_redis_int(server, "PTTL %s", key) > 0);

	/* Remove a's member by hand: a is lost at its next renewal, b is not. */
	assert_int_equal(test_redis_int(server, "ZREM %s %s", key, member), 1);
	assert_true(test_wait_until(not_held, a, 2000));
	g_usleep(600 * 1000);
	assert_true(dlock_held(b));
	assert_int_equal(dlock_release(a), DLOCK_ELOST);
	assert_int_equal(dlock_release(b), DLOCK_OK);
	dlock_lock_free(b);
	dlock_lock_free(a);
	dlock_client_free(client);
	g_free(member);
	finish(key, NULL);
	g_free(short_uri);
}

static void test_freeing_the_client_of_a_downgrade_releases_both_holds(void **state)
{
	const char *resource = "rw/downgrade-free";
	char *key = key_of(resource);
	test_holder waiting;
	test_acquire_thread *t;
	owner o;

	owner_open(&o, uri, resource);
	open_mode(&waiting, resource, DLOCK_MODE_WRITE);
	assert_int_equal(dlock_acquire(o.write, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(o.read, 0), DLOCK_OK);
	t = test_acquire_thread_start(waiting.lock, 30000);
	test_queue_wait_len(server, key, 2, BOUND_MS);
	dlock_client_free(o.client);
	/* The handles outlive their client, as memory only. */
	dlock_lock_free(o.read);
	dlock_lock_free(o.write);
	assert_int_equal(test_acquire_thread_join(t, BOUND_MS), DLOCK_OK);
	assert_key_type(key, "string");
	assert_int_equal(test_redis_int(server, "EXISTS %s:q", key), 0);
	assert_int_equal(dlock_release(waiting.lock), DLOCK_OK);
	finish(key, &waiting, NULL);
}

static void test_downgraded_read_hold_is_lost_with_its_write(void **state)
{
	const char *resource = "rw/downgrade-lost";
	char *short_uri = test_redis_uri(server, "?ttl=300ms");
	char *key = key_of(resource);
	owner o;

	owner_open(&o, short_uri, resource);
	assert_int_equal(dlock_acquire(o.write, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(o.read, 0), DLOCK_OK);
	/* Another holder took the key (as after an expiry): the read hold,
	 * still waiting for the write's release, goes with the write. */
	assert_int_equal(test_redis_int(server, "DEL %s", key), 1);
	freeReplyObject(test_redis_cmd(server, "SET %s someone-else", key));
	assert_int_equal(test_redis_int(server, "EXISTS %s", key), 1);
	assert_true(test_wait_until(not_held, o.write, 2000));
	assert_true(test_wait_until(not_held, o.read, 2000));
	assert_int_equal(dlock_release(o.read), DLOCK_ELOST);
	assert_int_equal(dlock_release(o.write), DLOCK_ELOST);
	assert_int_equal(test_redis_int(server, "DEL %s", key), 1);
	owner_close(&o);
	finish(key, NULL);
	g_free(short_uri);
}

/* A waiter has an entry in the queue of the lock at key (arg): a ticket,
 * not the downgrade's score 0. */
static bool writer_queued(void *arg)
{
	return test_redis_int(server, "ZCOUNT %s:q 1 +inf", (const char *)arg) >= 1;
}

/*
 * A downgrade whose write key vanished without a release (its lease ran
 * out) and was taken at once by a peer that does not queue (a raw SET NX,
 * as redis-py's Lock does on a plain name): the downgrade entry stands
 * for a read hold that can no longer be (its owner is told LOST at its
 * next renewal), and must not keep the queue blocked -- neither while the
 * peer holds nor as a reader once the peer has gone.  The holder here
 * never releases after LOST (a process that ignores it, or hangs).
 */
static void test_stale_downgrade_entry_does_not_block_the_queue_after_a_peer_took_the_key(void **state)
{
	const char *resource = "rw/downgrade-stale";
	char *long_uri = test_redis_uri(server, "?ttl=10s");
	char *key = key_of(resource);
	test_acquire_thread *t;
	test_holder w2;
	int64_t freed_ms, took_ms;
	owner o;

	owner_open(&o, long_uri, resource);
	open_mode(&w2, resource, DLOCK_MODE_WRITE);
	assert_int_equal(dlock_acquire(o.write, 0), DLOCK_OK);
	assert_int_equal(dlock_acquire(o.read, 0), DLOCK_OK);
	assert_int_equal(test_queue_len(server, key), 1); /* the downgrade entry */
	/* The write's lease ends unseen; a peer takes the key. */
	assert_int_equal(test_redis_int(server, "DEL %s", key), 1);
	freeReplyObject(test_redis_cmd(server, "SET %s peer-value NX PX 60000", key));
	t = test_acquire_thread_start(w2.lock, 30000);
	assert_true(test_wait_until(writer_queued, key, BOUND_MS));
	/* The peer lets go (no message: it does not know about the queue). */
	assert_int_equal(test_redis_int(server, "DEL %s", key), 1);
	freed_ms = test_now_ms();
	assert_int_equal(test_acquire_thread_join(t, 15000), DLOCK_OK);
	took_ms = test_now_ms() - freed_ms;
	print_message("the queued writer got the lock %" PRId64 " ms after the peer let go\n", took_ms);
	assert_true(took_ms < test_slack(2000));
	assert_key_type(key, "string");
	/* The read hold that could not be is lost, not held beside the writer. */
	assert_true(test_wait_until(not_held, o.read, 5000));
	assert_int_equal(dlock_release(w2.lock), DLOCK_OK);
	assert_int_equal(dlock_release(o.read), DLOCK_ELOST);
	assert_int_equal(dlock_release(o.write), DLOCK_ELOST);
	owner_close(&o);
	finish(key, &w2, NULL);
	g_free(long_uri);
}

static bool no_reader_left(void *arg)
{
	return test_redis_int(server, "EXISTS %s", (const char *)arg) == 0;
}

/* The release's script never reaches the server (its connection is held
 * up, then reset): the deferred release removes the reader later. */
static void test_read_release_during_outage_returns_at_once_and_removes_later(void **state)
{
	const char *resource = "rw/outage";
	test_proxy *proxy = test_proxy_start_proto(TEST_PROXY_REDIS, server->port);
	char *proxy_uri = g_strdup_printf("redis://127.0.0.1:%d?command-timeout=300ms&connect-timeout=300ms",
	                                  test_proxy_port(proxy));
	char *key = key_of(resource);
	dlock_client *client;
	dlock_lock *lock;
	int64_t t0;

	assert_int_equal(dlock_client_new(proxy_uri, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, resource, &lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(lock, DLOCK_MODE_READ), DLOCK_OK);
	assert_int_equal(dlock_lock_set_ttl(lock, 20000), DLOCK_OK);
	assert_int_equal(dlock_acquire(lock, 0), DLOCK_OK);
	test_proxy_stall(proxy, TEST_PROXY_UP);
	t0 = test_now_ms();
	assert_int_equal(dlock_release(lock), DLOCK_OK);
	assert_true(test_now_ms() - t0 < 800);
	assert_false(dlock_held(lock));
	test_proxy_reset_all(proxy);
	assert_int_equal(test_redis_int(server, "ZCARD %s", key), 1);
	test_proxy_unstall(proxy, TEST_PROXY_UP);
	/* The 20 s lease cannot explain this: the deferred release did it. */
	assert_true(test_wait_until(no_reader_left, key, 5000));
	dlock_lock_free(lock);
	dlock_client_free(client);
	test_proxy_stop(proxy);
	finish(key, NULL);
	g_free(proxy_uri);
}

static void test_killed_readers_member_expires_and_a_writer_gets_in(void **state)
{
	const char *resource = "rw/killed";
	char *short_uri = test_redis_uri(server, "?ttl=1s");
	char *key = key_of(resource);
	test_holder writer;
	reader_proc r;
	int64_t start;

	reader_start(&r, short_uri, resource);
	open_mode(&writer, resource, DLOCK_MODE_WRITE);
	assert_int_equal(dlock_acquire(writer.lock, 0), DLOCK_EBUSY);
	reader_kill(&r);
	start = test_now_ms();
	assert_int_equal(dlock_acquire(writer.lock, 10000), DLOCK_OK);
	/* Within the reader's lease and the waiter's capped backoff. */
	assert_true(test_now_ms() - start < 1000 + 1000 + 1000);
	assert_true(dlock_fencing_token(writer.lock) > r.token);
	assert_int_equal(dlock_release(writer.lock), DLOCK_OK);
	finish(key, &writer, NULL);
	g_free(short_uri);
}

static void test_no_lock_key_of_this_suite_remains(void **state)
{
	assert_int_equal(test_redis_leftover_keys(server, "dlock:{rw/"), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_readers_share_across_processes, test_queue_reset),
		cmocka_unit_test_setup(test_writer_excludes_readers_and_writers, test_queue_reset),
		cmocka_unit_test_setup(test_reader_after_a_queued_writer_waits_behind_it, test_queue_reset),
		cmocka_unit_test_setup(test_downgrade_keeps_the_read_hold_and_lets_no_queued_writer_in,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_downgraded_read_hold_is_renewed_under_the_write_and_after,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_modes_share_and_exclude_as_on_every_backend, test_queue_reset),
		cmocka_unit_test_setup(test_downgrade_as_on_every_fair_backend, test_queue_reset),
		cmocka_unit_test_setup(test_upgrade_returns_edeadlk_at_once, test_queue_reset),
		cmocka_unit_test_setup(test_tokens_increase_across_modes, test_queue_reset),
		cmocka_unit_test_setup(test_read_holds_survive_the_watchdog_and_are_lost_when_removed,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_freeing_the_client_of_a_downgrade_releases_both_holds,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_downgraded_read_hold_is_lost_with_its_write, test_queue_reset),
		cmocka_unit_test_setup(test_stale_downgrade_entry_does_not_block_the_queue_after_a_peer_took_the_key,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_read_release_during_outage_returns_at_once_and_removes_later,
		                       test_queue_reset),
		cmocka_unit_test_setup(test_killed_readers_member_expires_and_a_writer_gets_in,
		                       test_queue_reset),
		cmocka_unit_test(test_no_lock_key_of_this_suite_remains),
	};

	if (argc >= 5 && strcmp(argv[1], "--worker") == 0 && strcmp(argv[2], "reader") == 0) {
		test_init(argv[0]);
		return reader_worker(argv[3], argv[4]);
	}
	return test_queue_main(argc, argv, "redis-rw", tests, G_N_ELEMENTS(tests), &server, &uri,
	                       &marker);
}
