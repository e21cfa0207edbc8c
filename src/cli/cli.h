/* SPDX-License-Identifier: MIT */
/*
 * cli.h — what the files of the dlock command share.
 *
 * The command uses only the public header.  Its files, by job:
 *
 *   main.c    arguments, building the client and the lock, the exit
 *             status of a library failure, dispatch to a subcommand
 *   run.c     dlock run and dlock elect: the wait that a signal can end,
 *             then COMMAND's supervision (fork and exec, descriptors,
 *             PR_SET_PDEATHSIG, signal forwarding, the lost lock or
 *             leadership, COMMAND's exit status)
 *   signals.c which signals dlock takes, and what each one means
 *   status.c  dlock status: who holds the lock, as text or JSON
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/signalfd.h>

#include "dlock.h"

/* sysexits.h values, spelled out as the contract of the command. */
enum {
	EXIT_USAGE = 64,
	EXIT_UNAVAILABLE = 69,
	EXIT_LOST = 70,
	EXIT_OSERR = 71,
	EXIT_SOFTWARE = 70,
	EXIT_TEMPFAIL = 75,
	EXIT_NOPERM = 77,
	EXIT_CONFIG = 78,
};

/* The command line, as main.c parsed it.  Strings are borrowed from argv. */
typedef struct cli_options {
	const char *config;
	const char *backend;
	int64_t wait_ms;
	bool wait_given;
	int64_t ttl_ms;
	bool ttl_given;
	const char *ttl_text; /* -t as given, for messages */
	int busy_code;
	bool quiet;           /* -q: no message when not acquired in time */
	bool on_lost_ignore;
	bool shared;          /* -s: a READ hold; -x (the default): EXCLUSIVE */
	uint32_t permits;     /* --permits N: a semaphore of N; 0 when not given */
	bool json;
	const char *id;       /* elect --id: the participant id; NULL: <host>-<pid> */
	bool elect;           /* dlock elect: campaign instead of acquiring */
	const char *resource;
	char **command;
} cli_options;

/* Print "dlock: WHAT: error: detail" and return the exit status for rc. */
int cli_fail(int rc, const char *what, const cli_options *o);

/* Build the client and the lock as -c / -b / $DLOCK_CONFIG say, with the
 * options applied; for dlock elect the election (*ret_election) and its
 * handle (*ret_lock).  Returns 0, or the exit status after printing why
 * (nothing is left to free). */
int cli_open(const cli_options *o, dlock_client **ret_client, dlock_lock **ret_lock,
             dlock_election **ret_election);

/* What a signal means to dlock run (signals.c says more). */
typedef enum cli_signal_kind {
	CLI_SIGNAL_END,    /* its default action ends a process */
	CLI_SIGNAL_STOP,   /* SIGTSTP, SIGTTIN, SIGTTOU: job control stops */
	CLI_SIGNAL_NOTICE, /* its default action is none: SIGCONT, SIGWINCH, SIGURG */
	CLI_SIGNAL_CHILD,  /* SIGCHLD: COMMAND stopped, continued or exited */
} cli_signal_kind;

/* Block every signal dlock handles (*ret_handled, for a signalfd) in the
 * calling thread, before any other thread starts; *ret_saved gets the
 * mask as it was, for COMMAND. */
void cli_signals_block(sigset_t *ret_handled, sigset_t *ret_saved);
cli_signal_kind cli_signal_kind_of(int signo);
/* Sent by another process (kill, sigqueue), not by the kernel or dlock. */
bool cli_signal_from_other(const struct signalfd_siginfo *si);
/* Sent by the terminal to its foreground process group (^C, ^Z, ...). */
bool cli_signal_from_terminal(const struct signalfd_siginfo *si);
/* Stop the process as the default action of stop signal signo does;
 * returns once it is continued. */
void cli_stop_self(int signo);

/* The subcommands; each returns the command's exit status. */
int cli_run(cli_options *o);
int cli_status(const cli_options *o);

#endif /* DLOCK_CLI_H */
