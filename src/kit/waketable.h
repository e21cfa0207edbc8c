/* SPDX-License-Identifier: MIT */
/*
 * A wake table: key -> the waiters to wake when something happens to that
 * key (a lock file closed, a release published on a channel, a ZooKeeper
 * node deleted), plus one optional pointer of the backend's per key.
 *
 * The key type is the backend's: it gives the hash, equality and copy
 * functions at creation (an inotify watch descriptor as a direct int, a
 * channel name or node path as a string).  The table does no locking: the
 * backend calls it under the mutex that already guards what the keys
 * stand for, as it did with its own table.  Nothing here allocates when
 * waking, so a backend's wake path costs one hash lookup.
 *
 * A key lives while it has a waiter or non-NULL data: removing its last
 * waiter, or clearing its data, frees it -- and the call that does so
 * says so, for a backend that must then let go of what the key stands for
 * (an inotify watch).
 */
#ifndef DLOCK_KIT_WAKETABLE_H
#define DLOCK_KIT_WAKETABLE_H

#include <stdbool.h>

#include <glib.h>

#include "waiter.h"

typedef struct dlock__waketable dlock__waketable;
typedef struct dlock__wake_entry dlock__wake_entry;
/* Makes the table's own copy of a key: (dlock__key_copy_fn)g_strdup. */
typedef void *(*dlock__key_copy_fn)(const void *key);

/*
 * key_copy makes the table's own copy of a key when the key is first
 * added (NULL: the key is stored as given, as for GINT_TO_POINTER keys);
 * key_free frees that copy and data_free a key's data when the table is
 * freed or a key is dropped (either may be NULL).
 */
dlock__waketable *dlock__waketable_new(GHashFunc hash, GEqualFunc equal, dlock__key_copy_fn key_copy,
                                       GDestroyNotify key_free, GDestroyNotify data_free);
/* Free the table, its keys and their data; the waiters are not touched. */
void dlock__waketable_free(dlock__waketable *table);

/* Wake waiter whenever key is woken (the key is created if new).  The
 * waiter is borrowed until it is removed, and must be removed before it is
 * freed.  Adding it twice to a key needs two removes. */
void dlock__waketable_add(dlock__waketable *table, const void *key, dlock__waiter *waiter);
/* Stop waking waiter for key.  Returns true when this freed the key: no
 * waiter left and no data (false for a key that was not there). */
bool dlock__waketable_remove(dlock__waketable *table, const void *key, dlock__waiter *waiter);
/* Whether key is in the table (it has a waiter or data). */
bool dlock__waketable_contains(const dlock__waketable *table, const void *key);
/* Whether waiter is among key's waiters. */
bool dlock__waketable_has(const dlock__waketable *table, const void *key,
                          const dlock__waiter *waiter);
/* How many waiters key has (0 for an unknown key). */
unsigned dlock__waketable_count(const dlock__waketable *table, const void *key);

/* Wake every waiter of key.  Returns key's data (NULL for an unknown key),
 * so that a backend learns in the same lookup what else the key stands for. */
void *dlock__waketable_wake(dlock__waketable *table, const void *key);
/* Wake every waiter of every key (a reconnect, a session's state change). */
void dlock__waketable_wake_all(dlock__waketable *table);
/* Forget key, its waiters and its data (freed by data_free): a one-shot
 * event such as a fired ZooKeeper watch.  Its waiters can tell that it
 * fired: dlock__waketable_has() is false for them from then on. */
void dlock__waketable_drop(dlock__waketable *table, const void *key);

/* The backend's pointer for key, or NULL. */
void *dlock__waketable_data(const dlock__waketable *table, const void *key);
/* Set the backend's pointer for key (the key is created if new; the old
 * data is not freed).  Returns true when this freed the key: data NULL and
 * no waiter. */
bool dlock__waketable_set_data(dlock__waketable *table, const void *key, void *data);

/*
 * A walk over every key, for a backend that decides per key (the Redis
 * subscriber, bringing the server's subscriptions in line with the
 * table).  Between init and the last next, the table may be changed only
 * through the iterator.
 *
 *   dlock__waketable_iter it;
 *
 *   dlock__waketable_iter_init(&it, table);
 *   while (dlock__waketable_iter_next(&it))
 *       ... dlock__waketable_iter_key(&it), dlock__waketable_iter_data(&it) ...
 */
typedef struct dlock__waketable_iter {
	GHashTableIter iter;
	const void *key;
	dlock__wake_entry *entry;
} dlock__waketable_iter;

void dlock__waketable_iter_init(dlock__waketable_iter *it, dlock__waketable *table);
bool dlock__waketable_iter_next(dlock__waketable_iter *it);
/* The current key (the table's copy), its data and its waiter count; wake
 * its waiters; set its data (as dlock__waketable_set_data(): true when
 * that freed the key, which must then not be used again). */
const void *dlock__waketable_iter_key(const dlock__waketable_iter *it);
void *dlock__waketable_iter_data(const dlock__waketable_iter *it);
unsigned dlock__waketable_iter_count(const dlock__waketable_iter *it);
void dlock__waketable_iter_wake(dlock__waketable_iter *it);
bool dlock__waketable_iter_set_data(dlock__waketable_iter *it, void *data);

#endif
