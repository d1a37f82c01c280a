/* The runner's database. With no [store] url it is SQLite,
 * <state>/sandrun.db, in WAL mode; with one, a PostgreSQL server
 * (core/store/pg.c). The calls of db.h are the same for both. SQLite's
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
 *   4  warm (the sandboxes a service's pool holds, core/run/pool.c)
 *   5  kv (the plugins' key-value areas, core/store/kv.c); the files of
 *      the areas before it (<state>/plugins/SECTION/kv/KEY) are imported
 *      and left where they were
 * PostgreSQL's schema starts at version 4 (pg.c). */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/host/fsutil.h"
#include "core/host/kv.h"
#include "core/host/log.h"
#include "core/run/session.h"
#include "core/store/db_int.h"

#define SCHEMA_VERSION 5

/* The store's URL ("": SQLite), set at start before any thread uses it. */
static char *store_url;

void sr__db_use(const char *url)
{
	free(store_url);
	store_url = url && *url ? strdup(url) : NULL;
}

int sr__db_url_valid(const char *url)
{
	if (!url || !*url)
		return 1;
	if (strncmp(url, "postgresql://", 13) != 0 && strncmp(url, "postgres://", 11) != 0 &&
	    (!strchr(url, '=') || strstr(url, "://")))
		return 0;
	/* A URI or libpq's "key=value ..." form, as libpq parses it. */
	return sr__db_pg_url_valid(url);
}

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

int sr__db_owner_here(const char *owner)
{
	const char *colon = owner ? strchr(owner, ':') : NULL;
	char host[256] = "localhost";

	/* The host part only: no need to read this process's start. */
	gethostname(host, sizeof(host) - 1);
	return colon && strlen(host) == (size_t)(colon - owner) &&
	       strncmp(owner, host, (size_t)(colon - owner)) == 0;
}

/* ------------------------------------------------------- the common part */

const char *sr__db_name(const sr__db *db)
{
	return db->name;
}

int sr__db_error(sr__db *db, const char *area, const char *what)
{
	sr__log(SR_LOG_ERROR, area, "%s: %s: %s", db->name, what, db->err);
	return SR_EIO;
}

int sr__db_busy(const sr__db *db)
{
	return db->busy;
}

int sr__db_exec(sr__db *db, sr__db_rows **rows, const char *sql, const char *types, ...)
{
	va_list ap;
	int rc;

	if (rows)
		*rows = NULL;
	db->busy = 0;
	va_start(ap, types);
	rc = db->be->exec(db, rows, sql, types, ap);
	va_end(ap);
	if (rc < 0 && rows) {
		sr__db_rows_free(*rows);
		*rows = NULL;
	}
	return rc;
}

int sr__db_begin(sr__db *db)
{
	db->busy = 0;
	return db->be->begin(db);
}

int sr__db_end(sr__db *db, int commit)
{
	return db->be->end(db, commit);
}

void sr__db_close(sr__db *db)
{
	if (db)
		db->be->close(db);
}

int sr__db_rows_add(sr__db_rows **rp, int cols, const char *const *cell)
{
	sr__db_rows *r = *rp;

	if (!r) {
		if (!(r = *rp = calloc(1, sizeof(*r))))
			return SR_ENOMEM;
		r->cols = cols;
	}
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 8;
		char **grown = realloc(r->cell, cap * (size_t)cols * sizeof(*grown));
		if (!grown)
			return SR_ENOMEM;
		r->cell = grown;
		r->cap = cap;
	}
	for (int c = 0; c < cols; c++) {
		char **slot = &r->cell[r->n * (size_t)cols + (size_t)c];
		*slot = NULL;
		if (cell[c] && !(*slot = strdup(cell[c]))) {
			while (c--)
				free(r->cell[r->n * (size_t)cols + (size_t)c]);
			return SR_ENOMEM;
		}
	}
	r->n++;
	return SR_OK;
}

size_t sr__db_nrows(const sr__db_rows *r)
{
	return r ? r->n : 0;
}

