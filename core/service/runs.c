/* The service's runs: each a run of the core (core/run/run.h) with a
 * record in the run log, its events numbered and kept there, and the
 * streams that follow it. A run goes on when its caller goes away; a
 * stream waits (suspended) for the next event, so that a slow or vanished
 * client never holds the loop or another run. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/host/log.h"
#include "core/service/svc_int.h"

struct sr__follower {
	sr__svc *svc;
	struct MHD_Connection *conn;
	char id[SR__RUN_ID_LEN];
	sr__svc_run *live;        /* a reference, or NULL: an ended run */
	uint64_t next;            /* the next event's number */
	char *line;               /* the line being sent */
	size_t len, off;
	int waiting;              /* suspended, on live->waiters */
	sr__follower *next_waiter;
};

static const char *str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static json_t *now_iso(void)
{
	struct timespec ts;
	struct tm tm;
	char buf[40];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), ".%03ldZ", ts.tv_nsec / 1000000);
	return json_string(buf);
}

static int make_id(char *out, size_t n)
{
	unsigned char r[8];

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return SR_EIO;
	snprintf(out, n, "run-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4],
		 r[5], r[6], r[7]);
	return SR_OK;
}

sr__svc_run *sr__svc_run_find(sr__svc *s, const char *id)
{
	for (sr__svc_run *sr = s->runs; sr; sr = sr->next)
		if (strcmp(sr->id, id) == 0)
			return sr;
	return NULL;
}

int sr__svc_session_busy(sr__svc *s, const char *id)
{
	for (sr__svc_run *sr = s->runs; sr; sr = sr->next)
		if (!sr->done && strcmp(sr->session, id) == 0)
			return 1;
	return json_object_get(s->deleting, id) != NULL ||
	       json_object_get(s->leasing, id) != NULL;
}

/* ------------------------------------------------------------- lifetime */

static void on_reaper_closed(uv_handle_t *h)
{
	free(h->data);
}

static void unref(sr__svc_run *sr)
{
	sr__svc *s = sr->svc;

	if (--sr->refs > 0)
		return;
	for (sr__svc_run **pp = &s->runs; *pp; pp = &(*pp)->next)
		if (*pp == sr) {
			*pp = sr->next;
			break;
		}
	/* Nobody follows it any more: the log may forget it in time. */
	s->log->ops->retire(s->log, sr->id);
	json_decref(sr->summary);
	sr__svc_request_clear(&sr->req);
	uv_close((uv_handle_t *)&sr->reaper, on_reaper_closed);
}

/* Every stream waiting on sr goes on (an event came, or the run ended). */
static void wake(sr__svc_run *sr)
{
	sr__follower *f;

	if (!sr->waiters)
		return;
	while ((f = sr->waiters)) {
		sr->waiters = f->next_waiter;
		f->next_waiter = NULL;
		f->waiting = 0;
		MHD_resume_connection(f->conn);
	}
	sr__httpd_kick(sr->svc->httpd);
}

static const char *end_state(int exit_code)
{
	switch (exit_code) {
	case SR_RUN_EXIT_OK: return "finished";
	case SR_RUN_EXIT_CANCELLED: return "cancelled";
	case SR_RUN_EXIT_REFUSED: return "refused";
	default: return "failed";
	}
}

/* The run is over: its last summary, the streams told, its borrowed
 * request wiped, the table's reference dropped. */
static void finish(sr__svc_run *sr, int exit_code)
{
	sr__svc *s = sr->svc;
	const char *state = end_state(exit_code);

	sr->done = 1;
	sr->exit_code = exit_code;
	json_object_set_new(sr->summary, "state", json_string(state));
	json_object_set_new(sr->summary, "phase", json_string("done"));
	json_object_set_new(sr->summary, "exit_code", json_integer(exit_code));
	json_object_set_new(sr->summary, "ended_at", now_iso());
	s->log->ops->set_summary(s->log, sr->id, sr->summary);
	sr__metrics_run_ended(&s->m, state);
	s->active--;
	sr__log(SR_LOG_INFO, "service", "run %s %s (exit %d)", sr->id, state, exit_code);
	wake(sr);
	sr__svc_request_clear(&sr->req);
	/* Its session's lease: released, or kept while the pool has it. */
	sr__svc_leases_kick(s);
	unref(sr);
	sr__svc_check_drained(s);
}

