/* The database run log (runlog.h): the memory log answers every read,
 * and each change is also queued for a thread of this log's, which writes
 * the queue in one transaction at a time to the runs and run_events
 * tables of the runner's database (core/store/db.c). The loop never waits
 * for the disk; what was queued when the service stops is written before
 * the log is freed. When the service starts, the runs kept are read back
 * into memory, so that GET /v1/runs/ID and /events replay them.
 *
 * The database keeps what the memory log keeps: per_run events of each
 * run (the older ones are deleted when the run is retired) and the kept
 * most recently retired runs. */
#include "config.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "core/host/log.h"
#include "core/service/runlog.h"
#include "core/store/db.h"
#include "sandrun/plugin.h"

enum { OP_CREATE, OP_SUMMARY, OP_APPEND, OP_RETIRE };

typedef struct op {
	int kind;
	char *id;
	char *text;   /* summary or event line */
	uint64_t seq; /* of an event */
	struct op *next;
} op;

typedef struct db_log {
	sr__runlog pub;
	sr__runlog *mem;
	sqlite3 *db; /* the writer's, once loaded */
	size_t per_run, kept;
	char owner[320]; /* host:pid of this process */
	uv_thread_t writer;
	uv_mutex_t lock;
	uv_cond_t wake;
	op *head, **tail;
	int stop;
	int failing; /* the last transaction failed (said once) */
} db_log;

/* ---------------------------------------------------------------- writer */

static void op_free(op *o)
{
	free(o->id);
	free(o->text);
	free(o);
}

/* Run sql with ?1 the run's id, ?2 a text, ?3 a number, ?4 another text
 * (binding a number past the ones sql names is refused, harmlessly). */