const char *sr__db_text(const sr__db_rows *r, size_t row, int col)
{
	if (!r || row >= r->n || col < 0 || col >= r->cols)
		return NULL;
	return r->cell[row * (size_t)r->cols + (size_t)col];
}

int64_t sr__db_int(const sr__db_rows *r, size_t row, int col)
{
	const char *v = sr__db_text(r, row, col);

	return v ? (int64_t)strtoll(v, NULL, 10) : 0;
}

void sr__db_rows_free(sr__db_rows *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n * (size_t)r->cols; i++)
		free(r->cell[i]);
	free(r->cell);
	free(r);
}

/* ---------------------------------------------------------------- SQLite */

static void lite_failed(sr__db *db)
{
	sqlite3 *h = db->h;
	int code = sqlite3_errcode(h) & 0xff;

	db->busy = code == SQLITE_BUSY || code == SQLITE_LOCKED;
	snprintf(db->err, sizeof(db->err), "%s", sqlite3_errmsg(h));
}

/* sql with SQLite's numbered parameters: $N (outside quotes) as ?N. */
static char *lite_sql(const char *sql)
{
	char *out = strdup(sql);
	int quoted = 0;

	for (char *p = out; p && *p; p++) {
		if (*p == '\'')
			quoted = !quoted;
		else if (!quoted && *p == '$' && p[1] >= '0' && p[1] <= '9')
			*p = '?';
	}
	return out;
}

static int lite_exec(sr__db *db, sr__db_rows **rows, const char *sql, const char *types,
		     va_list ap)
{
	sqlite3 *h = db->h;
	sqlite3_stmt *st = NULL;
	char *text;
	int rc, i = 0;

	if (!*types && !rows) {
		if (!(text = lite_sql(sql)))
			return SR_ENOMEM;
		rc = sqlite3_exec(h, text, NULL, NULL, NULL);
		free(text);
		if (rc != SQLITE_OK) {
			lite_failed(db);
			return SR_EIO;
		}
		return sqlite3_changes(h);
	}
	if (!(text = lite_sql(sql)))
		return SR_ENOMEM;
	rc = sqlite3_prepare_v2(h, text, -1, &st, NULL);
	free(text);
	if (rc != SQLITE_OK) {
		lite_failed(db);
		return SR_EIO;
	}
	for (const char *t = types; *t; t++) {
		i++;
		if (*t == 'i') {
			sqlite3_bind_int64(st, i, (sqlite3_int64)va_arg(ap, int64_t));
		} else {
			const char *v = va_arg(ap, const char *);
			if (v)
				sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
			else
				sqlite3_bind_null(st, i);
		}
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int cols = sqlite3_column_count(st);
		const char *cell[16];
		if (!rows)
			continue;
		if (cols > 16)
			cols = 16;
		for (int c = 0; c < cols; c++)
			cell[c] = (const char *)sqlite3_column_text(st, c);
		if (sr__db_rows_add(rows, cols, cell) != SR_OK) {
			sqlite3_finalize(st);
			snprintf(db->err, sizeof(db->err), "out of memory");
			return SR_EIO;
		}
	}
	if (rc != SQLITE_DONE) {
		lite_failed(db);
		sqlite3_finalize(st);
		return SR_EIO;
	}
	sqlite3_finalize(st);
	return sqlite3_changes(h);
}

