/* Inside the database layer: a connection and its backend (SQLite in
 * db.c, PostgreSQL in pg.c). */
#ifndef SR_CORE_STORE_DB_INT_H
#define SR_CORE_STORE_DB_INT_H

#include <stdarg.h>

#include "core/store/db.h"

struct sr__db_rows {
	size_t n, cap;
	int cols;
	char **cell; /* n * cols; NULL for SQL NULL */
};

typedef struct db_backend {
	/* One statement (or several: nparams 0, no rows). */
	int (*exec)(sr__db *db, sr__db_rows **rows, const char *sql, const char *types,
		    va_list ap);
	int (*begin)(sr__db *db);
	int (*end)(sr__db *db, int commit);
	void (*close)(sr__db *db);
} db_backend;

struct sr__db {
	const db_backend *be;
	void *h;         /* sqlite3 *, PGconn * */
	int busy;        /* the last failure: another writer */
	int tx;          /* a transaction is open (PostgreSQL) */
	char name[512];
	char err[512];   /* the last failure's reason */
};

/* Append a row of cols cells (copied; NULL stays NULL). SR_OK/SR_ENOMEM. */
int sr__db_rows_add(sr__db_rows **r, int cols, const char *const *cell);

/* A connection to the PostgreSQL server of url, migrated (pg.c); NULL
 * logged. */
sr__db *sr__db_pg_open(const char *url, const char *state);
/* Whether libpq parses url (nothing said: its message may quote it). */
int sr__db_pg_url_valid(const char *url);

/* Import the session files of the store before the database (db.c), in
 * db's open transaction. */
int sr__db_import_files(sr__db *db, const char *state);
/* And the key-value files of the plugins (<state>/plugins/NS/kv/KEY). */
int sr__db_import_kv(sr__db *db, const char *state);

#endif
