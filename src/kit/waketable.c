/* SPDX-License-Identifier: MIT */
/*
 * The wake table (see waketable.h): a GHashTable of key -> entry, each
 * entry the key's waiters and the backend's pointer.
 */
#include "waketable.h"

struct dlock__wake_entry {
	GPtrArray *waiters; /* dlock__waiter *, borrowed */
	void *data;
};

struct dlock__waketable {
	GHashTable *entries; /* key (the table's copy) -> dlock__wake_entry * */
	dlock__key_copy_fn key_copy;
	GDestroyNotify data_free;
};

static void entry_free(dlock__wake_entry *e, GDestroyNotify data_free)
{
	if (data_free && e->data)
		data_free(e->data);
	g_ptr_array_unref(e->waiters);
	g_free(e);
}

dlock__waketable *dlock__waketable_new(GHashFunc hash, GEqualFunc equal, dlock__key_copy_fn key_copy,
                                       GDestroyNotify key_free, GDestroyNotify data_free)
{
	dlock__waketable *t = g_new(dlock__waketable, 1);

	/* Entries are freed by hand (entry_free needs data_free), so the hash
	 * table frees only the keys. */
	t->entries = g_hash_table_new_full(hash, equal, key_free, NULL);
	t->key_copy = key_copy;
	t->data_free = data_free;
	return t;
}

void dlock__waketable_free(dlock__waketable *table)
{
	GHashTableIter iter;
	gpointer value;

	if (!table)
		return;
	g_hash_table_iter_init(&iter, table->entries);
	while (g_hash_table_iter_next(&iter, NULL, &value))
		entry_free(value, table->data_free);
	g_hash_table_unref(table->entries);
	g_free(table);
}

static dlock__wake_entry *entry_get(dlock__waketable *t, const void *key)
{
	dlock__wake_entry *e = g_hash_table_lookup(t->entries, key);

	if (!e) {
		e = g_new(dlock__wake_entry, 1);
		e->waiters = g_ptr_array_new();
		e->data = NULL;
		g_hash_table_insert(t->entries, t->key_copy ? t->key_copy(key) : (gpointer)key, e);
	}
	return e;
}

static bool entry_empty(const dlock__wake_entry *e)
{
	return e->waiters->len == 0 && !e->data;
}

/* Free key's entry if nothing is left in it; true if it is gone. */
static bool entry_maybe_remove(dlock__waketable *t, const void *key, dlock__wake_entry *e)
{
	if (!entry_empty(e))
		return false;
	g_hash_table_remove(t->entries, key);
	entry_free(e, NULL);
	return true;
}

static void entry_wake(const dlock__wake_entry *e)
{
	for (guint i = 0; i < e->waiters->len; i++)
		dlock__waiter_wake(e->waiters->pdata[i]);
}

void dlock__waketable_add(dlock__waketable *table, const void *key, dlock__waiter *waiter)
{
	g_ptr_array_add(entry_get(table, key)->waiters, waiter);
}

bool dlock__waketable_remove(dlock__waketable *table, const void *key, dlock__waiter *waiter)
{
	dlock__wake_entry *e = g_hash_table_lookup(table->entries, key);

	if (!e)
		return false;
	g_ptr_array_remove_fast(e->waiters, waiter);
	return entry_maybe_remove(table, key, e);
}

bool dlock__waketable_contains(const dlock__waketable *table, const void *key)
{
	return g_hash_table_contains(table->entries, key);
}

bool dlock__waketable_has(const dlock__waketable *table, const void *key,
                          const dlock__waiter *waiter)
{
	const dlock__wake_entry *e = g_hash_table_lookup(table->entries, key);

	for (guint i = 0; e && i < e->waiters->len; i++)
		if (e->waiters->pdata[i] == waiter)
			return true;
	return false;
}

unsigned dlock__waketable_count(const dlock__waketable *table, const void *key)
{
	const dlock__wake_entry *e = g_hash_table_lookup(table->entries, key);

	return e ? e->waiters->len : 0;
}

void *dlock__waketable_wake(dlock__waketable *table, const void *key)
{
	const dlock__wake_entry *e = g_hash_table_lookup(table->entries, key);

	if (!e)
		return NULL;
	entry_wake(e);
	return e->data;
}

void dlock__waketable_wake_all(dlock__waketable *table)
{
	GHashTableIter iter;
	gpointer value;

	g_hash_table_iter_init(&iter, table->entries);
	while (g_hash_table_iter_next(&iter, NULL, &value))
		entry_wake(value);
}

void dlock__waketable_drop(dlock__waketable *table, const void *key)
{
	dlock__wake_entry *e = g_hash_table_lookup(table->entries, key);

	if (!e)
		return;
	g_hash_table_remove(table->entries, key);
	entry_free(e, table->data_free);
}

void *dlock__waketable_data(const dlock__waketable *table, const void *key)
{
	const dlock__wake_entry *e = g_hash_table_lookup(table->entries, key);

	return e ? e->data : NULL;
}

bool dlock__waketable_set_data(dlock__waketable *table, const void *key, void *data)
{
	dlock__wake_entry *e = data ? entry_get(table, key) : g_hash_table_lookup(table->entries, key);

	if (!e)
		return false;
	e->data = data;
	return entry_maybe_remove(table, key, e);
}

/* ---- iteration -------------------------------------------------------- */

void dlock__waketable_iter_init(dlock__waketable_iter *it, dlock__waketable *table)
{
	g_hash_table_iter_init(&it->iter, table->entries);
	it->key = NULL;
	it->entry = NULL;
}

bool dlock__waketable_iter_next(dlock__waketable_iter *it)
{
	gpointer key, value;

	if (!g_hash_table_iter_next(&it->iter, &key, &value)) {
		it->key = NULL;
		it->entry = NULL;
		return false;
	}
	it->key = key;
	it->entry = value;
	return true;
}

const void *dlock__waketable_iter_key(const dlock__waketable_iter *it)
{
	return it->key;
}

void *dlock__waketable_iter_data(const dlock__waketable_iter *it)
{
	return it->entry->data;
}

unsigned dlock__waketable_iter_count(const dlock__waketable_iter *it)
{
	return it->entry->waiters->len;
}

void dlock__waketable_iter_wake(dlock__waketable_iter *it)
{
	entry_wake(it->entry);
}

bool dlock__waketable_iter_set_data(dlock__waketable_iter *it, void *data)
{
	it->entry->data = data;
	if (!entry_empty(it->entry))
		return false;
	/* Frees the key: the caller must not use the one next gave it. */
	g_hash_table_iter_remove(&it->iter);
	entry_free(it->entry, NULL);
	it->key = NULL;
	it->entry = NULL;
	return true;
}
