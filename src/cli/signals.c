/* SPDX-License-Identifier: MIT */
/*
 * Which signals dlock run and dlock elect take, and what each one means.
 *
 * dlock blocks every signal but SIGKILL and SIGSTOP (which cannot be
 * blocked) and the fault signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
 * SIGTRAP, SIGABRT, SIGSYS: a crash of dlock itself, which must stay a
 * crash), and reads them from a signalfd.  So no signal ends dlock by
 * its default action while it holds the lock: whatever it is told, it
 * releases before it exits.
 *
 * Before COMMAND starts, a signal whose default action ends a process
 * ends the wait instead (exit 128+N, COMMAND never runs); a stop signal
 * stops dlock, as it would have.  While COMMAND runs, a signal another
 * process sent to dlock is passed on to COMMAND, which decides; dlock
 * exits when COMMAND does.  Signals the kernel sent are not passed on:
 * the terminal's (^C, ^\, ^Z, a resize, a hangup) went to the whole
 * foreground process group, COMMAND included, and a second copy would
 * interrupt COMMAND's own handling of the first; the others concern
 * dlock alone (a write to a closed pipe, a resource limit).  Should
 * COMMAND have left dlock's process group, the terminal's are passed on.
 *
 * Job control: dlock stops only once COMMAND has stopped after a SIGTSTP,
 * SIGTTIN or SIGTTOU that dlock was sent too, so that a shell sees the
 * job stopped and gets the terminal back.  A stopped dlock does not renew
 * its lease; a COMMAND that goes on running keeps dlock running, and so
 * the lock alive, and a request COMMAND did not follow within a second
 * is forgotten: COMMAND stopped later by other means (kill -STOP, a
 * debugger) does not stop dlock.  SIGCONT, when another process sends it, is passed on
 * (a shell's fg has continued COMMAND already; kill -CONT of dlock alone
 * continues the job).  SIGCHLD is dlock's own: COMMAND stopped,
 * continued or exited.
 */
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "cli.h"

static bool is_fault(int signo)
{
	switch (signo) {
	case SIGSEGV:
	case SIGBUS:
	case SIGILL:
	case SIGFPE:
	case SIGTRAP:
	case SIGABRT:
	case SIGSYS:
		return true;
	default:
		return false;
	}
}

void cli_signals_block(sigset_t *ret_handled, sigset_t *ret_saved)
{
	sigemptyset(ret_handled);
	for (int signo = 1; signo < SIGRTMIN; signo++)
		if (signo != SIGKILL && signo != SIGSTOP && !is_fault(signo))
			sigaddset(ret_handled, signo); /* the numbers no signal has are refused */
	for (int signo = SIGRTMIN; signo <= SIGRTMAX; signo++)
		sigaddset(ret_handled, signo);
	sigprocmask(SIG_BLOCK, ret_handled, ret_saved);
}

cli_signal_kind cli_signal_kind_of(int signo)
{
	switch (signo) {
	case SIGCHLD:
		return CLI_SIGNAL_CHILD;
	case SIGTSTP:
	case SIGTTIN:
	case SIGTTOU:
		return CLI_SIGNAL_STOP;
	case SIGCONT:
	case SIGWINCH:
	case SIGURG:
		return CLI_SIGNAL_NOTICE;
	default:
		return CLI_SIGNAL_END;
	}
}

bool cli_signal_from_other(const struct signalfd_siginfo *si)
{
	/* kill(), sigqueue() and tgkill() give a code of 0 or below; a
	 * write to a closed pipe gives SIGPIPE from dlock's own pid. */
	return si->ssi_code <= 0 && (pid_t)si->ssi_pid != getpid();
}

bool cli_signal_from_terminal(const struct signalfd_siginfo *si)
{
	if (si->ssi_code != SI_KERNEL)
		return false;
	switch (si->ssi_signo) {
	case SIGINT:
	case SIGQUIT:
	case SIGTSTP:
	case SIGHUP:
	case SIGCONT:
	case SIGWINCH:
		return true;
	default:
		return false;
	}
}

void cli_stop_self(int signo)
{
	sigset_t one;

	/* Blocked, the signal waits on this thread; unblocked, its default
	 * action stops the whole process, and the call returns once
	 * continued.  (A stop signal to an orphaned process group is
	 * dropped by the kernel, as it would have been.) */
	sigemptyset(&one);
	sigaddset(&one, signo);
	raise(signo);
	pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	pthread_sigmask(SIG_BLOCK, &one, NULL);
}
