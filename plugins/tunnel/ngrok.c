/* ngrok tunnel plugin: a runner-side service made reachable through the
 * ngrok agent already running on this host, driven through the agent's
 * local API (GET/POST /api/tunnels, DELETE /api/tunnels/NAME).
 *
 * resolve finds the tunnel whose config.addr forwards to the service (in
 * any of the agent's forms: "9000", "localhost:9000",
 * "http://localhost:9000"), preferring an https public URL; when there is
 * none and [tunnel.ngrok] create is on (the default), it creates one.
 * release removes only the tunnels this process created. The agent's
 * authtoken stays the agent's: the plugin never sees it. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sandrun/plugin.h"

#define DEFAULT_API "http://127.0.0.1:4040"
#define API_TIMEOUT_MS 10000

typedef struct created {
	char *name;
	struct created *next;
} created;

typedef struct ngrok {
	const sr_host *h;
	char *api;          /* without a trailing slash */
	int create;         /* create a tunnel when none forwards to the service */
	created *made;      /* by this process, for release */
	struct op *ops;     /* in flight, for cancel and fini */
} ngrok;

enum { OP_START, OP_RESOLVE, OP_RELEASE, OP_DOCTOR };

typedef struct op {
	ngrok *n;
	int kind;
	uint64_t req;
	sr_done_fn done;
	void *ud;
	char *scheme, *host; /* the service, for resolve */
	char *path;          /* its path and query, kept in the public URL */
	int port;
	int posted;          /* resolve: the create was sent */
	char *name;          /* the tunnel being created or deleted */
	sr_http_call *call;
	struct op *next;
} op;

/* ------------------------------------------------------------ addresses */

static int default_port(const char *scheme)
{
	return strcasecmp(scheme, "https") == 0 ? 443 : 80;
}

/* Split an agent or service address into scheme, host and port: "9000",
 * "host:9000", "scheme://host[:port][/...]" ("[::1]:9000" too). */
static int split_addr(const char *addr, char *scheme, size_t sn, char *host,
		      size_t hn, int *port)
{
	const char *p = strstr(addr, "://"), *h, *end, *colon;
	size_t len;
	char *e;

	snprintf(scheme, sn, "http");
	if (p) {
		if ((size_t)(p - addr) >= sn || p == addr)
			return -1;
		memcpy(scheme, addr, (size_t)(p - addr));
		scheme[p - addr] = 0;
		h = p + 3;
	} else {
		h = addr;
	}
	if (!p && strspn(h, "0123456789") == strlen(h) && *h) {
		snprintf(host, hn, "localhost");
		*port = (int)strtol(h, NULL, 10);
		return *port > 0 && *port < 65536 ? 0 : -1;
	}
	if (*h == '[') {
		if (!(end = strchr(h, ']')))
			return -1;
		h++;
		colon = end[1] == ':' ? end + 1 : NULL;
	} else {
		end = h + strcspn(h, ":/?#");
		colon = *end == ':' ? end : NULL;
	}
	len = (size_t)(end - h);
	if (!len || len >= hn)
		return -1;
	memcpy(host, h, len);
	host[len] = 0;
	if (colon) {
		long v = strtol(colon + 1, &e, 10);
		if (e == colon + 1 || v <= 0 || v > 65535 || (*e && !strchr("/?#", *e)))
			return -1;
		*port = (int)v;
	} else {
		*port = default_port(scheme);
	}
	return 0;
}

static int is_loopback(const char *host)
{
	return strcasecmp(host, "localhost") == 0 || strcmp(host, "127.0.0.1") == 0 ||
	       strcmp(host, "::1") == 0;
}

static int same_host(const char *a, const char *b)
{
	return strcasecmp(a, b) == 0 || (is_loopback(a) && is_loopback(b));
}

/* ------------------------------------------------------------------ ops */

static op *op_new(ngrok *n, int kind, uint64_t req, sr_done_fn done, void *ud)
{
	op *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->n = n;
	o->kind = kind;
	o->req = req;
	o->done = done;
	o->ud = ud;
	o->next = n->ops;
	n->ops = o;
	return o;
}

static void op_free(op *o)
{
	for (op **p = &o->n->ops; *p; p = &(*p)->next)
		if (*p == o) {
			*p = o->next;
			break;
		}
	free(o->scheme);
	free(o->host);
	free(o->name);
	free(o->path);
	free(o);
}