static void on_reaper(uv_timer_t *t)
{
	sr__svc_run *sr = t->data;
	int code = sr__run_finish(sr->run);

	sr->run = NULL;
	finish(sr, code);
}

/* The run is done (from inside it): finished on the next loop turn. */
static void on_run_done(void *ud)
{
	sr__svc_run *sr = ud;

	uv_timer_start(&sr->reaper, on_reaper, 0, 0);
}

/* ---------------------------------------------------------------- events */

static void set_copy(json_t *dst, const char *key, json_t *src, const char *src_key)
{
	json_t *v = json_object_get(src, src_key);

	if (v)
		json_object_set(dst, key, v);
}

/* What an event tells the summary; 1 when it changed. */
static int summarize(sr__svc_run *sr, json_t *ev)
{
	const char *type = str(ev, "type");
	json_t *sum = sr->summary;

	if (!type)
		return 0;
	if (strcmp(type, "run.started") == 0) {
		set_copy(sum, "session", ev, "session");
		set_copy(sum, "harness", ev, "harness");
		set_copy(sum, "provider", ev, "provider");
		set_copy(sum, "turn", ev, "turn");
		if (str(ev, "session") && !sr->session[0]) {
			snprintf(sr->session, sizeof(sr->session), "%s", str(ev, "session"));
			/* A new session: its lease at once, not at the next
			 * heartbeat. */
			sr__svc_leases_kick(sr->svc);
		} else if (str(ev, "session")) {
			snprintf(sr->session, sizeof(sr->session), "%s", str(ev, "session"));
		}
	} else if (strcmp(type, "sandbox.acquired") == 0) {
		set_copy(sum, "sandbox", ev, "sandbox");
	} else if (strcmp(type, "timing") == 0 && str(ev, "stage")) {
		json_object_set(json_object_get(sum, "timings"), str(ev, "stage"),
				json_object_get(ev, "ms"));
	} else if (strcmp(type, "run.finished") == 0) {
		set_copy(sum, "stop_reason", ev, "stop_reason");
		set_copy(sum, "duration_ms", ev, "ms");
		set_copy(sum, "sandbox", ev, "sandbox");
	} else if (strcmp(type, "run.failed") == 0) {
		json_object_set_new(sum, "error", json_pack("{s:s, s:s, s:b}",
			"code", str(ev, "code") ? str(ev, "code") : "failed",
			"message", str(ev, "message") ? str(ev, "message") : "",
			"retryable", json_is_true(json_object_get(ev, "retryable"))));
	} else if (strcmp(type, "run.cancelling") == 0) {
		json_object_set_new(sum, "state", json_string("cancelling"));
	} else {
		return 0;
	}
	return 1;
}

/* Every event of the run: redacted (as sandrun run prints them), numbered
 * ("seq") and named ("run"), kept, counted, and the streams waiting on it
 * woken. */
static void on_run_event(void *ud, json_t *ev)
{
	sr__svc_run *sr = ud;
	sr__svc *s = sr->svc;
	json_t *clean = sr__redact_json_in(ev, sr->scope);
	uint64_t seq = 0, next;
	char *text, *line;
	size_t len;

	if (!clean)
		return;
	next = (uint64_t)json_integer_value(json_object_get(sr->summary, "events")) + 1;
	json_object_set_new(clean, "run", json_string(sr->id));
	json_object_set_new(clean, "seq", json_integer((json_int_t)next));
	text = json_dumps(clean, JSON_COMPACT);
	len = text ? strlen(text) : 0;
	line = text ? realloc(text, len + 2) : NULL;
	if (!line) {
		free(text);
		json_decref(clean);
		return;
	}
	line[len] = '\n';
	line[len + 1] = 0;
	if (s->log->ops->append(s->log, sr->id, line, len + 1, &seq) != SR_OK)
		seq = 0;
	free(line);
	if (seq)
		json_object_set_new(sr->summary, "events", json_integer((json_int_t)seq));
	sr__metrics_event(&s->m, clean);
	/* The summary from the redacted event: a message may quote a secret. */
	if (summarize(sr, clean))
		s->log->ops->set_summary(s->log, sr->id, sr->summary);
	json_decref(clean);
	wake(sr);
}

/* ----------------------------------------------------------------- start */

