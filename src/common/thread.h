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

/* g_thread_new() with every signal blocked in the new thread. */
GThread *dlock__thread_new(const char *name, GThreadFunc fn, gpointer data);

/* Mark a descriptor close-on-exec. */
void dlock__set_cloexec(int fd);

#endif