/* The one way an op ends: done exactly once, then the op is gone. */
static void op_end(op *o, int status, const char *json, const char *message)
{
	sr_result r = { .size = sizeof(r), .status = status, .json = json,
			.message = message };
	sr_done_fn done = o->done;
	void *ud = o->ud;

	op_free(o);
	done(ud, &r);
}

static void op_fail(op *o, int status, const char *fmt, ...) SR_PRINTF(3, 4);
static void op_fail(op *o, int status, const char *fmt, ...)
{
	char msg[700];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	op_end(o, status, NULL, msg);
}

static int api_call(op *o, const char *method, const char *path, const char *body,
		    sr_done_fn cb)
{
	static const sr_pair json_headers[] = { { "Content-Type", "application/json" } };
	char url[1024];
	sr_http_request req = {
		.size = sizeof(req),
		.method = method,
		.url = url,
		.headers = body ? json_headers : NULL,
		.n_headers = body ? 1 : 0,
		.body = body,
		.body_len = body ? strlen(body) : 0,
		.timeout_ms = API_TIMEOUT_MS,
		.max_response = (size_t)1024 * 1024,
	};

	snprintf(url, sizeof(url), "%s%s", o->n->api, path);
	return o->n->h->http_request(o->n->h, &req, cb, o, &o->call);
}

/* The HTTP status of an answer, 0 when there was none. */
static long http_status(const sr_result *r)
{
	json_t *j;
	long s;

	if (r->status != SR_OK)
		return 0;
	j = json_loads(r->json ? r->json : "", 0, NULL);
	s = (long)json_integer_value(json_object_get(j, "status"));
	json_decref(j);
	return s;
}

/* The agent's error for a failed call, into buf. */
static const char *api_error(ngrok *n, const sr_result *r, char *buf, size_t len)
{
	long s = http_status(r);
	json_t *b;

	if (r->status == SR_ECONNREFUSED) {
		snprintf(buf, len, "no ngrok agent answers at %s (start one with 'ngrok start "
			 "--none', or set [tunnel.ngrok] api_url)", n->api);
	} else if (r->status != SR_OK) {
		snprintf(buf, len, "the ngrok agent at %s: %s", n->api,
			 r->message ? r->message : n->h->strerror(r->status));
	} else {
		b = json_loadb(r->data ? r->data : "", r->len, 0, NULL);
		snprintf(buf, len, "the ngrok agent at %s answered HTTP %ld%s%s", n->api, s,
			 json_string_value(json_object_get(b, "msg")) ? ": " : "",
			 json_string_value(json_object_get(b, "msg")) ?
			 json_string_value(json_object_get(b, "msg")) : "");
		json_decref(b);
	}
	return buf;
}

static int fail_status(const sr_result *r)
{
	return r->status != SR_OK ? r->status : SR_EHTTP;
}

/* The tunnels array of a GET /api/tunnels answer (a new reference). */
static json_t *tunnels_of(const sr_result *r)
{
	json_t *b = json_loadb(r->data ? r->data : "", r->len, 0, NULL);
	json_t *t = json_incref(json_object_get(b, "tunnels"));

	json_decref(b);
	if (!json_is_array(t)) {
		json_decref(t);
		return NULL;
	}
	return t;
}

/* ---------------------------------------------------------------- start */

static void on_listed_start(void *ud, const sr_result *r)
{
	op *o = ud;
	char err[600];
	json_t *t;

	o->call = NULL;
	if (http_status(r) != 200) {
		op_fail(o, fail_status(r), "%s", api_error(o->n, r, err, sizeof(err)));
		return;
	}
	if (!(t = tunnels_of(r))) {
		op_fail(o, SR_EPROTO, "the ngrok agent at %s answered /api/tunnels "
		       "without a tunnels array", o->n->api);
		return;
	}
	if (o->kind == OP_DOCTOR) {
		char detail[700];
		json_t *j;
		char *s;
		snprintf(detail, sizeof(detail), "ngrok agent at %s with %zu tunnel%s", o->n->api,
			 json_array_size(t), json_array_size(t) == 1 ? "" : "s");
		j = json_pack("{s:b, s:s}", "ok", 1, "detail", detail);
		s = j ? json_dumps(j, JSON_COMPACT) : NULL;
		json_decref(j);
		json_decref(t);
		op_end(o, s ? SR_OK : SR_ENOMEM, s, s ? NULL : "out of memory");
		free(s);
		return;
	}
	json_decref(t);
	op_end(o, SR_OK, NULL, NULL);
}

