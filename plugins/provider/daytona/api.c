/* Daytona API calls through the host table, and the lifecycle of one
 * provider operation: a chain of calls and waits that ends in exactly one
 * call of done, never from inside the ABI call that started it (an op
 * that finishes while that call is still on the stack is delivered with
 * host->complete). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daytona.h"

uint64_t dy__now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Percent-encoding of a query value; '/' stays (paths read better). The
 * caller frees the result. */
char *dy__urlenc(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(strlen(s) * 3 + 1), *o = out;

	if (!out)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~/", *p)) {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	*o = 0;
	return out;
}

/* s in single quotes for a POSIX shell. The caller frees the result. */
char *dy__shq(const char *s)
{
	size_t n = 3;
	char *out, *o;

	for (const char *p = s; *p; p++)
		n += *p == '\'' ? 4 : 1;
	if (!(out = malloc(n)))
		return NULL;
	o = out;
	*o++ = '\'';
	for (const char *p = s; *p; p++) {
		if (*p == '\'') {
			memcpy(o, "'\\''", 4);
			o += 4;
		} else {
			*o++ = *p;
		}
	}
	*o++ = '\'';
	*o = 0;
	return out;
}

/* The status an HTTP error answer becomes. */
int dy__http_error(int http)
{
	switch (http) {
	case 400: return SR_EINVAL;
	case 401: case 403: return SR_EPERM;
	case 404: return SR_ENOTFOUND;
	case 409: case 410: return SR_ESTATE;
	case 413: return SR_ETOOBIG;
	case 422: return SR_EUNSUPPORTED;
	default: return SR_EHTTP;
	}
}

/* A 400 about the sandbox's state is a state error, not bad input. */
int dy__http_fail_status(int http, const char *why)
{
	if (http == 400 && why && (strstr(why, "state") || strstr(why, "started")))
		return SR_ESTATE;
	return dy__http_error(http);
}

/* The message of an error body (API and toolbox shapes alike), borrowed. */
const char *dy__body_message(json_t *j)
{
	json_t *m = json_object_get(j, "message");

	if (json_is_array(m))
		m = json_array_get(m, 0);
	if (json_is_string(m))
		return json_string_value(m);
	m = json_object_get(j, "error");
	return json_is_string(m) ? json_string_value(m) : NULL;
}

/* An absolute URL under the API base. The caller frees it. */
char *dy__url(const dy *d, const char *fmt, ...)
{
	char path[2048];
	char *url;
	size_t base;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(path))
		return NULL;
	base = strlen(d->api_url);
	if (!(url = malloc(base + (size_t)n + 1)))
		return NULL;
	memcpy(url, d->api_url, base);
	memcpy(url + base, path, (size_t)n + 1);
	return url;
}

void dy__headers(const dy *d, sr_pair *h, size_t *n, const char *ctype)
{
	static char auth[4200];

	/* The key is registered for redaction at init; it never reaches a
	 * log line through us either. */
	snprintf(auth, sizeof(auth), "Bearer %s", d->api_key);
	*n = 0;
	h[(*n)++] = (sr_pair){ "Authorization", auth };
	h[(*n)++] = (sr_pair){ "X-Daytona-Source", "sandrun" };
	if (ctype)
		h[(*n)++] = (sr_pair){ "Content-Type", ctype };
}

/* Where a path lands in the sandbox: relative ones under the workspace.
 * The caller frees the result. */
char *dy__path_in_box(dy *d, const char *id, const char *path)
{
	dy_box *b = dy__box(d, id);
	const char *ws = b && b->workspace ? b->workspace : d->workspace;
	char *out;

	if (path && path[0] == '/')
		return strdup(path);
	if (!ws)
		return NULL;
	if (!path || !*path)
		return strdup(ws);
	if (!(out = malloc(strlen(ws) + strlen(path) + 2)))
		return NULL;
	sprintf(out, "%s/%s", ws, path);
	return out;
}

/* ------------------------------------------------------------ boxes */

