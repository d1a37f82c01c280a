/*
 * sandrund's HTTP API (doc/api.yaml). Checks, in order, before any of a
 * body is read: the route (404), the method (405), the bearer token (401,
 * constant time; every route but /health), the declared length (413).
 * A body sent without a length is capped while it arrives.
 *
 *   GET    /health                     liveness (503 while draining)
 *   GET    /metrics                    Prometheus text
 *   POST   /v1/runs[?wait=false]       start a run: its events as NDJSON,
 *                                      or 202 and its id
 *   GET    /v1/runs/ID                 its summary
 *   DELETE /v1/runs/ID                 cancel it
 *   GET    /v1/runs/ID/events[?after=N]  replay, then follow
 *   POST   /v1/runs/ID/permissions     answer a permission.request
 *   GET    /v1/sessions/ID             a session's pointer
 *   DELETE /v1/sessions/ID             destroy its sandbox, forget it
 *
 * Errors are {"error": {"code", "message"}}.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/host/log.h"
#include "core/host/status.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"
#include "core/run/plan.h"
#include "core/run/session.h"
#include "core/service/svc_int.h"

#define RETRY_AFTER "5"

enum route {
	R_NONE, R_HEALTH, R_METRICS, R_RUNS, R_RUN, R_RUN_EVENTS, R_RUN_PERMS, R_SESSION
};

typedef struct session_op session_op;
typedef struct lease_wait lease_wait;

struct sr__api_req {
	sr__svc *svc;
	struct MHD_Connection *conn;
	enum route route;
	char id[72];
	char *body;
	size_t len;
	int too_big;
	int dispatched;
	int suspended;
	unsigned status;     /* the answer made while suspended */
	json_t *answer;
	session_op *op;      /* what it waits on */
	lease_wait *lease;   /* or the session's lease */
	sr__api_req *next;   /* on svc->suspended */
};

/* A run waiting for its session's lease: outlives its request if need be
 * (the lease taken for nobody is released by the next heartbeat). */
struct lease_wait {
	sr__svc *svc;
	sr__api_req *q;      /* NULL once the request is gone */
	sr__svc_request req; /* parsed, checked */
	int waiting;         /* ?wait=true */
	int deleting;        /* for DELETE /v1/sessions/ID instead */
	char session[40];
	int answered;
	int rc;
	char holder[400];
};

/* A session being deleted: outlives its request if need be. */
struct session_op {
	sr__svc *svc;
	sr__api_req *q;      /* NULL once the request is gone */
	char session[40];
	char *sandbox;
};

/* ------------------------------------------------------------- answers */

static enum MHD_Result queue(sr__svc *s, struct MHD_Connection *conn, unsigned status,
			     struct MHD_Response *r)
{
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	sr__metrics_http(&s->m, status);
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* body: borrowed; NULL for none. */
static struct MHD_Response *json_response(json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct MHD_Response *r;
	size_t len = text ? strlen(text) : 0;

	if (text) {
		char *nl = realloc(text, len + 2);
		if (nl) {
			text = nl;
			text[len++] = '\n';
			text[len] = 0;
		}
	}
	r = MHD_create_response_from_buffer(len, text ? text : (void *)"",
					    text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(text);
		return NULL;
	}
	if (text)
		MHD_add_response_header(r, "Content-Type", "application/json");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	return r;
}

static enum MHD_Result send_json(sr__svc *s, struct MHD_Connection *conn, unsigned status,
				 json_t *body)
{
	return queue(s, conn, status, json_response(body));
}

static json_t *error_body(const char *code, const char *message)
{
	return json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message);
}

static enum MHD_Result send_error(sr__svc *s, struct MHD_Connection *conn, unsigned status,
				  const char *code, const char *fmt, ...) SR_PRINTF(5, 6);

static enum MHD_Result send_error(sr__svc *s, struct MHD_Connection *conn, unsigned status,
				  const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	json_t *body;
	struct MHD_Response *r;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	body = error_body(code, msg);
	r = json_response(body);
	json_decref(body);
	if (r && status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"sandrund\"");
	if (r && (status == MHD_HTTP_TOO_MANY_REQUESTS || status == MHD_HTTP_SERVICE_UNAVAILABLE))
		MHD_add_response_header(r, "Retry-After", RETRY_AFTER);
	return queue(s, conn, status, r);
}