static int lite_begin(sr__db *db)
{
	if (sqlite3_exec(db->h, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
		lite_failed(db);
		return SR_EIO;
	}
	return SR_OK;
}

static int lite_end(sr__db *db, int commit)
{
	if (sqlite3_exec(db->h, commit ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK) {
		lite_failed(db);
		if (commit) /* still open: let it go */
			sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
		return SR_EIO;
	}
	return SR_OK;
}

static void lite_close(sr__db *db)
{
	sqlite3_close(db->h);
	free(db);
}

static const db_backend lite = { lite_exec, lite_begin, lite_end, lite_close };

/* The files of the store before the database, into the sessions table
 * (in the migration's transaction). A file that does not read is said and
 * left. */
int sr__db_import_files(sr__db *db, const char *state)
{
	char dir[4096], file[4400];
	struct dirent *e;
	DIR *d;
	int rc = SR_OK, n = 0;

	snprintf(dir, sizeof(dir), "%s/sessions", state);
	if (!(d = opendir(dir)))
		return SR_OK;
	while (rc == SR_OK && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		char id[32];
		json_t *rec;
		char *text;
		int got;
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
			got = sr__db_exec(db, NULL, "INSERT INTO sessions (id, turn, record, updated) "
					  "VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
					  "titi", id,
					  (int64_t)json_integer_value(json_object_get(rec, "turn")),
					  text, (int64_t)time(NULL));
			if (got < 0)
				rc = sr__db_error(db, "store", "cannot import the session files");
			else
				n += got;
		}
		free(text);
		json_decref(rec);
	}
	closedir(d);
	if (rc == SR_OK && n)
		sr__log(SR_LOG_INFO, "store", "imported %d session pointers from %s into the "
			"database", n, dir);
	return rc;
}

/* One file of a key-value area before the database (its bytes, up to 1
 * MiB, never through a link) into the kv table unless the key is there. */
static int import_kv_file(sr__db *db, const char *ns, const char *dir, const char *key)
{
	char path[4400], *buf, *text;
	struct stat st;
	ssize_t n;
	int fd, hex = 0, rc;

	snprintf(path, sizeof(path), "%s/%s", dir, key);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20)) {
		if (fd >= 0)
			close(fd);
		sr__log(SR_LOG_WARN, "store", "%s is not a key-value record; not imported (left "
			"as it is)", path);
		return 0;
	}
	buf = malloc((size_t)st.st_size + 1);
	n = buf ? read(fd, buf, (size_t)st.st_size) : -1;
	close(fd);
	if (n != st.st_size) {
		free(buf);
		sr__log(SR_LOG_WARN, "store", "cannot read %s; not imported", path);
		return 0;
	}
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == 0 || (unsigned char)buf[i] >= 0x80)
			hex = 1;
	if (hex && (text = malloc(2 * (size_t)n + 1))) {
		for (ssize_t i = 0; i < n; i++)
			snprintf(text + 2 * i, 3, "%02x", (unsigned char)buf[i]);
	} else {
		buf[n] = 0;
		text = hex ? NULL : buf;
		buf = hex ? buf : NULL;
	}
	if (text)
		rc = sr__db_exec(db, NULL, "INSERT INTO kv (ns, key, value, hex) VALUES ($1, $2, "
				 "$3, $4) ON CONFLICT (ns, key) DO NOTHING", "ttti", ns, key, text,
				 (int64_t)hex);
	else {
		snprintf(db->err, sizeof(db->err), "out of memory");
		rc = SR_ENOMEM;
	}
	free(buf);
	free(text);
	return rc;
}

int sr__db_import_kv(sr__db *db, const char *state)
{
	char plugins[4096], dir[4400];
	struct dirent *p, *e;
	DIR *pd, *d;
	int rc = SR_OK, n = 0, got;

	snprintf(plugins, sizeof(plugins), "%s/plugins", state);
	if (!(pd = opendir(plugins)))
		return SR_OK;
	while (rc == SR_OK && (p = readdir(pd))) {
		if (p->d_name[0] == '.')
			continue;
		snprintf(dir, sizeof(dir), "%s/%s/kv", plugins, p->d_name);
		if (!(d = opendir(dir)))
			continue;
		while (rc == SR_OK && (e = readdir(d))) {
			if (!sr__kv_valid_key(e->d_name))
				continue; /* the lock, temporaries */
			if ((got = import_kv_file(db, p->d_name, dir, e->d_name)) < 0)
				rc = sr__db_error(db, "store", "cannot import the key-value files");
			else
				n += got;
		}
		closedir(d);
	}
	closedir(pd);
	if (rc == SR_OK && n)
		sr__log(SR_LOG_INFO, "store", "imported %d key-value records from %s into the "
			"database", n, plugins);
	return rc;
}

