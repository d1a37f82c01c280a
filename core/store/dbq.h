/* A queue of database jobs (core/store/dbq.c): each runs on libuv's
 * thread pool after every job pushed before it, one at a time, through a
 * connection of the queue's own; so the loop never waits for the disk
 * and a record's writes land in the order they were made. */
#ifndef SR_CORE_STORE_DBQ_H
#define SR_CORE_STORE_DBQ_H

#include "core/store/db.h"
#include <uv.h>

typedef struct sr__dbq sr__dbq;

/* A queue on loop for state's database (opened by the first job). */
sr__dbq *sr__dbq_new(uv_loop_t *loop, const char *state);
/* Run fn(db, arg) off the loop in its turn (db NULL when the database
 * cannot be opened), then done(arg, rc) on the loop when done is not
 * NULL; rc is fn's. SR_ENOMEM when it cannot be queued (nothing runs). */
int sr__dbq_push(sr__dbq *q, int (*fn)(sr__db *db, void *arg),
		 void (*done)(void *arg, int rc), void *arg);
/* Freed once the jobs pushed have run. */
void sr__dbq_close(sr__dbq *q);

#endif
