/* SPDX-License-Identifier: MIT */
/*
 * The file floor: an open-file-description lock taken and dropped on one
 * file that stays open — two fcntl(F_OFD_SETLK) calls, the least the file
 * backend's kernel lock costs.  dlock also opens the lock file, checks it
 * against its path, and writes the fencing counter and holder record under
 * the lock; that is what the ratio measures.  There is no round trip.
 *
 * The handoff floor is the kernel's own queue: the waiter blocks in
 * fcntl(F_OFD_SETLKW) and the kernel wakes it when the holder unlocks.
 * dlock cannot block there (a deadline could not be honoured) and waits
 * by inotify instead; this is what that costs.
 *
 * The file lives in the backend's directory (same file system) under a
 * name with spaces, which dlock's escaped file names never contain, and
 * is removed by its owner when the floor is closed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

typedef struct file_floor {
	bench_floor base;
	int fd;
	bool owner;
	char path[4200];
} file_floor;

static void set_lock_cmd(file_floor *ff, short type, int cmd)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };

	while (fcntl(ff->fd, cmd, &fl) != 0)
		if (errno != EINTR)
			bench_fail("file floor: fcntl(F_OFD_SETLK%s) on %s: %s", cmd == F_OFD_SETLKW ? "W" : "",
			           ff->path, strerror(errno));
}

static void set_lock(file_floor *ff, short type)
{
	set_lock_cmd(ff, type, F_OFD_SETLK);
}

static void hold(bench_floor *f)
{
	set_lock(f->impl, F_WRLCK);
}

static void unhold(bench_floor *f)
{
	set_lock(f->impl, F_UNLCK);
}

static int64_t wait_acquire(bench_floor *f)
{
	file_floor *ff = f->impl;
	int64_t t;

	set_lock_cmd(ff, F_WRLCK, F_OFD_SETLKW);
	t = bench_now_ns();
	set_lock(ff, F_UNLCK);
	return t;
}

static void pair(bench_floor *f)
{
	file_floor *ff = f->impl;

	set_lock(ff, F_WRLCK);
	set_lock(ff, F_UNLCK);
}

static void close_floor(bench_floor *f)
{
	file_floor *ff = f->impl;

	close(ff->fd);
	if (ff->owner)
		unlink(ff->path);
	free(ff);
}

bench_floor *bench_floor_file_open(const bench_target *t, int id, bool owner)
{
	file_floor *ff = calloc(1, sizeof(*ff));

	if (!ff)
		bench_fail("out of memory");
	ff->owner = owner;
	snprintf(ff->path, sizeof(ff->path), "%s/dlock-bench floor %d", t->dir, id);
	ff->fd = open(ff->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (ff->fd < 0)
		bench_fail("file floor: %s: %s", ff->path, strerror(errno));
	ff->base.pair = pair;
	ff->base.rtt = NULL;
	ff->base.hold = hold;
	ff->base.unhold = unhold;
	ff->base.wait_acquire = wait_acquire;
	ff->base.close = close_floor;
	ff->base.impl = ff;
	return &ff->base;
}
