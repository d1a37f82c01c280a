/*
 * The loopback MCP server: Streamable HTTP on 127.0.0.1 for agents that run
 * on the runner's own host. libmicrohttpd runs in epoll mode without a
 * thread of its own: a uv_poll_t watches its epoll descriptor and a
 * uv_timer_t follows MHD_get_timeout. Calls that wait on the relay suspend
 * their connection and resume it when the answer arrives.
 *
 * Checks, in order, before any of the body is read: path, method (405),
 * Origin (403), bearer (401, constant-time compare), Content-Length (413).
 */
#include "config.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "core/host/log.h"
#include "core/tools/mcp_http.h"
#include "shim/mcp_common.h"

#define BODY_MAX 1000000
#define PAGE_SIZE 100

typedef struct req_ctx req_ctx;

struct sr__mcp_http {
	sr__relay *relay;
	const sr__toolset *tools;
	json_t *specs;
	struct MHD_Daemon *daemon;
	uv_poll_t poll;
	uv_timer_t timer;
	int port;
	char token[64];
	char url[64];
	req_ctx *waiting; /* suspended connections */
	sr__secret_holds secrets; /* the token, while the server lives */
	int handles;
	int stopping;
};

struct req_ctx {
	sr__mcp_http *srv;
	struct MHD_Connection *conn;
	char *body;
	size_t len;
	int too_big;
	int started;      /* the body was dispatched */
	int pending;      /* relay answers still to come */
	int suspended;
	json_t *answer;   /* the JSON body to send (object or array) */
	unsigned status;  /* HTTP status of the answer */
	json_t *slots;    /* a batch's answers, in order */
	req_ctx *next;
};

/* ------------------------------------------------------------- helpers */

static void rearm(sr__mcp_http *s);
static void on_timer(uv_timer_t *t);

static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned status,
				 json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(text ? strlen(text) : 0,
					    text ? text : (void *)"",
					    text ? MHD_RESPMEM_MUST_FREE :
						   MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	if (text)
		MHD_add_response_header(r, "Content-Type", "application/json");
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, "Allow", "POST");
	if (status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status,
				  int code, const char *message)
{
	json_t *e = sr_mcp_error(NULL, code, message);
	enum MHD_Result ret = send_json(conn, status, e);

	json_decref(e);
	return ret;
}

/* "Bearer <token>": the scheme in any case (RFC 9110, 11.1), then one or
 * more spaces; the token compared in constant time. */
static int auth_ok(const sr__mcp_http *s, const char *got)
{
	size_t want = strlen(s->token), n;
	unsigned char diff;

	if (!got || strncasecmp(got, "Bearer ", 7) != 0)
		return 0;
	for (got += 7; *got == ' '; got++)
		;
	n = strlen(got);
	diff = (unsigned char)(n != want);
	for (size_t i = 0; i < want; i++)
		diff |= (unsigned char)(s->token[i] ^ (i < n ? got[i] : 0));
	return diff == 0;
}

/* No Origin (a non-browser client), or one on this machine. */
static int origin_ok(const char *origin)
{
	static const char *const hosts[] = { "http://127.0.0.1", "http://localhost",
					     "http://[::1]", NULL };

	if (!origin)
		return 1;
	for (const char *const *h = hosts; *h; h++) {
		size_t n = strlen(*h);
		if (strncasecmp(origin, *h, n) == 0 &&
		    (origin[n] == 0 || origin[n] == ':' || origin[n] == '/'))
			return 1;
	}
	return 0;
}

/* --------------------------------------------------------------- MCP */

static int is_request(json_t *msg)
{
	json_t *id = json_object_get(msg, "id");

	return json_is_string(json_object_get(msg, "method")) && id && !json_is_null(id);
}

static int calls_client_tool(sr__mcp_http *s, json_t *msg)
{
	const char *method = json_string_value(json_object_get(msg, "method"));
	const char *name;
	const sr__tool *t;

	if (!method || strcmp(method, "tools/call") != 0)
		return 0;
	name = json_string_value(json_object_get(json_object_get(msg, "params"), "name"));
	t = sr__tools_find(s->tools, name);
	return t && t->kind == SR_TOOL_CLIENT;
}

typedef struct slot_ref {
	req_ctx *rc;
	size_t index;   /* position in rc->slots, or (size_t)-1: single */
	json_t *id;
} slot_ref;

static void resume_later(req_ctx *rc);

static void store(req_ctx *rc, size_t index, json_t *answer)
{
	if (index == (size_t)-1) {
		json_decref(rc->answer);
		rc->answer = answer;
	} else {
		json_array_set_new(rc->slots, index, answer);
	}
}

