/* SPDX-License-Identifier: MIT */
#include "cleanup.h"

typedef struct item {
	const dlock__cleanup_ops *ops;
	gpointer data;
	int64_t ends_us;    /* CLOCK_BOOTTIME; INT64_MIN once done or given up */
	int64_t next_us;    /* CLOCK_BOOTTIME of the next try */
	int64_t backoff_us; /* the pause after the next try */
} item;

struct dlock__cleanups {
	GPtrArray *items;   /* item *, in the order they came (but see settle) */
	gpointer ctx;
	int64_t first_us;
	int64_t cap_us;
};

static void item_free(item *it)
{
	if (it->ops->free)
		it->ops->free(it->data);
	g_free(it);
}

dlock__cleanups *dlock__cleanups_new(gpointer ctx, int64_t first_us, int64_t cap_us)
{
	dlock__cleanups *q = g_new0(dlock__cleanups, 1);

	q->items = g_ptr_array_new_with_free_func((GDestroyNotify)item_free);
	q->ctx = ctx;
	q->first_us = first_us;
	q->cap_us = cap_us;
	return q;
}

void dlock__cleanups_free(dlock__cleanups *q)
{
	if (!q)
		return;
	g_ptr_array_unref(q->items);
	g_free(q);
}

void dlock__cleanups_finish(dlock__cleanups *q)
{
	if (q->items->len > 0)
		dlock__cleanups_attempt(q, q->items);
	dlock__cleanups_free(q);
}

void dlock__cleanups_add(dlock__cleanups *q, const dlock__cleanup_ops *ops, gpointer data,
                         int64_t ends_us, int64_t now_us)
{
	item *it = g_new0(item, 1);

	it->ops = ops;
	it->data = data;
	it->ends_us = ends_us;
	it->next_us = now_us;
	it->backoff_us = q->first_us;
	g_ptr_array_add(q->items, it);
}

void dlock__cleanups_clear(dlock__cleanups *q)
{
	g_ptr_array_set_size(q->items, 0);
}

guint dlock__cleanups_len(const dlock__cleanups *q)
{
	return q->items->len;
}

int64_t dlock__cleanups_due(dlock__cleanups *q, int64_t now_us, GPtrArray *batch)
{
	int64_t next = INT64_MAX;

	for (guint i = 0; i < q->items->len; i++) {
		item *it = q->items->pdata[i];

		if (it->next_us <= now_us)
			g_ptr_array_add(batch, it);
		else
			next = MIN(next, it->next_us);
	}
	return next;
}

void dlock__cleanups_attempt(dlock__cleanups *q, GPtrArray *batch)
{
	for (guint i = 0; i < batch->len; i++) {
		item *it = batch->pdata[i];
		dlock__cleanup_result r = it->ops->attempt(it->data, q->ctx);

		if (r == DLOCK__CLEANUP_DONE || r == DLOCK__CLEANUP_GIVE_UP)
			it->ends_us = INT64_MIN; /* dropped by settle */
		else if (r == DLOCK__CLEANUP_UNANSWERED)
			break;
	}
}

void dlock__cleanups_settle(dlock__cleanups *q, int64_t now_us)
{
	/* From the end, so that a removal moves only items already seen. */
	for (guint i = q->items->len; i-- > 0;) {
		item *it = q->items->pdata[i];

		if (it->ends_us <= now_us) {
			g_ptr_array_remove_index_fast(q->items, i);
		} else if (it->next_us <= now_us) {
			it->next_us = now_us + it->backoff_us;
			it->backoff_us = MIN(it->backoff_us * 2, q->cap_us);
		}
	}
}

void dlock__cleanups_run(dlock__cleanups *q, int64_t now_us)
{
	GPtrArray *batch = g_ptr_array_new();

	dlock__cleanups_due(q, now_us, batch);
	if (batch->len > 0) {
		dlock__cleanups_attempt(q, batch);
		dlock__cleanups_settle(q, now_us);
	}
	g_ptr_array_unref(batch);
}
