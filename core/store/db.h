/* The runner's database (core/store/db.c): SQLite in <state>/sandrun.db by
 * default, or a PostgreSQL server ([store] url, core/store/pg.c) that
 * several services share. The calls here are the same for both: SQL with
 * $1, $2, ... parameters, written in the dialect both accept, and rows
 * read back as text. A connection is used by one thread at a time; every
 * call waits for the database (call them off the loop). */
#ifndef SR_CORE_STORE_DB_H
#define SR_CORE_STORE_DB_H

#include <stddef.h>
#include <stdint.h>

typedef struct sr__db sr__db;
typedef struct sr__db_rows sr__db_rows;

/* The store of this process: url NULL or "" for SQLite under each state
 * directory, else a PostgreSQL connection URI or "key=value" string. Set
 * once, at start (the configuration's [store] url). */
void sr__db_use(const char *url);
/* Whether url is one sr__db_use takes (NULL, "", postgres:// or
 * postgresql://, or a libpq "key=value" string). */
int sr__db_url_valid(const char *url);

/* A connection to the store, migrated to the current schema (writers wait
 * for each other); NULL (logged) when it cannot be had. state is the
 * state directory (SQLite's file, and the files of the store before it). */
sr__db *sr__db_open(const char *state);
void sr__db_close(sr__db *db);
/* This process's connection for short calls on state's store (session
 * pointers, the plugins' key-value areas), opened once and kept, held by
 * the caller (other threads wait) until sr__db_release; NULL (logged) when
 * it cannot be had. */
sr__db *sr__db_shared(const char *state);
void sr__db_release(sr__db *db);
/* Close the kept connection (at exit). */
void sr__db_shared_close(void);
/* What the connection is, for messages: the file, or "PostgreSQL database
 * DB on HOST:PORT" (never a password). */
const char *sr__db_name(const sr__db *db);

/* Run one statement. types names the parameters that follow, one letter
 * each: 't' a const char * (NULL: SQL NULL), 'i' an int64_t. The rows it
 * answers into *rows when rows is not NULL (freed by the caller). The
 * number of rows it changed (>= 0), or SR_EIO (the reason kept for
 * sr__db_error; sr__db_busy says whether another writer was in the way).
 * With types "" and rows NULL, sql may be several statements. */
int sr__db_exec(sr__db *db, sr__db_rows **rows, const char *sql, const char *types, ...);
/* A transaction that writes (SQLite: taken with the write lock). */
int sr__db_begin(sr__db *db);
/* Commit (commit != 0) or roll back; SR_OK or SR_EIO. */
int sr__db_end(sr__db *db, int commit);
/* The last call failed because another writer held the database (try the
 * transaction again). */
int sr__db_busy(const sr__db *db);

size_t sr__db_nrows(const sr__db_rows *r);
/* Column col of row (from 0): its text, NULL for SQL NULL. */
const char *sr__db_text(const sr__db_rows *r, size_t row, int col);
/* The same as a number (0 for NULL). */
int64_t sr__db_int(const sr__db_rows *r, size_t row, int col);
void sr__db_rows_free(sr__db_rows *r);

/* Log what failed, with the database's reason, under area; SR_EIO. */
int sr__db_error(sr__db *db, const char *area, const char *what);

/* This process as the owner of rows ("host:pid:start", start when it
 * started, so that a pid used again is another owner). */
void sr__db_owner(char *buf, size_t n);
/* Whether owner is a process of this host. */
int sr__db_owner_here(const char *owner);
/* Whether owner names a process other than this one that still runs on
 * this host (another host's cannot be asked: 0). */
int sr__db_owner_alive(const char *owner);

#endif
