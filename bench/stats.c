/* SPDX-License-Identifier: MIT */
/*
 * Samples, their summary, and the result lines.
 *
 * A sample is one measured duration in nanoseconds.  The summary gives
 * mean, min, max and nearest-rank percentiles (p50, p90, p99, p99.9) in
 * microseconds.  Every result is printed twice: as a row for people on
 * stdout (by the modes), and as one JSON object per line appended to the
 * --json file, which scripts/bench.sh collects and scripts/bench-report.py
 * turns into tables and plots.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

void bench_samples_add(bench_samples *s, int64_t ns)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		int64_t *ns_new = realloc(s->ns, cap * sizeof(*ns_new));

		if (!ns_new)
			bench_fail("out of memory");
		s->ns = ns_new;
		s->cap = cap;
	}
	s->ns[s->n++] = ns;
}

void bench_samples_free(bench_samples *s)
{
	free(s->ns);
	s->ns = NULL;
	s->n = s->cap = 0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample with at least p of them at or below. */
static double percentile_us(const bench_samples *s, double p)
{
	double exact = p * (double)s->n;
	size_t rank = (size_t)exact;

	if ((double)rank < exact)
		rank++;
	if (rank < 1)
		rank = 1;
	if (rank > s->n)
		rank = s->n;
	return (double)s->ns[rank - 1] / 1000.0;
}

bench_summary bench_summarize(bench_samples *s)
{
	bench_summary r;
	double sum = 0;

	memset(&r, 0, sizeof(r));
	if (s->n == 0)
		return r;
	qsort(s->ns, s->n, sizeof(*s->ns), cmp_i64);
	for (size_t i = 0; i < s->n; i++)
		sum += (double)s->ns[i];
	r.n = s->n;
	r.mean_us = sum / (double)s->n / 1000.0;
	r.min_us = (double)s->ns[0] / 1000.0;
	r.max_us = (double)s->ns[s->n - 1] / 1000.0;
	r.p50_us = percentile_us(s, 0.50);
	r.p90_us = percentile_us(s, 0.90);
	r.p99_us = percentile_us(s, 0.99);
	r.p999_us = percentile_us(s, 0.999);
	return r;
}

/* ---- JSON lines ---- */

static void append(bench_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void append(bench_result *r, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(r->buf + r->len, sizeof(r->buf) - r->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(r->buf) - r->len)
		bench_fail("result line too long");
	r->len += (size_t)n;
}

static void append_string(bench_result *r, const char *s)
{
	append(r, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			append(r, "\\%c", c);
		else if (c < 0x20)
			append(r, "\\u%04x", c);
		else
			append(r, "%c", c);
	}
	append(r, "\"");
}

static void append_key(bench_result *r, const char *key)
{
	append(r, r->len > 1 ? "," : "");
	append_string(r, key);
	append(r, ":");
}

void bench_result_begin(bench_result *r, const bench_opts *o, const char *mode, const char *subject)
{
	r->len = 0;
	r->buf[0] = '\0';
	append(r, "{");
	bench_result_str(r, "mode", mode);
	bench_result_str(r, "backend", o->target.label);
	bench_result_str(r, "subject", subject);
}

void bench_result_str(bench_result *r, const char *key, const char *value)
{
	append_key(r, key);
	append_string(r, value);
}

void bench_result_int(bench_result *r, const char *key, int64_t value)
{
	append_key(r, key);
	append(r, "%lld", (long long)value);
}

void bench_result_num(bench_result *r, const char *key, double value)
{
	append_key(r, key);
	if (isfinite(value))
		append(r, "%.3f", value);
	else
		append(r, "null");
}

void bench_result_summary(bench_result *r, const bench_summary *s)
{
	bench_result_int(r, "count", (int64_t)s->n);
	bench_result_num(r, "mean_us", s->mean_us);
	bench_result_num(r, "p50_us", s->p50_us);
	bench_result_num(r, "p90_us", s->p90_us);
	bench_result_num(r, "p99_us", s->p99_us);
	bench_result_num(r, "p999_us", s->p999_us);
	bench_result_num(r, "min_us", s->min_us);
	bench_result_num(r, "max_us", s->max_us);
}

void bench_result_emit(bench_result *r, const bench_opts *o)
{
	FILE *f;

	append(r, "}\n");
	if (!o->json_path)
		return;
	f = fopen(o->json_path, "ae");
	if (!f)
		bench_fail("%s: %s", o->json_path, strerror(errno));
	if (fputs(r->buf, f) == EOF || fclose(f) != 0)
		bench_fail("%s: write failed", o->json_path);
}

/* ---- rows for people ---- */

void bench_print_header(void)
{
	printf("  %-15s %8s %10s %10s %10s %10s %10s\n", "", "n", "mean_us", "p50_us", "p99_us", "p99.9_us",
	       "max_us");
}

void bench_print_row(const char *name, const bench_summary *s)
{
	printf("  %-15s %8zu %10.1f %10.1f %10.1f %10.1f %10.1f\n", name, s->n, s->mean_us, s->p50_us,
	       s->p99_us, s->p999_us, s->max_us);
}
