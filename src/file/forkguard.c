/* SPDX-License-Identifier: MIT */
/*
 * Lock file descriptors and fork().
 *
 * An OFD lock belongs to the open file description, and fork() gives the
 * child a descriptor on that same description.  The kernel drops the lock
 * only when the last descriptor on the description is closed, so a child
 * that merely exists (no exec, which close-on-exec covers) would keep the
 * lock after its parent died.  Every lock file descriptor the backend
 * opens is therefore listed here, and a pthread_atfork() child handler
 * closes the child's copies before fork() returns in the child.  Closing a
 * copy does not unlock the shared description: the parent keeps its lock.
 *
 * The child of a multithreaded process runs only the forking thread, and
 * until it execs it may call only async-signal-safe functions: a mutex or
 * an allocator lock another thread held at the fork stays held there
 * forever.  So the list takes no lock and the handlers allocate nothing:
 * slots of lock-free atomic ints, in chunks that are only ever added
 * (never freed, as the handlers cannot be unregistered either), and the
 * child handler reads the slots and calls close(), nothing else.
 *
 * This is the one piece of process-wide state of the backend: fork() is a
 * process-wide event, and atfork handlers cannot be unregistered, so the
 * list cannot belong to a client.
 *
 * A fork() between open() and the listing would leave the child an
 * unlisted copy of a description we are about to lock.  The prepare
 * handler counts forks started, the parent handler forks done: an open
 * starts once no fork is under way (waiting on a futex, woken by the
 * parent handler), and reopens if one started meanwhile.
 * A close unlocks before it unlists, so a fork between the unlisting and
 * the close leaves the child an unlisted copy that holds no lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define CHUNK_SLOTS 256

/* The handlers may only use atomics that take no lock. */
G_STATIC_ASSERT(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_POINTER_LOCK_FREE == 2);
/* forks_done is also a futex word. */
G_STATIC_ASSERT(sizeof(atomic_uint) == sizeof(uint32_t));

typedef struct chunk {
	atomic_int slots[CHUNK_SLOTS]; /* a listed descriptor + 1; 0 when free */
	struct chunk *_Atomic next;
} chunk;

static chunk first;                    /* all free: zero-initialised */
static atomic_uint forks_started;      /* prepare handlers run */
static atomic_uint forks_done;         /* parent handlers run */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void before_fork(void)
{
	atomic_fetch_add(&forks_started, 1);
}

/* In the parent, an ordinary context: wake the opens waiting for the
 * fork to end (settled_forks()). */
static void after_fork_parent(void)
{
	atomic_fetch_add(&forks_done, 1);
	syscall(SYS_futex, &forks_done, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* In the child: async-signal-safe only (the file's comment says why). */
static void after_fork_child(void)
{
	for (chunk *c = &first; c; c = atomic_load(&c->next)) {
		for (int i = 0; i < CHUNK_SLOTS; i++) {
			int listed = atomic_exchange(&c->slots[i], 0);

			if (listed > 0)
				close(listed - 1);
		}
	}
	/* Forks that other threads of the parent had under way never end
	 * here: the child's own opens must not wait for them. */
	atomic_store(&forks_done, atomic_load(&forks_started));
}

static void install(void)
{
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static void list(int fd)
{
	chunk *c = &first;

	for (;;) {
		chunk *next;

		for (int i = 0; i < CHUNK_SLOTS; i++) {
			int free_slot = 0;

			if (atomic_load_explicit(&c->slots[i], memory_order_relaxed) == 0 &&
			    atomic_compare_exchange_strong(&c->slots[i], &free_slot, fd + 1))
				return;
		}
		next = atomic_load(&c->next);
		if (!next) {
			chunk *fresh = g_new0(chunk, 1);

			if (atomic_compare_exchange_strong(&c->next, &next, fresh))
				next = fresh;
			else
				g_free(fresh); /* another thread added one: next is it */
		}
		c = next;
	}
}

static void unlist(int fd)
{
	for (chunk *c = &first; c; c = atomic_load(&c->next)) {
		for (int i = 0; i < CHUNK_SLOTS; i++) {
			int listed = fd + 1;

			if (atomic_compare_exchange_strong(&c->slots[i], &listed, 0))
				return;
		}
	}
}

/*
 * The count of forks started, once none is under way.  A fork counted in
 * it has then ended (its child got every descriptor open before it, all
 * listed or closed there); one that starts later changes the count.  A
 * fork under way in another thread is waited for on the futex of
 * forks_done, which its parent handler wakes.
 */
static unsigned settled_forks(void)
{
	for (;;) {
		unsigned started = atomic_load(&forks_started);
		unsigned done = atomic_load(&forks_done);

		if (done == started)
			return started;
		/* Returns at once if forks_done moved meanwhile. */
		syscall(SYS_futex, &forks_done, FUTEX_WAIT_PRIVATE, done, NULL, NULL, 0);
	}
}

int dlock__file_open_guarded(const char *path, int flags, mode_t mode)
{
	pthread_once(&once, install);
	for (;;) {
		unsigned seen = settled_forks();
		int fd;

		do
			fd = open(path, flags | O_CLOEXEC, mode);
		while (fd < 0 && errno == EINTR);
		if (fd < 0)
			return -1;
		list(fd);
		if (atomic_load(&forks_started) == seen)
			return fd;
		/* A child may have an unlisted copy: use a new description. */
		unlist(fd);
		close(fd);
	}
}

void dlock__file_close_guarded(int fd)
{
	if (fd < 0)
		return;
	/* Unlocked before it is unlisted: a child forked in between keeps a
	 * copy of the description, which holds nothing then. */
	dlock__file_lock_range(fd, F_UNLCK, F_OFD_SETLK, 0, 0);
	unlist(fd);
	close(fd);
}
