/* SPDX-License-Identifier: MIT */
/*
 * READ holds on a lock file, and what a status query learns of them.
 *
 * Byte ranges of the lock file and who locks them (all open-file-
 * description locks, so each hold's descriptor is an owner of its own):
 *
 *   [0, READ_RANGE)        a writer's F_WRLCK (it locks the whole file, as
 *                          every dlock before read-write locks did), or
 *                          every reader's F_RDLCK
 *   COUNTER_BYTE           F_WRLCK of the one reader drawing a fencing
 *                          token: readers share the file, so the counter's
 *                          read-modify-write needs a lock of its own
 *   [SLOT_BASE + i*SLOT_SIZE, +SLOT_SIZE)
 *                          reader slot i: F_WRLCK of the reader using it,
 *                          whose holder record ("reader TOKEN") is written
 *                          there
 *
 * The data: the main record (fence, a writer's holder) at 0, the futex
 * word at 4092 (wake.c), the slots from 4096.  A slot is live while its
 * lock is held: the kernel drops a dead reader's lock, so a status query
 * tests each slot's lock (F_OFD_GETLK) and ignores the record of a slot
 * nobody holds.  A writer's whole-file lock covers every slot, so no
 * reader keeps a slot through a write hold, and a writer cannot get in
 * while any reader holds one.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* Slots tried before a reader gives up on a record of its own (it still
 * holds: its F_RDLCK is the lock; only `dlock status` misses it). */
#define SLOTS_MAX 4096

int dlock__file_lock_range(int fd, short type, int cmd, off_t start, off_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };

	return fcntl(fd, cmd, &fl);
}

static off_t slot_offset(int64_t slot)
{
	return DLOCK__FILE_SLOT_BASE + (off_t)slot * DLOCK__FILE_SLOT_SIZE;
}

static int write_slot(int fd, int64_t slot, const char *token)
{
	char buf[DLOCK__FILE_SLOT_SIZE] = { 0 };

	if (token)
		g_snprintf(buf, sizeof(buf), "reader %s\n", token);
	return pwrite(fd, buf, sizeof(buf), slot_offset(slot)) == (ssize_t)sizeof(buf) ? 0 : -1;
}

int64_t dlock__file_slot_claim(int fd, const char *token, int64_t first)
{
	for (int64_t n = 0; n < SLOTS_MAX; n++) {
		int64_t slot = (first + n) % SLOTS_MAX;

		if (dlock__file_lock_range(fd, F_WRLCK, F_OFD_SETLK, slot_offset(slot),
		                           DLOCK__FILE_SLOT_SIZE) != 0)
			continue;
		if (write_slot(fd, slot, token) != 0) {
			dlock__file_lock_range(fd, F_UNLCK, F_OFD_SETLK, slot_offset(slot), DLOCK__FILE_SLOT_SIZE);
			return -1;
		}
		return slot;
	}
	return -1;
}

int dlock__file_slot_write(int fd, int64_t slot, const char *token)
{
	return write_slot(fd, slot, token);
}

void dlock__file_slot_clear(int fd, int64_t slot)
{
	if (slot >= 0)
		write_slot(fd, slot, NULL);
}

/*
 * The token of a live slot's record, or NULL.  Live means locked with the
 * slot's own range, as a reader locks it: a writer's whole-file lock
 * covers every slot, and the records of readers that died, which a
 * status query that found the file shared may still scan after a writer
 * got in.
 */
static char *live_slot(int fd, int64_t slot)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot_offset(slot),
		            .l_len = DLOCK__FILE_SLOT_SIZE };
	char buf[DLOCK__FILE_SLOT_SIZE + 1];
	ssize_t n;
	char *end;

	if (fcntl(fd, F_OFD_GETLK, &fl) != 0 || fl.l_type == F_UNLCK || fl.l_start != slot_offset(slot) ||
	    fl.l_len != DLOCK__FILE_SLOT_SIZE)
		return NULL;
	n = pread(fd, buf, DLOCK__FILE_SLOT_SIZE, slot_offset(slot));
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	if (!g_str_has_prefix(buf, "reader ") || !(end = strchr(buf, '\n')))
		return NULL;
	return g_strndup(buf + 7, (gsize)(end - buf - 7));
}

GPtrArray *dlock__file_readers(int fd)
{
	GPtrArray *readers = g_ptr_array_new_with_free_func(g_free);
	struct stat st;

	if (fstat(fd, &st) != 0)
		return readers;
	for (int64_t slot = 0; slot < SLOTS_MAX && slot_offset(slot) < st.st_size; slot++) {
		char *token = live_slot(fd, slot);

		if (token)
			g_ptr_array_add(readers, token);
	}
	return readers;
}

int dlock__file_downgrade_locks(int fd)
{
	/* Everything past the main range but slot 0 first, while the main
	 * range is still ours alone: a reader can get in only once it is
	 * shared, and finds slot 0 taken and the counter free. */
	if (dlock__file_lock_range(fd, F_UNLCK, F_OFD_SETLK, DLOCK__FILE_READ_RANGE,
	                           DLOCK__FILE_SLOT_BASE - DLOCK__FILE_READ_RANGE) != 0 ||
	    dlock__file_lock_range(fd, F_UNLCK, F_OFD_SETLK, slot_offset(1), 0) != 0)
		return -1;
	/* Atomic: a write lock becomes a read lock with no moment unlocked. */
	return dlock__file_lock_range(fd, F_RDLCK, F_OFD_SETLK, 0, DLOCK__FILE_READ_RANGE);
}
