/* SPDX-License-Identifier: MIT */
/*
 * Close-on-exec for the ZooKeeper client's descriptors.
 *
 * The C client (3.8 as Debian builds it) opens its wake-up pipe and its
 * server sockets without close-on-exec, and keeps them private.  dlock
 * marks them itself: the pipe right after the handle is made (the
 * descriptors that appeared meanwhile and are pipes), and the socket each
 * time a connection is established (the sockets connected to the server
 * the handle reports).  A fork+exec in another thread during those short
 * windows can still inherit one; marking only ever adds close-on-exec to
 * descriptors of the ZooKeeper client.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <unistd.h>

#include "internal.h"
#include "thread.h"

/* The open descriptors of this process, as a sorted array of int. */
GArray *dlock__zk_fds(void)
{
	GArray *fds = g_array_new(FALSE, FALSE, sizeof(int));
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;

	if (!dir)
		return fds;
	while ((e = readdir(dir))) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);

		if (*e->d_name && !*end && fd != dirfd(dir)) {
			int v = (int)fd;

			g_array_append_val(fds, v);
		}
	}
	closedir(dir);
	return fds;
}

static bool contains(const GArray *fds, int fd)
{
	for (guint i = 0; i < fds->len; i++)
		if (g_array_index(fds, int, i) == fd)
			return true;
	return false;
}

void dlock__zk_cloexec_new_pipes(GArray *before)
{
	GArray *after = dlock__zk_fds();

	for (guint i = 0; i < after->len; i++) {
		int fd = g_array_index(after, int, i);
		struct stat st;

		if (!contains(before, fd) && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode))
			dlock__set_cloexec(fd);
	}
	g_array_unref(after);
}

static bool same_peer(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

		return x->sin6_port == y->sin6_port &&
		       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
	}
	return false;
}

void dlock__zk_cloexec_socket(zhandle_t *zh)
{
	struct sockaddr_storage server, peer;
	socklen_t len = sizeof(server);
	GArray *fds;

	memset(&server, 0, sizeof(server));
	if (!zookeeper_get_connected_host(zh, (struct sockaddr *)&server, &len))
		return;
	fds = dlock__zk_fds();
	for (guint i = 0; i < fds->len; i++) {
		int fd = g_array_index(fds, int, i);
		struct stat st;

		len = sizeof(peer);
		memset(&peer, 0, sizeof(peer));
		if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
		    getpeername(fd, (struct sockaddr *)&peer, &len) == 0 && same_peer(&server, &peer))
			dlock__set_cloexec(fd);
	}
	g_array_unref(fds);
}
