/* sandrun run --server URL: the turn on sandrund (doc/api.yaml). POST
 * /v1/runs streams the run's events, shown as an in-process run's are;
 * permission answers from standard input go to /permissions, Ctrl-C to
 * DELETE; the exit code is the run's (its summary's exit_code). */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli/cli.h"
#include "core/cli/run_ui.h"
#include "core/host/http.h"
#include "core/host/log.h"
#include "core/run/run.h"

#define ERROR_BODY_MAX 65536
#define STREAM_IDLE_MS (24ull * 3600 * 1000) /* a run may wait long for an answer */

typedef struct client {
	sr__run_ui view;         /* first: the hooks get it */
	uv_loop_t *loop;
	sr__http *http;
	const char *server;
	char base[1024];         /* the service's URL, no trailing slash */
	char auth[600];          /* "Bearer TOKEN", or "" */
	char run[64];            /* the run's id, once an event named it */
	int status;              /* the POST's HTTP status */
	char *body;              /* an error answer's body */
	size_t body_len;
	char *partial;           /* a line not yet ended */
	size_t partial_len;
	int streaming;           /* the POST is going on */
	int stream_rc;           /* its outcome */
	char stream_msg[300];
	int cancel_wanted, cancel_sent;
	int deny;                /* no one answers any more */
	json_t *pending;         /* permission requests not answered: {id: true} */
	int side;                /* other requests going on */
	json_t *last_end;        /* the last run.finished or run.failed */
	int exit_code;
	int have_exit;
	uv_signal_t sigint, sigterm;
} client;

/* A side request's context. */
typedef struct side_req {
	client *c;
	int kind;                /* SIDE_* */
	char id[80];             /* the permission request's id */
} side_req;

enum { SIDE_PERMISSION, SIDE_CANCEL, SIDE_SUMMARY };

static void side(client *c, int kind, const char *method, const char *path, json_t *body,
		 const char *id);

/* -------------------------------------------------------------- events */

static void answer_deny_pending(client *c)
{
	const char *id;
	json_t *v;
	void *tmp;

	json_object_foreach_safe(c->pending, tmp, id, v) {
		json_t *body = json_pack("{s:s, s:b}", "request_id", id, "allow", 0);
		char path[200];
		snprintf(path, sizeof(path), "/v1/runs/%s/permissions", c->run);
		side(c, SIDE_PERMISSION, "POST", path, body, id);
		json_decref(body);
		json_object_del(c->pending, id);
	}
}

static void send_cancel(client *c)
{
	char path[120];

	if (!c->cancel_wanted || c->cancel_sent || !c->run[0])
		return;
	c->cancel_sent = 1;
	snprintf(path, sizeof(path), "/v1/runs/%s", c->run);
	side(c, SIDE_CANCEL, "DELETE", path, NULL, NULL);
}

static void on_event(client *c, json_t *ev)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	const char *run = json_string_value(json_object_get(ev, "run"));

	if (run && !c->run[0]) {
		snprintf(c->run, sizeof(c->run), "%s", run);
		send_cancel(c); /* Ctrl-C before the run had a name */
	}
	if (type && (strcmp(type, "run.finished") == 0 || strcmp(type, "run.failed") == 0)) {
		json_decref(c->last_end);
		c->last_end = json_incref(ev);
	}
	if (type && strcmp(type, "permission.request") == 0 &&
	    json_string_value(json_object_get(ev, "request_id"))) {
		json_object_set_new(c->pending, json_string_value(json_object_get(ev, "request_id")),
				    json_true());
		if (c->deny)
			answer_deny_pending(c);
	}
	sr__run_ui_event(&c->view, ev);
}

static void on_line(client *c, const char *line, size_t len)
{
	json_t *ev = json_loadb(line, len, 0, NULL);

	if (json_is_object(ev))
		on_event(c, ev);
	else if (len)
		sr__log(SR_LOG_WARN, "run", "the service sent a line that is not a JSON object");
	json_decref(ev);
}

/* --------------------------------------------------------- the stream */

static void on_headers(void *ud, int status, const char *headers_json)
{
	client *c = ud;

	(void)headers_json;
	c->status = status;
}

static void keep_body(client *c, const void *data, size_t len)
{
	char *g;

	if (c->body_len + len > ERROR_BODY_MAX)
		return;
	if (!(g = realloc(c->body, c->body_len + len + 1)))
		return;
	c->body = g;
	memcpy(c->body + c->body_len, data, len);
	c->body_len += len;
	c->body[c->body_len] = 0;
}

