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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
	sr__db *db; /* the writer's, once loaded */
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

static int write_op(db_log *l, const op *o)
{
	sr__db *db = l->db;

	switch (o->kind) {
	case OP_CREATE:
		return sr__db_exec(db, NULL, "INSERT INTO runs (id, summary, ended, owner) VALUES "
				   "($1, $2, NULL, $3) ON CONFLICT (id) DO UPDATE SET summary = "
				   "excluded.summary, ended = NULL, owner = excluded.owner", "ttt",
				   o->id, o->text, l->owner);
	case OP_SUMMARY:
		return sr__db_exec(db, NULL, "UPDATE runs SET summary = $2 WHERE id = $1", "tt",
				   o->id, o->text);
	case OP_APPEND:
		return sr__db_exec(db, NULL, "INSERT INTO run_events (run, line, seq) VALUES ($1, "
				   "$2, $3) ON CONFLICT (run, seq) DO UPDATE SET line = "
				   "excluded.line", "tti", o->id, o->text, (int64_t)o->seq);
	case OP_RETIRE:
		if (sr__db_exec(db, NULL, "UPDATE runs SET ended = (SELECT COALESCE(MAX(ended), 0) "
				"+ 1 FROM runs) WHERE id = $1 AND ended IS NULL", "t", o->id) < 0 ||
		    /* its oldest events beyond per_run */
		    sr__db_exec(db, NULL, "DELETE FROM run_events WHERE run = $1 AND seq <= "
				"(SELECT MAX(seq) FROM run_events WHERE run = $1) - $2", "ti", o->id,
				(int64_t)l->per_run) < 0 ||
		    /* the runs retired before the kept ones */
		    sr__db_exec(db, NULL, "DELETE FROM run_events WHERE run IN (SELECT id FROM "
				"runs WHERE ended IS NOT NULL ORDER BY ended DESC LIMIT "
				"9223372036854775807 OFFSET $1)", "i", (int64_t)l->kept) < 0 ||
		    sr__db_exec(db, NULL, "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE "
				"ended IS NOT NULL ORDER BY ended DESC LIMIT 9223372036854775807 "
				"OFFSET $1)", "i", (int64_t)l->kept) < 0)
			return SR_EIO;
		return SR_OK;
	}
	return SR_EINVAL;
}

/* One transaction for what was queued. Failures are logged once until a
 * transaction succeeds again; the memory log still answers. SR_OK, or
 * SR_EIO (sr__db_busy: another writer held the database past the wait;
 * the batch can be written again, whole). */
