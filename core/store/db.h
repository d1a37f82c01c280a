/* The runner's SQLite database (core/store/db.c). */
#ifndef SR_CORE_STORE_DB_H
#define SR_CORE_STORE_DB_H

#include <sqlite3.h>
#include <stddef.h>

/* A connection to <state>/sandrun.db, migrated to the current schema
 * (writers wait up to 10 s for each other); NULL (logged) when it cannot
 * be had. */
sqlite3 *sr__db_open(const char *state);
/* This process as the owner of rows ("host:pid:start", start when it
 * started, so that a pid used again is another owner). */
void sr__db_owner(char *buf, size_t n);
/* Whether owner names a process other than this one that still runs on
 * this host (another host's cannot be asked: 0). */
int sr__db_owner_alive(const char *owner);
/* Log what failed, with SQLite's reason, under area; SR_EIO. */
int sr__db_error(sqlite3 *db, const char *area, const char *what);

#endif