static void on_chunk(void *ud, const void *data, size_t len)
{
	client *c = ud;
	const char *p = data, *end = p + len, *nl;

	if (c->status != 200) {
		keep_body(c, data, len);
		return;
	}
	while (p < end && (nl = memchr(p, '\n', (size_t)(end - p)))) {
		if (c->partial_len) {
			char *g = realloc(c->partial, c->partial_len + (size_t)(nl - p));
			if (g) {
				memcpy(g + c->partial_len, p, (size_t)(nl - p));
				on_line(c, g, c->partial_len + (size_t)(nl - p));
				c->partial = g;
			}
			c->partial_len = 0;
		} else {
			on_line(c, p, (size_t)(nl - p));
		}
		p = nl + 1;
	}
	if (p < end) {
		char *g = realloc(c->partial, c->partial_len + (size_t)(end - p));
		if (g) {
			memcpy(g + c->partial_len, p, (size_t)(end - p));
			c->partial = g;
			c->partial_len += (size_t)(end - p);
		}
	}
}

static void on_stream_done(void *ud, const sr_result *r)
{
	client *c = ud;

	c->streaming = 0;
	c->stream_rc = r->status;
	snprintf(c->stream_msg, sizeof(c->stream_msg), "%s", r->message ? r->message : "");
	if (c->partial_len && c->status == 200)
		on_line(c, c->partial, c->partial_len);
	c->partial_len = 0;
	uv_stop(c->loop); /* see run_until */
}

/* ------------------------------------------------------ side requests */

static void headers_for(client *c, sr_pair *h, size_t *n, int with_body)
{
	*n = 0;
	if (c->auth[0])
		h[(*n)++] = (sr_pair){ "Authorization", c->auth };
	if (with_body)
		h[(*n)++] = (sr_pair){ "Content-Type", "application/json" };
}

/* The message of an error answer ({"error": {"message"}}), or its text. */
static char *error_text(const void *data, size_t len)
{
	json_t *j = json_loadb(data ? data : "", len, 0, NULL);
	const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
	char *out = strndup(m ? m : data ? (const char *)data : "", m ? strlen(m) : len);

	json_decref(j);
	return out;
}

static void on_side_done(void *ud, const sr_result *r)
{
	side_req *q = ud;
	client *c = q->c;
	json_t *meta = r->json ? json_loads(r->json, 0, NULL) : NULL;
	int status = (int)json_integer_value(json_object_get(meta, "status"));
	char *msg;

	json_decref(meta);
	c->side--;
	if (r->status != SR_OK) {
		sr__log(SR_LOG_WARN, "run", "the service did not answer: %s",
			r->message ? r->message : "request failed");
	} else if (q->kind == SIDE_SUMMARY && status == 200) {
		json_t *sum = json_loadb(r->data ? r->data : "", r->len, 0, NULL);
		json_t *code = json_object_get(sum, "exit_code");
		if (json_is_integer(code)) {
			c->exit_code = (int)json_integer_value(code);
			c->have_exit = 1;
		}
		json_decref(sum);
	} else if (status >= 300) {
		msg = error_text(r->data, r->len);
		if (q->kind == SIDE_PERMISSION && status == 404)
			sr__log(SR_LOG_WARN, "run", "no permission request '%s' is waiting", q->id);
		else
			sr__log(SR_LOG_WARN, "run", "the service answered %d: %s", status,
				msg ? msg : "");
		free(msg);
	}
	free(q);
	uv_stop(c->loop); /* see run_until */
}

static void side(client *c, int kind, const char *method, const char *path, json_t *body,
		 const char *id)
{
	side_req *q = calloc(1, sizeof(*q));
	char url[1300], *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	sr_pair h[2];
	sr_http_request req;
	size_t n;

	if (!q) {
		free(text);
		return;
	}
	q->c = c;
	q->kind = kind;
	snprintf(q->id, sizeof(q->id), "%s", id ? id : "");
	snprintf(url, sizeof(url), "%s%s", c->base, path);
	headers_for(c, h, &n, text != NULL);
	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.method = method;
	req.url = url;
	req.headers = h;
	req.n_headers = n;
	req.body = text;
	req.body_len = text ? strlen(text) : 0;
	c->side++;
	/* Returns NULL after calling on_side_done when it cannot start. */
	sr__http_request(c->http, &req, on_side_done, q);
	free(text);
}

