/* SPDX-License-Identifier: MIT */
/*
 * dlock run: acquire RESOURCE, with a signal able to end the wait, then
 * run COMMAND under the lock and supervise it: nothing but descriptors
 * 0-2 inherited, killed with dlock (PR_SET_PDEATHSIG), signals passed on
 * (signals.c says which), stopped when the lock is lost, and its exit
 * status made dlock's.  dlock elect is the same with a campaign for
 * leadership of NAME in place of the acquire, and leadership lost in
 * place of the lock.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define KILL_GRACE_MS 10000

static int lost_pipe[2] = { -1, -1 };

/* What dlock run holds (lock), or dlock elect leads with (election, and
 * lock its handle). */
typedef struct held {
	dlock_lock *lock;
	dlock_election *election;
} held;

/* Runs on the library's callback thread: hand the news to the main loop. */
static void on_state(dlock_lock *lock, dlock_state state, void *user_data)
{
	char c = (char)state;

	(void)lock;
	(void)user_data;
	if (write(lost_pipe[1], &c, 1) < 0)
		return;
}

/* The same for an election: leadership lost is the lock lost. */
static void on_election(dlock_election *election, dlock_election_event event, const char *id,
                        void *user_data)
{
	(void)id;
	if (event == DLOCK_ELECTION_LOST)
		on_state(dlock_election_lock(election), DLOCK_STATE_LOST, user_data);
}

static int held_acquire(const held *h, int64_t wait_ms)
{
	return h->election ? dlock_election_campaign(h->election, wait_ms) : dlock_acquire(h->lock, wait_ms);
}

static int held_release(const held *h)
{
	return h->election ? dlock_election_resign(h->election) : dlock_release(h->lock);
}

static void held_free(held *h, dlock_client *client)
{
	if (h->election)
		dlock_election_free(h->election);
	else
		dlock_lock_free(h->lock);
	dlock_client_free(client);
}

/* In the child, before exec: nothing but 0-2 stays open. */
static void close_other_descriptors(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *entry;

	if (!dir) {
		for (int fd = 3; fd < 65536; fd++)
			close(fd);
		return;
	}
	while ((entry = readdir(dir))) {
		int fd = atoi(entry->d_name);

		if (fd > 2 && fd != dirfd(dir))
			close(fd);
	}
	closedir(dir);
}

