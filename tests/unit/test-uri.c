/* SPDX-License-Identifier: MIT */
/* Client specifications split into parts, percent-decoded, redacted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "dlock.h"
#include "parse.h"

static dlock__uri *parse_ok(const char *spec)
{
	dlock__uri *uri = NULL;

	if (dlock__uri_parse(spec, &uri) != DLOCK_OK)
		fail_msg("'%s' refused: %s", spec, dlock_last_error_message());
	return uri;
}

static void refused(const char *spec, const char *why)
{
	dlock__uri *uri = NULL;

	if (dlock__uri_parse(spec, &uri) != DLOCK_ECONFIG)
		fail_msg("'%s' accepted", spec);
	assert_null(uri);
	if (why && !strstr(dlock_last_error_message(), why))
		fail_msg("'%s': message '%s' lacks '%s'", spec, dlock_last_error_message(), why);
}

static void test_uri_parts_are_split_and_decoded(void **state)
{
	dlock__uri *uri = parse_ok("REDIS://al%69ce:s%40cret@h1:6379/3?ttl=10s&prefix=a%3Ab");
	const dlock__host *host = uri->hosts->pdata[0];
	const dlock__kv *first = uri->options->pdata[0], *second = uri->options->pdata[1];

	assert_string_equal(uri->scheme, "redis");
	assert_string_equal(uri->user, "alice");
	assert_string_equal(uri->password, "s@cret");
	assert_int_equal(uri->hosts->len, 1);
	assert_string_equal(host->host, "h1");
	assert_int_equal(host->port, 6379);
	assert_string_equal(uri->path, "/3");
	assert_int_equal(uri->options->len, 2);
	assert_string_equal(first->key, "ttl");
	assert_string_equal(first->value, "10s");
	assert_string_equal(second->key, "prefix");
	assert_string_equal(second->value, "a:b");
	dlock__uri_free(uri);
}

static void test_uri_redacted_form_drops_the_password_only(void **state)
{
	dlock__uri *uri = parse_ok("redis://alice:secret@h:1/0?ttl=1s");

	assert_string_equal(uri->redacted, "redis://alice@h:1/0?ttl=1s");
	dlock__uri_free(uri);
	uri = parse_ok("redis://:secret@h:1");
	assert_null(uri->user);
	assert_string_equal(uri->password, "secret");
	assert_string_equal(uri->redacted, "redis://h:1");
	assert_null(strstr(uri->redacted, "secret"));
	dlock__uri_free(uri);
}

static void test_uri_host_lists_ipv6_and_chroot(void **state)
{
	dlock__uri *uri = parse_ok("zk://a:1,b:2,[::1]:3/chroot/x");
	const dlock__host *v6 = uri->hosts->pdata[2];

	assert_int_equal(uri->hosts->len, 3);
	assert_string_equal(v6->host, "::1");
	assert_int_equal(v6->port, 3);
	assert_string_equal(uri->path, "/chroot/x");
	dlock__uri_free(uri);
	uri = parse_ok("redis://h");
	assert_int_equal(((dlock__host *)uri->hosts->pdata[0])->port, 0);
	dlock__uri_free(uri);
}

static void test_uri_without_authority_has_no_hosts(void **state)
{
	dlock__uri *uri = parse_ok("redis+unix:///tmp/x.sock?ttl=1s");

	assert_string_equal(uri->scheme, "redis+unix");
	assert_int_equal(uri->hosts->len, 0);
	assert_string_equal(uri->path, "/tmp/x.sock");
	assert_int_equal(uri->options->len, 1);
	dlock__uri_free(uri);
	uri = parse_ok("file://");
	assert_int_equal(uri->hosts->len, 0);
	assert_null(uri->path);
	dlock__uri_free(uri);
}

static void test_uri_bad_ports_and_hosts_are_refused(void **state)
{
	refused("redis://h:", "port");
	refused("redis://h:x1", "port");
	refused("redis://h:0", "out of range");
	refused("redis://h:65536", "out of range");
	refused("redis://h:99999", "out of range");
	refused("zk://a:1,,b:2", "empty host");
	refused("zk://[::1", "']'");
}

static void test_uri_bad_queries_are_refused(void **state)
{
	refused("redis://h:1?ttl", "no '='");
	refused("redis://h:1?=1s", "empty key");
	refused("redis://h:1?ttl=%zz", "escape");
	refused("redis://h:1?ttl=%4", "escape");
	refused("redis://h:1?ttl=%00", "escape");
	refused("redis://h:1?ttl=1s&ttl=2s", "twice");
}

static void test_uri_without_scheme_is_refused(void **state)
{
	refused("h:6379", "://");
	refused("/etc/dlock.conf", "scheme");
	refused("1redis://h", "scheme");
	refused("redis:/h", "://");
}

static const struct {
	const char *spec;
	const char *secrets[2]; /* the password, or its pieces around '/', '?' or '@' */
} leaky[] = {
	{ "redis://u:pa55/w0rd@h:1", { "pa55", "w0rd" } },
	{ "redis://u:p4ss?w0rd@h", { "p4ss", "w0rd" } },
	{ "zk://u:s3c/r3t@h:2181", { "s3c", "r3t" } },
	{ "zk://u:2181/s3cr3t@h:2181", { "s3cr3t", NULL } },
	{ "redis://:hunt3r/x@h:1", { "hunt3r", NULL } },
	{ "redis://u:1234/s3cr3t@h", { "s3cr3t", NULL } },
	{ "redis://u:s3cr3t@h:1/0?ttl=1s@x", { "s3cr3t", NULL } },
	{ "redis:/u:s3cr3t@h:1", { "s3cr3t", NULL } },
	{ "1redis://u:s3cr3t@h:1", { "s3cr3t", NULL } },
	{ "redis//u:s3cr3t@h", { "s3cr3t", NULL } },
	{ "redis://u:s3cr3t@h:x", { "s3cr3t", NULL } },
	{ "redis://u:s3cr3t@h:1?ttl", { "s3cr3t", NULL } },
	{ "redis://u:s3cr3t@[::1", { "s3cr3t", NULL } },
	{ "redis://u:s3cr%zz3t@h:1", { "s3cr", "3t@" } },
	/* The sentinels' password, an option: hidden as the URI's own is. */
	{ "redis+sentinel://s1,s2/svc?sentinel-password=s3cr3t", { "s3cr3t", NULL } },
	{ "redis+sentinel://s1/svc?ttl=1s&sentinel-password=s3cr3t&prefix=a:", { "s3cr3t", NULL } },
	{ "redis+sentinel://s1/svc?sentinel-password=s3%zzcr3t", { "s3", "cr3t" } },
	{ "redis+sentinel://s1/svc?sentinel-password=s3cr3t&sentinel-password=s3cr3t", { "s3cr3t", NULL } },
	{ "redis://h:1?sentinel-password=s3cr3t", { "s3cr3t", NULL } },
	{ "redis+sentinel://u:pa55w0rd@s1/svc?sentinel-user=x&sentinel-password=s3cr3t",
	  { "s3cr3t", "pa55w0rd" } },
};

