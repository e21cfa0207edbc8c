/* Client specifications split into parts, percent-decoded, redacted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <glib.h>

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
	};

	return cmocka_run_group_tests_name("uri", tests, NULL, NULL);
}