static int step(sqlite3 *db, const char *sql, const char *id, const char *text,
		sqlite3_int64 n, const char *text2)
{
	sqlite3_stmt *st;
	int rc;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return SQLITE_ERROR;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, n);
	sqlite3_bind_text(st, 4, text2, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int write_op(db_log *l, const op *o)
{
	sqlite3 *db = l->db;
	int rc;

	switch (o->kind) {
	case OP_CREATE:
		return step(db, "INSERT OR REPLACE INTO runs (id, summary, ended, owner) "
			    "VALUES (?1, ?2, NULL, ?4)", o->id, o->text, 0, l->owner);
	case OP_SUMMARY:
		return step(db, "UPDATE runs SET summary = ?2 WHERE id = ?1", o->id, o->text,
			    0, NULL);
	case OP_APPEND:
		return step(db, "INSERT OR REPLACE INTO run_events (run, line, seq) "
			    "VALUES (?1, ?2, ?3)", o->id, o->text, (sqlite3_int64)o->seq, NULL);
	case OP_RETIRE:
		rc = step(db, "UPDATE runs SET ended = (SELECT COALESCE(MAX(ended), 0) + 1 "
			  "FROM runs) WHERE id = ?1 AND ended IS NULL", o->id, NULL, 0, NULL);
		if (rc == SQLITE_OK) /* its oldest events beyond per_run */
			rc = step(db, "DELETE FROM run_events WHERE run = ?1 AND seq <= "
				  "(SELECT MAX(seq) FROM run_events WHERE run = ?1) - ?3", o->id, NULL, (sqlite3_int64)l->per_run, NULL);
		if (rc == SQLITE_OK) /* the runs retired before the kept ones */
			rc = step(db, "DELETE FROM run_events WHERE run IN (SELECT id FROM "
				  "runs WHERE ended IS NOT NULL ORDER BY ended DESC LIMIT -1 "
				  "OFFSET ?3)", o->id, NULL,
				  (sqlite3_int64)l->kept, NULL);
		if (rc == SQLITE_OK)
			rc = step(db, "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE "
				  "ended IS NOT NULL ORDER BY ended DESC LIMIT -1 OFFSET ?3)",
				  o->id, NULL, (sqlite3_int64)l->kept, NULL);
		return rc;
	}
	return SQLITE_MISUSE;
}

/* One transaction for what was queued. Failures are logged once until a
 * transaction succeeds again; the memory log still answers. SQLite's
 * result (SQLITE_BUSY: another writer held the database past the wait;
 * the batch can be written again, whole). */
static int write_batch(db_log *l, op *batch)
{
	int rc = sqlite3_exec(l->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);

	for (op *o = batch; rc == SQLITE_OK && o; o = o->next)
		rc = write_op(l, o);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(l->db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		if (!l->failing)
			sr__db_error(l->db, "service", "cannot record runs (they are kept in "
				     "memory until the service stops)");
		sqlite3_exec(l->db, "ROLLBACK", NULL, NULL, NULL);
	} else if (l->failing) {
		sr__log(SR_LOG_INFO, "service", "runs are recorded in the database again");
	}
	l->failing = rc != SQLITE_OK;
	return rc;
}

static void writer_main(void *arg)
{
	db_log *l = arg;

	for (;;) {
		op *batch;
		int stop;
		uv_mutex_lock(&l->lock);
		while (!l->head && !l->stop)
			uv_cond_wait(&l->wake, &l->lock);
		batch = l->head;
		stop = l->stop;
		l->head = NULL;
		l->tail = &l->head;
		uv_mutex_unlock(&l->lock);
		/* Busy: tried again (a few times), the batch whole. */
		for (int tries = 0; batch && tries < 3; tries++) {
			int rc = write_batch(l, batch);
			if (((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) || stop)
				break;
			uv_sleep(250);
		}
		while (batch) {
			op *next = batch->next;
			op_free(batch);
			batch = next;
		}
		if (stop && !batch) {
			uv_mutex_lock(&l->lock);
			stop = !l->head;
			uv_mutex_unlock(&l->lock);
			if (stop)
				return;
		}
	}
}

/* Queue a change; one that cannot be queued (no memory) is said. */
static void queue(db_log *l, int kind, const char *id, char *text, uint64_t seq)
{
	op *o = calloc(1, sizeof(*o));

	if (!o || !(o->id = strdup(id))) {
		free(o);
		free(text);
		sr__log(SR_LOG_ERROR, "service", "run %s: out of memory; a change is not "
			"recorded in the database", id);
		return;
	}
	o->kind = kind;
	o->text = text;
	o->seq = seq;
	uv_mutex_lock(&l->lock);
	*l->tail = o;
	l->tail = &o->next;
	uv_cond_signal(&l->wake);
	uv_mutex_unlock(&l->lock);
}

/* ------------------------------------------------------------------ ops */

static char *dump(json_t *summary)
{
	return json_dumps(summary, JSON_COMPACT);
}

static int d_create(sr__runlog *pub, const char *id, json_t *summary)
{
	db_log *l = (db_log *)pub;
	char *text;
	int rc = l->mem->ops->create(l->mem, id, summary);

	if (rc != SR_OK)
		return rc;
	if ((text = dump(summary)))
		queue(l, OP_CREATE, id, text, 0);
	return SR_OK;
}

static int d_append(sr__runlog *pub, const char *id, const char *line, size_t len,
		    uint64_t *seq)
{
	db_log *l = (db_log *)pub;
	int rc = l->mem->ops->append(l->mem, id, line, len, seq);
	char *text;

	if (rc != SR_OK)
		return rc;
	/* Without its newline. */
	if (len && line[len - 1] == '\n')
		len--;
	if ((text = strndup(line, len)))
		queue(l, OP_APPEND, id, text, *seq);
	return SR_OK;
}

static int d_line(sr__runlog *pub, const char *id, uint64_t seq, const char **line,
		  size_t *len, uint64_t *first)
{
	db_log *l = (db_log *)pub;

	return l->mem->ops->line(l->mem, id, seq, line, len, first);
}

static int d_set_summary(sr__runlog *pub, const char *id, json_t *summary)
{
	db_log *l = (db_log *)pub;
	int rc = l->mem->ops->set_summary(l->mem, id, summary);
	char *text;

	if (rc == SR_OK && (text = dump(summary)))
		queue(l, OP_SUMMARY, id, text, 0);
	return rc;
}

static int d_retire(sr__runlog *pub, const char *id)
{
	db_log *l = (db_log *)pub;
	int rc = l->mem->ops->retire(l->mem, id);

	if (rc == SR_OK)
		queue(l, OP_RETIRE, id, NULL, 0);
	return rc;
}

static int d_summary(sr__runlog *pub, const char *id, json_t **out)
{
	db_log *l = (db_log *)pub;

	return l->mem->ops->summary(l->mem, id, out);
}

static size_t d_count(sr__runlog *pub)
{
	db_log *l = (db_log *)pub;

	return l->mem->ops->count(l->mem);
}

static void d_foreach(sr__runlog *pub, void (*fn)(void *ud, json_t *summary), void *ud)
{
	db_log *l = (db_log *)pub;

	l->mem->ops->foreach(l->mem, fn, ud);
}

static void d_free(sr__runlog *pub)
{
	db_log *l = (db_log *)pub;

	if (!l)
		return;
	if (l->db) {
		uv_mutex_lock(&l->lock);
		l->stop = 1;
		uv_cond_signal(&l->wake);
		uv_mutex_unlock(&l->lock);
		uv_thread_join(&l->writer);
		sqlite3_close(l->db);
	}
	while (l->head) { /* queued before a failed start */
		op *next = l->head->next;
		op_free(l->head);
		l->head = next;
	}
	uv_cond_destroy(&l->wake);
	uv_mutex_destroy(&l->lock);
	if (l->mem)
		l->mem->ops->free(l->mem);
	free(l);
}

static const sr__runlog_ops db_ops = {
	d_create, d_append, d_line, d_set_summary, d_retire, d_summary, d_count, d_foreach,
	d_free
};

/* ------------------------------------------------------------------ load */

/* The events of run id into memory, numbered as they were. */
static int load_events(db_log *l, const char *id, json_t *summary)
{
	sqlite3_stmt *st;
	uint64_t first = 0, seq;
	int rc;

	if (sqlite3_prepare_v2(l->db, "SELECT seq, line FROM run_events WHERE run = ?1 "
			       "ORDER BY seq", -1, &st, NULL) != SQLITE_OK)
		return sr__db_error(l->db, "service", "cannot read the run log");
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		first = (uint64_t)sqlite3_column_int64(st, 0);
	if (sr__runlog_mem_load(l->mem, id, summary, first) != SR_OK) {
		sqlite3_finalize(st);
		return SR_ENOMEM;
	}
	for (; rc == SQLITE_ROW; rc = sqlite3_step(st)) {
		const char *line = (const char *)sqlite3_column_text(st, 1);
		size_t len = (size_t)sqlite3_column_bytes(st, 1);
		char *nl = malloc(len + 2);
		if (!nl)
			break;
		memcpy(nl, line ? line : "", len);
		nl[len] = '\n';
		nl[len + 1] = 0;
		l->mem->ops->append(l->mem, id, nl, len + 1, &seq);
		free(nl);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? SR_OK : sr__db_error(l->db, "service", "cannot read the run log");
}

/* A run that was not over when its service stopped: failed, and said so. */
static void interrupted(db_log *l, const char *id, json_t *summary)
{
	char *text;

	json_object_set_new(summary, "state", json_string("failed"));
	json_object_set_new(summary, "phase", json_string("done"));
	json_object_set_new(summary, "error", json_string("the service stopped before the "
							   "run ended"));
	if ((text = dump(summary)))
		queue(l, OP_SUMMARY, id, text, 0);
	sr__log(SR_LOG_WARN, "service", "run %s was not over when the service stopped; it "
		"is recorded as failed", id);
}

/* The runs kept, retired ones in the order they were retired; then the
 * ones that were not over. */
static int load(db_log *l)
{
	sqlite3_stmt *st;
	int rc, n = 0;

	if (sqlite3_prepare_v2(l->db, "SELECT id, summary, owner, ended IS NULL FROM runs "
			       "ORDER BY ended IS NULL, ended", -1, &st, NULL) != SQLITE_OK)
		return sr__db_error(l->db, "service", "cannot read the run log");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *id = (const char *)sqlite3_column_text(st, 0);
		const char *text = (const char *)sqlite3_column_text(st, 1);
		const char *owner = (const char *)sqlite3_column_text(st, 2);
		int live = sqlite3_column_int(st, 3);
		json_t *summary = text ? json_loads(text, 0, NULL) : NULL;
		if (!id || !json_is_object(summary) || (live && sr__db_owner_alive(owner))) {
			if (id && !json_is_object(summary))
				sr__log(SR_LOG_WARN, "service", "run %s: its summary in the "
					"database does not read as JSON; not loaded", id);
			json_decref(summary);
			continue;
		}
		if (live)
			interrupted(l, id, summary);
		if (load_events(l, id, summary) == SR_OK) {
			n++;
			l->mem->ops->retire(l->mem, id);
			if (live)
				queue(l, OP_RETIRE, id, NULL, 0);
		}
		json_decref(summary);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return sr__db_error(l->db, "service", "cannot read the run log");
	if (n)
		sr__log(SR_LOG_INFO, "service", "%d runs read back from %s", n,
			sqlite3_db_filename(l->db, "main"));
	return SR_OK;
}

sr__runlog *sr__runlog_db_new(const char *state, size_t per_run, size_t kept, char *err,
			      size_t errlen)
{
	db_log *l = calloc(1, sizeof(*l));

	if (!l) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	l->pub.ops = &db_ops;
	l->per_run = per_run ? per_run : 1;
	l->kept = kept;
	l->tail = &l->head;
	sr__db_owner(l->owner, sizeof(l->owner));
	if (uv_mutex_init(&l->lock) != 0 || uv_cond_init(&l->wake) != 0) {
		free(l);
		snprintf(err, errlen, "cannot make a lock");
		return NULL;
	}
	if (!(l->mem = sr__runlog_mem_new(per_run, kept))) {
		d_free(&l->pub);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (!(l->db = sr__db_open(state))) {
		d_free(&l->pub);
		snprintf(err, errlen, "cannot use the database in %s (see above)", state);
		return NULL;
	}
	if (load(l) != SR_OK || uv_thread_create(&l->writer, writer_main, l) != 0) {
		sqlite3_close(l->db);
		l->db = NULL;
		d_free(&l->pub);
		snprintf(err, errlen, "cannot read the run log from %s/sandrun.db (see above)",
			 state);
		return NULL;
	}
	return &l->pub;
}