static json_t *new_summary(const char *id, const sr__svc_request *q)
{
	json_t *sum = json_pack("{s:s, s:s, s:s, s:s?, s:n, s:s?, s:n, s:n, s:n, s:n, s:n, s:I,"
				" s:o, s:n, s:n, s:o}",
				"run", id, "state", "running", "phase", "planning",
				"harness", q->harness, "provider", "session", q->session,
				"sandbox", "turn", "stop_reason", "error", "exit_code",
				"events", (json_int_t)0, "created_at", now_iso(), "ended_at",
				"duration_ms", "timings", json_object());

	if (sum && !q->harness)
		json_object_set_new(sum, "harness", json_null());
	if (sum && !q->session)
		json_object_set_new(sum, "session", json_null());
	return sum;
}

int sr__svc_run_new(sr__svc *s, sr__svc_request *q, sr__svc_run **out,
		    char *msg, size_t n)
{
	sr__svc_run *sr = calloc(1, sizeof(*sr));
	sr__run_opts o;
	int rc, exit_code = SR_RUN_EXIT_FAILED;

	*out = NULL;
	if (!sr || make_id(sr->id, sizeof(sr->id)) != SR_OK ||
	    !(sr->summary = new_summary(sr->id, q)) ||
	    s->log->ops->create(s->log, sr->id, sr->summary) != SR_OK) {
		if (sr)
			json_decref(sr->summary);
		free(sr);
		sr__svc_request_clear(q);
		snprintf(msg, n, "cannot record a new run (out of memory?)");
		return SR_ENOMEM;
	}
	sr->svc = s;
	sr->req = *q;
	memset(q, 0, sizeof(*q));
	sr->refs = 2; /* the table's and the caller's */
	sr->t0 = uv_now(s->ctx->loop);
	if (sr->req.session)
		snprintf(sr->session, sizeof(sr->session), "%s", sr->req.session);
	uv_timer_init(s->ctx->loop, &sr->reaper);
	sr->reaper.data = sr;
	sr->next = s->runs;
	s->runs = sr;
	s->active++;
	memset(&o, 0, sizeof(o));
	o.harness = sr->req.harness;
	o.session = sr->req.session;
	o.prompt = sr->req.prompt;
	o.tools = sr->req.tools;
	o.mcp_servers = sr->req.mcp_servers;
	o.model_url = sr->req.model_url;
	o.credentials = sr->req.credentials;
	o.secret_scope = sr->scope = sr->req.secrets.scope;
	o.network = sr->req.network;
	o.enforcement_strict = sr->req.enforcement_strict;
	o.ask_policy = sr->req.ask_policy;
	o.ask_required = sr->req.ask_explicit;
	memcpy(o.endpoints, sr->req.endpoints, sizeof(sr->req.endpoints));
	o.n_endpoints = sr->req.n_endpoints;
	memcpy(o.mounts, sr->req.mounts, sizeof(sr->req.mounts));
	o.n_mounts = sr->req.n_mounts;
	o.shim_path = s->o.shim_path;
	o.pool = s->pool;
	o.acp_timeout_ms = s->o.acp_timeout_ms;
	o.event = on_run_event;
	o.done = on_run_done;
	o.ud = sr;
	sr__log(SR_LOG_INFO, "service", "run %s: started%s%s", sr->id,
		sr->req.session ? " on session " : "", sr->req.session ? sr->req.session : "");
	rc = sr__run_start(s->ctx, &o, &sr->run, &exit_code);
	if (rc != SR_OK) {
		/* Refused by a plan gate (its run.failed is in the log). */
		sr->run = NULL;
		finish(sr, exit_code);
	}
	*out = sr;
	return SR_OK;
}

void sr__svc_run_release(sr__svc_run *sr)
{
	unref(sr);
}

json_t *sr__svc_run_summary(sr__svc *s, const char *id)
{
	sr__svc_run *sr = sr__svc_run_find(s, id);
	json_t *sum = NULL;

	if (sr) {
		sum = json_deep_copy(sr->summary);
		if (sum && sr->run)
			json_object_set_new(sum, "phase", json_string(sr__run_phase(sr->run)));
		return sum;
	}
	if (s->log->ops->summary(s->log, id, &sum) != SR_OK)
		return NULL;
	return sum;
}

static void count_state(void *ud, json_t *summary)
{
	json_t *by = ud;
	const char *state = str(summary, "state");

	if (!state)
		return;
	json_object_set_new(by, state, json_integer(json_integer_value(
		json_object_get(by, state)) + 1));
}

