/* Session leases in the runner's database (lease.h; table leases, schema
 * version 3 of core/store/db.c). Taking a lease is one statement: an
 * INSERT that, on a session already leased, updates the row only when it
 * is the same owner's or has expired, so that of two services taking it at
 * once exactly one changes a row (SQLite's write lock; PostgreSQL's row
 * lock, the WHERE looked at again on the row as the other left it). */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/host/log.h"
#include "core/store/db.h"
#include "core/store/lease.h"
#include "sandrun/plugin.h"

#define TAKE "INSERT INTO leases (session, owner, busy, expires, heartbeat) " \
	"VALUES ($1, $2, $3, $4 + $5, $4) ON CONFLICT (session) DO UPDATE SET " \
	"owner = excluded.owner, busy = excluded.busy, expires = excluded.expires, " \
	"heartbeat = excluded.heartbeat WHERE leases.owner = excluded.owner OR " \
	"leases.expires < excluded.heartbeat"

/* Run TAKE for one session: 1 taken, 0 held by another, -1 error. */
static int take(sr__db *db, const char *session, const char *owner, int busy, int64_t now,
		int64_t ttl)
{
	int n = sr__db_exec(db, NULL, TAKE, "ttiii", session, owner, (int64_t)busy, now, ttl);

	return n < 0 ? -1 : n == 1;
}

int sr__lease_acquire(sr__db *db, const char *session, const char *owner, int busy,
		      int64_t now, int64_t ttl, char *holder, size_t n)
{
	sr__db_rows *r;
	int got = take(db, session, owner, busy, now, ttl);

	if (got < 0)
		return sr__db_error(db, "service", "cannot take a session's lease");
	if (got) {
		/* What another service recorded of the session's sandbox is
		 * stale now (core/store/warm.c). */
		sr__db_exec(db, NULL, "DELETE FROM warm WHERE session = $1 AND owner != $2", "tt",
			    session, owner);
		return SR_OK;
	}
	snprintf(holder, n, "another service");
	if (sr__db_exec(db, &r, "SELECT owner, busy, expires FROM leases WHERE session = $1",
			"t", session) >= 0 && sr__db_nrows(r))
		snprintf(holder, n, "sandrund %s (%s; its lease runs %lld ms more unless "
			 "renewed)", sr__db_text(r, 0, 0),
			 sr__db_int(r, 0, 1) ? "a turn going on" : "kept warm",
			 (long long)(sr__db_int(r, 0, 2) - now));
	sr__db_rows_free(r);
	return SR_ESTATE;
}

/* Whether list (the heartbeat's array) names session. */
static int listed(json_t *list, const char *session)
{
	size_t i;
	json_t *v;

	json_array_foreach(list, i, v) {
		const char *s = json_string_value(json_object_get(v, "session"));
		if (s && strcmp(s, session) == 0)
			return 1;
	}
	return 0;
}

int sr__lease_beat(sr__db *db, const char *owner, const char *held, int64_t now,
		   int64_t since, int64_t ttl)
{
	json_t *list = json_loads(held, 0, NULL), *v;
	sr__db_rows *mine = NULL;
	int lost = 0, rc = SR_OK;
	size_t i;

	if (!json_is_array(list)) {
		json_decref(list);
		return SR_EINVAL;
	}
	if (sr__db_begin(db) != SR_OK) {
		json_decref(list);
		return sr__db_error(db, "service", "cannot renew the leases");
	}
	json_array_foreach(list, i, v) {
		const char *session = json_string_value(json_object_get(v, "session"));
		int got;
		if (!session || json_is_true(json_object_get(v, "pending")))
			continue;
		got = take(db, session, owner, json_is_true(json_object_get(v, "busy")), now, ttl);
		if (got < 0) {
			rc = SR_EIO;
			break;
		} else if (!got) {
			lost++;
			sr__log(SR_LOG_ERROR, "service", "session %s: its lease was taken over by "
				"another service while this one did not renew it (stalled longer "
				"than [service] lease_ttl?)", session);
		}
	}
	/* owner's other leases, but not one taken since the list was made. */
	if (rc == SR_OK && sr__db_exec(db, &mine, "SELECT session FROM leases WHERE owner = $1 "
				       "AND heartbeat < $2", "ti", owner, since) < 0)
		rc = SR_EIO;
	for (i = 0; rc == SR_OK && i < sr__db_nrows(mine); i++) {
		const char *session = sr__db_text(mine, i, 0);
		if (session && !listed(list, session) &&
		    sr__db_exec(db, NULL, "DELETE FROM leases WHERE session = $1 AND owner = $2 "
				"AND heartbeat < $3", "tti", session, owner, since) < 0)
			rc = SR_EIO;
	}
	if (rc != SR_OK)
		sr__db_error(db, "service", "cannot renew the leases");
	sr__db_rows_free(mine);
	json_decref(list);
	if (sr__db_end(db, rc == SR_OK) != SR_OK && rc == SR_OK)
		rc = sr__db_error(db, "service", "cannot renew the leases");
	return rc == SR_OK ? lost : rc;
}

int sr__lease_release_all(sr__db *db, const char *owner)
{
	if (sr__db_exec(db, NULL, "DELETE FROM leases WHERE owner = $1", "t", owner) < 0)
		return sr__db_error(db, "service", "cannot release the leases");
	return SR_OK;
}
