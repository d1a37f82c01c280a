/* The warm pool's record in the runner's database (warm.h; table warm,
 * schema version 4 of core/store/db.c). */
#include "config.h"

#include "core/store/db.h"
#include "core/store/warm.h"
#include "sandrun/plugin.h"

int sr__warm_record(sqlite3 *db, const char *session, const char *sandbox,
		    const char *provider, int running, int64_t ttl_at, const char *owner)
{
	sqlite3_stmt *st;
	int rc;

	if (!db || sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO warm (session, sandbox, "
				      "provider, running, ttl_at, owner) VALUES (?1, ?2, ?3, ?4, "
				      "NULLIF(?5, 0), ?6)", -1, &st, NULL) != SQLITE_OK)
		return db ? sr__db_error(db, "pool", "cannot record a warm sandbox") : SR_EIO;
	sqlite3_bind_text(st, 1, session, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, sandbox, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, provider, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 4, running);
	sqlite3_bind_int64(st, 5, ttl_at);
	sqlite3_bind_text(st, 6, owner, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? SR_OK : sr__db_error(db, "pool", "cannot record a warm sandbox");
}

int sr__warm_forget(sqlite3 *db, const char *session, const char *sandbox)
{
	sqlite3_stmt *st;
	int rc;

	if (!db || sqlite3_prepare_v2(db, "DELETE FROM warm WHERE session = ?1 AND sandbox = ?2",
				      -1, &st, NULL) != SQLITE_OK)
		return db ? sr__db_error(db, "pool", "cannot forget a warm sandbox") : SR_EIO;
	sqlite3_bind_text(st, 1, session, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, sandbox, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? SR_OK : sr__db_error(db, "pool", "cannot forget a warm sandbox");
}

json_t *sr__warm_adopt(sqlite3 *db, const char *owner)
{
	sqlite3_stmt *st = NULL, *mine = NULL, *stale = NULL;
	json_t *out = json_array();
	int rc = SQLITE_OK;

	if (!out || sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
		json_decref(out);
		sr__db_error(db, "pool", "cannot read the warm sandboxes");
		return NULL;
	}
	if (sqlite3_prepare_v2(db, "SELECT session, sandbox, provider, running, "
			       "COALESCE(ttl_at, 0), owner, (SELECT l.owner FROM leases l WHERE "
			       "l.session = warm.session AND l.owner != warm.owner) FROM warm "
			       "WHERE owner != ?1", -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "UPDATE warm SET owner = ?1 WHERE session = ?2", -1, &mine,
			       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "DELETE FROM warm WHERE session = ?1", -1, &stale,
			       NULL) != SQLITE_OK) {
		rc = SQLITE_ERROR;
		goto out;
	}
	sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *session = (const char *)sqlite3_column_text(st, 0);
		const char *taker = (const char *)sqlite3_column_text(st, 6);
		if (sr__db_owner_alive((const char *)sqlite3_column_text(st, 5)))
			continue; /* another service's, running */
		if (taker && sr__db_owner_alive(taker)) {
			/* A running service took the session over since (its
			 * lease): the sandbox is that service's business. */
			sqlite3_reset(stale);
			sqlite3_bind_text(stale, 1, session, -1, SQLITE_TRANSIENT);
			if (sqlite3_step(stale) != SQLITE_DONE)
				break;
			continue;
		}
		json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:b, s:I}", "session",
			session, "sandbox", (const char *)sqlite3_column_text(st, 1), "provider",
			(const char *)sqlite3_column_text(st, 2), "running",
			sqlite3_column_int(st, 3), "ttl_at",
			(json_int_t)sqlite3_column_int64(st, 4)));
		sqlite3_reset(mine);
		sqlite3_bind_text(mine, 1, owner, -1, SQLITE_STATIC);
		sqlite3_bind_text(mine, 2, session, -1, SQLITE_TRANSIENT);
		if (sqlite3_step(mine) != SQLITE_DONE)
			break;
	}
	if (rc == SQLITE_DONE)
		rc = SQLITE_OK;
out:
	sqlite3_finalize(st);
	sqlite3_finalize(mine);
	sqlite3_finalize(stale);
	if (rc != SQLITE_OK || sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
		sr__db_error(db, "pool", "cannot read the warm sandboxes");
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		json_decref(out);
		return NULL;
	}
	return out;
}
