/* Session pointers in SQLite, <state>/sandrun.db, with the compare-and-set
 * on the turn index done by the database. The schema is versioned with
 * PRAGMA user_version and migrated when a connection opens; the first
 * migration imports the files of the earlier store (<state>/sessions/
 * ses-*.json), which are left where they were. */
#include "config.h"

#include <dirent.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/host/ctx.h"
#include "core/host/fsutil.h"
#include "core/host/log.h"
#include "core/run/session.h"

#define SCHEMA_VERSION 1

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

static int db_error(sqlite3 *db, const char *what)
{
	sr__log(SR_LOG_ERROR, "session", "%s: %s: %s", sqlite3_db_filename(db, "main"), what,
		sqlite3_errmsg(db));
	return SR_EIO;
}

/* The files of the store before SQLite, into the sessions table (in the
 * migration's transaction). A file that does not read is said and left. */
static int import_files(sqlite3 *db, const char *state)
{
	char dir[4096], file[4400];
	sqlite3_stmt *st = NULL;
	struct dirent *e;
	DIR *d;
	int rc = SR_OK, n = 0;

	snprintf(dir, sizeof(dir), "%s/sessions", state);
	if (!(d = opendir(dir)))
		return SR_OK;
	if (sqlite3_prepare_v2(db, "INSERT OR IGNORE INTO sessions (id, turn, record, updated) "
			       "VALUES (?1, ?2, ?3, ?4)", -1, &st, NULL) != SQLITE_OK) {
		closedir(d);
		return db_error(db, "cannot import the session files");
	}
	while (rc == SR_OK && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		char id[32];
		json_t *rec;
		char *text;
		if (len != 25 || strcmp(e->d_name + 20, ".json") != 0)
			continue;
		snprintf(id, sizeof(id), "%.20s", e->d_name);
		if (!sr__session_valid_id(id))
			continue;
		snprintf(file, sizeof(file), "%s/%s", dir, e->d_name);
		rec = json_load_file(file, 0, NULL);
		text = json_is_object(rec) ? json_dumps(rec, JSON_COMPACT) : NULL;
		if (!text) {
			sr__log(SR_LOG_WARN, "session", "%s does not read as a session record; "
				"not imported (left as it is)", file);
		} else {
			sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
			sqlite3_bind_int64(st, 2, json_integer_value(json_object_get(rec, "turn")));
			sqlite3_bind_text(st, 3, text, -1, SQLITE_TRANSIENT);
			sqlite3_bind_int64(st, 4, (sqlite3_int64)time(NULL));
			if (sqlite3_step(st) != SQLITE_DONE)
				rc = db_error(db, "cannot import the session files");
			else
				n += sqlite3_changes(db);
			sqlite3_reset(st);
		}
		free(text);
		json_decref(rec);
	}
	closedir(d);
	sqlite3_finalize(st);
	if (rc == SR_OK && n)
		sr__log(SR_LOG_INFO, "session", "imported %d session pointers from %s into the "
			"database", n, dir);
	return rc;
}

/* Bring the schema to SCHEMA_VERSION, under a write lock (two processes
 * opening a new database at once migrate it once). */
static int schema_version(sqlite3 *db, int *version)
{
	sqlite3_stmt *st;
	int rc = SR_OK;

	if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		*version = sqlite3_column_int(st, 0);
	else
		rc = db_error(db, "cannot read the schema version");
	sqlite3_finalize(st);
	return rc;
}

static int migrate(sqlite3 *db, const char *state)
{
	int version = 0, rc;

	/* Current already (the usual case): no write lock. */
	if ((rc = schema_version(db, &version)) != SR_OK || version == SCHEMA_VERSION)
		return rc;
	/* WAL (lasting, set once, outside a transaction): readers go on while
	 * a writer writes. */
	if (sqlite3_exec(db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL) != SQLITE_OK)
		return db_error(db, "cannot set the journal mode");
	if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		return db_error(db, "cannot lock the database");
	rc = schema_version(db, &version);
	if (rc == SR_OK && version > SCHEMA_VERSION) {
		sr__log(SR_LOG_ERROR, "session", "%s: schema version %d is newer than this "
			"sandrun's (%d): refusing to touch it", sqlite3_db_filename(db, "main"),
			version, SCHEMA_VERSION);
		rc = SR_EIO;
	}
	if (rc == SR_OK && version < 1) {
		if (sqlite3_exec(db, "CREATE TABLE sessions (id TEXT PRIMARY KEY, turn INTEGER NOT "
				 "NULL, record TEXT NOT NULL, updated INTEGER NOT NULL)", NULL, NULL,
				 NULL) != SQLITE_OK)
			rc = db_error(db, "cannot create the sessions table");
		else
			rc = import_files(db, state);
	}
	if (rc == SR_OK && version < SCHEMA_VERSION) {
		char sql[64];
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", SCHEMA_VERSION);
		if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
			rc = db_error(db, "cannot record the schema version");
	}
	if (sqlite3_exec(db, rc == SR_OK ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK &&
	    rc == SR_OK)
		rc = db_error(db, "cannot commit the migration");
	return rc;
}

/* A connection to state's database, migrated; NULL (logged) when it
 * cannot be had: a file that is not a database is never overwritten. */
static sqlite3 *open_db(const char *state)
{
	char path[4200];
	sqlite3 *db = NULL;

	if (sr__mkdirs(state, 0700) != SR_OK) {
		sr__log(SR_LOG_ERROR, "session", "cannot create the state directory %s", state);
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/sandrun.db", state);
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
			    SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, NULL) != SQLITE_OK) {
		sr__log(SR_LOG_ERROR, "session", "cannot open %s: %s", path,
			db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return NULL;
	}
	/* Writers wait for each other (several runners on one state
	 * directory). */
	sqlite3_busy_timeout(db, 10000);
	if (migrate(db, state) != SR_OK) {
		if (sqlite3_errcode(db) == SQLITE_NOTADB)
			sr__log(SR_LOG_ERROR, "session", "%s is not a SQLite database; it is left "
				"as it is (move it away to start afresh)", path);
		else
			db_error(db, "cannot use the database");
		sqlite3_close(db);
		return NULL;
	}
	return db;
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
		return db_error(db, "cannot read a session");
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
		rc = rc == SQLITE_DONE ? SR_ENOTFOUND : db_error(db, "cannot read a session");
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
	if (sr__session_valid_id(id) && !(db = open_db(state_dir)))
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
		rc = db_error(db, "cannot lock the database");
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
			rc = db_error(db, "cannot write a session");
		} else {
			sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
			sqlite3_bind_int64(st, 2, expected_turn + 1);
			sqlite3_bind_text(st, 3, text, -1, SQLITE_STATIC);
			sqlite3_bind_int64(st, 4, (sqlite3_int64)time(NULL));
			if (expected_turn)
				sqlite3_bind_int64(st, 5, expected_turn);
			if (sqlite3_step(st) != SQLITE_DONE)
				rc = db_error(db, "cannot write a session");
			else if (sqlite3_changes(db) != 1)
				rc = SR_ESTATE;
		}
		sqlite3_finalize(st);
	}
	if (sqlite3_exec(db, rc == SR_OK ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) !=
		    SQLITE_OK && rc == SR_OK)
		rc = db_error(db, "cannot commit a session");
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
		rc = db_error(db, "cannot remove a session");
	} else {
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
		if (sandbox)
			sqlite3_bind_text(st, 2, sandbox, -1, SQLITE_STATIC);
		if (sqlite3_step(st) != SQLITE_DONE)
			rc = db_error(db, "cannot remove a session");
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
