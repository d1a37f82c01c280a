/* Session pointers in the runner's database (core/store/db.c: SQLite or
 * PostgreSQL), with the compare-and-set on the turn index done by the
 * database. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/host/ctx.h"
#include "core/host/log.h"
#include "core/plugins/provider.h"
#include "core/run/session.h"
#include "core/store/db.h"

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

/* The record of id: SR_OK with *out, SR_ENOTFOUND, or SR_EIO (a record
 * that is not a JSON object, or a database error). */
static int read_record(sr__db *db, const char *id, json_t **out, int64_t *turn)
{
	sr__db_rows *r;
	const char *text;
	int rc = SR_OK;

	*out = NULL;
	if (sr__db_exec(db, &r, "SELECT record, turn FROM sessions WHERE id = $1", "t", id) < 0)
		return sr__db_error(db, "session", "cannot read a session");
	if (!sr__db_nrows(r)) {
		sr__db_rows_free(r);
		return SR_ENOTFOUND;
	}
	text = sr__db_text(r, 0, 0);
	*turn = sr__db_int(r, 0, 1);
	*out = text ? json_loads(text, 0, NULL) : NULL;
	if (!json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		sr__log(SR_LOG_ERROR, "session", "session %s: its record does not read as "
			"JSON; it is left as it is", id);
		rc = SR_EIO;
	}
	sr__db_rows_free(r);
	return rc;
}

/* The process's connection for session id (sr__db_release it): NULL with
 * *rc SR_EINVAL (not an id) or SR_EIO. */
static sr__db *open_for(const char *state_dir, const char *id, int *rc)
{
	sr__db *db = NULL;

	*rc = SR_EINVAL;
	if (sr__session_valid_id(id) && !(db = sr__db_shared(state_dir)))
		*rc = SR_EIO;
	return db;
}

int sr__session_load(const char *state_dir, const char *id, json_t **out)
{
	int64_t turn;
	sr__db *db;
	int rc;

	*out = NULL;
	if (!(db = open_for(state_dir, id, &rc)))
		return rc;
	rc = read_record(db, id, out, &turn);
	sr__db_release(db);
	return rc;
}

int sr__session_store(const char *state_dir, const char *id, json_t *rec,
		      int expected_turn)
{
	int64_t have = 0;
	json_t *cur;
	char *text;
	sr__db *db;
	int rc, n;

	if (json_integer_value(json_object_get(rec, "turn")) != expected_turn + 1)
		return SR_EINVAL;
	if (!(text = json_dumps(rec, JSON_COMPACT)))
		return SR_ENOMEM;
	if (!(db = open_for(state_dir, id, &rc))) {
		free(text);
		return rc;
	}
	if (sr__db_begin(db) != SR_OK) {
		rc = sr__db_error(db, "session", "cannot lock the database");
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
		if (expected_turn == 0)
			n = sr__db_exec(db, NULL, "INSERT INTO sessions (id, turn, record, updated) "
					"VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING", "titi",
					id, (int64_t)1, text, (int64_t)time(NULL));
		else
			n = sr__db_exec(db, NULL, "UPDATE sessions SET turn = $2, record = $3, "
					"updated = $4 WHERE id = $1 AND turn = $5", "titii", id,
					(int64_t)expected_turn + 1, text, (int64_t)time(NULL),
					(int64_t)expected_turn);
		if (n < 0)
			rc = sr__db_error(db, "session", "cannot write a session");
		else if (n != 1)
			rc = SR_ESTATE;
	}
	if (sr__db_end(db, rc == SR_OK) != SR_OK && rc == SR_OK)
		rc = sr__db_error(db, "session", "cannot commit a session");
out:
	sr__db_release(db);
	free(text);
	return rc;
}

/* DELETE sql ($1 the id, $2 sandbox when not NULL) for session id. */
static int delete_where(const char *state_dir, const char *id, const char *sql,
			const char *sandbox)
{
	sr__db *db;
	int rc, n;

	if (!(db = open_for(state_dir, id, &rc)))
		return rc;
	n = sandbox ? sr__db_exec(db, NULL, sql, "tt", id, sandbox) :
		sr__db_exec(db, NULL, sql, "t", id);
	if (n < 0)
		rc = sr__db_error(db, "session", "cannot remove a session");
	else
		rc = n ? SR_OK : SR_ENOTFOUND;
	sr__db_release(db);
	return rc;
}

int sr__session_remove(const char *state_dir, const char *id)
{
	return delete_where(state_dir, id, "DELETE FROM sessions WHERE id = $1", NULL);
}

int sr__session_forget_sandbox(const char *state_dir, const char *id, const char *sandbox)
{
	const char *was;
	int64_t turn = 0;
	json_t *rec;
	sr__db *db;
	int rc, n;

	if (!(db = open_for(state_dir, id, &rc)))
		return rc;
	rc = read_record(db, id, &rec, &turn);
	was = json_string_value(json_object_get(rec, "sandbox"));
	if (rc == SR_OK && (!was || strcmp(was, sandbox) != 0))
		rc = SR_ENOTFOUND;
	/* Only the turn read: no turn recorded in between is lost. */
	if (rc == SR_OK) {
		n = sr__db_exec(db, NULL, "DELETE FROM sessions WHERE id = $1 AND turn = $2", "ti",
				id, turn);
		if (n < 0)
			rc = sr__db_error(db, "session", "cannot remove a session");
		else
			rc = n ? SR_OK : SR_ENOTFOUND;
	}
	json_decref(rec);
	sr__db_release(db);
	return rc;
}

