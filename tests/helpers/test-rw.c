/* SPDX-License-Identifier: MIT */
/* Read-write lock checks shared by the backend suites (test-rw.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>

#include "test-rw.h"
#include "test-util.h"

void test_rw_owner_open(test_rw_owner *o, const char *uri, const char *resource, dlock_mode mode)
{
	assert_int_equal(dlock_client_new(uri, &o->client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(o->client, resource, &o->lock), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(o->lock, mode), DLOCK_OK);
}

void test_rw_owner_close(test_rw_owner *o)
{
	dlock_lock_free(o->lock);
	dlock_client_free(o->client);
}

/* Acquire with wait 0 and check the result; on a grant, the token must
 * exceed *last, which then becomes it. */
static void try_expect(dlock_lock *lock, int want, uint64_t *last)
{
	int rc = dlock_acquire(lock, 0);

	if (rc != want)
		fail_msg("acquire: %s (%s), expected %s", dlock_code_name(rc), dlock_last_error_message(),
		         dlock_code_name(want));
	if (rc == DLOCK_OK) {
		assert_true(dlock_fencing_token(lock) > *last);
		*last = dlock_fencing_token(lock);
	}
}

/* The query as one of the owners sees it. */
static void assert_query(dlock_lock *lock, dlock_held_as mode, size_t holders)
{
	dlock_info *info;

	assert_int_equal(dlock_lock_query(lock, &info), DLOCK_OK);
	assert_int_equal(dlock_info_mode(info), mode);
	assert_int_equal(dlock_info_locked(info), mode != DLOCK_HELD_FREE);
	assert_int_equal(dlock_info_holders(info), holders);
	for (size_t i = 0; i < holders; i++)
		assert_int_equal(dlock_info_holder_pid_at(info, i), getpid());
	dlock_info_free(info);
}

void test_rw_share_and_exclude(const char *uri, const char *resource)
{
	test_rw_owner r1, r2, w, x;
	uint64_t last = 0;

	test_rw_owner_open(&r1, uri, resource, DLOCK_MODE_READ);
	test_rw_owner_open(&r2, uri, resource, DLOCK_MODE_READ);
	test_rw_owner_open(&w, uri, resource, DLOCK_MODE_WRITE);
	test_rw_owner_open(&x, uri, resource, DLOCK_MODE_EXCLUSIVE);

	try_expect(r1.lock, DLOCK_OK, &last);
	try_expect(r2.lock, DLOCK_OK, &last);
	assert_query(w.lock, DLOCK_HELD_SHARED, 2);
	try_expect(w.lock, DLOCK_EBUSY, &last);
	try_expect(x.lock, DLOCK_EBUSY, &last);
	assert_int_equal(dlock_release(r1.lock), DLOCK_OK);
	try_expect(w.lock, DLOCK_EBUSY, &last);
	assert_query(w.lock, DLOCK_HELD_SHARED, 1);
	assert_int_equal(dlock_release(r2.lock), DLOCK_OK);
	assert_query(w.lock, DLOCK_HELD_FREE, 0);

	try_expect(w.lock, DLOCK_OK, &last);
	assert_query(r1.lock, DLOCK_HELD_EXCLUSIVE, 1);
	try_expect(r1.lock, DLOCK_EBUSY, &last);
	try_expect(x.lock, DLOCK_EBUSY, &last);
	assert_int_equal(dlock_release(w.lock), DLOCK_OK);

	try_expect(x.lock, DLOCK_OK, &last);
	try_expect(r2.lock, DLOCK_EBUSY, &last);
	try_expect(w.lock, DLOCK_EBUSY, &last);
	assert_int_equal(dlock_release(x.lock), DLOCK_OK);
	try_expect(r2.lock, DLOCK_OK, &last);
	assert_int_equal(dlock_release(r2.lock), DLOCK_OK);

	test_rw_owner_close(&r1);
	test_rw_owner_close(&r2);
	test_rw_owner_close(&w);
	test_rw_owner_close(&x);
}

void test_rw_upgrade_refused(const char *uri, const char *resource)
{
	test_rw_owner o;
	dlock_lock *write, *exclusive;
	int64_t t0;

	test_rw_owner_open(&o, uri, resource, DLOCK_MODE_READ);
	assert_int_equal(dlock_lock_new(o.client, resource, &write), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(write, DLOCK_MODE_WRITE), DLOCK_OK);
	assert_int_equal(dlock_lock_new(o.client, resource, &exclusive), DLOCK_OK);
	assert_int_equal(dlock_acquire(o.lock, 5000), DLOCK_OK);
	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(write, -1), DLOCK_EDEADLK);
	assert_int_equal(dlock_acquire(exclusive, 10000), DLOCK_EDEADLK);
	/* At once: no wait for a hold that would never go. */
	assert_true(test_now_ms() - t0 < 1000);
	assert_true(dlock_held(o.lock));
	assert_int_equal(dlock_release(o.lock), DLOCK_OK);
	dlock_lock_free(write);
	dlock_lock_free(exclusive);
	test_rw_owner_close(&o);
}