dy_box *dy__box(dy *d, const char *id)
{
	for (dy_box *b = d->boxes; b; b = b->next)
		if (strcmp(b->id, id) == 0)
			return b;
	return NULL;
}

const char *dy__box_toolbox(dy *d, const char *id)
{
	dy_box *b = dy__box(d, id);

	return b ? b->toolbox : NULL;
}

void dy__box_forget(dy *d, const char *id)
{
	for (dy_box **pp = &d->boxes; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->id, id) == 0) {
			dy_box *b = *pp;
			*pp = b->next;
			free(b->id);
			free(b->toolbox);
			free(b->home);
			free(b->workspace);
			free(b);
			return;
		}
	}
}

void dy__box_set(dy *d, const char *id, json_t *rec)
{
	const char *tb = json_string_value(json_object_get(rec, "toolboxProxyUrl"));
	dy_box *b;
	size_t n;

	char *url;

	if (!tb || !*tb)
		return;
	n = strlen(tb);
	while (n && tb[n - 1] == '/')
		n--;
	if (!(url = malloc(n + strlen(id) + 2)))
		return;
	sprintf(url, "%.*s/%s", (int)n, tb, id);
	if ((b = dy__box(d, id))) {
		free(b->toolbox);
		b->toolbox = url;
		return;
	}
	if (!(b = calloc(1, sizeof(*b))) || !(b->id = strdup(id))) {
		free(b);
		free(url);
		return;
	}
	b->toolbox = url;
	b->next = d->boxes;
	d->boxes = b;
}

/* --------------------------------------------------------------- ops */

dy_op *dy__op_new(dy *d, int kind, uint64_t req, const char *id,
		  sr_done_fn done, void *ud)
{
	dy_op *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->d = d;
	op->kind = kind;
	op->req = req;
	op->done = done;
	op->ud = ud;
	op->in_call = 1;
	op->delay_ms = 250;
	op->started_ms = dy__now_ms();
	if (id && !(op->id = strdup(id))) {
		free(op);
		return NULL;
	}
	op->next_op = d->ops;
	d->ops = op;
	return op;
}

void dy__op_free(dy_op *op)
{
	for (dy_op **pp = &op->d->ops; *pp; pp = &(*pp)->next_op) {
		if (*pp == op) {
			*pp = op->next_op;
			break;
		}
	}
	if (op->timer)
		op->d->host->timer_stop(op->timer);
	dy__sec_end(op);
	dy__sec_free(op->sec);
	free(op->id);
	free(op->path);
	free(op->path2);
	free(op->net_cidrs);
	free(op->net_domains);
	free(op->last_state);
	json_decref(op->body);
	json_decref(op->rec);
	json_decref(op->acc);
	if (op->xfree)
		op->xfree(op->xdata);
	free(op);
}

/* At the end of the ABI call that started op: a call that could not be
 * sent is the call's error (done never runs); otherwise the op runs on. */
int dy__op_start(dy_op *op, int rc)
{
	if (op->zombie) {
		dy__op_free(op);
		return SR_OK;
	}
	if (rc == SR_OK)
		rc = op->start_rc;
	if (rc != SR_OK) {
		dy__op_free(op);
		return rc;
	}
	op->in_call = 0;
	return SR_OK;
}

void dy__op_finish(dy_op *op, int status, const char *json, const void *data,
		   size_t len, const char *fmt, ...)
{
	const sr_host *h = op->d->host;
	char msg[1024];
	sr_result r = { sizeof(r), status, NULL, json, data, len };
	va_list ap;

	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		r.message = msg;
		if (status != SR_OK && status != SR_ECANCELED)
			h->log(h, SR_LOG_DEBUG, "%s", msg);
	}
	/* Unlinked first: done may start another operation. */
	for (dy_op **pp = &op->d->ops; *pp; pp = &(*pp)->next_op) {
		if (*pp == op) {
			*pp = op->next_op;
			break;
		}
	}
	op->next_op = NULL;
	if (!op->done) {
		/* The plugin is being unloaded: nobody waits. */
		dy__op_free(op);
		return;
	}
	if (op->in_call || op->canceled) {
		if (h->complete(h, op->done, op->ud, &r) != SR_OK)
			h->log(h, SR_LOG_ERROR, "cannot deliver a result: out of memory");
		if (op->in_call) {
			op->zombie = 1;
			return;
		}
	} else {
		op->done(op->ud, &r);
	}
	/* dy__op_free unlinks again: harmless, it is no longer listed. */
	dy__op_free(op);
}

