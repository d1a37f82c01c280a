/* The runner's database: SQLite, <state>/sandrun.db, in WAL mode. Its
 * schema is versioned with PRAGMA user_version and migrated when a
 * connection opens, under a write lock, so that two processes opening a
 * new database at once migrate it once; a newer schema is refused and a
 * file that is not a database left as it is. The versions:
 *   1  sessions (the session pointers, core/run/session.c); the files of
 *      the store before it (<state>/sessions/ses-*.json) are imported
 *      and left where they were
 *   2  runs and run_events (the service's run log, core/service/
 *      runlog_db.c)
 *   3  leases (which service holds a session, core/store/lease.c)
 *   4  warm (the sandboxes a service's pool holds, core/run/pool.c) */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/host/fsutil.h"
#include "core/host/log.h"
#include "core/run/session.h"
#include "core/store/db.h"

#define SCHEMA_VERSION 4

/* When process pid started (clock ticks after boot, /proc/PID/stat's
 * 22nd field), or 0 when it cannot be read. */
static unsigned long long start_of(long pid)
{
	char path[64], buf[1024];
	unsigned long long start = 0;
	const char *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if (!(f = fopen(path, "re")))
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* After the command's closing parenthesis: state, then 18 fields. */
	if ((p = strrchr(buf, ')')) &&
	    sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
		   "%*d %*d %*d %llu", &start) != 1)
		start = 0;
	return start;
}

void sr__db_owner(char *buf, size_t n)
{
	char host[256] = "localhost";

	gethostname(host, sizeof(host) - 1);
	snprintf(buf, n, "%s:%ld:%llu", host, (long)getpid(), start_of((long)getpid()));
}

int sr__db_owner_alive(const char *owner)
{
	const char *colon = owner ? strchr(owner, ':') : NULL;
	unsigned long long start = 0;
	char me[320], *end;
	long pid;

	sr__db_owner(me, sizeof(me));
	if (!colon || strcmp(owner, me) == 0)
		return 0;
	/* Another host's cannot be asked. */
	if (strncmp(owner, me, (size_t)(colon - owner) + 1) != 0)
		return 0;
	pid = strtol(colon + 1, &end, 10);
	if (*end == ':')
		start = strtoull(end + 1, NULL, 10);
	if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno != EPERM))
		return 0;
	/* The same pid, but a later process (the pid reused): gone. One
	 * whose start cannot be read (another user's, /proc hidepid): taken
	 * as the same. */
	{
		unsigned long long now = start ? start_of(pid) : 0;
		return !start || !now || now == start;
	}
}