/* ------------------------------------------------------------- the ui */

static int answer_remote(sr__run_ui *v, const char *id, int allow)
{
	client *c = (client *)v;
	json_t *body;
	char path[200];

	if (!c->run[0])
		return SR_ENOTFOUND;
	json_object_del(c->pending, id);
	body = json_pack("{s:s, s:b}", "request_id", id, "allow", allow);
	snprintf(path, sizeof(path), "/v1/runs/%s/permissions", c->run);
	side(c, SIDE_PERMISSION, "POST", path, body, id);
	json_decref(body);
	return SR_OK; /* a refusal is reported when the answer comes */
}

static void deny_remote(sr__run_ui *v)
{
	client *c = (client *)v;

	c->deny = 1;
	if (c->run[0])
		answer_deny_pending(c);
}

static void on_signal(uv_signal_t *s, int signum)
{
	client *c = s->data;

	(void)signum;
	c->cancel_wanted = 1;
	send_cancel(c);
}

/* ------------------------------------------------------------ command */

/* The first token of a tokens file (blank lines and # comments skipped). */
static int read_token(const char *path, char *out, size_t n)
{
	FILE *f = fopen(path, "re");
	char *line = NULL, *p, *e;
	size_t cap = 0;
	int found = 0;

	if (!f)
		return 0;
	while (!found && getline(&line, &cap, f) >= 0) {
		for (p = line; *p == ' ' || *p == '\t'; p++)
			;
		for (e = p + strlen(p); e > p && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' ||
						  e[-1] == '\t'); e--)
			;
		*e = 0;
		if (*p && *p != '#' && strlen(p) < n) {
			snprintf(out, n, "%s", p);
			found = 1;
		}
	}
	if (line)
		memset(line, 0, cap);
	free(line);
	fclose(f);
	return found;
}

static int set_server(client *c, const char *server)
{
	size_t n;

	if (strncmp(server, "unix:", 5) == 0 && server[5] == '/') {
		if (sr__http_set_unix_socket(c->http, server + 5) != SR_OK)
			return 0;
		snprintf(c->base, sizeof(c->base), "http://localhost");
		return 1;
	}
	if (strncmp(server, "http://", 7) != 0 && strncmp(server, "https://", 8) != 0)
		return 0;
	n = strlen(server);
	while (n > 8 && server[n - 1] == '/')
		n--;
	if (n >= sizeof(c->base) - 64)
		return 0;
	snprintf(c->base, sizeof(c->base), "%.*s", (int)n, server);
	return 1;
}

/* The exit code for a refused POST. */
static int refused(client *c)
{
	char *msg = error_text(c->body, c->body_len);

	fprintf(stderr, "sandrun run: %s refused the run (HTTP %d): %s\n", c->server, c->status,
		msg && *msg ? msg : "no reason given");
	free(msg);
	switch (c->status) {
	case 401:
	case 403:
		return SR_EXIT_CONFIG;
	case 409:
	case 429:
	case 503:
		return SR_RUN_EXIT_RETRY;
	case 400:
	case 404:
	case 405:
	case 413:
		return SR_EXIT_USAGE;
	default:
		return SR_EXIT_UNAVAILABLE;
	}
}

/* Without the summary: what the last event says. */
static int code_from_events(client *c)
{
	json_t *e = c->last_end;
	const char *type = json_string_value(json_object_get(e, "type"));
	const char *reason = json_string_value(json_object_get(e, "stop_reason"));
	const char *phase = json_string_value(json_object_get(e, "phase"));

	if (!type)
		return SR_RUN_EXIT_FAILED;
	if (strcmp(type, "run.finished") == 0)
		return reason && strcmp(reason, "cancelled") == 0 ? SR_RUN_EXIT_CANCELLED :
								    SR_RUN_EXIT_OK;
	if (phase && strcmp(phase, "plan") == 0)
		return SR_RUN_EXIT_REFUSED;
	return json_is_true(json_object_get(e, "retryable")) ? SR_RUN_EXIT_RETRY :
							       SR_RUN_EXIT_FAILED;
}