/* The op fails with the answer r: status and message naming the sandbox,
 * the call and the HTTP status. */
void dy__op_fail(dy_op *op, const dy_resp *r)
{
	char who[200] = "";
	int status;

	if (op->id)
		snprintf(who, sizeof(who), "sandbox '%s': ", op->id);
	if (r->status != SR_OK) {
		dy__op_finish(op, r->status, NULL, NULL, 0, "daytona: %s%s: %s", who, op->what,
			      r->why ? r->why : op->d->host->strerror(r->status));
		return;
	}
	status = dy__http_fail_status(r->http, r->why);
	dy__op_finish(op, status, NULL, NULL, 0, "daytona: %s%s: HTTP %d%s%s", who, op->what,
		      r->http, r->why ? ": " : "", r->why ? r->why : "");
}

/* "METHOD /path" of url, without host and query, for messages. */
static void describe_call(dy_op *op, const char *method, const char *url)
{
	const char *p = strstr(url, "://");
	size_t n;

	p = p ? strchr(p + 3, '/') : NULL;
	if (!p)
		p = url;
	n = strcspn(p, "?");
	snprintf(op->what_buf, sizeof(op->what_buf), "%s %.*s", method, (int)n, p);
	op->what = op->what_buf;
}

static void on_api(void *ud, const sr_result *res)
{
	dy_op *op = ud;
	dy_resp r = { 0 };
	json_t *meta = NULL;
	char *body = NULL;

	op->call = NULL;
	if (op->canceled || res->status == SR_ECANCELED) {
		op->canceled = 1;
		dy__op_finish(op, SR_ECANCELED, NULL, NULL, 0, "daytona: %s: cancelled",
			      op->what);
		return;
	}
	r.status = res->status;
	r.why = res->message;
	if (res->status == SR_OK) {
		meta = json_loads(res->json ? res->json : "{}", 0, NULL);
		r.http = (int)json_integer_value(json_object_get(meta, "status"));
		body = malloc(res->len + 1);
		if (body) {
			if (res->len)
				memcpy(body, res->data, res->len);
			body[res->len] = 0;
		}
		r.body = body;
		r.len = res->len;
		if (res->len)
			r.json = json_loadb(res->data, res->len, 0, NULL);
		r.why = (r.http >= 300) ? dy__body_message(r.json) : NULL;
		if (r.http >= 300 && !r.why && body && *body && res->len < 300 &&
		    !strchr(body, '<'))
			r.why = body;
	}
	op->next(op, &r);
	json_decref(r.json);
	json_decref(meta);
	free(body);
}

/* Send one call; op->next gets its answer. On a failure to send, an op
 * still inside its ABI call returns the status through dy__op_start; a
 * running one finishes with it. Callers return right after. */
int dy__api(dy_op *op, const char *method, const char *url,
	    const char *ctype, const void *body, size_t len, size_t max,
	    dy_step next)
{
	const sr_host *h = op->d->host;
	sr_pair hdr[4];
	sr_http_request rq = { sizeof(rq), method, url, hdr, 0, body, len,
			       op->d->request_timeout_ms, max };
	int rc;

	describe_call(op, method, url);
	dy__headers(op->d, hdr, &rq.n_headers, ctype);
	op->next = next;
	rc = h->http_request(h, &rq, on_api, op, &op->call);
	if (rc != SR_OK) {
		op->call = NULL;
		if (op->in_call)
			op->start_rc = rc;
		else
			dy__op_finish(op, rc, NULL, NULL, 0, "daytona: %s%s%s: cannot send: %s",
				      op->id ? "sandbox '" : "", op->id ? op->id : "",
				      op->id ? "'" : "", h->strerror(rc));
	}
	return rc;
}

