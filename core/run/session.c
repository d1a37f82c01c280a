/* Session pointers in SQLite, <state>/sandrun.db (core/store/db.c), with
 * the compare-and-set on the turn index done by the database. */
#include "config.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/host/ctx.h"
#include "core/host/log.h"
#include "core/run/session.h"
#include "core/store/db.h"

void sr__session_new_id(char *buf, size_t n)
{
	unsigned char r[8] = { 0 };

	(void)!getrandom(r, sizeof(r), 0);
	snprintf(buf, n, "ses-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2],
		 r[3], r[4], r[5], r[6], r[7]);
}

int sr__session_valid_id(const char *id)
{
	if (!id || strncmp(id, "ses-", 4) != 0 || strlen(id) != 20)
		return 0;
	for (const char *p = id + 4; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

/* The record of id: SR_OK with *out, SR_ENOTFOUND, or SR_EIO (a record
 * that is not a JSON object, or a database error). */
static int read_record(sqlite3 *db, const char *id, json_t **out, sqlite3_int64 *turn)
{
	sqlite3_stmt *st;
	int rc;

	*out = NULL;
	if (sqlite3_prepare_v2(db, "SELECT record, turn FROM sessions WHERE id = ?1", -1, &st,
			       NULL) != SQLITE_OK)
		return sr__db_error(db, "session", "cannot read a session");
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const char *text = (const char *)sqlite3_column_text(st, 0);
		*turn = sqlite3_column_int64(st, 1);
		*out = text ? json_loads(text, 0, NULL) : NULL;
		if (!json_is_object(*out)) {
			json_decref(*out);
			*out = NULL;
			sr__log(SR_LOG_ERROR, "session", "session %s: its record does not read as "
				"JSON; it is left as it is", id);
			rc = SR_EIO;
		} else {
			rc = SR_OK;
		}
	} else {
		rc = rc == SQLITE_DONE ? SR_ENOTFOUND : sr__db_error(db, "session", "cannot read a session");
	}
	sqlite3_finalize(st);
	return rc;
}

/* A connection for session id: NULL with *rc SR_EINVAL (not an id) or
 * SR_EIO. */
static sqlite3 *open_for(const char *state_dir, const char *id, int *rc)
{
	sqlite3 *db = NULL;

	*rc = SR_EINVAL;
	if (sr__session_valid_id(id) && !(db = sr__db_open(state_dir)))
		*rc = SR_EIO;
	return db;
}

int sr__session_load(const char *state_dir, const char *id, json_t **out)
{
	sqlite3_int64 turn;
	sqlite3 *db;
	int rc;

	*out = NULL;
	if (!(db = open_for(state_dir, id, &rc)))
		return rc;
	rc = read_record(db, id, out, &turn);
	sqlite3_close(db);
	return rc;
}

int sr__session_store(const char *state_dir, const char *id, json_t *rec,
		      int expected_turn)
{
	sqlite3_stmt *st = NULL;
	sqlite3_int64 have = 0;
	json_t *cur;
	char *text;
	sqlite3 *db;
	int rc;

	if (json_integer_value(json_object_get(rec, "turn")) != expected_turn + 1)
		return SR_EINVAL;
	if (!(text = json_dumps(rec, JSON_COMPACT)))
		return SR_ENOMEM;
	if (!(db = open_for(state_dir, id, &rc))) {
		free(text);
		return rc;
	}
	if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
		rc = sr__db_error(db, "session", "cannot lock the database");
		goto out;
	}
	/* An unreadable record is never overwritten as if absent. */
	rc = read_record(db, id, &cur, &have);
	json_decref(cur);
	if (rc == SR_ENOTFOUND) {
		have = 0;
		rc = SR_OK;
	}
	if (rc == SR_OK && have != expected_turn)
		rc = SR_ESTATE;
	if (rc == SR_OK) {
		/* The database's compare-and-set: the row of the turn this one
		 * followed, or none for a first turn. */
		const char *sql = expected_turn == 0 ?
			"INSERT INTO sessions (id, turn, record, updated) VALUES (?1, ?2, ?3, ?4) "
			"ON CONFLICT (id) DO NOTHING" :
			"UPDATE sessions SET turn = ?2, record = ?3, updated = ?4 "
			"WHERE id = ?1 AND turn = ?5";
		if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
			rc = sr__db_error(db, "session", "cannot write a session");
		} else {
			sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
			sqlite3_bind_int64(st, 2, expected_turn + 1);
			sqlite3_bind_text(st, 3, text, -1, SQLITE_STATIC);
			sqlite3_bind_int64(st, 4, (sqlite3_int64)time(NULL));
			if (expected_turn)
				sqlite3_bind_int64(st, 5, expected_turn);
			if (sqlite3_step(st) != SQLITE_DONE)
				rc = sr__db_error(db, "session", "cannot write a session");
			else if (sqlite3_changes(db) != 1)
				rc = SR_ESTATE;
		}
		sqlite3_finalize(st);
	}
	if (sqlite3_exec(db, rc == SR_OK ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) !=
		    SQLITE_OK && rc == SR_OK)
		rc = sr__db_error(db, "session", "cannot commit a session");
out:
	sqlite3_close(db);
	free(text);
	return rc;
}

/* DELETE sql (?1 the id, ?2 sandbox when not NULL) for session id. */
static int delete_where(const char *state_dir, const char *id, const char *sql,
			const char *sandbox)
{
	sqlite3_stmt *st;
	sqlite3 *db;
	int rc;

	if (!(db = open_for(state_dir, id, &rc)))
		return rc;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		rc = sr__db_error(db, "session", "cannot remove a session");
	} else {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		if (sandbox)
			sqlite3_bind_text(st, 2, sandbox, -1, SQLITE_STATIC);
		if (sqlite3_step(st) != SQLITE_DONE)
			rc = sr__db_error(db, "session", "cannot remove a session");
		else
			rc = sqlite3_changes(db) ? SR_OK : SR_ENOTFOUND;
		sqlite3_finalize(st);
	}
	sqlite3_close(db);
	return rc;
}

int sr__session_remove(const char *state_dir, const char *id)
{
	return delete_where(state_dir, id, "DELETE FROM sessions WHERE id = ?1", NULL);
}

int sr__session_forget_sandbox(const char *state_dir, const char *id, const char *sandbox)
{
	/* One statement: no turn recorded in between is lost. */
	return delete_where(state_dir, id, "DELETE FROM sessions WHERE id = ?1 AND "
			    "json_valid(record) AND json_extract(record, '$.sandbox') = ?2",
			    sandbox);
}