/* ------------------------------------------------------------ home */

json_t *sr__session_home(const char *runner, const char *locality)
{
	return json_pack("{s:s?, s:s?}", "runner", runner, "locality", locality);
}

static int differ(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "") != 0;
}

int sr__session_elsewhere(const json_t *rec, const char *provider, int remote,
			  const char *locality, const char *runner, char *msg, size_t n,
			  int *retryable)
{
	const char *id = json_string_value(json_object_get(rec, "session"));
	const char *was = json_string_value(json_object_get(rec, "provider"));
	const json_t *home = json_object_get(rec, "home");
	const char *its_runner = json_string_value(json_object_get(home, "runner"));
	const char *its_place = json_string_value(json_object_get(home, "locality"));

	*retryable = 0;
	if (!id)
		id = "?";
	if (was && differ(was, provider)) {
		snprintf(msg, n, "session '%s' has its sandbox on provider '%s', and this "
			 "runner's provider is '%s': a runner configured with provider '%s' "
			 "continues it; nothing was deleted", id, was, provider, was);
		return SR__SESSION_PROVIDER_CHANGED;
	}
	if (!json_is_object(home))
		return 0; /* recorded before homes were */
	if (differ(its_place, locality) || (!remote && differ(its_runner, runner))) {
		snprintf(msg, n, "session '%s' has its sandbox with runner '%s'%s%s, which this "
			 "runner ('%s'%s%s) does not reach: only a runner sharing that "
			 "runner id and sandbox root continues it (a turn sent there, or "
			 "sent again once it is back, runs)",
			 id, its_runner ? its_runner : "?", its_place ? " at " : "",
			 its_place ? its_place : "", runner ? runner : "?",
			 locality ? " at " : "", locality ? locality : "");
		*retryable = 1;
		return SR__SESSION_ELSEWHERE;
	}
	return 0;
}

const char *sr__session_elsewhere_code(int why)
{
	return why == SR__SESSION_PROVIDER_CHANGED ? "session_provider_changed" :
						     "session_elsewhere";
}

int sr__session_elsewhere_here(sr__ctx *ctx, sr__plugin *provider, const json_t *rec,
			       char *msg, size_t n, int *retryable)
{
	return sr__session_elsewhere(rec, provider->desc->name,
				     !!(sr__provider_capabilities(provider) & SR_CAP_REMOTE),
				     sr__provider_locality(provider), sr__ctx_runner_id(ctx), msg,
				     n, retryable);
}

/* ------------------------------------------------------ off the loop */

typedef struct job {
	uv_work_t work;
	char *state, *id, *sandbox;
	json_t *rec;       /* a store's (NULL: a removal) */
	int expected_turn;
	int rc;
	void (*done)(void *ud, int rc);
	void *ud;
} job;

static void job_work(uv_work_t *w)
{
	job *j = w->data;

	if (j->rec)
		j->rc = sr__session_store(j->state, j->id, j->rec, j->expected_turn);
	else if (j->sandbox)
		j->rc = sr__session_forget_sandbox(j->state, j->id, j->sandbox);
	else
		j->rc = sr__session_remove(j->state, j->id);
}

static void job_free(job *j)
{
	json_decref(j->rec);
	free(j->state);
	free(j->id);
	free(j->sandbox);
	free(j);
}

static void job_done(uv_work_t *w, int status)
{
	job *j = w->data;

	if (status == UV_ECANCELED)
		j->rc = SR_ECANCELED;
	if (j->done)
		j->done(j->ud, j->rc);
	job_free(j);
}

static int job_queue(uv_loop_t *loop, const char *state_dir, const char *id,
		     const char *sandbox, json_t *rec, int expected_turn,
		     void (*done)(void *ud, int rc), void *ud)
{
	job *j = calloc(1, sizeof(*j));

	if (!j) {
		json_decref(rec);
		return SR_ENOMEM;
	}
	j->rec = rec;
	j->expected_turn = expected_turn;
	j->done = done;
	j->ud = ud;
	j->work.data = j;
	if (!(j->state = strdup(state_dir)) || !(j->id = strdup(id)) ||
	    (sandbox && !(j->sandbox = strdup(sandbox))) ||
	    uv_queue_work(loop, &j->work, job_work, job_done) != 0) {
		job_free(j);
		return SR_ENOMEM;
	}
	return SR_OK;
}

int sr__session_store_async(uv_loop_t *loop, const char *state_dir, const char *id,
			    json_t *rec, int expected_turn, void (*done)(void *ud, int rc),
			    void *ud)
{
	return job_queue(loop, state_dir, id, NULL, rec, expected_turn, done, ud);
}

int sr__session_remove_async(uv_loop_t *loop, const char *state_dir, const char *id,
			     const char *sandbox, void (*done)(void *ud, int rc), void *ud)
{
	return job_queue(loop, state_dir, id, sandbox, NULL, 0, done, ud);
}