static int ng_start(void *self, uint64_t req, sr_done_fn done, void *ud)
{
	op *o = op_new(self, OP_START, req, done, ud);
	int rc;

	if (!o)
		return SR_ENOMEM;
	if ((rc = api_call(o, "GET", "/api/tunnels", NULL, on_listed_start)) != SR_OK)
		op_free(o);
	return rc;
}

/* -------------------------------------------------------------- resolve */

static int remember(ngrok *n, const char *name)
{
	created *c = calloc(1, sizeof(*c));

	if (!c || !(c->name = strdup(name))) {
		free(c);
		return SR_ENOMEM;
	}
	c->next = n->made;
	n->made = c;
	return SR_OK;
}

static void forget(ngrok *n, const char *name)
{
	for (created **p = &n->made; *p; p = &(*p)->next)
		if (strcmp((*p)->name, name) == 0) {
			created *c = *p;
			*p = c->next;
			free(c->name);
			free(c);
			return;
		}
}

/* Where the service's path and query start in url ("" when it has none). */
static const char *path_of(const char *url)
{
	const char *p = strstr(url, "://");

	p = p ? p + 3 : url;
	return p + strcspn(p, "/?#");
}

/* The public URL reaches the service's own URL: ngrok forwards a request's
 * path as it came, and its public_url has none (the agent API docs, "List
 * Tunnels"), so the service's path and query are appended. */
static void answer_url(op *o, const char *url)
{
	size_t n = strlen(url), pn = strlen(o->path);
	char *full = malloc(n + pn + 1);
	json_t *j;

	if (!full) {
		op_fail(o, SR_ENOMEM, "out of memory");
		return;
	}
	if (n && url[n - 1] == '/' && o->path[0] == '/')
		n--;
	snprintf(full, n + pn + 1, "%.*s%s", (int)n, url, o->path);
	j = json_pack("{s:s}", "url", full);
	free(full);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	json_decref(j);
	if (!s) {
		op_fail(o, SR_ENOMEM, "out of memory");
		return;
	}
	op_end(o, SR_OK, s, NULL);
	free(s);
}

static void on_created(void *ud, const sr_result *r)
{
	op *o = ud;
	char err[600];
	json_t *b;
	const char *url, *name;

	o->call = NULL;
	if (http_status(r) != 201 && http_status(r) != 200) {
		/* Cancelled after the request went out, the agent may still
		 * make it: it stays recorded, for release (a 404 is fine). */
		if (r->status != SR_ECANCELED)
			forget(o->n, o->name);
		op_fail(o, fail_status(r), "could not create a tunnel to %s://%s:%d: %s",
		       o->scheme, o->host, o->port, api_error(o->n, r, err, sizeof(err)));
		return;
	}
	b = json_loadb(r->data ? r->data : "", r->len, 0, NULL);
	url = json_string_value(json_object_get(b, "public_url"));
	name = json_string_value(json_object_get(b, "name"));
	if (!url || !name) {
		json_decref(b);
		op_fail(o, SR_EPROTO, "the ngrok agent at %s created a tunnel without a "
		       "name or public_url", o->n->api);
		return;
	}
	if (strcmp(name, o->name) != 0 && remember(o->n, name) != SR_OK) {
		json_decref(b);
		op_fail(o, SR_ENOMEM, "out of memory");
		return;
	}
	o->n->h->log(o->n->h, SR_LOG_INFO, "created ngrok tunnel '%s' to %s://%s:%d: %s", name,
		     o->scheme, o->host, o->port, url);
	answer_url(o, url);
	json_decref(b);
}

static void create_tunnel(op *o)
{
	unsigned char rnd[4];
	char name[80], addr[300];
	json_t *j;
	char *body;
	int rc;

	if (o->n->h->random_bytes(o->n->h, rnd, sizeof(rnd)) != SR_OK) {
		op_fail(o, SR_EIO, "no random bytes for a tunnel name");
		return;
	}
	snprintf(name, sizeof(name), "sandrun-%d-%02x%02x%02x%02x", o->port, rnd[0], rnd[1],
		 rnd[2], rnd[3]);
	snprintf(addr, sizeof(addr), strchr(o->host, ':') ? "%s://[%s]:%d" : "%s://%s:%d",
		 o->scheme, o->host, o->port);
	j = json_pack("{s:s, s:s, s:s}", "addr", addr, "proto", "http", "name", name);
	body = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!body) {
		op_fail(o, SR_ENOMEM, "out of memory");
		return;
	}
	/* Recorded before it is asked for: whatever happens to this call,
	 * release deletes it. */
	if (!(o->name = strdup(name)) || remember(o->n, name) != SR_OK) {
		free(body);
		op_fail(o, SR_ENOMEM, "out of memory");
		return;
	}
	o->posted = 1;
	rc = api_call(o, "POST", "/api/tunnels", body, on_created);
	free(body);
	if (rc != SR_OK) {
		forget(o->n, name);
		op_fail(o, rc, "could not ask the ngrok agent at %s for a tunnel", o->n->api);
	}
}