int sr__db_error(sqlite3 *db, const char *area, const char *what)
{
	sr__log(SR_LOG_ERROR, area, "%s: %s: %s", sqlite3_db_filename(db, "main"), what,
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
		return sr__db_error(db, "store", "cannot import the session files");
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
			sr__log(SR_LOG_WARN, "store", "%s does not read as a session record; "
				"not imported (left as it is)", file);
		} else {
			sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
			sqlite3_bind_int64(st, 2, json_integer_value(json_object_get(rec, "turn")));
			sqlite3_bind_text(st, 3, text, -1, SQLITE_TRANSIENT);
			sqlite3_bind_int64(st, 4, (sqlite3_int64)time(NULL));
			if (sqlite3_step(st) != SQLITE_DONE)
				rc = sr__db_error(db, "store", "cannot import the session files");
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
		sr__log(SR_LOG_INFO, "store", "imported %d session pointers from %s into the "
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
		rc = sr__db_error(db, "store", "cannot read the schema version");
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
		return sr__db_error(db, "store", "cannot set the journal mode");
	if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		return sr__db_error(db, "store", "cannot lock the database");
	rc = schema_version(db, &version);
	if (rc == SR_OK && version > SCHEMA_VERSION) {
		sr__log(SR_LOG_ERROR, "store", "%s: schema version %d is newer than this "
			"sandrun's (%d): refusing to touch it", sqlite3_db_filename(db, "main"),
			version, SCHEMA_VERSION);
		rc = SR_EIO;
	}
	if (rc == SR_OK && version < 1) {
		if (sqlite3_exec(db, "CREATE TABLE sessions (id TEXT PRIMARY KEY, turn INTEGER NOT "
				 "NULL, record TEXT NOT NULL, updated INTEGER NOT NULL)", NULL, NULL,
				 NULL) != SQLITE_OK)
			rc = sr__db_error(db, "store", "cannot create the sessions table");
		else
			rc = import_files(db, state);
	}
	/* 2: the service's runs (their last summary) and their events, for
	 * replay after a restart; ended orders the runs that are over. */
	if (rc == SR_OK && version < 2 &&
	    sqlite3_exec(db, "CREATE TABLE runs (id TEXT PRIMARY KEY, summary TEXT NOT NULL, "
			 "owner TEXT NOT NULL, ended INTEGER);"
			 "CREATE INDEX runs_ended ON runs (ended);"
			 "CREATE TABLE run_events (run TEXT NOT NULL, seq INTEGER NOT NULL, "
			 "line TEXT NOT NULL, PRIMARY KEY (run, seq)) WITHOUT ROWID",
			 NULL, NULL, NULL) != SQLITE_OK)
		rc = sr__db_error(db, "store", "cannot create the runs tables");
	/* 3: session leases; expires and heartbeat in Unix milliseconds. */
	if (rc == SR_OK && version < 3 &&
	    sqlite3_exec(db, "CREATE TABLE leases (session TEXT PRIMARY KEY, owner TEXT NOT NULL, "
			 "busy INTEGER NOT NULL, expires INTEGER NOT NULL, heartbeat INTEGER "
			 "NOT NULL)", NULL, NULL, NULL) != SQLITE_OK)
		rc = sr__db_error(db, "store", "cannot create the leases table");
	/* 4: the warm pool's sandboxes; ttl_at in Unix milliseconds. */
	if (rc == SR_OK && version < 4 &&
	    sqlite3_exec(db, "CREATE TABLE warm (session TEXT PRIMARY KEY, sandbox TEXT NOT NULL, "
			 "provider TEXT NOT NULL, running INTEGER NOT NULL, ttl_at INTEGER, "
			 "owner TEXT NOT NULL)", NULL, NULL, NULL) != SQLITE_OK)
		rc = sr__db_error(db, "store", "cannot create the warm table");
	if (rc == SR_OK && version < SCHEMA_VERSION) {
		char sql[64];
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", SCHEMA_VERSION);
		if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
			rc = sr__db_error(db, "store", "cannot record the schema version");
	}
	if (sqlite3_exec(db, rc == SR_OK ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK &&
	    rc == SR_OK)
		rc = sr__db_error(db, "store", "cannot commit the migration");
	return rc;
}

/* Another connection writes: wait for it, up to 10 s, looking again
 * every 0.1 ms at first and every 5 ms at most. (SQLite's own busy
 * timeout sleeps 1, 2, 5, ... 100 ms between looks: with many short
 * writes, a writer slept far longer than the one before it took.) */
static int on_busy(void *ud, int count)
{
	struct timespec ts;
	long us = 100L * (count + 1);

	(void)ud;
	if (us > 5000)
		us = 5000;
	/* 10 s: the first 50 looks take 0.13 s, then one every 5 ms. */
	if (count > 50 + 1975)
		return 0;
	ts.tv_sec = 0;
	ts.tv_nsec = us * 1000;
	nanosleep(&ts, NULL);
	return 1;
}

sqlite3 *sr__db_open(const char *state)
{
	char path[4200];
	sqlite3 *db = NULL;

	if (sr__mkdirs(state, 0700) != SR_OK) {
		sr__log(SR_LOG_ERROR, "store", "cannot create the state directory %s", state);
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/sandrun.db", state);
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
			    SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, NULL) != SQLITE_OK) {
		sr__log(SR_LOG_ERROR, "store", "cannot open %s: %s", path,
			db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return NULL;
	}
	/* Writers wait for each other (several runners on one state
	 * directory). A commit writes the WAL without waiting for it to
	 * reach the disk (synchronous NORMAL, per connection): what is
	 * written survives the process dying, and the database stays
	 * whole if the machine goes down, losing at most the last commits.
	 * Waiting for the disk at every pointer, lease and event made a
	 * turn wait on fsync, and writers queue behind each other. */
	sqlite3_busy_handler(db, on_busy, NULL);
	sqlite3_exec(db, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL);
	if (migrate(db, state) != SR_OK) {
		if (sqlite3_errcode(db) == SQLITE_NOTADB)
			sr__log(SR_LOG_ERROR, "store", "%s is not a SQLite database; it is left "
				"as it is (move it away to start afresh)", path);
		else if (sqlite3_errcode(db) != SQLITE_OK) /* else said already */
			sr__db_error(db, "store", "cannot use the database");
		sqlite3_close(db);
		return NULL;
	}
	return db;
}