/* -------------------------------------------------------------- routing */

/* "/v1/runs/ID..." with ID of [A-Za-z0-9._-], 1 to 64: the rest after
 * ID, or NULL. */
static const char *take_id(const char *p, char *id, size_t n)
{
	size_t len = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			       "0123456789._-");

	if (len == 0 || len > 64 || len >= n || (p[len] && p[len] != '/'))
		return NULL;
	memcpy(id, p, len);
	id[len] = 0;
	return p + len;
}

static enum route match(const char *url, char *id, size_t n)
{
	const char *rest;

	if (strcmp(url, "/health") == 0)
		return R_HEALTH;
	if (strcmp(url, "/metrics") == 0)
		return R_METRICS;
	if (strcmp(url, "/v1/runs") == 0)
		return R_RUNS;
	if (strncmp(url, "/v1/runs/", 9) == 0 && (rest = take_id(url + 9, id, n))) {
		if (!*rest)
			return R_RUN;
		if (strcmp(rest, "/events") == 0)
			return R_RUN_EVENTS;
		if (strcmp(rest, "/permissions") == 0)
			return R_RUN_PERMS;
		return R_NONE;
	}
	if (strncmp(url, "/v1/sessions/", 13) == 0 && (rest = take_id(url + 13, id, n)) && !*rest)
		return R_SESSION;
	return R_NONE;
}

static const char *allowed(enum route r)
{
	switch (r) {
	case R_RUNS:
	case R_RUN_PERMS:
		return "POST";
	case R_RUN:
	case R_SESSION:
		return "GET, DELETE";
	default:
		return "GET";
	}
}

static int method_ok(enum route r, const char *method)
{
	const char *a = allowed(r);
	size_t n = strlen(method);

	for (const char *p = a; (p = strstr(p, method)); p += n)
		if ((p == a || p[-1] == ' ') && (p[n] == 0 || p[n] == ','))
			return 1;
	return 0;
}

/* ----------------------------------------------------------- handlers */

/* A query argument; "" for one with a NUL in it (%00), which no value the
 * API takes has, and which C would otherwise read cut short. */
static const char *arg(struct MHD_Connection *conn, const char *key)
{
	const char *v = NULL;
	size_t len = 0;

	if (MHD_lookup_connection_value_n(conn, MHD_GET_ARGUMENT_KIND, key, strlen(key), &v,
					  &len) != MHD_YES || !v)
		return NULL;
	return strlen(v) == len ? v : "";
}

static enum MHD_Result health(sr__svc *s, struct MHD_Connection *conn)
{
	json_t *body = json_pack("{s:s, s:s, s:i}", "status", s->draining ? "draining" : "ok",
				 "version", PACKAGE_VERSION, "runs_active", (int)s->active);
	enum MHD_Result ret = send_json(s, conn, s->draining ? MHD_HTTP_SERVICE_UNAVAILABLE :
				      MHD_HTTP_OK, body);

	json_decref(body);
	return ret;
}

static enum MHD_Result metrics(sr__svc *s, struct MHD_Connection *conn)
{
	json_t *by_state = json_object(), *by_phase = json_object();
	struct MHD_Response *r;
	char *text;

	sr__svc_run_counts(s, by_state, by_phase);
	sr__pool_counts(s->pool, &s->m.warm_running, &s->m.warm_stopped);
	text = sr__metrics_text(&s->m, by_state, by_phase, s->ctx->reg);
	json_decref(by_state);
	json_decref(by_phase);
	if (!text)
		return send_error(s, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory",
				  "out of memory");
	r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	return queue(s, conn, MHD_HTTP_OK, r);
}

static enum MHD_Result stream(sr__svc *s, struct MHD_Connection *conn, const char *id,
			      uint64_t after)
{
	struct MHD_Response *r = sr__svc_follow(s, id, after, conn);
	char location[128];

	if (!r)
		return send_error(s, conn, MHD_HTTP_NOT_FOUND, "no_such_run", "no run '%s'", id);
	snprintf(location, sizeof(location), "/v1/runs/%s", id);
	MHD_add_response_header(r, "Content-Type", "application/x-ndjson");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	MHD_add_response_header(r, "Location", location);
	return queue(s, conn, MHD_HTTP_OK, r);
}