static void assert_no_secret(const char *spec, const char *text, const char *const secrets[2])
{
	for (int i = 0; i < 2; i++)
		if (secrets[i] && text && strstr(text, secrets[i]))
			fail_msg("'%s': '%s' shows the password piece '%s'", spec, text, secrets[i]);
}

/*
 * A password with an unencoded '/' or '?' ends the authority early, so the
 * rest of it lands in what looks like a port or a path: no message and no
 * redacted form may show any of it, whether the URI is refused or not.
 */
static void test_uri_messages_never_show_a_password(void **state)
{
	for (size_t i = 0; i < G_N_ELEMENTS(leaky); i++) {
		dlock__uri *uri = NULL;
		int rc = dlock__uri_parse(leaky[i].spec, &uri);

		if (rc == DLOCK_OK) {
			assert_no_secret(leaky[i].spec, uri->redacted, leaky[i].secrets);
			dlock__uri_free(uri);
		} else {
			assert_int_equal(rc, DLOCK_ECONFIG);
			assert_no_secret(leaky[i].spec, dlock_last_error_message(), leaky[i].secrets);
		}
	}
}

/* The same through the public entry point, where the backends judge the
 * parts (a path that is not a database number, say). */
static void test_client_messages_never_show_a_password(void **state)
{
	for (size_t i = 0; i < G_N_ELEMENTS(leaky); i++) {
		dlock_client *client = NULL;

		if (dlock_client_new(leaky[i].spec, &client) == DLOCK_OK) {
			dlock_lock *lock = NULL;

			assert_int_equal(dlock_lock_new(client, "r", &lock), DLOCK_OK);
			assert_no_secret(leaky[i].spec, dlock_lock_backend_uri(lock), leaky[i].secrets);
			dlock_lock_free(lock);
			dlock_client_free(client);
		} else {
			assert_no_secret(leaky[i].spec, dlock_last_error_message(), leaky[i].secrets);
		}
	}
}

/* A URI given where a backend name goes (the dlock command takes a spec
 * without "://" as a name) is not echoed with its password. */
static void test_backend_name_messages_never_show_a_password(void **state)
{
	char *dir = g_dir_make_tmp("dlock-uri-XXXXXX", NULL);
	char *spec = g_strdup_printf("file://%s", dir);
	dlock_client *client = NULL;
	dlock_lock *lock = NULL;

	(void)state;
	assert_int_equal(dlock_client_new(spec, &client), DLOCK_OK);
	assert_int_equal(dlock_lock_new(client, "r", &lock), DLOCK_OK);
	for (size_t i = 0; i < G_N_ELEMENTS(leaky); i++) {
		assert_int_equal(dlock_lock_set_backend(lock, leaky[i].spec), DLOCK_EINVAL);
		assert_no_secret(leaky[i].spec, dlock_last_error_message(), leaky[i].secrets);
	}
	dlock_lock_free(lock);
	dlock_client_free(client);
	g_rmdir(dir);
	g_free(spec);
	g_free(dir);
}