void sr__svc_run_counts(sr__svc *s, json_t *by_state, json_t *by_phase)
{
	static const char *const states[] = { "running", "cancelling", "finished", "cancelled",
					      "failed", "refused", NULL };

	for (const char *const *st = states; *st; st++)
		json_object_set_new(by_state, *st, json_integer(0));
	s->log->ops->foreach(s->log, count_state, by_state);
	for (sr__svc_run *sr = s->runs; sr; sr = sr->next) {
		const char *phase;
		if (!sr->run)
			continue;
		phase = sr__run_phase(sr->run);
		json_object_set_new(by_phase, phase, json_integer(json_integer_value(
			json_object_get(by_phase, phase)) + 1));
	}
}

void sr__svc_runs_cancel_all(sr__svc *s)
{
	for (sr__svc_run *sr = s->runs; sr; sr = sr->next)
		if (sr->run && !sr->done)
			sr__run_cancel_shutdown(sr->run);
}

void sr__svc_runs_free(sr__svc *s)
{
	/* Only ended runs remain once drained; a run still going is left
	 * (its memory with it) rather than freed under its own feet. */
	while (s->runs && s->runs->done) {
		sr__svc_run *sr = s->runs;
		sr->refs = 1;
		unref(sr);
	}
}

/* --------------------------------------------------------------- streams */

static void follower_free(void *cls)
{
	sr__follower *f = cls;
	sr__svc *s = f->svc;

	if (f->live)
		unref(f->live);
	free(f->line);
	free(f);
	s->streams--;
	sr__svc_check_drained(s);
}

/* The next line for f into f->line: 1, or 0 when there is none yet. */
static int next_line(sr__follower *f)
{
	sr__runlog *log = f->svc->log;
	const char *line;
	size_t len;
	uint64_t first = 0;
	int rc = log->ops->line(log, f->id, f->next, &line, &len, &first);

	free(f->line);
	f->line = NULL;
	f->len = f->off = 0;
	if (rc == SR_ESTATE) {
		/* Past the buffer: say so, then go on from the oldest kept. */
		json_t *ev = json_pack("{s:s, s:s, s:I, s:I}", "type", "events.dropped", "run", f->id,
				       "from", (json_int_t)f->next, "to", (json_int_t)(first - 1));
		char *text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
		json_decref(ev);
		f->next = first;
		if (!text)
			return 0;
		len = strlen(text);
		f->line = realloc(text, len + 2);
		if (!f->line) {
			free(text);
			return 0;
		}
		f->line[len] = '\n';
		f->len = len + 1;
		return 1;
	}
	if (rc != SR_OK)
		return 0;
	if (!(f->line = malloc(len)))
		return 0;
	memcpy(f->line, line, len);
	f->len = len;
	f->next++;
	return 1;
}

static ssize_t follow_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	sr__follower *f = cls;
	size_t n = 0;

	(void)pos;
	while (n < max) {
		if (f->off < f->len) {
			size_t k = f->len - f->off < max - n ? f->len - f->off : max - n;
			memcpy(buf + n, f->line + f->off, k);
			f->off += k;
			n += k;
			continue;
		}
		if (!next_line(f))
			break;
	}
	if (n)
		return (ssize_t)n;
	if (!f->live || f->live->done)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* Nothing yet: wait for the run's next event, off MHD's loop. */
	f->waiting = 1;
	f->next_waiter = f->live->waiters;
	f->live->waiters = f;
	MHD_suspend_connection(f->conn);
	return 0;
}

struct MHD_Response *sr__svc_follow(sr__svc *s, const char *id, uint64_t after,
				    struct MHD_Connection *conn)
{
	sr__svc_run *live = sr__svc_run_find(s, id);
	struct MHD_Response *resp;
	json_t *sum = NULL;
	sr__follower *f;

	if (!live && s->log->ops->summary(s->log, id, &sum) != SR_OK)
		return NULL;
	json_decref(sum);
	if (!(f = calloc(1, sizeof(*f))))
		return NULL;
	f->svc = s;
	f->conn = conn;
	snprintf(f->id, sizeof(f->id), "%s", id);
	f->next = after + 1;
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, (size_t)16 * 1024, follow_read, f,
						 follower_free);
	if (!resp) {
		free(f);
		return NULL;
	}
	if (live) {
		f->live = live;
		live->refs++;
	}
	s->streams++;
	return resp;
}
