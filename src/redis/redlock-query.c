/* SPDX-License-Identifier: MIT */
/*
 * The Redlock query (dlock_lock_query, dlock status): one round of the
 * query script on every master, the quorum's verdict on who holds the
 * lock, and each master's own view.
 */
#include <string.h>

#include "clock.h"
#include "error.h"
#include "redlock.h"
#include "scripts-lua.h"

/* Master i's answer to the query script, or NULL. */
static const redisReply *query_reply(const rl_call *call)
{
	const redisReply *r = call->reply;

	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_INTEGER ||
	    r->element[2]->type != REDIS_REPLY_INTEGER)
		return NULL;
	return r;
}

static dlock__master_view master_view(const redis_backend *m, const redisReply *r)
{
	dlock__master_view v = { g_strdup_printf("%s:%d", m->host, m->port), r != NULL, NULL, -1, 0 };

	if (r) {
		if (r->element[0]->len > 0)
			v.holder_raw = g_strndup(r->element[0]->str, r->element[0]->len);
		v.expires_in_ms = MAX(r->element[1]->integer, -1);
		v.fencing_token = (uint64_t)MAX(r->element[2]->integer, 0);
	}
	return v;
}

/*
 * Who holds resource, as a quorum sees it: a value on a quorum of the
 * masters is the holder, with the shortest of their TTLs; the token is
 * the largest counter.  Each master's own answer goes in ret->masters.
 * Fewer than a quorum answering: DLOCK_EUNAVAILABLE, or the refusal that
 * kept them from answering (DLOCK_EACCES, DLOCK_ECONFIG, DLOCK_EBACKEND).
 */
int dlock__redlock_query(dlock__backend *backend, const char *resource, int64_t deadline_us,
                         dlock__server_info *ret)
{
	redlock_backend *rl = redlock_of(backend);
	redis_names names;
	const char *words[RL_QUERY_WORDS];
	rl_request req = { SCRIPT_RL_QUERY, words, NULL, 0, resource, rl->command_timeout_ms, true,
	                   false, 0, NULL, NULL };
	rl_call calls[RL_MASTERS_MAX];
	int64_t until_us;
	int answered, rc = DLOCK_OK;

	dlock__redis_names_init(&names, rl->masters[0], resource);
	words[RL_QUERY_KEY_LOCK] = names.key;
	words[RL_QUERY_KEY_FENCE] = names.fence;
	until_us = MIN(deadline_us, dlock__mono_us() + rl->command_timeout_ms * 1000);
	answered = dlock__redlock_round(rl, &req, NULL, until_us, calls, NULL);
	memset(ret, 0, sizeof(*ret));
	ret->expires_in_ms = -1;
	ret->masters = g_array_new(FALSE, TRUE, sizeof(dlock__master_view));
	g_array_set_clear_func(ret->masters, dlock__master_view_clear);
	for (int i = 0; i < rl->n_masters; i++) {
		dlock__master_view v = master_view(rl->masters[i], query_reply(&calls[i]));

		ret->fencing_token = MAX(ret->fencing_token, v.fencing_token);
		g_array_append_val(ret->masters, v);
	}
	for (int i = 0; i < rl->n_masters && !ret->locked; i++) {
		const dlock__master_view *v = &g_array_index(ret->masters, dlock__master_view, i);
		int64_t pttl = INT64_MAX;
		int agree = 0;

		for (int k = 0; v->holder_raw && k < rl->n_masters; k++) {
			const dlock__master_view *o = &g_array_index(ret->masters, dlock__master_view, k);

			if (o->holder_raw && strcmp(o->holder_raw, v->holder_raw) == 0) {
				agree++;
				if (o->expires_in_ms >= 0)
					pttl = MIN(pttl, o->expires_in_ms);
			}
		}
		if (agree >= rl->quorum) {
			ret->locked = true;
			ret->holder_raw = g_strdup(v->holder_raw);
			ret->expires_in_ms = pttl == INT64_MAX ? -1 : pttl;
		}
	}
	if (answered == DLOCK_ECONFIG)
		rc = dlock__redlock_conflict_error(calls, rl->n_masters);
	else if (answered < rl->quorum) {
		int failed_rc = DLOCK_EUNAVAILABLE;
		char *failed = dlock__redlock_failure(calls, rl->n_masters, &failed_rc);

		rc = dlock__error(failed_rc, "%s: %d of %d masters answered, a quorum is %d (%s)",
		                  rl->label, MAX(answered, 0), rl->n_masters, rl->quorum, failed);
		g_free(failed);
	}
	dlock__redlock_calls_clear(calls, rl->n_masters);
	dlock__redis_names_clear(&names);
	if (rc != DLOCK_OK)
		dlock__server_info_clear(ret);
	return rc;
}