/* An '@' after the host list is refused, with the fix in the message. */
static void test_uri_at_sign_after_the_hosts_is_refused(void **state)
{
	refused("redis://u:pa55/w0rd@h:1", "%2F");
	refused("zk://h:2181/chroot@x", "%40");
	refused("redis://h:1?prefix=a@b", "%40");
	dlock__uri_free(parse_ok("redis://h:1?prefix=a%40b"));
	dlock__uri_free(parse_ok("zk://u:pa%2F55%3Fw0rd@h:2181/chroot"));
}

/* The value of key in uri's options, or NULL. */
static const char *option_of(const dlock__uri *uri, const char *key)
{
	for (guint i = 0; i < uri->options->len; i++) {
		const dlock__kv *kv = uri->options->pdata[i];

		if (strcmp(kv->key, key) == 0)
			return kv->value;
	}
	return NULL;
}

/* password-file gives the URI's password, sentinel-password-file the
 * option sentinel-password, in the URI or from a configuration group;
 * the file options leave the URI's options. */
static void test_uri_secret_files_give_the_passwords(void **state)
{
	char *dir = g_dir_make_tmp("dlock-uri-XXXXXX", NULL);
	char *pw = g_build_filename(dir, "pw", NULL);
	char *spw = g_build_filename(dir, "spw", NULL);
	char *spec = g_strdup_printf("redis+sentinel://s1/mymaster?password-file=%s&sentinel-password-file=%s&ttl=5s",
	                             pw, spw);
	GPtrArray *extra = g_ptr_array_new();
	dlock__kv from_group = { "sentinel-password-file", spw };
	dlock__uri *uri;

	assert_true(g_file_set_contents(pw, "data-pw\n", -1, NULL));
	assert_true(g_file_set_contents(spw, "sentinel-pw", -1, NULL));
	assert_int_equal(dlock__uri_parse(spec, &uri), DLOCK_OK);
	assert_int_equal(dlock__uri_read_secret_files(uri, NULL, NULL), DLOCK_OK);
	assert_string_equal(uri->password, "data-pw");
	assert_string_equal(option_of(uri, "sentinel-password"), "sentinel-pw");
	assert_null(option_of(uri, "password-file"));
	assert_null(option_of(uri, "sentinel-password-file"));
	assert_string_equal(option_of(uri, "ttl"), "5s");
	dlock__uri_free(uri);
	g_free(spec);

	/* From a configuration group (extra), which the caller keeps. */
	g_ptr_array_add(extra, &from_group);
	assert_int_equal(dlock__uri_parse("redis+sentinel://s1/mymaster", &uri), DLOCK_OK);
	assert_int_equal(dlock__uri_read_secret_files(uri, extra, "group [backend b]"), DLOCK_OK);
	assert_string_equal(option_of(uri, "sentinel-password"), "sentinel-pw");
	assert_true(dlock__secret_file_key("sentinel-password-file"));
	assert_false(dlock__secret_file_key("sentinel-password"));
	dlock__uri_free(uri);

	/* Both ways at once: refused, the value never shown. */
	assert_int_equal(dlock__uri_parse("redis+sentinel://s1/mymaster?sentinel-password=inline-pw", &uri), DLOCK_OK);
	assert_int_equal(dlock__uri_read_secret_files(uri, extra, "group [backend b]"), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "one password is enough"));
	assert_null(strstr(dlock_last_error_message(), "inline-pw"));
	assert_null(strstr(dlock_last_error_message(), "sentinel-pw"));
	dlock__uri_free(uri);
	spec = g_strdup_printf("redis+sentinel://s1/mymaster?sentinel-password-file=%s", spw);
	assert_int_equal(dlock__uri_parse(spec, &uri), DLOCK_OK);
	assert_int_equal(dlock__uri_read_secret_files(uri, extra, "group [backend b]"), DLOCK_ECONFIG);
	assert_non_null(strstr(dlock_last_error_message(), "in the URI and in the group too"));
	dlock__uri_free(uri);
	g_free(spec);

	g_ptr_array_unref(extra);
	g_unlink(pw);
	g_unlink(spw);
	g_rmdir(dir);
	g_free(pw);
	g_free(spw);
	g_free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uri_parts_are_split_and_decoded),
		cmocka_unit_test(test_uri_redacted_form_drops_the_password_only),
		cmocka_unit_test(test_uri_host_lists_ipv6_and_chroot),
		cmocka_unit_test(test_uri_without_authority_has_no_hosts),
		cmocka_unit_test(test_uri_bad_ports_and_hosts_are_refused),
		cmocka_unit_test(test_uri_bad_queries_are_refused),
		cmocka_unit_test(test_uri_without_scheme_is_refused),
		cmocka_unit_test(test_uri_messages_never_show_a_password),
		cmocka_unit_test(test_client_messages_never_show_a_password),
		cmocka_unit_test(test_backend_name_messages_never_show_a_password),
		cmocka_unit_test(test_uri_at_sign_after_the_hosts_is_refused),
		cmocka_unit_test(test_uri_secret_files_give_the_passwords),
	};

	return cmocka_run_group_tests_name("uri", tests, NULL, NULL);
}
