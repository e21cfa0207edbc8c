/*
 * Library threads.  Every library thread is named, runs with all signals
 * blocked (so the host program's handlers run only on its own threads), and
 * is joined by whoever started it.
 */
#ifndef DLOCK_COMMON_THREAD_H
#define DLOCK_COMMON_THREAD_H

#include <signal.h>
#include <stdbool.h>

#include <glib.h>

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

/* Mark a descriptor close-on-exec. */
void dlock__set_cloexec(int fd);

#endif
