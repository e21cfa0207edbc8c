/* SPDX-License-Identifier: MIT */
/*
 * Pure parsing and validation: durations, client specifications (URIs),
 * the backends' option rows, resource names, and holder records.  Nothing
 * here does I/O beyond reading the local host name, so all of it is
 * covered by the unit suite.
 *
 * Functions returning int give DLOCK_OK or a negative DLOCK_E* code and,
 * on failure, leave a message naming what was wrong in
 * dlock_last_error_message() (see error.h).
 */
#ifndef DLOCK_KIT_PARSE_H
#define DLOCK_KIT_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <glib.h>

/* ---- durations ------------------------------------------------------- */

/*
 * Parse a duration into milliseconds: a bare number of seconds ("30",
 * "0.5"), or terms of a number and a unit (h, m, s, ms), largest unit
 * first and each unit once ("250ms", "1.5s", "1m30s", "1h2m3s500ms").  A
 * number may have up to 9 digits after a point; the whole must come to a
 * whole number of milliseconds.  No sign, no space; overflow of int64 is
 * refused.  Returns true and *ret_ms on success, false otherwise (no
 * message: callers know the context and write it, with
 * DLOCK__DURATION_FORMS).  dlock_parse_duration() is the public form.
 */
bool dlock__duration_parse(const char *text, int64_t *ret_ms);

/* The forms a duration takes, for messages about one that is not. */
#define DLOCK__DURATION_FORMS "like 250ms, 1.5s, 1m30s; a bare number is seconds"

/* ---- client specifications ------------------------------------------- */

typedef struct dlock__host {
	char *host; /* name or address; an IPv6 literal without its brackets */
	int port;   /* 0 when the spec gave none */
} dlock__host;

typedef struct dlock__kv {
	char *key;
	char *value;
} dlock__kv;

typedef struct dlock__uri {
	char *scheme;       /* lower case: "redis", "redis+unix", "zk", "file", ... */
	char *user;         /* percent-decoded; NULL when absent */
	char *password;     /* percent-decoded; NULL when absent */
	GPtrArray *hosts;   /* of dlock__host *; empty when the authority is empty */
	char *path;         /* percent-decoded, with its leading '/'; NULL when absent */
	GPtrArray *options; /* of dlock__kv *, in the order given, percent-decoded */
	char *redacted;     /* the spec with "user:password@" reduced to "user@" (or removed) */
} dlock__uri;

/*
 * Split scheme://[user[:password]@]host[:port][,host[:port]...][/path][?k=v&k=v]
 * into parts.  The scheme is any [A-Za-z][A-Za-z0-9+.-]*; this layer does
 * not judge it.  Refused with DLOCK_ECONFIG (message names the part): no
 * "://", an empty or non-numeric or out-of-range port, an empty host between
 * commas, a query item without '=', an empty key, a bad %-escape, a
 * duplicate query key.  Caller frees *ret_uri with dlock__uri_free().
 */
int dlock__uri_parse(const char *spec, dlock__uri **ret_uri);
void dlock__uri_free(dlock__uri *uri);

/* Free a secret (a password, credentials) after overwriting it, so it
 * does not linger in freed memory.  NULL is a no-op. */
void dlock__secret_free(char *secret);

/*
 * Passwords from files (secret-file.c): "password-file=PATH" in
 * uri->options or in extra (the other keys of a configuration file's
 * group, where extra_where names it; NULL for none) gives uri->password,
 * "sentinel-password-file=PATH" the option "sentinel-password", read from
 * the file's one line (at most 4096 bytes, its line end dropped).
 * Refused with DLOCK_ECONFIG, naming the path but never what it holds:
 * an unreadable, empty or multi-line file, and a password given both
 * ways.  The file options leave uri->options; in extra the caller skips
 * the keys dlock__secret_file_key() names.
 */
int dlock__uri_read_secret_files(dlock__uri *uri, const GPtrArray *extra, const char *extra_where);
bool dlock__secret_file_key(const char *key);