/* A call with a JSON body (NULL: none). body is borrowed. */
int dy__api_json(dy_op *op, const char *method, const char *url, json_t *body,
		 dy_step next)
{
	char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
	int rc;

	if (body && !s) {
		if (op->in_call)
			op->start_rc = SR_ENOMEM;
		else
			dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return SR_ENOMEM;
	}
	rc = dy__api(op, method, url, s ? "application/json" : NULL, s, s ? strlen(s) : 0,
		     0, next);
	free(s);
	return rc;
}

static void on_wait(void *ud)
{
	dy_op *op = ud;

	op->d->host->timer_stop(op->timer);
	op->timer = NULL;
	op->next(op, NULL);
}

/* Wait ms, then op->next(op, NULL). */
int dy__wait(dy_op *op, uint64_t ms, dy_step next)
{
	const sr_host *h = op->d->host;

	op->next = next;
	op->timer = h->timer_start(h, ms, 0, on_wait, op);
	if (!op->timer) {
		if (op->in_call)
			op->start_rc = SR_ENOMEM;
		else
			dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: cannot start a timer");
		return SR_ENOMEM;
	}
	return SR_OK;
}

/* ops->cancel: done runs with SR_ECANCELED, on the next loop turn. */
void dy__op_cancel(dy_op *op)
{
	op->canceled = 1;
	if (op->call) {
		sr_http_call *c = op->call;
		op->call = NULL;
		/* on_api runs from inside http_cancel and finishes op. */
		op->d->host->http_cancel(c);
		return;
	}
	dy__op_finish(op, SR_ECANCELED, NULL, NULL, 0, "daytona: %s%s%s: cancelled",
		      op->id ? "sandbox '" : "operation", op->id ? op->id : "",
		      op->id ? "'" : "");
}

int dy__complete_now(const dy *d, sr_done_fn done, void *ud, int status,
		     const char *fmt, ...)
{
	char msg[1024];
	sr_result r = { sizeof(r), status, msg, NULL, NULL, 0 };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return d->host->complete(d->host, done, ud, &r);
}

/* ------------------------------------------------------ the toolbox */

static void toolbox_got(dy_op *op, const dy_resp *r)
{
	dy_step next = op->after_toolbox;

	if (r->status != SR_OK || r->http != 200) {
		dy__op_fail(op, r);
		return;
	}
	dy__box_set(op->d, op->id, r->json);
	if (!dy__box_toolbox(op->d, op->id)) {
		dy__op_finish(op, SR_EPROTO, NULL, NULL, 0,
			      "daytona: sandbox '%s': its record has no toolboxProxyUrl", op->id);
		return;
	}
	dy__ensure_home(op, next);
}

static int set_paths(dy *d, dy_box *b, const char *home)
{
	free(b->home);
	free(b->workspace);
	b->home = strdup(d->home ? d->home : home);
	if (d->workspace) {
		b->workspace = strdup(d->workspace);
	} else if (b->home && (b->workspace = malloc(strlen(b->home) + 16))) {
		sprintf(b->workspace, "%s/workspace", strcmp(b->home, "/") ? b->home : "");
	}
	return b->home && b->workspace ? SR_OK : SR_ENOMEM;
}

static void home_got(dy_op *op, const dy_resp *r)
{
	const char *dir = json_string_value(json_object_get(r->json, "dir"));
	dy_box *b = dy__box(op->d, op->id);

	if (r->status != SR_OK || r->http != 200) {
		dy__op_fail(op, r);
		return;
	}
	if (!dir || dir[0] != '/' || !b) {
		dy__op_finish(op, SR_EPROTO, NULL, NULL, 0,
			      "daytona: sandbox '%s': %s: no absolute 'dir' in the answer", op->id,
			      op->what);
		return;
	}
	if (set_paths(op->d, b, dir) != SR_OK) {
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return;
	}
	op->after_toolbox(op, NULL);
}