static int write_batch(db_log *l, op *batch)
{
	int rc = sr__db_begin(l->db);

	for (op *o = batch; rc >= 0 && o; o = o->next)
		rc = write_op(l, o);
	if (rc >= 0)
		rc = sr__db_end(l->db, 1);
	if (rc < 0) {
		int busy = sr__db_busy(l->db);
		if (!l->failing)
			sr__db_error(l->db, "service", "cannot record runs (they are kept in "
				     "memory until the service stops)");
		sr__db_end(l->db, 0);
		/* (the rollback's result is not the batch's) */
		l->failing = 1;
		return busy ? SR_ETIMEDOUT : SR_EIO;
	}
	if (l->failing)
		sr__log(SR_LOG_INFO, "service", "runs are recorded in the database again");
	l->failing = 0;
	return SR_OK;
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
			if (rc != SR_ETIMEDOUT || stop)
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
		sr__db_close(l->db);
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
static int load_events(db_log *l, const char *id, json_t *summary, uint64_t *last)
{
	sr__db_rows *r;
	uint64_t seq;
	size_t n;

	if (sr__db_exec(l->db, &r, "SELECT seq, line FROM run_events WHERE run = $1 ORDER BY "
			"seq", "t", id) < 0)
		return sr__db_error(l->db, "service", "cannot read the run log");
	n = sr__db_nrows(r);
	if (sr__runlog_mem_load(l->mem, id, summary, n ? (uint64_t)sr__db_int(r, 0, 0) : 0) !=
	    SR_OK) {
		sr__db_rows_free(r);
		return SR_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const char *line = sr__db_text(r, i, 1);
		size_t len = line ? strlen(line) : 0;
		char *nl = malloc(len + 2);
		if (!nl)
			break;
		memcpy(nl, line ? line : "", len);
		nl[len] = '\n';
		nl[len + 1] = 0;
		if (l->mem->ops->append(l->mem, id, nl, len + 1, &seq) == SR_OK)
			*last = seq;
		free(nl);
	}
	sr__db_rows_free(r);
	return SR_OK;
}

/* A run that was not over when its service stopped: closed with one
 * run.failed (code service_restarted, retryable), numbered after the last
 * event that was written, which replay shows; its summary then as an
 * ended run's (doc/api.yaml: an error object, exit code 75, when it was
 * found ended, its last event's number). */
static void interrupted(db_log *l, const char *id, json_t *summary, uint64_t last)
{
	static const char msg[] = "the service stopped (or was killed) before the run ended; "
				  "the turn may be sent again";
	const char *session = json_string_value(json_object_get(summary, "session"));
	json_t *ev = json_pack("{s:s, s:s, s:s, s:s?, s:b, s:s, s:I}", "type", "run.failed",
			       "code", "service_restarted", "message", msg, "session", session,
			       "retryable", 1, "run", id, "seq", (json_int_t)last + 1);
	char *text = ev ? json_dumps(ev, JSON_COMPACT) : NULL, *line;
	struct timespec ts;
	struct tm tm;
	char when[40];
	uint64_t seq = 0;
	size_t len;

	json_decref(ev);
	if (text && (line = malloc(strlen(text) + 2))) {
		len = strlen(text);
		memcpy(line, text, len);
		line[len] = '\n';
		line[len + 1] = 0;
		if (d_append(&l->pub, id, line, len + 1, &seq) != SR_OK)
			seq = 0;
		free(line);
	}
	free(text);
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + strlen(when), sizeof(when) - strlen(when), ".%03ldZ",
		 ts.tv_nsec / 1000000);
	json_object_set_new(summary, "state", json_string("failed"));
	json_object_set_new(summary, "phase", json_string("done"));
	json_object_set_new(summary, "error", json_pack("{s:s, s:s, s:b}", "code",
							"service_restarted", "message", msg,
							"retryable", 1));
	json_object_set_new(summary, "exit_code", json_integer(75)); /* SR_RUN_EXIT_RETRY */
	json_object_set_new(summary, "ended_at", json_string(when));
	json_object_set_new(summary, "events", json_integer((json_int_t)(seq ? seq : last)));
	d_set_summary(&l->pub, id, summary);
	sr__log(SR_LOG_WARN, "service", "run %s was not over when the service stopped; it "
		"is recorded as failed (service_restarted)", id);
}

/* The runs kept, retired ones in the order they were retired; then the
 * ones that were not over. One that another host's service runs, or may,
 * is left to it. */
static int load(db_log *l)
{
	sr__db_rows *r;
	int n = 0;

	if (sr__db_exec(l->db, &r, "SELECT id, summary, owner, CASE WHEN ended IS NULL THEN 1 "
			"ELSE 0 END FROM runs ORDER BY ended IS NULL, ended", "") < 0)
		return sr__db_error(l->db, "service", "cannot read the run log");
	for (size_t i = 0; i < sr__db_nrows(r); i++) {
		const char *id = sr__db_text(r, i, 0);
		const char *text = sr__db_text(r, i, 1);
		const char *owner = sr__db_text(r, i, 2);
		int live = (int)sr__db_int(r, i, 3);
		uint64_t last = 0;
		json_t *summary;
		if (!id || (live && (!sr__db_owner_here(owner) || sr__db_owner_alive(owner))))
			continue;
		summary = text ? json_loads(text, 0, NULL) : NULL;
		if (!json_is_object(summary)) {
			sr__log(SR_LOG_WARN, "service", "run %s: its summary in the database does "
				"not read as JSON; not loaded", id);
			json_decref(summary);
			continue;
		}
		if (load_events(l, id, summary, &last) == SR_OK) {
			n++;
			/* The summary was written at its last change, the events
			 * one by one: its count is the last event's. */
			if (!live && (json_int_t)last != json_integer_value(json_object_get(summary,
											  "events"))) {
				json_object_set_new(summary, "events", json_integer((json_int_t)last));
				l->mem->ops->set_summary(l->mem, id, summary);
			}
			if (live)
				interrupted(l, id, summary, last);
			l->mem->ops->retire(l->mem, id);
			if (live)
				queue(l, OP_RETIRE, id, NULL, 0);
		}
		json_decref(summary);
	}
	sr__db_rows_free(r);
	if (n)
		sr__log(SR_LOG_INFO, "service", "%d runs read back from %s", n,
			sr__db_name(l->db));
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
		snprintf(err, errlen, "cannot use the runner's database (see above)");
		return NULL;
	}
	if (load(l) != SR_OK || uv_thread_create(&l->writer, writer_main, l) != 0) {
		snprintf(err, errlen, "cannot read the run log from %s (see above)",
			 sr__db_name(l->db));
		sr__db_close(l->db);
		l->db = NULL;
		d_free(&l->pub);
		return NULL;
	}
	return &l->pub;
}
