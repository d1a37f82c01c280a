/* Session leases in the runner's database (lease.h; table leases, schema
 * version 3 of core/store/db.c). Taking a lease is one statement: an
 * INSERT that, on a session already leased, updates the row only when it
 * is the same owner's or has expired, so that of two services taking it at
 * once exactly one changes a row. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "core/host/log.h"
#include "core/store/db.h"
#include "core/store/lease.h"
#include "sandrun/plugin.h"

#define TAKE "INSERT INTO leases (session, owner, busy, expires, heartbeat) " \
	"VALUES (?1, ?2, ?3, ?4 + ?5, ?4) ON CONFLICT (session) DO UPDATE SET " \
	"owner = excluded.owner, busy = excluded.busy, expires = excluded.expires, " \
	"heartbeat = excluded.heartbeat WHERE leases.owner = excluded.owner OR " \
	"leases.expires < excluded.heartbeat"

/* Run TAKE for one session: 1 taken, 0 held by another, -1 error. */
static int take(sqlite3 *db, sqlite3_stmt *st, const char *session, const char *owner,
		int busy, int64_t now, int64_t ttl)
{
	int rc;

	sqlite3_reset(st);
	sqlite3_bind_text(st, 1, session, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 3, busy);
	sqlite3_bind_int64(st, 4, now);
	sqlite3_bind_int64(st, 5, ttl);
	rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		return -1;
	return sqlite3_changes(db) == 1;
}

int sr__lease_acquire(sqlite3 *db, const char *session, const char *owner, int busy,
		      int64_t now, int64_t ttl, char *holder, size_t n)
{
	sqlite3_stmt *st;
	int got;

	if (sqlite3_prepare_v2(db, TAKE, -1, &st, NULL) != SQLITE_OK)
		return sr__db_error(db, "service", "cannot take a session's lease");
	got = take(db, st, session, owner, busy, now, ttl);
	sqlite3_finalize(st);
	if (got < 0)
		return sr__db_error(db, "service", "cannot take a session's lease");
	if (got) {
		/* What another service recorded of the session's sandbox is
		 * stale now (core/store/warm.c). */
		if (sqlite3_prepare_v2(db, "DELETE FROM warm WHERE session = ?1 AND owner != ?2",
				       -1, &st, NULL) == SQLITE_OK) {
			sqlite3_bind_text(st, 1, session, -1, SQLITE_STATIC);
			sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
			sqlite3_step(st);
			sqlite3_finalize(st);
		}
		return SR_OK;
	}
	snprintf(holder, n, "another service");
	if (sqlite3_prepare_v2(db, "SELECT owner, busy, expires FROM leases WHERE session = ?1",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, session, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW)
			snprintf(holder, n, "sandrund %s (%s; its lease runs %lld ms more unless "
				 "renewed)", (const char *)sqlite3_column_text(st, 0),
				 sqlite3_column_int(st, 1) ? "a turn going on" : "kept warm",
				 (long long)(sqlite3_column_int64(st, 2) - now));
		sqlite3_finalize(st);
	}
	return SR_ESTATE;
}

int sr__lease_beat(sqlite3 *db, const char *owner, const char *held, int64_t now,
		   int64_t since, int64_t ttl)
{
	sqlite3_stmt *list = NULL, *st = NULL, *drop = NULL;
	int lost = 0, rc = SR_OK;

	if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		return sr__db_error(db, "service", "cannot renew the leases");
	if (sqlite3_prepare_v2(db, "SELECT json_extract(value, '$.session'), "
			       "json_extract(value, '$.busy') FROM json_each(?1) WHERE "
			       "json_extract(value, '$.pending') IS NOT 1", -1, &list,
			       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, TAKE, -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "DELETE FROM leases WHERE owner = ?1 AND heartbeat < ?3 AND "
			       "session NOT IN (SELECT json_extract(value, '$.session') FROM "
			       "json_each(?2))", -1, &drop, NULL) != SQLITE_OK) {
		rc = SR_EIO;
		goto out;
	}
	sqlite3_bind_text(list, 1, held, -1, SQLITE_STATIC);
	while (rc == SR_OK && sqlite3_step(list) == SQLITE_ROW) {
		const char *session = (const char *)sqlite3_column_text(list, 0);
		int got;
		if (!session)
			continue;
		got = take(db, st, session, owner, sqlite3_column_int(list, 1), now, ttl);
		if (got < 0) {
			rc = SR_EIO;
		} else if (!got) {
			lost++;
			sr__log(SR_LOG_ERROR, "service", "session %s: its lease was taken over by "
				"another service while this one did not renew it (stalled longer "
				"than [service] lease_ttl?)", session);
		}
	}
	if (rc == SR_OK) {
		sqlite3_bind_text(drop, 1, owner, -1, SQLITE_STATIC);
		sqlite3_bind_text(drop, 2, held, -1, SQLITE_STATIC);
		sqlite3_bind_int64(drop, 3, since);
		if (sqlite3_step(drop) != SQLITE_DONE)
			rc = SR_EIO;
	}
out:
	if (rc != SR_OK)
		sr__db_error(db, "service", "cannot renew the leases");
	sqlite3_finalize(list);
	sqlite3_finalize(st);
	sqlite3_finalize(drop);
	if (sqlite3_exec(db, rc == SR_OK ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK &&
	    rc == SR_OK)
		rc = sr__db_error(db, "service", "cannot renew the leases");
	return rc == SR_OK ? lost : rc;
}

int sr__lease_release_all(sqlite3 *db, const char *owner)
{
	sqlite3_stmt *st;
	int rc;

	if (sqlite3_prepare_v2(db, "DELETE FROM leases WHERE owner = ?1", -1, &st, NULL) !=
	    SQLITE_OK)
		return sr__db_error(db, "service", "cannot release the leases");
	sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? SR_OK : sr__db_error(db, "service", "cannot release the leases");
}