static void start_stream(client *c, json_t *body)
{
	static const sr_http_stream_callbacks cbs = { sizeof(cbs), on_headers, on_chunk,
						      on_stream_done };
	char url[1300], *text = json_dumps(body, JSON_COMPACT);
	sr_pair h[3];
	sr_http_request req;
	size_t n;

	snprintf(url, sizeof(url), "%s/v1/runs", c->base);
	headers_for(c, h, &n, 1);
	h[n++] = (sr_pair){ "Accept", "application/x-ndjson" };
	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.method = "POST";
	req.url = url;
	req.headers = h;
	req.n_headers = n;
	req.body = text;
	req.body_len = text ? strlen(text) : 0;
	req.timeout_ms = STREAM_IDLE_MS;
	req.max_response = (size_t)1 << 40;
	c->streaming = 1;
	/* On a failure to start, done has run already (streaming is 0). */
	sr__http_stream(c->http, &req, &cbs, c);
	free(text);
}

/* Run the loop while *flag_zero or a side request is going on. Each of
 * their ends calls uv_stop: an end that comes in UV_RUN_ONCE's timers,
 * before its poll, would otherwise leave the poll to block for good (only
 * the signal handles would be left). */
static void run_until(client *c, int *flag_zero)
{
	while ((*flag_zero || c->side) && uv_run(c->loop, UV_RUN_ONCE))
		;
}

int sr__run_on_server(const char *server, const char *token_file, json_t *body,
		      int json)
{
	client c;
	char token[520] = "", path[120];
	const char *env = getenv("SANDRUN_TOKEN");
	int rc, zero = 0;

	memset(&c, 0, sizeof(c));
	sr__run_ui_init(&c.view, json);
	c.view.answer = answer_remote;
	c.view.deny_all = deny_remote;
	c.server = server;
	c.loop = uv_default_loop();
	c.pending = json_object();
	if (token_file && !read_token(token_file, token, sizeof(token))) {
		fprintf(stderr, "sandrun run: --token-file %s: no token in it (or cannot read it)\n",
			token_file);
		rc = SR_EXIT_USAGE;
		goto out;
	}
	if (!token[0] && env && *env)
		snprintf(token, sizeof(token), "%s", env);
	if (token[0]) {
		snprintf(c.auth, sizeof(c.auth), "Bearer %s", token);
		sr__secret_register(token);
		memset(token, 0, sizeof(token));
	}
	if (!(c.http = sr__http_new(c.loop)) || !set_server(&c, server)) {
		fprintf(stderr, "sandrun run: --server '%s': expected http://HOST:PORT, "
			"https://HOST[:PORT] or unix:/PATH\n", server);
		rc = SR_EXIT_USAGE;
		goto out;
	}
	uv_signal_init(c.loop, &c.sigint);
	uv_signal_init(c.loop, &c.sigterm);
	c.sigint.data = c.sigterm.data = &c;
	uv_signal_start(&c.sigint, on_signal, SIGINT);
	uv_signal_start(&c.sigterm, on_signal, SIGTERM);
	if (strcmp(json_string_value(json_object_get(body, "permission_mode")), "ask") == 0)
		sr__run_ui_start_input(&c.view, c.loop);
	start_stream(&c, body);
	run_until(&c, &c.streaming);
	sr__run_ui_stop_input(&c.view);
	if (c.stream_rc != SR_OK) {
		if (c.run[0])
			fprintf(stderr, "sandrun run: lost the stream of run %s: %s; the run goes on "
				"(GET %s/v1/runs/%s/events?after=N replays it)\n", c.run, c.stream_msg,
				c.base, c.run);
		else
			fprintf(stderr, "sandrun run: cannot reach sandrund at %s: %s\n", server,
				c.stream_msg);
		rc = SR_EXIT_UNAVAILABLE;
	} else if (c.status != 200) {
		rc = refused(&c);
	} else if (!c.run[0]) {
		fprintf(stderr, "sandrun run: %s sent no event naming a run\n", server);
		rc = SR_EXIT_UNAVAILABLE;
	} else {
		snprintf(path, sizeof(path), "/v1/runs/%s", c.run);
		side(&c, SIDE_SUMMARY, "GET", path, NULL, NULL);
		run_until(&c, &zero);
		rc = c.have_exit ? c.exit_code : code_from_events(&c);
	}
	uv_close((uv_handle_t *)&c.sigint, NULL);
	uv_close((uv_handle_t *)&c.sigterm, NULL);
out:
	if (c.http)
		sr__http_free(c.http);
	uv_run(c.loop, UV_RUN_NOWAIT);
	sr__run_ui_clear(&c.view);
	json_decref(c.pending);
	json_decref(c.last_end);
	free(c.body);
	free(c.partial);
	memset(c.auth, 0, sizeof(c.auth));
	return rc;
}