static int shim_ok(sr__svc *s)
{
	return s->o.shim_path && access(s->o.shim_path, X_OK) == 0;
}

static enum MHD_Result take_lease(sr__svc *s, sr__api_req *q, sr__svc_request *req,
				  int waiting);
static int model_host_ok(const char *hosts, const char *url);
static enum MHD_Result launch(sr__svc *s, sr__api_req *q, sr__svc_request *req,
			      int waiting);

static enum MHD_Result start_run(sr__svc *s, sr__api_req *q)
{
	const char *wait = arg(q->conn, "wait"), *code;
	sr__svc_request req;
	char msg[1024];
	enum MHD_Result ret;
	int waiting = 1;

	if (wait && strcmp(wait, "false") == 0)
		waiting = 0;
	else if (wait && strcmp(wait, "true") != 0)
		return send_error(s, q->conn, MHD_HTTP_BAD_REQUEST, "invalid_request",
				  "'wait' must be true or false");
	if (sr__svc_request_parse(q->body, q->len, &req, &code, msg, sizeof(msg)) != SR_OK)
		return send_error(s, q->conn, MHD_HTTP_BAD_REQUEST, code, "%s", msg);
	/* The service's own credentials go to the model hosts it was
	 * configured for, not wherever a token holder points them. */
	if (req.model_url && !req.credentials && !model_host_ok(s->conf.model_hosts, req.model_url)) {
		ret = send_error(s, q->conn, MHD_HTTP_BAD_REQUEST, "model_url_refused",
				 "'model.url' %.300s without 'model.credentials': the service's own "
				 "credentials go only to the hosts of [service] model_hosts (%s); give "
				 "the credentials for this endpoint in the request", req.model_url,
				 *s->conf.model_hosts ? s->conf.model_hosts : "none configured");
		sr__svc_request_clear(&req);
		return ret;
	}
	if (s->draining) {
		sr__svc_request_clear(&req);
		return send_error(s, q->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
				  "the service is shutting down");
	}
	if (s->active >= s->conf.max_runs) {
		sr__svc_request_clear(&req);
		return send_error(s, q->conn, MHD_HTTP_TOO_MANY_REQUESTS, "too_many_runs",
				  "%u runs are going on, the most this service runs at once "
				  "([service] max_runs); try again later", s->active);
	}
	if (req.session && sr__svc_session_busy(s, req.session)) {
		ret = send_error(s, q->conn, MHD_HTTP_CONFLICT, "session_busy",
				 "session '%s' has a run going on (or is being deleted)", req.session);
		sr__svc_request_clear(&req);
		return ret;
	}
	if (json_array_size(req.tools) && !shim_ok(s)) {
		sr__svc_request_clear(&req);
		return send_error(s, q->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "tools_unavailable",
				  "platform tools need sandrun-shim, not found at %s (set SANDRUN_SHIM)",
				  s->o.shim_path ? s->o.shim_path : "(none)");
	}
	if (req.session)
		return take_lease(s, q, &req, waiting);
	return launch(s, q, &req, waiting);
}

static void suspend(sr__svc *s, sr__api_req *q)
{
	q->suspended = 1;
	q->next = s->suspended;
	s->suspended = q;
	MHD_suspend_connection(q->conn);
}

static void resume(sr__api_req *q);

static void on_leased(void *ud, int rc, const char *holder)
{
	lease_wait *w = ud;

	if (!w->q) { /* the caller went away: the lease goes */
		sr__svc_lease_settled(w->svc, w->session);
		if (rc == SR_OK)
			sr__svc_leases_kick(w->svc);
		sr__svc_request_clear(&w->req);
		free(w);
		return;
	}
	w->answered = 1;
	w->rc = rc;
	snprintf(w->holder, sizeof(w->holder), "%s", holder);
	resume(w->q);
}

/* A turn on a session starts once this service holds the session's lease
 * (another service on the same database may be running it). */
