/* SPDX-License-Identifier: MIT */
/*
 * Passwords read from files, so that they show neither on a command line
 * (ps) nor in a configuration file: the option "password-file" gives the
 * URI's password, "sentinel-password-file" the option
 * "sentinel-password".  The file holds the password on one line.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "parse.h"

/* A password file larger than this is not one. */
#define SECRET_FILE_MAX 4096

static const struct {
	const char *file_key;
	const char *key; /* NULL: the URI's own password */
} secret_files[] = { { "password-file", NULL }, { "sentinel-password-file", "sentinel-password" } };

bool dlock__secret_file_key(const char *key)
{
	for (size_t i = 0; i < G_N_ELEMENTS(secret_files); i++)
		if (strcmp(key, secret_files[i].file_key) == 0)
			return true;
	return false;
}

/* Up to SECRET_FILE_MAX + 2 bytes of path (a line end may follow a
 * password of the largest size), a regular file: no read of a FIFO or a
 * device can hold the caller up, into *ret (NUL-terminated, g_free) and
 * *ret_len. */
static int read_bounded(const char *path, const char *where, const char *key, char **ret, size_t *ret_len)
{
	size_t cap = SECRET_FILE_MAX + 3, len = 0;
	struct stat st;
	char *buf;
	int fd;

	/* As the option dir: a relative path would name another file for a
	 * service started in / than for the shell that tried it. */
	if (path[0] != '/')
		return dlock__error(DLOCK_ECONFIG, "%s, option %s: '%s' is not an absolute path", where, key, path);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return dlock__error(DLOCK_ECONFIG, "%s, option %s: cannot open %s: %s", where, key, path,
		                    g_strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return dlock__error(DLOCK_ECONFIG, "%s, option %s: %s is not a regular file", where, key, path);
	}
	buf = g_malloc(cap);
	while (len < cap - 1) {
		ssize_t n = read(fd, buf + len, cap - 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = errno;

			close(fd);
			memset(buf, 0, len);
			g_free(buf);
			return dlock__error(DLOCK_ECONFIG, "%s, option %s: cannot read %s: %s", where, key, path,
			                    g_strerror(err));
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	*ret = buf;
	*ret_len = len;
	return DLOCK_OK;
}

/* The password in path (where and key name it in messages): its one line,
 * without the line end.  Freed with dlock__secret_free(). */
static int read_secret(const char *path, const char *where, const char *key, char **ret)
{
	char *text = NULL;
	size_t len = 0;
	int rc;

	if ((rc = read_bounded(path, where, key, &text, &len)) != DLOCK_OK)
		return rc;
	if (len > 0 && text[len - 1] == '\n')
		text[--len] = '\0';
	if (len > 0 && text[len - 1] == '\r')
		text[--len] = '\0';
	if (len > SECRET_FILE_MAX)
		rc = dlock__error(DLOCK_ECONFIG, "%s, option %s: %s is larger than %d bytes: not a password",
		                  where, key, path, SECRET_FILE_MAX);
	else if (len == 0)
		rc = dlock__error(DLOCK_ECONFIG, "%s, option %s: %s is empty", where, key, path);
	else if (strlen(text) != len || strpbrk(text, "\r\n"))
		rc = dlock__error(DLOCK_ECONFIG, "%s, option %s: %s holds more than one line "
		                  "(a password file holds the password alone)", where, key, path);
	if (rc != DLOCK_OK) {
		/* What was read may still be the password. */
		memset(text, 0, len);
		g_free(text);
		return rc;
	}
	*ret = text;
	return DLOCK_OK;
}

static const dlock__kv *find(const GPtrArray *kvs, const char *key)
{
	for (guint i = 0; kvs && i < kvs->len; i++) {
		const dlock__kv *kv = kvs->pdata[i];

		if (strcmp(kv->key, key) == 0)
			return kv;
	}
	return NULL;
}

/* Set the secret that the file option at index i of secret_files gives. */
static int take(dlock__uri *uri, const GPtrArray *extra, size_t i, const char *path, const char *where)
{
	const char *key = secret_files[i].key;
	char *secret;
	int rc;

	if (key ? find(uri->options, key) || find(extra, key) : uri->password != NULL)
		return dlock__error(DLOCK_ECONFIG, "%s: both %s and %s given: one password is enough", where,
		                    key ? key : "a password in the URI", secret_files[i].file_key);
	if ((rc = read_secret(path, where, secret_files[i].file_key, &secret)) != DLOCK_OK)
		return rc;
	if (!key) {
		uri->password = secret;
	} else {
		dlock__kv *kv = g_new0(dlock__kv, 1);

		kv->key = g_strdup(key);
		kv->value = secret;
		g_ptr_array_add(uri->options, kv);
	}
	return DLOCK_OK;
}

int dlock__uri_read_secret_files(dlock__uri *uri, const GPtrArray *extra, const char *extra_where)
{
	char *where = g_strdup_printf("URI %s", uri->redacted);
	int rc = DLOCK_OK;

	for (size_t i = 0; i < G_N_ELEMENTS(secret_files) && rc == DLOCK_OK; i++) {
		const dlock__kv *in_uri = find(uri->options, secret_files[i].file_key);
		const dlock__kv *in_extra = find(extra, secret_files[i].file_key);

		if (in_uri && in_extra)
			rc = dlock__error(DLOCK_ECONFIG, "%s: %s given in the URI and in the group too", extra_where,
			                  secret_files[i].file_key);
		else if (in_uri)
			rc = take(uri, extra, i, in_uri->value, where);
		else if (in_extra)
			rc = take(uri, extra, i, in_extra->value, extra_where);
	}
	/* The file options are done with: the backends do not take them. */
	for (guint j = uri->options->len; j-- > 0;)
		if (dlock__secret_file_key(((dlock__kv *)uri->options->pdata[j])->key))
			g_ptr_array_remove_index(uri->options, j);
	g_free(where);
	return rc;
}