static int schema_version(sr__db *db, int *version)
{
	sr__db_rows *r;

	if (sr__db_exec(db, &r, "PRAGMA user_version", "") < 0)
		return sr__db_error(db, "store", "cannot read the schema version");
	*version = (int)sr__db_int(r, 0, 0);
	sr__db_rows_free(r);
	return SR_OK;
}

/* Bring the schema to SCHEMA_VERSION, under a write lock (two processes
 * opening a new database at once migrate it once). */
static int migrate(sr__db *db, const char *state)
{
	int version = 0, rc;

	/* Current already (the usual case): no write lock. */
	if ((rc = schema_version(db, &version)) != SR_OK || version == SCHEMA_VERSION)
		return rc;
	/* WAL (lasting, set once, outside a transaction): readers go on while
	 * a writer writes. */
	if (sr__db_exec(db, NULL, "PRAGMA journal_mode = WAL", "") < 0)
		return sr__db_error(db, "store", "cannot set the journal mode");
	if (sr__db_begin(db) != SR_OK)
		return sr__db_error(db, "store", "cannot lock the database");
	rc = schema_version(db, &version);
	if (rc == SR_OK && version > SCHEMA_VERSION) {
		sr__log(SR_LOG_ERROR, "store", "%s: schema version %d is newer than this "
			"sandrun's (%d): refusing to touch it", db->name, version, SCHEMA_VERSION);
		rc = SR_EINVAL;
	}
	if (rc == SR_OK && version < 1) {
		if (sr__db_exec(db, NULL, "CREATE TABLE sessions (id TEXT PRIMARY KEY, turn INTEGER "
				"NOT NULL, record TEXT NOT NULL, updated INTEGER NOT NULL)", "") < 0)
			rc = sr__db_error(db, "store", "cannot create the sessions table");
		else
			rc = sr__db_import_files(db, state);
	}
	/* 2: the service's runs (their last summary) and their events, for
	 * replay after a restart; ended orders the runs that are over. */
	if (rc == SR_OK && version < 2 &&
	    sr__db_exec(db, NULL, "CREATE TABLE runs (id TEXT PRIMARY KEY, summary TEXT NOT NULL, "
			"owner TEXT NOT NULL, ended INTEGER);"
			"CREATE INDEX runs_ended ON runs (ended);"
			"CREATE TABLE run_events (run TEXT NOT NULL, seq INTEGER NOT NULL, "
			"line TEXT NOT NULL, PRIMARY KEY (run, seq)) WITHOUT ROWID", "") < 0)
		rc = sr__db_error(db, "store", "cannot create the runs tables");
	/* 3: session leases; expires and heartbeat in Unix milliseconds. */
	if (rc == SR_OK && version < 3 &&
	    sr__db_exec(db, NULL, "CREATE TABLE leases (session TEXT PRIMARY KEY, owner TEXT NOT "
			"NULL, busy INTEGER NOT NULL, expires INTEGER NOT NULL, heartbeat INTEGER "
			"NOT NULL)", "") < 0)
		rc = sr__db_error(db, "store", "cannot create the leases table");
	/* 4: the warm pool's sandboxes; ttl_at in Unix milliseconds. */
	if (rc == SR_OK && version < 4 &&
	    sr__db_exec(db, NULL, "CREATE TABLE warm (session TEXT PRIMARY KEY, sandbox TEXT NOT "
			"NULL, provider TEXT NOT NULL, running INTEGER NOT NULL, ttl_at INTEGER, "
			"owner TEXT NOT NULL)", "") < 0)
		rc = sr__db_error(db, "store", "cannot create the warm table");
	/* 5: the plugins' key-value areas (hex: the value is hex, not
	 * ASCII text). */
	if (rc == SR_OK && version < 5) {
		if (sr__db_exec(db, NULL, "CREATE TABLE kv (ns TEXT NOT NULL, key TEXT NOT NULL, "
				"value TEXT NOT NULL, hex INTEGER NOT NULL, PRIMARY KEY (ns, key)) "
				"WITHOUT ROWID", "") < 0)
			rc = sr__db_error(db, "store", "cannot create the kv table");
		else
			rc = sr__db_import_kv(db, state);
	}
	if (rc == SR_OK && version < SCHEMA_VERSION) {
		char sql[64];
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", SCHEMA_VERSION);
		if (sr__db_exec(db, NULL, sql, "") < 0)
			rc = sr__db_error(db, "store", "cannot record the schema version");
	}
	if (sr__db_end(db, rc == SR_OK) != SR_OK && rc == SR_OK)
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

static sr__db *lite_open(const char *state)
{
	sr__db *db = calloc(1, sizeof(*db));
	sqlite3 *h = NULL;
	int rc;

	if (!db) {
		sr__log(SR_LOG_ERROR, "store", "out of memory");
		return NULL;
	}
	db->be = &lite;
	snprintf(db->name, sizeof(db->name), "%s/sandrun.db", state);
	if (sqlite3_open_v2(db->name, &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
			    SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, NULL) != SQLITE_OK) {
		sr__log(SR_LOG_ERROR, "store", "cannot open %s: %s", db->name,
			h ? sqlite3_errmsg(h) : "out of memory");
		sqlite3_close(h);
		free(db);
		return NULL;
	}
	db->h = h;
	/* Writers wait for each other (several runners on one state
	 * directory). A commit writes the WAL without waiting for it to
	 * reach the disk (synchronous NORMAL, per connection): what is
	 * written survives the process dying, and the database stays
	 * whole if the machine goes down, losing at most the last commits.
	 * Waiting for the disk at every pointer, lease and event made a
	 * turn wait on fsync, and writers queue behind each other. */
	sqlite3_busy_handler(h, on_busy, NULL);
	sqlite3_exec(h, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL);
	if ((rc = migrate(db, state)) != SR_OK) {
		if (sqlite3_errcode(h) == SQLITE_NOTADB)
			sr__log(SR_LOG_ERROR, "store", "%s is not a SQLite database; it is left "
				"as it is (move it away to start afresh)", db->name);
		else if (rc != SR_EINVAL && sqlite3_errcode(h) != SQLITE_OK)
			sr__db_error(db, "store", "cannot use the database");
		lite_close(db);
		return NULL;
	}
	return db;
}

sr__db *sr__db_open(const char *state)
{
	if (sr__mkdirs(state, 0700) != SR_OK) {
		sr__log(SR_LOG_ERROR, "store", "cannot create the state directory %s", state);
		return NULL;
	}
	if (store_url)
		return sr__db_pg_open(store_url, state);
	return lite_open(state);
}

/* ------------------------------------------------- the kept connection */

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static sr__db *shared;
static char *shared_state;
static pid_t shared_pid;

sr__db *sr__db_shared(const char *state)
{
	pthread_mutex_lock(&shared_lock);
	/* A child's copy is its parent's (one socket): left alone. */
	if (shared && shared_pid != getpid())
		shared = NULL;
	if (shared && strcmp(shared_state, state) != 0) {
		sr__db_close(shared);
		shared = NULL;
	}
	if (!shared) {
		free(shared_state);
		shared_state = strdup(state);
		shared = shared_state ? sr__db_open(state) : NULL;
		shared_pid = getpid();
	}
	if (!shared)
		pthread_mutex_unlock(&shared_lock);
	return shared;
}

void sr__db_release(sr__db *db)
{
	(void)db;
	pthread_mutex_unlock(&shared_lock);
}

void sr__db_shared_close(void)
{
	pthread_mutex_lock(&shared_lock);
	if (shared && shared_pid == getpid())
		sr__db_close(shared);
	shared = NULL;
	free(shared_state);
	shared_state = NULL;
	pthread_mutex_unlock(&shared_lock);
}