static enum MHD_Result take_lease(sr__svc *s, sr__api_req *q, sr__svc_request *req,
				  int waiting)
{
	lease_wait *w = calloc(1, sizeof(*w));
	const char *session = req ? req->session : q->id;

	if (!w || sr__svc_lease_take(s, session, on_leased, w) != SR_OK) {
		free(w);
		if (req)
			sr__svc_request_clear(req);
		return send_error(s, q->conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "store_failed",
				  "cannot take the session's lease (out of memory)");
	}
	w->svc = s;
	w->q = q;
	snprintf(w->session, sizeof(w->session), "%s", session);
	if (req) {
		w->req = *req;
		memset(req, 0, sizeof(*req));
	} else {
		w->deleting = 1;
	}
	w->waiting = waiting;
	q->lease = w;
	suspend(s, q);
	return MHD_YES;
}

static enum MHD_Result destroy_session(sr__svc *s, sr__api_req *q);

/* Resumed with the lease's answer. */
static enum MHD_Result leased(sr__svc *s, sr__api_req *q)
{
	lease_wait *w = q->lease;
	const char *session = w->session;
	enum MHD_Result ret;

	q->lease = NULL;
	/* A deletion: its own lease no longer makes the session busy. */
	if (w->deleting)
		sr__svc_lease_settled(s, session);
	if (w->rc == SR_OK && w->deleting && sr__svc_session_busy(s, q->id)) {
		ret = send_error(s, q->conn, MHD_HTTP_CONFLICT, "session_busy",
				 "session '%s' has a run going on (or is being deleted)", q->id);
	} else if (w->rc == SR_OK && w->deleting) {
		ret = destroy_session(s, q);
	} else if (w->rc == SR_OK && s->draining) {
		ret = send_error(s, q->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
				 "the service is shutting down");
	} else if (w->rc == SR_OK) {
		ret = launch(s, q, &w->req, w->waiting);
	} else if (w->rc == SR_ESTATE) {
		ret = send_error(s, q->conn, MHD_HTTP_CONFLICT, "session_leased",
				 "session '%s' is held by %s; send its turns there, or wait",
				 session, w->holder);
	} else {
		ret = send_error(s, q->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "store_failed",
				 "cannot take the lease of session '%s': the database cannot be "
				 "used (see the service's log)", session);
	}
	/* A run holds the session now (or a deletion), or nothing came of
	 * the lease: the heartbeat keeps it or releases it. */
	sr__svc_lease_settled(s, session);
	if (w->rc == SR_OK)
		sr__svc_leases_kick(s);
	sr__svc_request_clear(&w->req);
	free(w);
	return ret;
}

/* Whether url's host (and port) is in hosts, a comma-separated list of
 * HOST (any port) or HOST:PORT. */
static int model_host_ok(const char *hosts, const char *url)
{
	char host[256], why[300], entry[300];
	long port = sr__url_port(url);
	const char *p = hosts;

	if (!sr__url_host(url, host, sizeof(host), why, sizeof(why)))
		return 0;
	while (*p) {
		size_t len = strcspn(p, ",");
		char *colon;
		snprintf(entry, sizeof(entry), "%.*s", (int)len, p);
		p += len + (p[len] == ',');
		colon = strrchr(entry, ':');
		if (colon && !strchr(colon + 1, ']')) {
			*colon = 0;
			if (strtol(colon + 1, NULL, 10) != port)
				continue;
		}
		if (strcasecmp(entry, host) == 0)
			return 1;
	}
	return 0;
}

/* Start the run and answer: its events, or 202. req is taken. */
static enum MHD_Result launch(sr__svc *s, sr__api_req *q, sr__svc_request *req, int waiting)
{
	sr__svc_run *sr;
	char msg[1024], location[128], id[SR__RUN_ID_LEN];
	enum MHD_Result ret;

	if (sr__svc_run_new(s, req, &sr, msg, sizeof(msg)) != SR_OK)
		return send_error(s, q->conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory", "%s",
				  msg);
	snprintf(id, sizeof(id), "%s", sr->id);
	if (waiting) {
		ret = stream(s, q->conn, id, 0);
	} else {
		json_t *body = json_pack("{s:s}", "run", id);
		struct MHD_Response *r = json_response(body);
		json_decref(body);
		snprintf(location, sizeof(location), "/v1/runs/%s", id);
		if (r)
			MHD_add_response_header(r, "Location", location);
		ret = queue(s, q->conn, MHD_HTTP_ACCEPTED, r);
	}
	sr__svc_run_release(sr);
	return ret;
}

