/* SPDX-License-Identifier: MIT */
/*
 * Semaphores on a lock file (docs/file.md, "Semaphores"): N permits are
 * the first N bytes of the file's main range, and a permit is an F_WRLCK
 * on its one byte.  So a semaphore's holders and the resource's other
 * holds exclude each other as the kernel sees byte ranges: a writer locks
 * the whole file, readers the main range shared, and either conflicts
 * with any permit taken; two permits never conflict.  The main range is
 * READ_RANGE bytes long, which bounds N on this backend.
 *
 * N is kept at PERMITS_OFFSET in the file (data no lock range refers to),
 * read and written under the counter byte's lock, as the token is drawn:
 * an acquire takes that byte, reads the stored N, refuses another N while
 * any permit is taken (a waiter holds nothing, so the file cannot know of
 * one), stores its own N otherwise, then tries the permits from a random
 * one and, having one, draws its token and lets the byte go.  The last
 * holder to leave clears the stored N.  Each permit's holder record is in
 * a slot of its own, as a reader's is (readers.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "internal.h"

#define PERMITS_OFFSET 2048
#define PERMITS_FIELD 32

uint32_t dlock__file_permits_read(int fd)
{
	char buf[PERMITS_FIELD + 1];
	ssize_t n = pread(fd, buf, PERMITS_FIELD, PERMITS_OFFSET);
	uint64_t value;
	char *end;

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	if (!g_str_has_prefix(buf, "permits "))
		return 0;
	value = g_ascii_strtoull(buf + 8, &end, 10);
	if (*end != '\n' || value > DLOCK__FILE_PERMITS_MAX)
		return 0;
	return (uint32_t)value;
}

/* Store N (0 clears it), padded to the field, so the file keeps its size. */
static int permits_write(int fd, uint32_t permits)
{
	char buf[PERMITS_FIELD] = { 0 };

	if (permits)
		g_snprintf(buf, sizeof(buf), "permits %" PRIu32 "\n", permits);
	return pwrite(fd, buf, sizeof(buf), PERMITS_OFFSET) == (ssize_t)sizeof(buf) ? 0 : -1;
}

/* Whether another description holds any of the first n bytes (a permit,
 * a reader's range, a writer's file). */
static bool permits_taken(int fd, uint32_t n)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = n };

	return n > 0 && (fcntl(fd, F_OFD_GETLK, &fl) != 0 || fl.l_type != F_UNLCK);
}

int dlock__file_permits_check(const char *resource, uint32_t permits)
{
	if (permits > DLOCK__FILE_PERMITS_MAX)
		return dlock__error(DLOCK_EINVAL, "semaphore '%s' asks for %" PRIu32 " permits; the file "
		                    "backend keeps at most %d", resource, permits, DLOCK__FILE_PERMITS_MAX);
	return DLOCK_OK;
}

int dlock__file_permit_try(int fd, const char *path, const char *resource, uint32_t permits,
                           int64_t *ret_permit)
{
	uint32_t stored = dlock__file_permits_read(fd);
	uint32_t first;

	if (stored && stored != permits && permits_taken(fd, stored))
		return dlock__error_permits(resource, permits, stored);
	if (stored != permits && permits_write(fd, permits) != 0)
		return dlock__error(DLOCK_EBACKEND, "file %s: cannot record the number of permits: %s", path,
		                    g_strerror(errno));
	first = g_random_int_range(0, (gint32)permits);
	for (uint32_t k = 0; k < permits; k++) {
		uint32_t i = (first + k) % permits;

		if (dlock__file_lock_range(fd, F_WRLCK, F_OFD_SETLK, i, 1) == 0) {
			*ret_permit = i;
			return 1;
		}
		if (errno != EAGAIN && errno != EACCES && errno != EINTR)
			return dlock__error(DLOCK_EBACKEND, "file %s: cannot lock a permit: %s", path,
			                    g_strerror(errno));
	}
	return 0;
}

void dlock__file_permit_release(int fd, int64_t permit)
{
	dlock__file_lock_range(fd, F_UNLCK, F_OFD_SETLK, permit, 1);
	/* The last one out clears N, under the counter byte (tried once: a
	 * holder arriving meanwhile stores its own N anyway). */
	if (dlock__file_lock_range(fd, F_WRLCK, F_OFD_SETLK, DLOCK__FILE_COUNTER_BYTE, 1) != 0)
		return;
	if (!permits_taken(fd, dlock__file_permits_read(fd)))
		permits_write(fd, 0);
	dlock__file_lock_range(fd, F_UNLCK, F_OFD_SETLK, DLOCK__FILE_COUNTER_BYTE, 1);
}

bool dlock__file_permits_held(uint32_t permits, const struct flock *found)
{
	/* Another description's lock inside the first N bytes that is not
	 * a reader's range (shared) or a writer's file (from 0 to the end). */
	return permits > 0 && found->l_type == F_WRLCK && found->l_start < permits &&
	       found->l_len > 0 && found->l_start + found->l_len <= permits;
}