static void on_listed_resolve(void *ud, const sr_result *r)
{
	op *o = ud;
	char err[600], scheme[16], host[256];
	const char *best = NULL;
	json_t *t, *e;
	size_t i;
	int port;

	o->call = NULL;
	if (http_status(r) != 200) {
		op_fail(o, fail_status(r), "%s", api_error(o->n, r, err, sizeof(err)));
		return;
	}
	if (!(t = tunnels_of(r))) {
		op_fail(o, SR_EPROTO, "the ngrok agent at %s answered /api/tunnels "
		       "without a tunnels array", o->n->api);
		return;
	}
	json_array_foreach(t, i, e) {
		const char *addr = json_string_value(json_object_get(json_object_get(e, "config"),
								     "addr"));
		const char *url = json_string_value(json_object_get(e, "public_url"));
		if (!addr || !url || split_addr(addr, scheme, sizeof(scheme), host, sizeof(host),
						&port) != 0)
			continue;
		if (port != o->port || !same_host(host, o->host) || strcasecmp(scheme, o->scheme) != 0)
			continue;
		if (!best || (strncmp(url, "https://", 8) == 0 && strncmp(best, "https://", 8) != 0))
			best = url;
	}
	if (best) {
		answer_url(o, best);
	} else if (!o->n->create) {
		op_fail(o, SR_ENOTFOUND, "no tunnel of the ngrok agent at %s forwards to "
		       "%s://%s:%d, and [tunnel.ngrok] create is off", o->n->api, o->scheme,
		       o->host, o->port);
	} else {
		create_tunnel(o);
	}
	json_decref(t);
}

static int ng_resolve(void *self, uint64_t req, const char *local_url, sr_done_fn done,
		      void *ud)
{
	ngrok *n = self;
	char scheme[16], host[256];
	int port, rc;
	op *o;

	if (!local_url || !strstr(local_url, "://") ||
	    split_addr(local_url, scheme, sizeof(scheme), host, sizeof(host), &port) != 0 ||
	    (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0)) {
		n->h->log(n->h, SR_LOG_ERROR, "'%s' is not an http(s) URL with a host",
			  local_url ? local_url : "");
		return SR_EINVAL;
	}
	if (!(o = op_new(n, OP_RESOLVE, req, done, ud)))
		return SR_ENOMEM;
	if (!(o->scheme = strdup(scheme)) || !(o->host = strdup(host)) ||
	    !(o->path = strndup(path_of(local_url), strcspn(path_of(local_url), "#")))) {
		op_free(o);
		return SR_ENOMEM;
	}
	for (char *p = o->scheme; *p; p++)
		*p = (char)(*p | 0x20);
	o->port = port;
	if ((rc = api_call(o, "GET", "/api/tunnels", NULL, on_listed_resolve)) != SR_OK)
		op_free(o);
	return rc;
}

/* -------------------------------------------------------------- release */

static void release_next(op *o);

static void on_deleted(void *ud, const sr_result *r)
{
	op *o = ud;
	long s = http_status(r);
	char err[600];

	o->call = NULL;
	if (s != 204 && s != 200 && s != 404) {
		op_fail(o, fail_status(r), "could not delete ngrok tunnel '%s': %s", o->name,
		       api_error(o->n, r, err, sizeof(err)));
		return;
	}
	forget(o->n, o->name);
	release_next(o);
}

static void release_next(op *o)
{
	char path[200];
	int rc;

	if (!o->n->made) {
		op_end(o, SR_OK, NULL, NULL);
		return;
	}
	free(o->name);
	if (!(o->name = strdup(o->n->made->name))) {
		op_fail(o, SR_ENOMEM, "out of memory");
		return;
	}
	snprintf(path, sizeof(path), "/api/tunnels/%s", o->name);
	if ((rc = api_call(o, "DELETE", path, NULL, on_deleted)) != SR_OK)
		op_fail(o, rc, "could not ask the ngrok agent at %s to delete a tunnel",
		       o->n->api);
}

