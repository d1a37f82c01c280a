/* Newline-delimited JSON-RPC 2.0 in both directions (the ACP transport). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/run/acp.h"
#include "sandrun/plugin.h"

#define LINE_MAX_BYTES (16u << 20)

typedef struct pending {
	json_int_t id;
	char method[64];
	sr__acp_reply_fn fn;
	void *ud;
	uv_timer_t *timer;
	sr__acp *a;
	struct pending *next;
} pending;

struct sr__acp {
	uv_loop_t *loop;
	sr__acp_handlers h;
	void *ud;
	char *buf;
	size_t len, cap;
	int broken;
	json_int_t next_id;
	pending *pending;
};

sr__acp *sr__acp_new(uv_loop_t *loop, const sr__acp_handlers *h, void *ud)
{
	sr__acp *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->loop = loop;
	a->h = *h;
	a->ud = ud;
	return a;
}

static void on_timer_closed(uv_handle_t *t)
{
	free(t);
}

static pending *take(sr__acp *a, json_int_t id)
{
	for (pending **pp = &a->pending; *pp; pp = &(*pp)->next)
		if ((*pp)->id == id) {
			pending *p = *pp;
			*pp = p->next;
			if (p->timer) {
				uv_timer_stop(p->timer);
				uv_close((uv_handle_t *)p->timer, on_timer_closed);
			}
			return p;
		}
	return NULL;
}

static void fail_all(sr__acp *a, const char *message)
{
	while (a->pending) {
		pending *p = take(a, a->pending->id);
		p->fn(p->ud, NULL, NULL, message);
		free(p);
	}
}

void sr__acp_free(sr__acp *a)
{
	if (!a)
		return;
	fail_all(a, "closed");
	free(a->buf);
	free(a);
}

size_t sr__acp_pending(const sr__acp *a)
{
	size_t n = 0;

	for (pending *p = a->pending; p; p = p->next)
		n++;
	return n;
}

static int send_msg(sr__acp *a, json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	size_t n;
	int rc;

	json_decref(msg);
	if (!text)
		return SR_ENOMEM;
	n = strlen(text);
	text[n] = '\n'; /* json_dumps left room for the NUL */
	rc = a->h.write(a->ud, text, n + 1);
	free(text);
	return rc;
}

static void on_timeout(uv_timer_t *t)
{
	pending *p = t->data;
	sr__acp *a = p->a;
	char msg[160];

	p = take(a, p->id);
	if (!p)
		return;
	snprintf(msg, sizeof(msg), "no answer to %s in time", p->method);
	p->fn(p->ud, NULL, NULL, msg);
	free(p);
}

int sr__acp_request(sr__acp *a, const char *method, json_t *params,
		    uint64_t timeout_ms, sr__acp_reply_fn fn, void *ud)
{
	pending *p = calloc(1, sizeof(*p));
	json_t *msg;
	int rc;

	if (!p) {
		json_decref(params);
		return SR_ENOMEM;
	}
	p->id = a->next_id++;
	snprintf(p->method, sizeof(p->method), "%s", method);
	p->fn = fn;
	p->ud = ud;
	p->a = a;
	msg = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", p->id,
			"method", method, "params", params ? params : json_object());
	p->next = a->pending;
	a->pending = p;
	if (timeout_ms) {
		p->timer = malloc(sizeof(*p->timer));
		if (!p->timer) {
			p = take(a, p->id);
			free(p);
			json_decref(msg);
			return SR_ENOMEM;
		}
		uv_timer_init(a->loop, p->timer);
		p->timer->data = p;
		uv_timer_start(p->timer, on_timeout, timeout_ms, 0);
	}
	rc = send_msg(a, msg);
	if (rc != SR_OK) {
		p = take(a, p->id);
		free(p);
	}
	return rc;
}

int sr__acp_notify(sr__acp *a, const char *method, json_t *params)
{
	return send_msg(a, json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method",
				     method, "params", params ? params : json_object()));
}

int sr__acp_respond(sr__acp *a, json_t *id, json_t *result)
{
	return send_msg(a, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id,
				     "result", result ? result : json_null()));
}

int sr__acp_respond_error(sr__acp *a, json_t *id, int code,
			  const char *message)
{
	return send_msg(a, json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0",
				     "id", id, "error", "code", code, "message",
				     message));
}

static void dispatch(sr__acp *a, const char *line, size_t len)
{
	json_error_t err;
	json_t *msg = json_loadb(line, len, 0, &err), *id;
	const char *method;

	if (!json_is_object(msg)) {
		/* Adapters log to stderr; anything else on stdout is a bug of
		 * theirs, reported but not fatal. */
		if (a->h.protocol_error)
			a->h.protocol_error(a->ud, "a line from the agent is not a JSON-RPC message");
		json_decref(msg);
		return;
	}
	id = json_object_get(msg, "id");
	method = json_string_value(json_object_get(msg, "method"));
	if (method && id && !json_is_null(id)) {
		a->h.request(a->ud, id, method, json_object_get(msg, "params"));
	} else if (method) {
		a->h.notification(a->ud, method, json_object_get(msg, "params"));
	} else if (json_is_integer(id)) {
		pending *p = take(a, json_integer_value(id));
		json_t *error = json_object_get(msg, "error");
		if (p) {
			p->fn(p->ud, error ? NULL : json_object_get(msg, "result"),
			      error, NULL);
			free(p);
		}
	}
	json_decref(msg);
}

void sr__acp_feed(sr__acp *a, const char *data, size_t len)
{
	size_t start = 0;

	if (a->broken)
		return;
	for (size_t i = 0; i < len; i++) {
		if (data[i] != '\n')
			continue;
		if (a->len) {
			if (a->len + (i - start) > LINE_MAX_BYTES)
				goto too_long;
			if (a->len + (i - start) + 1 > a->cap) {
				size_t cap = a->len + (i - start) + 1;
				char *g = realloc(a->buf, cap);
				if (!g)
					goto too_long;
				a->buf = g;
				a->cap = cap;
			}
			memcpy(a->buf + a->len, data + start, i - start);
			a->len += i - start;
			dispatch(a, a->buf, a->len);
			a->len = 0;
		} else if (i > start) {
			dispatch(a, data + start, i - start);
		}
		start = i + 1;
	}
	if (start < len) {
		size_t rest = len - start;
		if (a->len + rest > LINE_MAX_BYTES)
			goto too_long;
		if (a->len + rest > a->cap) {
			size_t cap = (a->len + rest) * 2;
			char *g = realloc(a->buf, cap);
			if (!g)
				goto too_long;
			a->buf = g;
			a->cap = cap;
		}
		memcpy(a->buf + a->len, data + start, rest);
		a->len += rest;
	}
	return;
too_long:
	a->broken = 1;
	if (a->h.protocol_error)
		a->h.protocol_error(a->ud, "a message from the agent is over 16 MiB");
	fail_all(a, "the agent sent a message over 16 MiB");
}

void sr__acp_closed(sr__acp *a, const char *message)
{
	fail_all(a, message);
}