/*
 * spec as messages may show it: "scheme://user:password@rest" becomes
 * "scheme://user@rest" (or "scheme://rest" without a user), where the
 * '@' is the last one of the whole spec, so a password holding an
 * unencoded '/' or '?' is hidden too.  Text without "://" (a URI
 * mistyped, or a file name) loses what lies between its first ':' and its
 * last '@': "redis:/u:pw@h" becomes "redis:***@h"; text with no '@', or
 * no ':' before it, is returned as is.  Caller frees with g_free().
 */
char *dlock__uri_redact(const char *spec);
/* text with every word (between spaces or quotes) that looks like a URI
 * redacted as above: for messages of other libraries that quote a file
 * name or a line.  Caller frees with g_free(). */
char *dlock__uri_redact_text(const char *text);

/* ---- options --------------------------------------------------------- */

/*
 * Bounds of the durations.  Past the maxima a value is a mistake (a unit
 * slip, microseconds for milliseconds) rather than a wish, and refusing it
 * keeps every microsecond sum the backends make (now + ttl, now + timeout)
 * far from overflow: a TTL of 9.3e15 ms once wrapped to a lease already
 * over, and a huge connect-timeout to a negative socket timeout.
 */
#define DLOCK__TTL_MIN_MS 100
#define DLOCK__TTL_MAX_MS (INT64_C(7) * 24 * 3600 * 1000)  /* 7 days */
#define DLOCK__TIMEOUT_MAX_MS (INT64_C(3600) * 1000)       /* 1 hour: connect-, command-, session-timeout */

/* What an option's value is, and the C type it is stored as. */
typedef enum dlock__option_kind {
	DLOCK__OPTION_DURATION, /* int64_t milliseconds, from min_ms to max_ms */
	DLOCK__OPTION_ONOFF,    /* bool: on/off, true/false, yes/no, 1/0, in any case */
	DLOCK__OPTION_CHOICE,   /* int: the index of the value in choices */
	DLOCK__OPTION_STRING,   /* char *, accepted by check */
	DLOCK__OPTION_PATH,     /* char *, an absolute path */
	DLOCK__OPTION_COUNT,    /* int, a decimal number from 0 to count_max */
} dlock__option_kind;

/*
 * One option of one backend: a row of the table the backend's operations
 * table points at (ended by a row without a name).  The parsed value is
 * stored at offset in the backend's own settings struct, which the core
 * allocates (ops->options_size bytes), fills from the rows' defaults and
 * then from the URI and the configuration file, and hands to open.
 */
typedef struct dlock__option {
	const char *name;            /* "ttl": docs/configuration.md, "Options" */
	dlock__option_kind kind;
	const char *fallback;        /* the default, as a user would write it; NULL: none */
	size_t offset;               /* of the value in the settings struct */
	int64_t min_ms, max_ms;      /* DURATION */
	const char *const *choices;  /* CHOICE: the accepted words, NULL-terminated */
	bool (*check)(const char *value); /* STRING: true when value is acceptable; NULL: any */
	const char *why;             /* STRING: the refusal when check says no */
	int count_max;               /* COUNT */
} dlock__option;

/* Rows that more than one backend has, written once. */
#define DLOCK__OPTION_TIMEOUT(name_, fallback_, type, field) \
	{ .name = (name_), .kind = DLOCK__OPTION_DURATION, .fallback = (fallback_), \
	  .offset = offsetof(type, field), .min_ms = 1, .max_ms = DLOCK__TIMEOUT_MAX_MS }
#define DLOCK__OPTION_CONNECT_TIMEOUT(type, field) \
	DLOCK__OPTION_TIMEOUT("connect-timeout", "5s", type, field)
/* A lease backend's (DLOCK__CAP_LEASE) TTL and watchdog: the core reads
 * these two rows for the defaults of its holds. */
#define DLOCK__OPTION_TTL(type, field) \
	{ .name = "ttl", .kind = DLOCK__OPTION_DURATION, .fallback = "30s", \
	  .offset = offsetof(type, field), .min_ms = DLOCK__TTL_MIN_MS, .max_ms = DLOCK__TTL_MAX_MS }