static pid_t start_command(const cli_options *o, const held *h, const sigset_t *saved_mask)
{
	dlock_lock *lock = h->lock;
	const char *backend = dlock_lock_backend_uri(lock);
	const char *leader = h->election ? dlock_election_id(h->election) : NULL;
	pid_t parent = getpid();
	char token[32];
	pid_t pid;

	/* Read before fork: in the child every call on the lock is refused. */
	snprintf(token, sizeof(token), "%" PRIu64, dlock_fencing_token(lock));
	pid = fork();
	if (pid != 0)
		return pid;
	/* Never run without the lock: die with dlock. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(EXIT_SOFTWARE);
	setenv("DLOCK_RESOURCE", o->resource, 1);
	setenv("DLOCK_FENCING_TOKEN", token, 1);
	setenv("DLOCK_BACKEND", backend ? backend : "", 1);
	if (leader)
		setenv("DLOCK_LEADER_ID", leader, 1);
	close_other_descriptors();
	signal(SIGPIPE, SIG_DFL);
	sigprocmask(SIG_SETMASK, saved_mask, NULL);
	execvp(o->command[0], o->command);
	fprintf(stderr, "dlock: cannot run %s: %s\n", o->command[0], strerror(errno));
	_exit(errno == ENOENT ? 127 : 126);
}

/*
 * While dlock_acquire() waits, the main thread cannot read the signalfd:
 * this thread does, and turns a signal that would end dlock into a cancel
 * of the wait (a stop signal stops dlock, as it would have; the others
 * change nothing).  A cancel only ends acquires already waiting, and the
 * signal may come just before the main thread enters dlock_acquire(), so
 * the thread cancels again every CANCEL_REPEAT_MS until it is told to
 * stop.
 */
#define CANCEL_REPEAT_MS 50

typedef struct wait_guard {
	dlock_lock *lock; /* canceled: an election's handle ends its campaign too */
	int sfd;
	int stop[2];
	pthread_t thread;
	int signo; /* the signal that canceled the wait, 0 if none; read after join */
} wait_guard;

static void *guard_main(void *data)
{
	wait_guard *g = data;

	for (;;) {
		struct pollfd fds[2] = { { .fd = g->sfd, .events = POLLIN }, { .fd = g->stop[0], .events = POLLIN } };
		struct signalfd_siginfo si;

		if (poll(fds, 2, g->signo ? CANCEL_REPEAT_MS : -1) < 0 && errno != EINTR)
			break;
		if (fds[1].revents)
			break;
		if (g->signo) {
			dlock_lock_cancel(g->lock);
			continue;
		}
		if (!(fds[0].revents & POLLIN) || read(g->sfd, &si, sizeof(si)) != sizeof(si))
			continue;
		switch (cli_signal_kind_of((int)si.ssi_signo)) {
		case CLI_SIGNAL_STOP:
			cli_stop_self((int)si.ssi_signo);
			break;
		case CLI_SIGNAL_END:
			/* A SIGPIPE of dlock's own write ends nothing. */
			if (si.ssi_code <= 0 && (pid_t)si.ssi_pid == getpid())
				break;
			g->signo = (int)si.ssi_signo;
			dlock_lock_cancel(g->lock);
			break;
		default:
			break; /* no child yet; nothing to continue or redraw */
		}
	}
	return NULL;
}

/*
 * Acquire, canceled by a signal that would end dlock; *ret_signo says
 * which.  Without its guard thread no signal could stop the wait, so when
 * that cannot be started nothing is tried: *ret_errno says why (else 0).
 */
static int acquire_interruptible(const held *h, int sfd, int64_t wait_ms, int *ret_signo,
                                 int *ret_errno)
{
	wait_guard g = { .lock = h->lock, .sfd = sfd };
	int rc;

	*ret_signo = 0;
	*ret_errno = 0;
	if (pipe2(g.stop, O_CLOEXEC) != 0) {
		*ret_errno = errno;
		return DLOCK_OK;
	}
	if ((*ret_errno = pthread_create(&g.thread, NULL, guard_main, &g)) != 0) {
		close(g.stop[0]);
		close(g.stop[1]);
		return DLOCK_OK;
	}
	rc = held_acquire(h, wait_ms);
	if (write(g.stop[1], "x", 1) != 1)
		pthread_cancel(g.thread);
	pthread_join(g.thread, NULL);
	close(g.stop[0]);
	close(g.stop[1]);
	*ret_signo = g.signo;
	return rc;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* How soon COMMAND must stop after a stop signal dlock was sent too for
 * dlock to stop with it; a request COMMAND ignored is forgotten then. */
#define STOP_FOLLOW_MS 1000

/* COMMAND, as supervise() follows it. */
typedef struct command {
	pid_t pid;
	bool stopped;        /* stopped, as SIGCHLD told */
	int stop_asked;      /* a stop signal dlock was sent too, 0 if none */
	int64_t stop_asked_ms; /* when (now_ms()) */
	bool exited;
	int status;          /* its wait status once exited */
} command;

/* What SIGCHLD announced: COMMAND stopped, continued or exited. */
static void reap(command *c)
{
	pid_t pid;
	int st;

	while (!c->exited && (pid = waitpid(c->pid, &st, WNOHANG | WUNTRACED | WCONTINUED)) == c->pid) {
		if (WIFSTOPPED(st)) {
			c->stopped = true;
		} else if (WIFCONTINUED(st)) {
			c->stopped = false;
		} else {
			c->exited = true;
			c->status = st;
		}
	}
}

/*
 * A signal to dlock while COMMAND runs (signals.c says why each is
 * passed on or not).  A stop signal stops dlock once COMMAND has stopped,
 * and not before: a COMMAND that goes on running needs the lease renewed.
 * Nor long after: COMMAND stopped later by other means (kill -STOP, a
 * debugger) and continued the same way would run on while dlock, which
 * nobody continues, no longer renews the lease.
 */
static void on_signal(command *c, const struct signalfd_siginfo *si)
{
	int signo = (int)si->ssi_signo;
	cli_signal_kind kind = cli_signal_kind_of(signo);
	bool from_other = cli_signal_from_other(si);

	if (kind == CLI_SIGNAL_CHILD) {
		reap(c);
	} else if (from_other || (cli_signal_from_terminal(si) && getpgid(c->pid) != getpgrp())) {
		/* (The terminal's reached COMMAND itself while it is in
		 * dlock's process group.) */
		kill(c->pid, signo);
	}
	if (kind == CLI_SIGNAL_STOP && (from_other || si->ssi_code > 0)) {
		c->stop_asked = signo;
		c->stop_asked_ms = now_ms();
	}
	if (c->stop_asked && now_ms() - c->stop_asked_ms > STOP_FOLLOW_MS)
		c->stop_asked = 0;
	if (c->stop_asked && c->stopped && !c->exited) {
		signo = c->stop_asked;
		c->stop_asked = 0;
		cli_stop_self(signo);
	}
}

/*
 * Wait for COMMAND to exit, passing signals on.  When the lock is lost,
 * *ret_lost is set and COMMAND gets SIGTERM, then SIGKILL if it has not
 * exited KILL_GRACE_MS later (--on-lost=ignore only warns).  Returns
 * COMMAND's wait status (0 if the wait itself failed).
 */
static int supervise(const cli_options *o, int sfd, pid_t child, bool *ret_lost)
{
	command c = { .pid = child };
	int64_t kill_at = -1;
	bool lost = false;

	while (!c.exited) {
		struct pollfd fds[2] = { { .fd = sfd, .events = POLLIN }, { .fd = lost_pipe[0], .events = POLLIN } };
		int timeout = kill_at < 0 ? -1 : (int)(kill_at - now_ms() > 0 ? kill_at - now_ms() : 0);
		struct signalfd_siginfo si;

		if (poll(fds, 2, timeout) < 0 && errno != EINTR)
			break;
		if (kill_at >= 0 && now_ms() >= kill_at) {
			kill(child, SIGKILL);
			kill_at = -1;
		}
		if (fds[1].revents & POLLIN) {
			char state;

			if (read(lost_pipe[0], &state, 1) == 1 && state == DLOCK_STATE_LOST && !lost) {
				lost = true;
				if (o->on_lost_ignore) {
					fprintf(stderr, "dlock: warning: %s %s was lost; %s keeps running\n",
					        o->elect ? "leadership of" : "lock on", o->resource, o->command[0]);
				} else {
					fprintf(stderr, "dlock: %s %s was lost; stopping %s\n",
					        o->elect ? "leadership of" : "lock on", o->resource, o->command[0]);
					kill(child, SIGTERM);
					kill_at = now_ms() + KILL_GRACE_MS;
				}
			}
		}
		if ((fds[0].revents & POLLIN) && read(sfd, &si, sizeof(si)) == sizeof(si))
			on_signal(&c, &si);
	}
	*ret_lost = lost;
	return c.status;
}

int cli_run(cli_options *o)
{
	sigset_t handled, saved;
	dlock_client *client;
	held h = { NULL, NULL };
	bool lost = false;
	int status, rc, sfd, signo, err;
	pid_t child;

	/* Signals go through a signalfd (signals.c); library threads block
	 * them all. */
	cli_signals_block(&handled, &saved);
	sfd = signalfd(-1, &handled, SFD_CLOEXEC);
	if (sfd < 0 || pipe2(lost_pipe, O_CLOEXEC) != 0) {
		fprintf(stderr, "dlock: %s\n", strerror(errno));
		return EXIT_SOFTWARE;
	}

	if ((rc = cli_open(o, &client, &h.lock, &h.election)) != 0)
		return rc;
	if (h.election)
		dlock_election_set_callback(h.election, on_election, NULL);
	else
		dlock_lock_set_state_callback(h.lock, on_state, NULL);
	if (!o->wait_given)
		o->wait_ms = dlock_client_default_wait_ms(client);
	rc = acquire_interruptible(&h, sfd, o->wait_ms, &signo, &err);
	if (err != 0) {
		fprintf(stderr, "dlock: %s: cannot watch for signals while waiting for the lock: %s\n",
		        o->resource, strerror(err));
		held_free(&h, client);
		return EXIT_OSERR;
	}
	if (signo) {
		/* Asked to stop before COMMAND started: it never runs. */
		fprintf(stderr, "dlock: %s: %s while waiting for the lock; not running %s\n", o->resource,
		        strsignal(signo), o->command[0]);
		if (rc == DLOCK_OK)
			held_release(&h);
		held_free(&h, client);
		return 128 + signo;
	}
	if (rc != DLOCK_OK) {
		rc = cli_fail(rc, o->resource, o);
		held_free(&h, client);
		return rc;
	}

	child = start_command(o, &h, &saved);
	if (child < 0) {
		fprintf(stderr, "dlock: fork: %s\n", strerror(errno));
		held_release(&h);
		held_free(&h, client);
		return EXIT_SOFTWARE;
	}

	status = supervise(o, sfd, child, &lost);
	/* COMMAND's status becomes dlock's, unless the lock was lost under it. */
	rc = held_release(&h);
	if (rc == DLOCK_ELOST && !lost) {
		/* Nothing told us before: the key or node went without a word
		 * (COMMAND or an operator removed it, or it expired between
		 * two renewals). */
		lost = true;
		fprintf(stderr, "dlock: %s%s %s was lost before %s exited (found at release: %s)\n",
		        o->on_lost_ignore ? "warning: " : "", o->elect ? "leadership of" : "lock on",
		        o->resource, o->command[0], dlock_last_error_message());
	} else if (rc != DLOCK_OK && rc != DLOCK_ELOST) {
		fprintf(stderr, "dlock: %s: release: %s: %s\n", o->resource, dlock_strerror(rc),
		        dlock_last_error_message());
	}
	held_free(&h, client);
	if (lost && !o->on_lost_ignore)
		return EXIT_LOST;
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