typedef struct waiter_start {
	test_rw_waiter *w;
	int64_t wait_ms;
} waiter_start;

static gpointer waiter_main(gpointer data)
{
	waiter_start *start = data;
	test_rw_waiter *w = start->w;

	w->rc = dlock_acquire(w->owner.lock, start->wait_ms);
	g_atomic_int_set(&w->done, 1);
	g_free(start);
	return NULL;
}

void test_rw_waiter_start(test_rw_waiter *w, const char *uri, const char *resource, dlock_mode mode,
                          int64_t wait_ms)
{
	waiter_start *start = g_new(waiter_start, 1);

	test_rw_owner_open(&w->owner, uri, resource, mode);
	assert_int_equal(dlock_lock_set_owner(w->owner.lock, DLOCK_OWNER_HANDLE), DLOCK_OK);
	w->rc = -1;
	w->done = 0;
	start->w = w;
	start->wait_ms = wait_ms;
	w->thread = g_thread_new("rw-waiter", waiter_main, start);
}

bool test_rw_waiter_done(void *w)
{
	return g_atomic_int_get(&((test_rw_waiter *)w)->done) != 0;
}

void test_rw_waiter_join(test_rw_waiter *w)
{
	g_thread_join(w->thread);
	w->thread = NULL;
}

void test_rw_downgrade(const char *uri, const char *resource, bool fair)
{
	test_rw_owner owner, other_reader;
	test_rw_waiter ww;
	dlock_lock *read;
	uint64_t write_token, read_token;
	int64_t t0;

	test_rw_owner_open(&owner, uri, resource, DLOCK_MODE_WRITE);
	assert_int_equal(dlock_lock_new(owner.client, resource, &read), DLOCK_OK);
	assert_int_equal(dlock_lock_set_mode(read, DLOCK_MODE_READ), DLOCK_OK);
	test_rw_owner_open(&other_reader, uri, resource, DLOCK_MODE_READ);

	assert_int_equal(dlock_acquire(owner.lock, 5000), DLOCK_OK);
	write_token = dlock_fencing_token(owner.lock);
	test_rw_waiter_start(&ww, uri, resource, DLOCK_MODE_WRITE, 30000);
	/* Give the writer time to start waiting: it must still be waiting
	 * after the downgrade and the write hold's release. */
	assert_false(test_poll_window(test_rw_waiter_done, &ww, 300));

	t0 = test_now_ms();
	assert_int_equal(dlock_acquire(read, 0), DLOCK_OK);
	assert_true(test_now_ms() - t0 < 1000);
	/* The read hold continues the write hold: a larger token, or the
	 * write's own where a larger one could not stay below the tokens of
	 * writers queued meanwhile (ZooKeeper's, fixed when they queued). */
	read_token = dlock_fencing_token(read);
	assert_true(read_token >= write_token);
	assert_int_equal(dlock_release(owner.lock), DLOCK_OK);
	assert_true(dlock_held(read));
	assert_false(test_poll_window(test_rw_waiter_done, &ww, 500));
	if (fair) {
		/* A reader arriving now is behind the queued writer. */
		assert_int_equal(dlock_acquire(other_reader.lock, 0), DLOCK_EBUSY);
	} else {
		/* Still a read hold: another reader shares it. */
		assert_int_equal(dlock_acquire(other_reader.lock, 0), DLOCK_OK);
		assert_int_equal(dlock_release(other_reader.lock), DLOCK_OK);
	}
	assert_false(test_rw_waiter_done(&ww));

	assert_int_equal(dlock_release(read), DLOCK_OK);
	assert_true(test_wait_until(test_rw_waiter_done, &ww, 10000));
	test_rw_waiter_join(&ww);
	assert_int_equal(ww.rc, DLOCK_OK);
	/* Granted after the read hold ended: a larger token than it had. */
	assert_true(dlock_fencing_token(ww.owner.lock) > read_token);
	assert_int_equal(dlock_release(ww.owner.lock), DLOCK_OK);

	dlock_lock_free(read);
	test_rw_owner_close(&owner);
	test_rw_owner_close(&other_reader);
	test_rw_owner_close(&ww.owner);
}
