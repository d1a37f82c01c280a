/* The runner's database on a PostgreSQL server (libpq), for services that
 * share one store ([store] url). The statements are db.h's, the same as
 * SQLite's; parameters go as text, 'i' ones typed int8. The schema's
 * version is the one row of sandrun_schema, migrated under a transaction
 * advisory lock, so that replicas starting at once migrate it once; a
 * newer schema is refused. It starts at version 4 (db.c's list), with the
 * tables SQLite has at that version, and the session files of the store
 * before the database imported as SQLite does; version 5 adds the kv
 * table (and imports the key-value files). The files imported are those
 * of the state directory of the service that migrates. */
#include "config.h"

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host/log.h"
#include "core/store/db_int.h"

#define SCHEMA_VERSION 5
#define INT8OID 20
#define MAX_PARAMS 16
/* pg_advisory_xact_lock's key for the migration ("sandrun" in ASCII). */
#define MIGRATION_LOCK "32476749081245038"

/* Whether a transaction is open on db (no reconnecting then: it is lost). */
#define IN_TX(db) ((db)->tx)

/* Keep the reason of a failure: the server's primary message only (its
 * DETAIL may quote a row: a record, a key-value). */
static void failed(sr__db *db, PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	size_t n;

	if (!msg || !*msg)
		msg = PQerrorMessage(db->h);
	snprintf(db->err, sizeof(db->err), "%s", msg && *msg ? msg : "unknown error");
	n = strlen(db->err);
	while (n && (db->err[n - 1] == '\n' || db->err[n - 1] == ' '))
		db->err[--n] = 0;
	/* serialization_failure, deadlock_detected, lock_not_available. */
	db->busy = state && (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
			     strcmp(state, "55P03") == 0);
}

static int pg_exec(sr__db *db, sr__db_rows **rows, const char *sql, const char *types,
		   va_list ap)
{
	const char *values[MAX_PARAMS];
	char numbers[MAX_PARAMS][24];
	Oid oids[MAX_PARAMS];
	int n = 0, rc, status;
	PGresult *res;

	for (const char *t = types; *t && n < MAX_PARAMS; t++, n++) {
		oids[n] = 0;
		if (*t == 'i') {
			snprintf(numbers[n], sizeof(numbers[n]), "%lld",
				 (long long)va_arg(ap, int64_t));
			values[n] = numbers[n];
			oids[n] = INT8OID;
		} else {
			values[n] = va_arg(ap, const char *);
		}
	}
	for (int tries = 0;; tries++) {
		/* The server restarted, or the network failed: connect again,
		 * and try once more (never inside a transaction: it is lost). */
		if (PQstatus(db->h) == CONNECTION_BAD && !IN_TX(db))
			PQreset(db->h);
		if (n == 0 && !rows)
			res = PQexec(db->h, sql);
		else
			res = PQexecParams(db->h, sql, n, oids, values, NULL, NULL, 0);
		status = PQresultStatus(res);
		if (tries || PQstatus(db->h) != CONNECTION_BAD || IN_TX(db) ||
		    status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK)
			break;
		PQclear(res);
	}
	if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
		failed(db, res);
		PQclear(res);
		return SR_EIO;
	}
	if (rows && status == PGRES_TUPLES_OK) {
		int cols = PQnfields(res), nr = PQntuples(res);
		const char *cell[16];
		if (cols > 16)
			cols = 16;
		for (int i = 0; i < nr; i++) {
			for (int c = 0; c < cols; c++)
				cell[c] = PQgetisnull(res, i, c) ? NULL : PQgetvalue(res, i, c);
			if (sr__db_rows_add(rows, cols, cell) != SR_OK) {
				snprintf(db->err, sizeof(db->err), "out of memory");
				PQclear(res);
				return SR_EIO;
			}
		}
	}
	rc = atoi(PQcmdTuples(res));
	PQclear(res);
	return rc;
}