/* The relay answered a tools/call. */
static void on_relay_done(void *ud, json_t *response)
{
	slot_ref *ref = ud;
	req_ctx *rc = ref->rc;
	const char *status = json_string_value(json_object_get(response, "status"));
	json_t *result = json_object_get(response, "result");
	json_t *answer;

	if (status && strcmp(status, "ok") == 0 && json_is_object(result))
		answer = sr_mcp_response(ref->id, json_incref(result));
	else if (status && strcmp(status, "paused") == 0)
		answer = sr_mcp_response(ref->id, sr_mcp_text_result(
			json_string_value(json_object_get(response, "message")), 0));
	else
		answer = sr_mcp_response(ref->id, sr_mcp_text_result(
			json_string_value(json_object_get(response, "error")) ?
			json_string_value(json_object_get(response, "error")) :
			"the tool call failed", 1));
	store(rc, ref->index, answer);
	json_decref(ref->id);
	free(ref);
	if (--rc->pending == 0)
		resume_later(rc);
}

/* Answer one message; returns the answer (NULL for a notification) or,
 * for a call that waits on the relay, NULL with rc->pending raised. */
static json_t *handle_one(sr__mcp_http *s, req_ctx *rc, json_t *msg,
			  size_t index, int *deferred)
{
	json_t *id = json_object_get(msg, "id"), *params, *result;
	const char *method = json_string_value(json_object_get(msg, "method"));
	char text[200];

	*deferred = 0;
	if (!json_is_object(msg))
		return sr_mcp_error(NULL, -32600, "Invalid Request");
	if (!method)
		return NULL; /* a response or junk without an id: nothing to say */
	if (!is_request(msg))
		return NULL; /* notification */
	if (!json_is_string(id) && !json_is_integer(id))
		return sr_mcp_error(NULL, -32600, "Invalid Request: id must be a string or number");
	params = json_object_get(msg, "params");
	if (strcmp(method, "initialize") == 0)
		return sr_mcp_response(id, sr_mcp_initialize(params, PACKAGE_VERSION));
	if (strcmp(method, "ping") == 0)
		return sr_mcp_response(id, json_object());
	if (strcmp(method, "tools/list") == 0) {
		result = sr_mcp_tools_page(s->specs, params, PAGE_SIZE);
		return result ? sr_mcp_response(id, result) :
				sr_mcp_error(id, SR_MCP_INVALID_PARAMS, "invalid cursor");
	}
	if (strcmp(method, "tools/call") == 0) {
		const char *name = json_string_value(json_object_get(params, "name"));
		json_t *args = json_object_get(params, "arguments");
		slot_ref *ref;
		if (!name)
			return sr_mcp_error(id, SR_MCP_INVALID_PARAMS, "tools/call needs a tool name");
		if (!sr__tools_find(s->tools, name)) {
			snprintf(text, sizeof(text), "Unknown tool: %.150s", name);
			return sr_mcp_error(id, SR_MCP_INVALID_PARAMS, text);
		}
		if (args && !json_is_object(args) && !json_is_null(args))
			return sr_mcp_error(id, SR_MCP_INVALID_PARAMS,
					    "tools/call arguments must be an object");
		ref = calloc(1, sizeof(*ref));
		if (!ref)
			return sr_mcp_error(id, -32603, "out of memory");
		ref->rc = rc;
		ref->index = index;
		ref->id = json_incref(id);
		rc->pending++;
		*deferred = 1;
		if (sr__relay_call(s->relay, name, json_is_object(args) ? args : NULL,
				   on_relay_done, ref) != SR_OK) {
			rc->pending--;
			*deferred = 0;
			json_decref(ref->id);
			free(ref);
			return sr_mcp_error(id, -32603, "the runner cannot take the call");
		}
		return NULL;
	}
	snprintf(text, sizeof(text), "Method not found: %.150s", method);
	return sr_mcp_error(id, -32601, text);
}

/* The 2026-07-28 era probe: answered 400 with a JSON-RPC error so that the
 * client falls back to initialize. */
static int is_modern_probe(json_t *msg)
{
	const char *method = json_string_value(json_object_get(msg, "method"));
	json_t *meta = json_object_get(json_object_get(msg, "params"), "_meta");
	const char *v = json_string_value(
		json_object_get(meta, "io.modelcontextprotocol/protocolVersion"));

	return (method && strcmp(method, "server/discover") == 0) ||
	       (v && strcmp(v, "2026-01-01") > 0);
}

/* Dispatch the whole body; sets rc->answer/status, or leaves calls
 * pending. */
