/* SPDX-License-Identifier: MIT */
/*
 * Library threads.  Every library thread is named, runs with all signals
 * blocked (so the host program's handlers run only on its own threads), and
 * is joined by whoever started it.
 */
#ifndef DLOCK_KIT_THREAD_H
#define DLOCK_KIT_THREAD_H

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

#include <glib.h>

#include "mutex.h"

/*
 * g_thread_new() with every signal blocked in the new thread.  name must
 * be a string literal of at most 15 characters, checked at compile time:
 * Linux keeps 15 characters of a thread's name and refuses a longer one
 * outright (pthread_setname_np fails with ERANGE), which would leave the
 * thread showing as the host program in top, ps and gdb.
 */
#define DLOCK__THREAD_NAME_MAX 15
#define dlock__thread_new(name, fn, data)                                              \
	(G_STATIC_ASSERT_EXPR(sizeof("" name "") <= DLOCK__THREAD_NAME_MAX + 1),        \
	 dlock__thread_start(name, fn, data))
GThread *dlock__thread_start(const char *name, GThreadFunc fn, gpointer data);

/*
 * A library thread started on first use and joined at close: the
 * watchdog, the subscriber, the session thread, the file watch, the
 * callback thread.  A zeroed struct is "not started"; the mutex that
 * guards it is the owner's (passed in), so a caller already holding that
 * mutex starts it with the _locked form.
 *
 * The first get calls make(arg), which builds what the thread works on
 * and returns it (NULL make: arg itself); the named thread then runs
 * fn(data).  make may clear *ret_start to keep the data without a thread
 * (the file backend without inotify).  Every get returns the data; after
 * stop, nothing starts again and get returns NULL.
 */
typedef struct dlock__lazy_thread {
	gpointer data;    /* what make() returned; NULL before the first get */
	GThread *thread;  /* running fn(data); NULL if make() declined one */
	bool stopped;     /* stopped for good */
} dlock__lazy_thread;

typedef gpointer (*dlock__lazy_make_fn)(gpointer arg, bool *ret_start);

#define dlock__lazy_thread_get(lazy, mu, rank, name, make, fn, arg)                    \
	(G_STATIC_ASSERT_EXPR(sizeof("" name "") <= DLOCK__THREAD_NAME_MAX + 1),        \
	 dlock__lazy_thread_start(lazy, mu, rank, name, make, fn, arg))
#define dlock__lazy_thread_get_locked(lazy, name, make, fn, arg)                       \
	dlock__lazy_thread_get(lazy, NULL, DLOCK__RANK_NONE, name, make, fn, arg)
/* Takes mu, if not NULL, at its rank (mutex.h) around the start. */
gpointer dlock__lazy_thread_start(dlock__lazy_thread *lazy, GMutex *mu, dlock__rank rank,
                                  const char *name, dlock__lazy_make_fn make, GThreadFunc fn,
                                  gpointer arg);

/* The data if started (and not stopped), else NULL; starts nothing.  Any
 * thread, without the mutex. */
gpointer dlock__lazy_thread_peek(dlock__lazy_thread *lazy);
/* Whether a thread runs on the data (started, make() did not decline). */
bool dlock__lazy_thread_running(dlock__lazy_thread *lazy);

/*
 * Stop for good: under mu, mark it stopped and take the data; then, with
 * mu released, tell(data) asks the thread to end (tell may be NULL when
 * the owner has told it already) and the thread is joined.  Returns the
 * data for the caller to free, or NULL if it never started.
 */
gpointer dlock__lazy_thread_stop(dlock__lazy_thread *lazy, GMutex *mu, dlock__rank rank,
                                 void (*tell)(gpointer data));

/* The calling process's pid and thread's kernel id, kept without a system
 * call and refreshed in a forked child (self.c). */
pid_t dlock__self_pid(void);
pid_t dlock__self_tid(void);

/* Mark a descriptor close-on-exec. */
void dlock__set_cloexec(int fd);

/*
 * A library thread's wake eventfd (EFD_NONBLOCK): _drain() takes what was
 * written to it; _pause() sleeps us, waking on every write to it (drained)
 * to ask stopping(arg), and returns early once that says yes.
 */
void dlock__wake_fd_drain(int fd);
void dlock__wake_fd_pause(int fd, int64_t us, bool (*stopping)(void *arg), void *arg);

#endif