static int simple(sr__db *db, const char *sql)
{
	PGresult *res;
	int ok;

	/* BEGIN on a connection that broke: connect again, and try once
	 * more when it is found broken only now. */
	for (int tries = 0;; tries++) {
		if (PQstatus(db->h) == CONNECTION_BAD && strcmp(sql, "BEGIN") == 0)
			PQreset(db->h);
		res = PQexec(db->h, sql);
		ok = PQresultStatus(res) == PGRES_COMMAND_OK;
		if (ok || tries || strcmp(sql, "BEGIN") != 0 || PQstatus(db->h) != CONNECTION_BAD)
			break;
		PQclear(res);
	}

	/* COMMIT of a transaction that failed answers ROLLBACK. */
	if (ok && strcmp(sql, "COMMIT") == 0 && strcmp(PQcmdStatus(res), "ROLLBACK") == 0) {
		snprintf(db->err, sizeof(db->err), "the transaction was rolled back");
		ok = 0;
	} else if (!ok) {
		failed(db, res);
	}
	PQclear(res);
	return ok ? SR_OK : SR_EIO;
}

static int pg_begin(sr__db *db)
{
	int rc = simple(db, "BEGIN");

	db->tx = rc == SR_OK;
	return rc;
}

static int pg_end(sr__db *db, int commit)
{
	db->tx = 0;
	return simple(db, commit ? "COMMIT" : "ROLLBACK");
}

static void pg_close(sr__db *db)
{
	PQfinish(db->h);
	free(db);
}

static const db_backend pg = { pg_exec, pg_begin, pg_end, pg_close };