static enum MHD_Result run_get(sr__svc *s, struct MHD_Connection *conn, const char *id)
{
	json_t *sum = sr__svc_run_summary(s, id);
	enum MHD_Result ret;

	if (!sum)
		return send_error(s, conn, MHD_HTTP_NOT_FOUND, "no_such_run", "no run '%s'", id);
	ret = send_json(s, conn, MHD_HTTP_OK, sum);
	json_decref(sum);
	return ret;
}

/* 404 for a run never seen, 409 for one that ended. */
static enum MHD_Result not_live(sr__svc *s, struct MHD_Connection *conn, const char *id)
{
	json_t *sum = sr__svc_run_summary(s, id);

	if (!sum)
		return send_error(s, conn, MHD_HTTP_NOT_FOUND, "no_such_run", "no run '%s'", id);
	json_decref(sum);
	return send_error(s, conn, MHD_HTTP_CONFLICT, "run_ended", "run '%s' has ended", id);
}

static enum MHD_Result run_cancel(sr__svc *s, struct MHD_Connection *conn, const char *id)
{
	sr__svc_run *sr = sr__svc_run_find(s, id);
	json_t *body;
	enum MHD_Result ret;

	if (!sr || sr->done || !sr->run)
		return not_live(s, conn, id);
	sr__log(SR_LOG_INFO, "service", "run %s: cancel requested", id);
	sr__run_cancel(sr->run);
	body = json_pack("{s:s, s:s}", "run", id, "state", "cancelling");
	ret = send_json(s, conn, MHD_HTTP_ACCEPTED, body);
	json_decref(body);
	return ret;
}

static enum MHD_Result run_events(sr__svc *s, struct MHD_Connection *conn, const char *id)
{
	const char *after = arg(conn, "after");
	unsigned long long n = 0;
	char *end = NULL;

	if (after) {
		/* Digits only: strtoull would take "+5", " 5" (from %20) and
		 * saturate 2^64 to its largest value. */
		errno = 0;
		n = strtoull(after, &end, 10);
		if (!*after || *end || strspn(after, "0123456789") != strlen(after) ||
		    errno == ERANGE)
			return send_error(s, conn, MHD_HTTP_BAD_REQUEST, "invalid_request",
					  "'after' must be an event number (0 or more)");
	}
	return stream(s, conn, id, n);
}

static enum MHD_Result run_permission(sr__svc *s, sr__api_req *q)
{
	sr__svc_run *sr = sr__svc_run_find(s, q->id);
	json_t *body, *allow;
	json_error_t err;
	const char *rid;
	enum MHD_Result ret;

	body = json_loadb(q->body ? q->body : "", q->len, JSON_REJECT_DUPLICATES, &err);
	rid = json_string_value(json_object_get(body, "request_id"));
	allow = json_object_get(body, "allow");
	if (!body || !json_is_object(body) || !rid || !json_is_boolean(allow) ||
	    json_object_size(body) != 2) {
		json_decref(body);
		return send_error(s, q->conn, MHD_HTTP_BAD_REQUEST, body ? "invalid_request" :
				  "invalid_json", "the body must be {\"request_id\": string, "
				  "\"allow\": true|false}");
	}
	if (!sr || sr->done || !sr->run) {
		json_decref(body);
		return not_live(s, q->conn, q->id);
	}
	if (sr__run_permission(sr->run, rid, json_is_true(allow)) != SR_OK) {
		ret = send_error(s, q->conn, MHD_HTTP_NOT_FOUND, "no_such_request",
				 "no permission request '%.80s' is waiting in run '%s'", rid, q->id);
		json_decref(body);
		return ret;
	}
	json_object_set_new(body, "run", json_string(q->id));
	ret = send_json(s, q->conn, MHD_HTTP_OK, body);
	json_decref(body);
	return ret;
}

static const char *active_run_on(sr__svc *s, const char *session)
{
	for (sr__svc_run *sr = s->runs; sr; sr = sr->next)
		if (!sr->done && strcmp(sr->session, session) == 0)
			return sr->id;
	return NULL;
}

/* The session's record, or an answer sent (*ret). */
static json_t *load_session(sr__svc *s, struct MHD_Connection *conn, const char *id,
			    enum MHD_Result *ret)
{
	const char *state = sr__ctx_state_dir(s->ctx);
	json_t *rec = NULL;
	int rc;