static int ng_release(void *self, uint64_t req, const char *sandbox_id, sr_done_fn done,
		      void *ud)
{
	ngrok *n = self;
	sr_result r = { .size = sizeof(r), .status = SR_OK };
	char path[200];
	op *o;
	int rc;

	/* Tunnels are the runner's, not a sandbox's: nothing per sandbox. */
	if (sandbox_id || !n->made)
		return n->h->complete(n->h, done, ud, &r);
	if (!(o = op_new(n, OP_RELEASE, req, done, ud)))
		return SR_ENOMEM;
	if (!(o->name = strdup(n->made->name))) {
		op_free(o);
		return SR_ENOMEM;
	}
	snprintf(path, sizeof(path), "/api/tunnels/%s", o->name);
	if ((rc = api_call(o, "DELETE", path, NULL, on_deleted)) != SR_OK)
		op_free(o);
	return rc;
}

static int ng_cancel(void *self, uint64_t req)
{
	ngrok *n = self;

	for (op *o = n->ops; o; o = o->next)
		if (o->req == req && o->call) {
			/* Runs the op's callback, which ends it with SR_ECANCELED. */
			n->h->http_cancel(o->call);
			return SR_OK;
		}
	return SR_ENOTFOUND;
}

static int ng_doctor(void *self, sr_done_fn done, void *ud)
{
	op *o = op_new(self, OP_DOCTOR, 0, done, ud);
	int rc;

	if (!o)
		return SR_ENOMEM;
	if ((rc = api_call(o, "GET", "/api/tunnels", NULL, on_listed_start)) != SR_OK)
		op_free(o);
	return rc;
}

/* ------------------------------------------------------------ lifecycle */

static int ng_init(const sr_host *h, void **self)
{
	const char *api = h->config_get(h, "api_url");
	const char *create = h->config_get(h, "create");
	ngrok *n;
	size_t len;

	if (api && strncmp(api, "http://", 7) != 0 && strncmp(api, "https://", 8) != 0)
		return h->config_invalid(h, "api_url", "an http(s) URL of the ngrok agent's API");
	if (create && strcmp(create, "yes") != 0 && strcmp(create, "no") != 0 &&
	    strcmp(create, "true") != 0 && strcmp(create, "false") != 0)
		return h->config_invalid(h, "create", "yes or no");
	if (!(n = calloc(1, sizeof(*n))) || !(n->api = strdup(api ? api : DEFAULT_API))) {
		free(n);
		return SR_ENOMEM;
	}
	len = strlen(n->api);
	while (len && n->api[len - 1] == '/')
		n->api[--len] = 0;
	n->h = h;
	n->create = !create || strcmp(create, "yes") == 0 || strcmp(create, "true") == 0;
	*self = n;
	return SR_OK;
}

static void ng_fini(void *self)
{
	ngrok *n = self;

	while (n->ops) {
		op *o = n->ops;
		if (o->call)
			n->h->http_cancel(o->call); /* ends it */
		else
			op_fail(o, SR_ECANCELED, "the plugin is stopping");
	}
	while (n->made) {
		created *c = n->made;
		n->h->log(n->h, SR_LOG_INFO, "ngrok tunnel '%s' is left in place", c->name);
		n->made = c->next;
		free(c->name);
		free(c);
	}
	free(n->api);
	free(n);
}

static const sr_tunnel_ops ngrok_ops = {
	.size = sizeof(sr_tunnel_ops),
	.start = ng_start,
	.resolve = ng_resolve,
	.release = ng_release,
	.cancel = ng_cancel,
};

static const char *const ngrok_keys[] = { "api_url", "create", NULL };

static const sr_plugin_descriptor ngrok_descriptor = {
	.abi_major = SR_ABI_MAJOR,
	.abi_minor = SR_ABI_MINOR,
	.size = sizeof(sr_plugin_descriptor),
	.kind = SR_PLUGIN_TUNNEL,
	.name = "ngrok",
	.version = "0.1.0",
	.description = "runner-side services through the local ngrok agent's tunnels",
	.ops = &ngrok_ops,
	.config_keys = ngrok_keys,
	.init = ng_init,
	.fini = ng_fini,
	.doctor = ng_doctor,
};

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &ngrok_descriptor;
}