static void dispatch(sr__mcp_http *s, req_ctx *rc)
{
	json_error_t err;
	json_t *msg = json_loadb(rc->body ? rc->body : "", rc->len, 0, &err);
	int deferred;

	rc->status = MHD_HTTP_OK;
	if (!msg) {
		rc->status = MHD_HTTP_BAD_REQUEST;
		rc->answer = sr_mcp_error(NULL, -32700, "Parse error");
	} else if (json_is_array(msg)) {
		size_t i, n = json_array_size(msg);
		json_t *item;
		if (n == 0) {
			rc->status = MHD_HTTP_BAD_REQUEST;
			rc->answer = sr_mcp_error(NULL, -32600, "Invalid Request: empty batch");
			json_decref(msg);
			return;
		}
		/* Refused whole, before any item runs. */
		json_array_foreach(msg, i, item)
			if (calls_client_tool(s, item)) {
				rc->status = MHD_HTTP_BAD_REQUEST;
				rc->answer = sr_mcp_error(NULL, -32600,
					"Invalid Request: a batch may not call a client tool");
				json_decref(msg);
				return;
			}
		rc->slots = json_array();
		for (i = 0; i < n; i++)
			json_array_append_new(rc->slots, json_null());
		json_array_foreach(msg, i, item) {
			json_t *a = handle_one(s, rc, item, i, &deferred);
			if (a)
				json_array_set_new(rc->slots, i, a);
		}
	} else if (is_modern_probe(msg)) {
		rc->status = MHD_HTTP_BAD_REQUEST;
		rc->answer = sr_mcp_error(json_object_get(msg, "id"), -32601,
			"Method not found: this server speaks protocol revisions up to "
			SR_MCP_LATEST "; use initialize");
	} else {
		/* A call the relay finished at once (a denial, a missing
		 * argument, a client tool) has stored its answer already. */
		json_t *a = handle_one(s, rc, msg, (size_t)-1, &deferred);
		if (a)
			store(rc, (size_t)-1, a);
		else if (!deferred)
			rc->status = MHD_HTTP_ACCEPTED;
	}
	json_decref(msg);
}

/* A batch's final body: its answers without the holes of notifications;
 * all notifications: 202. */
static void finish_batch(req_ctx *rc)
{
	json_t *out, *a;
	size_t i;

	if (!rc->slots)
		return;
	out = json_array();
	json_array_foreach(rc->slots, i, a)
		if (!json_is_null(a))
			json_array_append(out, a);
	json_decref(rc->slots);
	rc->slots = NULL;
	if (json_array_size(out) == 0) {
		json_decref(out);
		rc->status = MHD_HTTP_ACCEPTED;
		return;
	}
	rc->answer = out;
}

static void unlink_waiting(req_ctx *rc)
{
	for (req_ctx **pp = &rc->srv->waiting; *pp; pp = &(*pp)->next)
		if (*pp == rc) {
			*pp = rc->next;
			return;
		}
}

static void resume_later(req_ctx *rc)
{
	if (!rc->suspended)
		return;
	rc->suspended = 0;
	unlink_waiting(rc);
	MHD_resume_connection(rc->conn);
	/* MHD_run on the next loop turn sends the answer. */
	uv_timer_start(&rc->srv->timer, on_timer, 0, 0);
}

static enum MHD_Result respond(req_ctx *rc)
{
	finish_batch(rc);
	if (rc->status == MHD_HTTP_ACCEPTED && !rc->answer)
		return send_json(rc->conn, MHD_HTTP_ACCEPTED, NULL);
	return send_json(rc->conn, rc->status ? rc->status : MHD_HTTP_OK, rc->answer);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_size, void **state)
{
	sr__mcp_http *s = cls;
	req_ctx *rc = *state;
	const char *cl;

	(void)version;
	if (!rc) {
		/* Headers only: everything is checked before the body. */
		if (strcmp(url, "/mcp") != 0)
			return send_error(conn, MHD_HTTP_NOT_FOUND, -32600, "not found: the endpoint is /mcp");
		if (strcmp(method, "POST") != 0)
			return send_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, -32600,
					  "method not allowed: POST only");
		if (!origin_ok(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin")))
			return send_error(conn, MHD_HTTP_FORBIDDEN, -32600, "forbidden origin");
		if (!auth_ok(s, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
							    "Authorization")))
			return send_error(conn, MHD_HTTP_UNAUTHORIZED, -32001,
					  "unauthorized: a valid bearer token is required");
		cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > BODY_MAX)
			return send_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, -32600,
					  "request body over 1000000 bytes");
		rc = calloc(1, sizeof(*rc));
		if (!rc)
			return MHD_NO;
		rc->srv = s;
		rc->conn = conn;
		*state = rc;
		return MHD_YES;
	}
	if (*upload_size) {
		if (!rc->too_big && rc->len + *upload_size <= BODY_MAX) {
			char *g = realloc(rc->body, rc->len + *upload_size + 1);
			if (g) {
				rc->body = g;
				memcpy(rc->body + rc->len, upload, *upload_size);
				rc->len += *upload_size;
			}
		} else {
			rc->too_big = 1;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (rc->too_big)
		return send_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, -32600,
				  "request body over 1000000 bytes");
	if (!rc->started) {
		rc->started = 1;
		dispatch(s, rc);
		if (rc->pending) {
			rc->suspended = 1;
			rc->next = s->waiting;
			s->waiting = rc;
			MHD_suspend_connection(conn);
			return MHD_YES;
		}
	}
	return respond(rc);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **state,
			 enum MHD_RequestTerminationCode code)
{
	req_ctx *rc = *state;