	*ret = MHD_NO;
	if (!sr__session_valid_id(id)) {
		*ret = send_error(s, conn, MHD_HTTP_NOT_FOUND, "no_such_session",
				  "'%s' is not a session id (ses- and 16 hex digits)", id);
		return NULL;
	}
	rc = state ? sr__session_load(state, id, &rec) : SR_EIO;
	if (rc == SR_OK)
		return rec;
	json_decref(rec);
	*ret = rc == SR_ENOTFOUND ?
		send_error(s, conn, MHD_HTTP_NOT_FOUND, "no_such_session", "no session '%s'", id) :
		send_error(s, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "state_unreadable",
			   "session '%s' cannot be read from the state directory", id);
	return NULL;
}

static enum MHD_Result session_get(sr__svc *s, struct MHD_Connection *conn, const char *id)
{
	enum MHD_Result ret;
	json_t *rec = load_session(s, conn, id, &ret), *body;
	const char *run;

	if (!rec)
		return ret;
	run = active_run_on(s, id);
	body = json_pack("{s:s, s:O?, s:O?, s:O?, s:O?, s:s?}", "session", id,
			 "sandbox", json_object_get(rec, "sandbox"),
			 "provider", json_object_get(rec, "provider"),
			 "harness", json_object_get(rec, "harness"),
			 "turn", json_object_get(rec, "turn"), "run", run);
	if (body && !run)
		json_object_set_new(body, "run", json_null());
	ret = send_json(s, conn, MHD_HTTP_OK, body);
	json_decref(body);
	json_decref(rec);
	return ret;
}