/* Run next once the sandbox's home and workspace are known: configured,
 * or the toolbox's user-home-dir. The toolbox URL must be known. */
int dy__ensure_home(dy_op *op, dy_step next)
{
	dy_box *b = dy__box(op->d, op->id);
	char *url;
	int in = op->in_call, rc;

	op->after_toolbox = next;
	if (b && !b->workspace && op->d->home && op->d->workspace &&
	    set_paths(op->d, b, op->d->home) != SR_OK)
		b = NULL;
	if (b && b->workspace) {
		next(op, NULL);
		return in ? op->start_rc : SR_OK;
	}
	if (!b || !(url = malloc(strlen(b->toolbox) + 32))) {
		if (op->in_call)
			op->start_rc = SR_ENOMEM;
		else
			dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return SR_ENOMEM;
	}
	sprintf(url, "%s/user-home-dir", b->toolbox);
	rc = dy__api(op, "GET", url, NULL, NULL, 0, 0, home_got);
	free(url);
	return rc;
}

/* Run next once the sandbox's toolbox URL is known (from the cache or
 * its record). */
int dy__with_toolbox(dy_op *op, dy_step next)
{
	char *url;
	int rc;

	if (dy__box_toolbox(op->d, op->id))
		return dy__ensure_home(op, next);
	op->after_toolbox = next;
	if (!(url = dy__url(op->d, "/sandbox/%s", op->id))) {
		if (op->in_call)
			op->start_rc = SR_ENOMEM;
		else
			dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return SR_ENOMEM;
	}
	rc = dy__api(op, "GET", url, NULL, NULL, 0, 0, toolbox_got);
	free(url);
	return rc;
}

/* ---------------------------------------------- fire and forget */

struct dy_ff {
	dy *d;
	sr_http_call *call;
	char what[200];
	struct dy_ff *next;
};
typedef struct dy_ff ff;

static void ff_done(void *ud, const sr_result *r)
{
	ff *f = ud;
	json_t *meta = r->json ? json_loads(r->json, 0, NULL) : NULL;
	int http = (int)json_integer_value(json_object_get(meta, "status"));

	for (ff **pp = &f->d->ffs; *pp; pp = &(*pp)->next) {
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	}

	if ((r->status != SR_OK && r->status != SR_ECANCELED) || http >= 300)
		f->d->host->log(f->d->host, SR_LOG_DEBUG, "%s: %s (HTTP %d)", f->what,
				r->status != SR_OK ? f->d->host->strerror(r->status) : "failed",
				http);
	json_decref(meta);
	free(f);
}

/* A best-effort call whose answer only reaches the debug log. */
int dy__fire_and_forget(dy *d, const char *method, const char *url, json_t *body)
{
	sr_pair hdr[4];
	char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
	sr_http_request rq = { sizeof(rq), method, url, hdr, 0, s, s ? strlen(s) : 0,
			       d->request_timeout_ms, 0 };
	ff *f = calloc(1, sizeof(*f));
	int rc;

	if (!f) {
		free(s);
		return SR_ENOMEM;
	}
	f->d = d;
	snprintf(f->what, sizeof(f->what), "%s %s", method, url);
	dy__headers(d, hdr, &rq.n_headers, s ? "application/json" : NULL);
	rc = d->host->http_request(d->host, &rq, ff_done, f, &f->call);
	if (rc != SR_OK) {
		free(f);
	} else {
		f->next = d->ffs;
		d->ffs = f;
	}
	free(s);
	return rc;
}

/* At fini: the answers are not waited for. */
void dy__ff_cancel_all(dy *d)
{
	while (d->ffs)
		d->host->http_cancel(d->ffs->call); /* ff_done unlinks it */
}