	(void)cls;
	(void)conn;
	(void)code;
	if (!rc)
		return;
	free(rc->body);
	json_decref(rc->answer);
	json_decref(rc->slots);
	free(rc);
	*state = NULL;
}

/* ---------------------------------------------------------- the loop */

static void run_mhd(sr__mcp_http *s)
{
	MHD_run(s->daemon);
	rearm(s);
}

static void on_timer(uv_timer_t *t)
{
	run_mhd(t->data);
}

static void rearm(sr__mcp_http *s)
{
	MHD_UNSIGNED_LONG_LONG ms;

	if (s->stopping)
		return;
	if (MHD_get_timeout(s->daemon, &ms) == MHD_YES)
		uv_timer_start(&s->timer, on_timer, ms, 0);
	else
		uv_timer_start(&s->timer, on_timer, 1000, 0);
}

static void on_poll(uv_poll_t *p, int status, int events)
{
	(void)status;
	(void)events;
	run_mhd(p->data);
}

static void base64url(const unsigned char *in, size_t n, char *out)
{
	static const char a[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t o = 0;

	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)in[i] << 16;
		if (i + 1 < n)
			v |= (unsigned)in[i + 1] << 8;
		if (i + 2 < n)
			v |= in[i + 2];
		out[o++] = a[(v >> 18) & 63];
		out[o++] = a[(v >> 12) & 63];
		if (i + 1 < n)
			out[o++] = a[(v >> 6) & 63];
		if (i + 2 < n)
			out[o++] = a[v & 63];
	}
	out[o] = 0;
}

int sr__mcp_http_start(uv_loop_t *loop, sr__relay *relay,
		       const sr__toolset *tools, sr__mcp_http **out,
		       char *err, size_t errlen)
{
	struct sockaddr_in sa;
	unsigned char rnd[32];
	const union MHD_DaemonInfo *info;
	sr__mcp_http *s;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return SR_ENOMEM;
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		free(s);
		snprintf(err, errlen, "no random bytes for the bearer token");
		return SR_EIO;
	}
	base64url(rnd, sizeof(rnd), s->token);
	sr__secret_hold_in(&s->secrets, s->token);
	s->relay = relay;
	s->tools = tools;
	s->specs = sr__tools_specs(tools);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->daemon = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME,
		0, NULL, NULL, on_request, s,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),
		MHD_OPTION_END);
	if (!s->daemon) {
		json_decref(s->specs);
		sr__secret_holds_release(&s->secrets);
		free(s);
		snprintf(err, errlen, "cannot start the loopback MCP server on 127.0.0.1");
		return SR_EIO;
	}
	info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : 0;
	snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d/mcp", s->port);
	info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
	uv_poll_init(loop, &s->poll, info->epoll_fd);
	uv_timer_init(loop, &s->timer);
	s->poll.data = s->timer.data = s;
	s->handles = 2;
	uv_poll_start(&s->poll, UV_READABLE, on_poll);
	rearm(s);
	*out = s;
	return SR_OK;
}

const char *sr__mcp_http_url(const sr__mcp_http *s)
{
	return s->url;
}

const char *sr__mcp_http_token(const sr__mcp_http *s)
{
	return s->token;
}

static void on_closed(uv_handle_t *h)
{
	sr__mcp_http *s = h->data;

	if (--s->handles == 0)
		free(s);
}

void sr__mcp_http_stop(sr__mcp_http *s)
{
	if (!s)
		return;
	/* Suspended connections must be resumed before MHD stops. */
	while (s->waiting) {
		req_ctx *rc = s->waiting;
		s->waiting = rc->next;
		rc->suspended = 0;
		rc->pending = 0;
		json_decref(rc->slots);
		rc->slots = NULL;
		json_decref(rc->answer);
		rc->answer = sr_mcp_error(NULL, -32603, "the runner is shutting down");
		rc->status = MHD_HTTP_SERVICE_UNAVAILABLE;
		MHD_resume_connection(rc->conn);
	}
	MHD_run(s->daemon);
	s->stopping = 1;
	MHD_stop_daemon(s->daemon);
	json_decref(s->specs);
	sr__secret_holds_release(&s->secrets); /* no request can show it now */
	uv_poll_stop(&s->poll);
	uv_timer_stop(&s->timer);
	uv_close((uv_handle_t *)&s->poll, on_closed);
	uv_close((uv_handle_t *)&s->timer, on_closed);
}