#define DLOCK__OPTION_WATCHDOG(type, field) \
	{ .name = "watchdog", .kind = DLOCK__OPTION_ONOFF, .fallback = "on", \
	  .offset = offsetof(type, field) }

/* Whether any backend has an option of that name: tells an unknown
 * option from one that applies only to other backends. */
typedef bool (*dlock__option_known_fn)(const char *name);

/* The options of one backend being built: its rows, its settings struct,
 * and which rows were given explicitly. */
typedef struct dlock__options {
	const dlock__option *rows;
	void *values;   /* the backend's settings struct */
	uint64_t given; /* bit i: rows[i] was set from the URI or the file */
	dlock__option_known_fn known;
} dlock__options;

/* Allocate the settings struct (size bytes) and fill in every row's
 * default; given = 0.  rows may be NULL: a backend without options.
 * known is dlock__backend_option_known, or NULL where no other backend
 * counts (every name not in rows is then unknown).  Clear with
 * dlock__options_clear(). */
void dlock__options_init(dlock__options *opts, const dlock__option *rows, size_t size,
                         dlock__option_known_fn known);
void dlock__options_clear(dlock__options *opts);

/*
 * Set one option from its text.  where names the source for messages (for
 * example "URI redis://h:1" or "file /etc/dlock.conf, group [backend
 * cache]").  DLOCK_ECONFIG, with where, the key and the reason in the
 * message, for a name no backend has ("unknown option"), a name only
 * other backends have ("option 'root' does not apply to this backend"), a
 * malformed or out-of-range value, or a key already given.
 */
int dlock__options_set(dlock__options *opts, const char *key, const char *value, const char *where);

/* Whether the option was given explicitly (not left at its default). */
bool dlock__options_given(const dlock__options *opts, const char *name);

/* Where the option's value is stored (of the row's C type), or NULL when
 * this backend has no such row. */
const void *dlock__options_value(const dlock__options *opts, const char *name);

/* ---- resource names -------------------------------------------------- */

/* Check a resource name against the rules of dlock.h.  DLOCK_OK, or
 * DLOCK_EINVAL with a message naming the rule and the byte offset. */
int dlock__resource_check(const char *name);

/* ---- holder records and owner tokens --------------------------------- */

typedef struct dlock__holder {
	char *host;       /* the local host name */
	int64_t pid;
	int64_t tid;      /* kernel thread id (gettid) */
	int64_t since_ms; /* wall clock, ms since the Unix epoch */
	char *id;         /* a leader election participant's id, else NULL
	                   * (docs/recipes.md, "Leader election") */
} dlock__holder;

/* Describe the calling thread now.  Clear with dlock__holder_clear(). */
void dlock__holder_init_self(dlock__holder *holder);
void dlock__holder_clear(dlock__holder *holder);

/* Human form: "host=H pid=P tid=T since=2026-11-22T14:00:00.123Z", then
 * " id=ID" for an election participant.  Caller frees with g_free(). */
char *dlock__holder_describe(const dlock__holder *holder);

/*
 * Owner tokens: "dlock1:<32 lowercase hex random>:<pid>:<tid>:<since_ms>:<host>",
 * then " id=<id>" for an election participant (host names have no spaces;
 * the id runs to the end).
 * The random part is 128 bits from getrandom(); peers compare the whole
 * token for equality only.  dlock__token_new returns a new string (g_free).
 * dlock__token_parse fills *ret_holder from a token (or returns false for a
 * value that is not a dlock token, such as a peer's); clear it afterwards.
 */
char *dlock__token_new(const dlock__holder *holder);
bool dlock__token_parse(const char *token, dlock__holder *ret_holder);

/* Fill buf with len random bytes from the kernel's generator, drawn a
 * block at a time into a per-thread pool (self.c).  Aborts if the kernel
 * refuses, as no safe token can be made. */
void dlock__random_bytes(void *buf, size_t len);

#endif