static void resume(sr__api_req *q)
{
	sr__svc *s = q->svc;

	for (sr__api_req **pp = &s->suspended; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	q->suspended = 0;
	MHD_resume_connection(q->conn);
	sr__httpd_kick(s->httpd);
}

static void on_session_destroyed(void *ud, const sr_result *res)
{
	session_op *op = ud;
	sr__svc *s = op->svc;
	const char *state = sr__ctx_state_dir(s->ctx);
	sr__api_req *q = op->q;
	unsigned status = MHD_HTTP_OK;
	json_t *answer;

	if (res->status == SR_OK || res->status == SR_ENOTFOUND) {
		if (state)
			sr__session_remove(state, op->session);
		sr__log(SR_LOG_INFO, "service", "session %s deleted (sandbox %s)", op->session,
			op->sandbox);
		answer = json_pack("{s:s, s:s, s:b}", "session", op->session, "sandbox",
				   op->sandbox, "deleted", 1);
	} else {
		status = MHD_HTTP_BAD_GATEWAY;
		answer = error_body("provider_failed", res->message ? res->message :
				    sr__strerror(res->status));
	}
	json_object_del(s->deleting, op->session);
	sr__svc_leases_kick(s); /* its lease released */
	if (q) {
		q->op = NULL;
		q->status = status;
		q->answer = answer;
		resume(q);
	} else {
		json_decref(answer);
	}
	free(op->sandbox);
	free(op);
	sr__svc_check_drained(s);
}

/* DELETE /v1/sessions/ID: once the session's lease is this service's
 * (another service may have a turn going on, or keep it warm). */
static enum MHD_Result session_delete(sr__svc *s, sr__api_req *q)
{
	enum MHD_Result ret;
	json_t *rec;

	if (sr__svc_session_busy(s, q->id))
		return send_error(s, q->conn, MHD_HTTP_CONFLICT, "session_busy",
				  "session '%s' has a run going on (or is being deleted)", q->id);
	if (!(rec = load_session(s, q->conn, q->id, &ret)))
		return ret;
	json_decref(rec);
	return take_lease(s, q, NULL, 0);
}

static enum MHD_Result destroy_session(sr__svc *s, sr__api_req *q)
{
	enum MHD_Result ret;
	json_t *rec;
	const char *pname, *sandbox;
	sr__plugin *p;
	session_op *op;
	int rc;

	if (!(rec = load_session(s, q->conn, q->id, &ret)))
		return ret;
	pname = json_string_value(json_object_get(rec, "provider"));
	sandbox = json_string_value(json_object_get(rec, "sandbox"));
	p = pname ? sr__registry_find(s->ctx->reg, SR_PLUGIN_PROVIDER, pname) : NULL;
	if (!p || !sandbox || sr__plugin_start(s->ctx, p) != SR_OK) {
		ret = send_error(s, q->conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "provider_unavailable",
				 "session '%s' is on provider '%s', which is not loaded here", q->id,
				 pname ? pname : "?");
		json_decref(rec);
		return ret;
	}
	{
		char msg[1024];
		int retryable, why;
		/* Its sandbox with a runner this one does not reach: nothing
		 * here could destroy it, so nothing is forgotten. */
		if ((why = sr__session_elsewhere_here(s->ctx, p, rec, msg, sizeof(msg),
						      &retryable))) {
			json_decref(rec);
			return send_error(s, q->conn, MHD_HTTP_CONFLICT,
					  sr__session_elsewhere_code(why), "%s", msg);
		}
	}
	op = calloc(1, sizeof(*op));
	if (!op || !(op->sandbox = strdup(sandbox))) {
		free(op);
		json_decref(rec);
		return send_error(s, q->conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out_of_memory",
				  "out of memory");
	}
	json_decref(rec);
	op->svc = s;
	op->q = q;
	snprintf(op->session, sizeof(op->session), "%s", q->id);
	/* A warm sandbox leaves the pool: this destroys it
	 * (SR__TD_DELETED). */
	sr__pool_drop(s->pool, q->id);
	rc = sr__provider_destroy(p, sr__next_req(), op->sandbox, on_session_destroyed, op);
	if (rc != SR_OK) {
		free(op->sandbox);
		free(op);
		return send_error(s, q->conn, MHD_HTTP_BAD_GATEWAY, "provider_failed",
				  "cannot destroy sandbox: %s", sr__strerror(rc));
	}
	json_object_set_new(s->deleting, q->id, json_true());
	q->op = op;
	suspend(s, q);
	return MHD_YES;
}

static enum MHD_Result dispatch(sr__svc *s, sr__api_req *q, const char *method)
{
	int del = strcmp(method, "DELETE") == 0;

	switch (q->route) {
	case R_HEALTH:
		return health(s, q->conn);
	case R_METRICS:
		return metrics(s, q->conn);
	case R_RUNS:
		return start_run(s, q);
	case R_RUN:
		return del ? run_cancel(s, q->conn, q->id) : run_get(s, q->conn, q->id);
	case R_RUN_EVENTS:
		return run_events(s, q->conn, q->id);
	case R_RUN_PERMS:
		return run_permission(s, q);
	case R_SESSION:
		return del ? session_delete(s, q) : session_get(s, q->conn, q->id);
	default:
		return MHD_NO;
	}
}

/* --------------------------------------------------------- the request */

/* Counts the request's headers of one name (case-insensitive). */
struct header_count {
	const char *name;
	unsigned n;
};

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
				    const char *value)
{
	struct header_count *c = cls;

	(void)kind;
	(void)value;
	if (strcasecmp(key, c->name) == 0)
		c->n++;
	return MHD_YES;
}

/* A header the request must not carry twice: one part of a chain may read
 * the first and another the last (request smuggling, a token checked that
 * is not the one used). */
static int repeated(struct MHD_Connection *conn, const char *name)
{
	struct header_count c = { name, 0 };

	MHD_get_connection_values(conn, MHD_HEADER_KIND, count_header, &c);
	return c.n > 1;
}

