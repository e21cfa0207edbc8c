/* SPDX-License-Identifier: MIT */
/*
 * Worker processes and the storage service.
 *
 * Each life of a worker slot is one process and one reader thread here.
 * The reader records every event line the worker prints and answers its
 * writes: the storage accepts a write unless its token is lower than the
 * largest it has accepted for that resource (the fencing check), and
 * records both outcomes.  When the worker's output ends the reader reaps
 * it: an exit status other than 0, or a signal the nemesis did not send,
 * is a crash.
 */
#include "torture-run.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test-util.h"

typedef struct reader_arg {
	torture_run *run;
	torture_slot *slot;
	int life;
	pid_t pid;
	int in_fd;
	int out_fd;
} reader_arg;

static void record(torture_run *run, const torture_event *e)
{
	g_array_append_val(run->events, *e);
}

/* The storage's answer to one write; called under run->lock. */
static bool store(torture_run *run, torture_event *e)
{
	bool accepted = run->fencing_off || e->token >= run->max_token[e->res];

	if (accepted && e->token > run->max_token[e->res])
		run->max_token[e->res] = e->token;
	e->code = accepted;
	e->t = g_get_monotonic_time();
	return accepted;
}

static void handle_line(reader_arg *a, const char *line)
{
	torture_run *run = a->run;
	torture_event e = { .slot = a->slot->index, .life = a->life };
	int64_t t, aux;
	uint64_t token;
	int res, code, owner;
	char kind, mode;
	bool accepted = false;

	if (sscanf(line, "%c %" SCNd64 " %d %" SCNu64 " %d %c %d %" SCNd64, &kind, &t, &res, &token, &code, &mode,
	           &owner, &aux) != 8) {
		/* Anything else on stdout is the worker's own complaint. */
		printf("torture: worker %d.%d: %s\n", a->slot->index, a->life, line);
		return;
	}
	e.kind = kind;
	e.mode = mode;
	e.owner = owner;
	e.t = t;
	e.aux = aux;
	e.res = res;
	e.token = token;
	e.code = code;
	if (kind != EV_EXIT && (res < 0 || res >= run->resources || owner < 0 || owner >= TORTURE_MAX_OWNERS))
		return;
	g_mutex_lock(&run->lock);
	if (kind == EV_WRITE)
		accepted = store(run, &e);
	else if (kind == EV_ACQUIRED && code == 0)
		a->slot->held |= 1u << res;
	else if (kind == EV_RELEASE)
		a->slot->held &= ~(1u << res);
	record(run, &e);
	g_mutex_unlock(&run->lock);
	if (kind == EV_WRITE && !test_write_str(a->in_fd, accepted ? "1\n" : "0\n"))
		printf("torture: worker %d.%d: cannot answer its write\n", a->slot->index, a->life);
}

static void reap(reader_arg *a)
{
	torture_run *run = a->run;
	int status = 0;
	bool crash;

	while (waitpid(a->pid, &status, 0) < 0 && errno == EINTR)
		;
	g_mutex_lock(&run->lock);
	if (WIFSIGNALED(status))
		crash = !(WTERMSIG(status) == SIGKILL && a->slot->nemesis_killed);
	else
		crash = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	if (crash) {
		run->crashes++;
		if (WIFSIGNALED(status))
			printf("torture: CRASH: worker %d.%d (pid %d) died of signal %d (%s), not sent by the nemesis\n",
			       a->slot->index, a->life, (int)a->pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
		else
			printf("torture: CRASH: worker %d.%d (pid %d) exited with status %d\n", a->slot->index, a->life,
			       (int)a->pid, WEXITSTATUS(status));
	}
	a->slot->held = 0;
	a->slot->done = true;
	g_mutex_unlock(&run->lock);
}

static gpointer reader_main(gpointer data)
{
	reader_arg *a = data;
	FILE *in = fdopen(a->out_fd, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	while ((n = getline(&line, &cap, in)) > 0) {
		if (line[n - 1] == '\n')
			line[n - 1] = '\0';
		handle_line(a, line);
	}
	free(line);
	fclose(in);
	close(a->in_fd);
	reap(a);
	g_free(a);
	return NULL;
}

void torture_spawn(torture_run *run, torture_slot *slot, const char *mode)
{
	reader_arg *a = g_new0(reader_arg, 1);
	char sl[16], life[16], seed[32], permits[16];
	const char *args[8];
	char *name;

	g_mutex_lock(&run->lock);
	slot->life++;
	slot->mode = mode;
	slot->nemesis_killed = false;
	slot->done = false;
	slot->held = 0;
	g_mutex_unlock(&run->lock);
	g_snprintf(sl, sizeof(sl), "%d", slot->index);
	g_snprintf(life, sizeof(life), "%d", slot->life);
	g_snprintf(seed, sizeof(seed), "%" PRIu64, run->seed);
	g_snprintf(permits, sizeof(permits), "%u", run->limits.permits);
	args[0] = slot->uri;
	args[1] = sl;
	args[2] = life;
	args[3] = seed;
	args[4] = run->layout;
	args[5] = permits;
	args[6] = mode;
	args[7] = NULL;
	a->run = run;
	a->slot = slot;
	a->life = slot->life;
	a->pid = test_spawn_worker_io(args, &a->in_fd, &a->out_fd);
	slot->pid = a->pid;
	name = g_strdup_printf("torture-reader-%d", slot->index);
	if (slot->reader)
		g_thread_unref(slot->reader);
	slot->reader = g_thread_new(name, reader_main, a);
	g_free(name);
}

void torture_join(torture_run *run, torture_slot *slot)
{
	(void)run;
	if (slot->reader) {
		g_thread_join(slot->reader);
		slot->reader = NULL;
	}
}

static bool all_done(void *arg)
{
	torture_run *run = arg;
	bool done = true;

	g_mutex_lock(&run->lock);
	for (int s = 0; s < run->workers; s++)
		done = done && run->slots[s].done;
	g_mutex_unlock(&run->lock);
	return done;
}

void torture_stop_workers(torture_run *run)
{
	for (int s = 0; s < run->workers; s++) {
		kill(run->slots[s].pid, SIGCONT);
		kill(run->slots[s].pid, SIGUSR1);
	}
	/* A worker finishes its round first: an acquire's deadline (3 s at
	 * most), a hold (1.5 s at most), a lost hold kept (6.5 s at most, cut
	 * short by the request), a downgrade, its releases, and an election's
	 * callbacks catching up (3 s at most). */
	if (!test_wait_until(all_done, run, 20000)) {
		for (int s = 0; s < run->workers; s++) {
			torture_slot *slot = &run->slots[s];

			g_mutex_lock(&run->lock);
			if (!slot->done) {
				printf("torture: CRASH: worker %d.%d did not stop within 20 s of being asked; killed\n",
				       slot->index, slot->life);
				run->crashes++;
				slot->nemesis_killed = true;
				kill(slot->pid, SIGKILL);
			}
			g_mutex_unlock(&run->lock);
		}
	}
	for (int s = 0; s < run->workers; s++)
		torture_join(run, &run->slots[s]);
}