/* Notices ("relation already exists, skipping") are not errors. */
static void quiet(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

/* The schema's version without a lock or a CREATE (a role that may only
 * read and write the tables can connect): 0 when there is none. */
static int version_of(sr__db *db, int *version)
{
	sr__db_rows *r = NULL;

	*version = 0;
	if (sr__db_exec(db, &r, "SELECT to_regclass('sandrun_schema') IS NOT NULL", "") < 0)
		return SR_EIO;
	if (strcmp(sr__db_text(r, 0, 0) ? sr__db_text(r, 0, 0) : "", "t") == 0) {
		sr__db_rows_free(r);
		r = NULL;
		if (sr__db_exec(db, &r, "SELECT max(version) FROM sandrun_schema", "") < 0)
			return SR_EIO;
		*version = (int)sr__db_int(r, 0, 0);
	}
	sr__db_rows_free(r);
	return SR_OK;
}

static int migrate(sr__db *db, const char *state)
{
	sr__db_rows *r = NULL;
	int version, rc = SR_OK;

	if (version_of(db, &version) != SR_OK)
		return sr__db_error(db, "store", "cannot read the schema version");
	if (version == SCHEMA_VERSION)
		return SR_OK;
	if (sr__db_begin(db) != SR_OK)
		return sr__db_error(db, "store", "cannot begin the migration");
	if (sr__db_exec(db, NULL, "SELECT pg_advisory_xact_lock(" MIGRATION_LOCK ")", "") < 0 ||
	    sr__db_exec(db, NULL, "CREATE TABLE IF NOT EXISTS sandrun_schema (version INTEGER "
			"NOT NULL)", "") < 0 ||
	    sr__db_exec(db, &r, "SELECT version FROM sandrun_schema", "") < 0) {
		rc = sr__db_error(db, "store", "cannot read the schema version");
		goto out;
	}
	version = sr__db_nrows(r) ? (int)sr__db_int(r, 0, 0) : 0;
	if (version > SCHEMA_VERSION) {
		sr__log(SR_LOG_ERROR, "store", "%s: schema version %d is newer than this "
			"sandrun's (%d): refusing to touch it", db->name, version, SCHEMA_VERSION);
		rc = SR_EINVAL;
		goto out;
	}
	if (version == SCHEMA_VERSION)
		goto out;
	if (version < 4 && sr__db_exec(db, NULL,
			"CREATE TABLE sessions (id TEXT PRIMARY KEY, turn BIGINT NOT NULL, "
			"record TEXT NOT NULL, updated BIGINT NOT NULL);"
			"CREATE TABLE runs (id TEXT PRIMARY KEY, summary TEXT NOT NULL, "
			"owner TEXT NOT NULL, ended BIGINT);"
			"CREATE INDEX runs_ended ON runs (ended);"
			"CREATE TABLE run_events (run TEXT NOT NULL, seq BIGINT NOT NULL, "
			"line TEXT NOT NULL, PRIMARY KEY (run, seq));"
			"CREATE TABLE leases (session TEXT PRIMARY KEY, owner TEXT NOT NULL, "
			"busy BIGINT NOT NULL, expires BIGINT NOT NULL, heartbeat BIGINT NOT NULL);"
			"CREATE TABLE warm (session TEXT PRIMARY KEY, sandbox TEXT NOT NULL, "
			"provider TEXT NOT NULL, running BIGINT NOT NULL, ttl_at BIGINT, "
			"owner TEXT NOT NULL)", "") < 0) {
		rc = sr__db_error(db, "store", "cannot create the tables");
		goto out;
	}
	if (version < 4 && (rc = sr__db_import_files(db, state)) != SR_OK)
		goto out;
	if (version < 5 && sr__db_exec(db, NULL, "CREATE TABLE kv (ns TEXT NOT NULL, key TEXT NOT "
				       "NULL, value TEXT NOT NULL, hex BIGINT NOT NULL, PRIMARY KEY "
				       "(ns, key))", "") < 0) {
		rc = sr__db_error(db, "store", "cannot create the kv table");
		goto out;
	}
	if (version < 5 && (rc = sr__db_import_kv(db, state)) != SR_OK)
		goto out;
	if (sr__db_exec(db, NULL, "DELETE FROM sandrun_schema", "") < 0 ||
	    sr__db_exec(db, NULL, "INSERT INTO sandrun_schema (version) VALUES ($1)", "i",
			(int64_t)SCHEMA_VERSION) < 0) {
		rc = sr__db_error(db, "store", "cannot record the schema version");
		goto out;
	}
	if (rc == SR_OK)
		sr__log(SR_LOG_INFO, "store", "%s: tables created (schema version %d)", db->name,
			SCHEMA_VERSION);
out:
	sr__db_rows_free(r);
	if (sr__db_end(db, rc == SR_OK) != SR_OK && rc == SR_OK)
		rc = sr__db_error(db, "store", "cannot commit the migration");
	return rc;
}

int sr__db_pg_url_valid(const char *url)
{
	char *err = NULL;
	PQconninfoOption *opts = PQconninfoParse(url, &err);

	PQfreemem(err); /* it may quote the password */
	PQconninfoFree(opts);
	return opts != NULL;
}

sr__db *sr__db_pg_open(const char *url, const char *state)
{
	sr__db *db = calloc(1, sizeof(*db));
	PGconn *h;

	if (!db) {
		sr__log(SR_LOG_ERROR, "store", "out of memory");
		return NULL;
	}
	db->be = &pg;
	if (!sr__db_pg_url_valid(url)) {
		/* libpq's message may quote the URL, password and all. */
		sr__log(SR_LOG_ERROR, "store", "[store] url does not parse as a PostgreSQL "
			"connection URI or key=value string");
		free(db);
		return NULL;
	}
	{
		/* A server that does not answer: 10 s, unless the URL says. */
		static const char *const keys[] = { "connect_timeout", "dbname", NULL };
		const char *values[] = { "10", url, NULL };
		h = PQconnectdbParams(keys, values, 1);
	}
	if (!h || PQstatus(h) != CONNECTION_OK) {
		/* libpq's message names the host, never the password. */
		sr__log(SR_LOG_ERROR, "store", "cannot connect to the PostgreSQL server of "
			"[store] url: %s", h ? PQerrorMessage(h) : "out of memory");
		PQfinish(h);
		free(db);
		return NULL;
	}
	db->h = h;
	PQsetNoticeProcessor(h, quiet, NULL);
	snprintf(db->name, sizeof(db->name), "PostgreSQL database %s on %s%s%s", PQdb(h),
		 PQhost(h) && *PQhost(h) ? PQhost(h) : "localhost", PQport(h) && *PQport(h) ?
		 ":" : "", PQport(h) ? PQport(h) : "");
	if (migrate(db, state) != SR_OK) {
		pg_close(db);
		return NULL;
	}
	return db;
}