/* Everything that can be said from the headers alone. */
static enum MHD_Result headers(sr__svc *s, struct MHD_Connection *conn, const char *url,
			       const char *method, const char *version, void **state)
{
	char id[72] = "";
	enum route route = match(url, id, sizeof(id));
	const char *cl;
	sr__api_req *q;

	/* HTTP/1.1 requires Host (RFC 9112, 3.2); two lengths or two
	 * credentials are ambiguous. */
	if (version && strcmp(version, MHD_HTTP_VERSION_1_1) == 0 &&
	    !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"))
		return send_error(s, conn, MHD_HTTP_BAD_REQUEST, "invalid_request",
				  "an HTTP/1.1 request needs a Host header");
	if (repeated(conn, "Content-Length") || repeated(conn, "Authorization") ||
	    repeated(conn, "Host") || repeated(conn, "Transfer-Encoding"))
		return send_error(s, conn, MHD_HTTP_BAD_REQUEST, "invalid_request",
				  "a header that may appear once appears twice (Content-Length, "
				  "Transfer-Encoding, Authorization or Host)");
	if (route == R_NONE)
		return send_error(s, conn, MHD_HTTP_NOT_FOUND, "not_found", "no route %.200s", url);
	if (!method_ok(route, method)) {
		struct MHD_Response *r;
		json_t *body = error_body("method_not_allowed", "method not allowed here");
		r = json_response(body);
		json_decref(body);
		if (r)
			MHD_add_response_header(r, "Allow", allowed(route));
		return queue(s, conn, MHD_HTTP_METHOD_NOT_ALLOWED, r);
	}
	if (route != R_HEALTH && s->tokens &&
	    !sr__tokens_check(s->tokens, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
								     "Authorization")))
		return send_error(s, conn, MHD_HTTP_UNAUTHORIZED, "unauthorized",
				  "a valid bearer token is required (Authorization: Bearer TOKEN)");
	cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
	if (cl && strtoull(cl, NULL, 10) > s->conf.max_body)
		return send_error(s, conn, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
				  "the body is over %zu bytes ([service] max_body)", s->conf.max_body);
	if (!(q = calloc(1, sizeof(*q))))
		return MHD_NO;
	q->svc = s;
	q->conn = conn;
	q->route = route;
	snprintf(q->id, sizeof(q->id), "%s", id);
	*state = q;
	return MHD_YES;
}

enum MHD_Result sr__api_request(void *cls, struct MHD_Connection *conn, const char *url,
				const char *method, const char *version,
				const char *upload, size_t *upload_size, void **state)
{
	sr__svc *s = cls;
	sr__api_req *q = *state;

	if (!q)
		return headers(s, conn, url, method, version, state);
	if (*upload_size) {
		if (!q->too_big && q->len + *upload_size <= s->conf.max_body) {
			char *g = realloc(q->body, q->len + *upload_size + 1);
			if (!g)
				return MHD_NO;
			q->body = g;
			memcpy(q->body + q->len, upload, *upload_size);
			q->len += *upload_size;
			q->body[q->len] = 0;
		} else {
			q->too_big = 1;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (q->too_big)
		return send_error(s, conn, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
				  "the body is over %zu bytes ([service] max_body)", s->conf.max_body);
	if (!q->dispatched) {
		q->dispatched = 1;
		return dispatch(s, q, method);
	}
	/* Resumed: the operation it waited on answered. */
	if (q->lease && q->lease->answered)
		return leased(s, q);
	if (q->answer) {
		enum MHD_Result ret = send_json(s, conn, q->status, q->answer);
		json_decref(q->answer);
		q->answer = NULL;
		return ret;
	}
	return send_error(s, conn, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
			  "the service is shutting down");
}

void sr__api_completed(void *cls, struct MHD_Connection *conn, void **state,
		       enum MHD_RequestTerminationCode code)
{
	sr__api_req *q = *state;

	(void)cls;
	(void)conn;
	(void)code;
	if (!q)
		return;
	if (q->op)
		q->op->q = NULL;
	if (q->lease && q->lease->answered) { /* gone before it was told */
		sr__svc_lease_settled(q->svc, q->lease->session);
		if (q->lease->rc == SR_OK)
			sr__svc_leases_kick(q->svc);
		sr__svc_request_clear(&q->lease->req);
		free(q->lease);
	} else if (q->lease) {
		q->lease->q = NULL;
	}
	if (q->body) {
		/* It may have carried credentials. */
		volatile char *p = q->body;
		for (size_t i = 0; i < q->len; i++)
			p[i] = 0;
	}
	free(q->body);
	json_decref(q->answer);
	free(q);
	*state = NULL;
}

void sr__api_resume_all(sr__svc *s)
{
	while (s->suspended) {
		sr__api_req *q = s->suspended;
		if (q->op) {
			q->op->q = NULL;
			q->op = NULL;
		}
		if (q->lease && !q->lease->answered) {
			q->lease->q = NULL;
			q->lease = NULL;
		}
		resume(q);
	}
}
