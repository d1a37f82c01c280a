/* The host table: core services passed to plugins, never linked by them. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <unistd.h>

#include <jansson.h>

#include "core/plugins/complete.h"
#include "core/host/ctx.h"
#include "core/host/fsutil.h"
#include "core/plugins/host.h"
#include "core/host/http.h"
#include "core/host/kv.h"
#include "core/host/log.h"
#include "core/host/proc.h"
#include "core/host/status.h"

static sr__host_priv *priv(const sr_host *h)
{
	return (sr__host_priv *)h; /* pub is the first member */
}

static void h_log(const sr_host *h, int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sr__logv(level, priv(h)->plugin->section, fmt, ap);
	va_end(ap);
}

static void h_secret_register(const sr_host *h, const char *value)
{
	(void)h;
	sr__secret_register(value);
}

static void h_secret_hold(const sr_host *h, const char *value)
{
	(void)h;
	/* Without memory to count it, it is kept for good. */
	if (sr__secret_hold(value) != 0)
		sr__secret_register(value);
}

static void h_secret_release(const sr_host *h, const char *value)
{
	(void)h;
	sr__secret_release(value);
}

static int h_open_beneath(const sr_host *h, int dirfd, const char *path, int flags,
			  unsigned mode, unsigned how)
{
	(void)h;
	return sr__open_beneath(dirfd, path, flags, mode, how);
}

static const char *h_config_get(const sr_host *h, const char *key)
{
	sr__host_priv *p = priv(h);

	return sr__config_get(p->ctx->config, p->plugin->section, key);
}

static int h_config_invalid(const sr_host *h, const char *key,
			    const char *why)
{
	sr__host_priv *p = priv(h);

	return sr__config_invalid(p->ctx->config, p->plugin->section, key, why);
}

static const char *h_state_dir(const sr_host *h)
{
	return sr__ctx_state_dir(priv(h)->ctx);
}

static const char *h_plugin_dir(const sr_host *h)
{
	sr__host_priv *p = priv(h);
	const char *state = sr__ctx_state_dir(p->ctx);
	size_t n;

	if (p->plugin_dir)
		return p->plugin_dir;
	if (!state)
		return NULL;
	n = strlen(state) + strlen(p->plugin->section) + 16;
	p->plugin_dir = malloc(n);
	if (!p->plugin_dir)
		return NULL;
	snprintf(p->plugin_dir, n, "%s/plugins/%s", state, p->plugin->section);
	if (sr__mkdirs(p->plugin_dir, 0700) != SR_OK) {
		sr__log(SR_LOG_ERROR, p->plugin->section, "cannot create %s: %s",
			p->plugin_dir, strerror(errno));
		free(p->plugin_dir);
		p->plugin_dir = NULL;
	}
	return p->plugin_dir;
}

/* ------------------------------------------------------------ timers */

struct sr_timer {
	uv_timer_t t;
	sr_timer_fn fn;
	void *ud;
};

static void on_timer(uv_timer_t *t)
{
	sr_timer *st = t->data;

	st->fn(st->ud);
}

static sr_timer *h_timer_start(const sr_host *h, uint64_t after_ms,
			       uint64_t repeat_ms, sr_timer_fn fn, void *ud)
{
	sr_timer *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	uv_timer_init(priv(h)->ctx->loop, &t->t);
	t->t.data = t;
	t->fn = fn;
	t->ud = ud;
	uv_timer_start(&t->t, on_timer, after_ms, repeat_ms);
	return t;
}

static void on_timer_closed(uv_handle_t *h)
{
	free(h->data);
}

static void h_timer_stop(sr_timer *t)
{
	if (!t)
		return;
	uv_timer_stop(&t->t);
	uv_close((uv_handle_t *)&t->t, on_timer_closed);
}

/* -------------------------------------------------------------- http */

/* The core's HTTP client calls back from inside the call when a request
 * cannot start; a plugin gets that as an error return instead (the
 * completion rule), the reason logged. */
typedef struct http_hold {
	const sr_host *h;
	sr_done_fn done;
	void *ud;
	int in_call, failed;
	sr_http_stream_callbacks stream; /* the plugin's, for streams */
} http_hold;

/* A stream's headers and chunks go to the plugin's own ud, not the hold. */
static void http_held_headers(void *ud, int http_status, const char *headers_json)
{
	http_hold *hold = ud;

	if (hold->stream.on_headers)
		hold->stream.on_headers(hold->ud, http_status, headers_json);
}

static void http_held_chunk(void *ud, const void *data, size_t len)
{
	http_hold *hold = ud;

	if (hold->stream.on_chunk)
		hold->stream.on_chunk(hold->ud, data, len);
}

static void http_held_done(void *ud, const sr_result *r)
{
	http_hold *hold = ud;

	if (hold->in_call) {
		hold->failed = r->status != SR_OK ? r->status : SR_EIO;
		sr__log(SR_LOG_WARN, priv(hold->h)->plugin->section, "HTTP request not started: %s",
			r->message ? r->message : sr__strerror(r->status));
		return;
	}
	hold->done(hold->ud, r);
	free(hold);
}

static int http_start(const sr_host *h, const sr_http_request *req,
		      const sr_http_stream_callbacks *stream, sr_done_fn done,
		      void *ud, sr_http_call **out)
{
	sr__ctx *ctx = priv(h)->ctx;
	sr_http_stream_callbacks held_stream;
	http_hold *hold;
	sr_http_call *c;
	int rc;

	*out = NULL;
	if (!sr__ctx_http(ctx)) {
		sr__log(SR_LOG_WARN, priv(h)->plugin->section,
			"HTTP unavailable: cannot load " SR_LIBCURL_SONAME);
		return SR_ENETWORK;
	}
	if (!(hold = calloc(1, sizeof(*hold))))
		return SR_ENOMEM;
	hold->h = h;
	hold->done = done;
	hold->ud = ud;
	hold->in_call = 1;
	if (stream) {
		hold->stream = *stream;
		held_stream = *stream;
		held_stream.on_headers = http_held_headers;
		held_stream.on_chunk = http_held_chunk;
		held_stream.done = http_held_done;
		c = sr__http_stream(ctx->http, req, &held_stream, hold);
	} else {
		c = sr__http_request(ctx->http, req, http_held_done, hold);
	}
	hold->in_call = 0;
	rc = c ? SR_OK : hold->failed ? hold->failed : SR_EINVAL;
	if (rc != SR_OK) {
		free(hold);
		return rc;
	}
	*out = c;
	return SR_OK;
}

static int h_http_request(const sr_host *h, const sr_http_request *req,
			  sr_done_fn done, void *ud, sr_http_call **call)
{
	return http_start(h, req, NULL, done, ud, call);
}

static int h_http_stream(const sr_host *h, const sr_http_request *req,
			 const sr_http_stream_callbacks *cbs, void *ud,
			 sr_http_call **call)
{
	sr_http_stream_callbacks s = { 0 };

	*call = NULL;
	memcpy(&s, cbs, cbs->size < sizeof(s) ? cbs->size : sizeof(s));
	if (!s.done)
		return SR_EINVAL;
	s.size = sizeof(s);
	return http_start(h, req, &s, s.done, ud, call);
}

/* ---------------------------------------------------------- complete */

static int h_complete(const sr_host *h, sr_done_fn done, void *ud,
		      const sr_result *result)
{
	return sr__complete_later(priv(h)->ctx->loop, done, ud, result);
}

/* ------------------------------------------------------------ events */

static void h_event(const sr_host *h, const char *type, const char *fields_json)
{
	sr__ctx *ctx = priv(h)->ctx;
	json_t *ev = fields_json ? json_loads(fields_json, 0, NULL) : json_object();

	if (!type || !json_is_object(ev)) {
		sr__log(SR_LOG_WARN, priv(h)->plugin->section,
			"event '%s' dropped: its fields are not a JSON object", type ? type : "");
		json_decref(ev);
		return;
	}
	json_object_set_new(ev, "type", json_string(type));
	json_object_set_new(ev, "plugin", json_string(priv(h)->plugin->section));
	if (!sr__ctx_emit(ctx, priv(h)->plugin, ev))
		sr__log(SR_LOG_INFO, priv(h)->plugin->section, "event '%s' (no run to take it)",
			type);
	json_decref(ev);
}

/* ------------------------------------------------------------- procs */

/* A plugin's process, between it and the host: once the plugin is
 * stopped (its fini may kill a process whose exit comes later, on the
 * loop), the process's callbacks go nowhere instead of into freed memory
 * or an unloaded module. */
typedef struct proc_hold {
	sr__host_priv *owner;   /* NULL once the plugin stopped */
	sr_proc_callbacks cbs;
	void *ud;
	struct proc_hold *next;
} proc_hold;

static void held_stdout(void *ud, const void *data, size_t len)
{
	proc_hold *ph = ud;

	if (ph->owner && ph->cbs.on_stdout)
		ph->cbs.on_stdout(ph->ud, data, len);
}

static void held_stderr(void *ud, const void *data, size_t len)
{
	proc_hold *ph = ud;

	if (ph->owner && ph->cbs.on_stderr)
		ph->cbs.on_stderr(ph->ud, data, len);
}

static void held_exit(void *ud, int status, int sig)
{
	proc_hold *ph = ud;

	if (ph->owner) {
		for (proc_hold **p = &ph->owner->procs; *p; p = &(*p)->next)
			if (*p == ph) {
				*p = ph->next;
				break;
			}
		if (ph->cbs.on_exit)
			ph->cbs.on_exit(ph->ud, status, sig);
	}
	free(ph);
}

static int h_proc_spawn(const sr_host *h, const sr_proc_spec *spec,
			const sr_proc_callbacks *cbs, void *ud, sr_proc **out)
{
	static const sr_proc_callbacks held = {
		sizeof(held), held_stdout, held_stderr, held_exit
	};
	proc_hold *ph;
	char err[512];
	int rc;

	if (!cbs)
		return SR_EINVAL;
	if (!(ph = calloc(1, sizeof(*ph))))
		return SR_ENOMEM;
	ph->owner = priv(h);
	/* No slot past the size the plugin declared is read. */
	memcpy(&ph->cbs, cbs, cbs->size < sizeof(ph->cbs) ? cbs->size : sizeof(ph->cbs));
	ph->ud = ud;
	rc = sr__proc_spawn(priv(h)->ctx->loop, spec, &held, ph, out, err, sizeof(err));
	if (rc != SR_OK) {
		sr__log(SR_LOG_DEBUG, priv(h)->plugin->section, "%s", err);
		free(ph);
		return rc;
	}
	ph->next = priv(h)->procs;
	priv(h)->procs = ph;
	return SR_OK;
}

/* ------------------------------------------------------------ random */

static int h_random_bytes(const sr_host *h, void *buf, size_t len)
{
	size_t got = 0;

	(void)h;
	while (got < len) {
		ssize_t n = getrandom((char *)buf + got, len - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return SR_EIO;
		got += (size_t)n;
	}
	return SR_OK;
}

/* -------------------------------------------------------------- work */

typedef struct work {
	uv_work_t w;
	sr_work_fn fn;
	sr_work_done_fn done;
	void *ud;
	int status;
} work;

static void work_run(uv_work_t *w)
{
	work *k = w->data;

	k->status = k->fn(k->ud);
}

static void work_after(uv_work_t *w, int status)
{
	work *k = w->data;

	if (k->done)
		k->done(k->ud, status == UV_ECANCELED ? SR_ECANCELED : k->status);
	free(k);
}

static int h_work(const sr_host *h, sr_work_fn fn, sr_work_done_fn done,
		  void *ud)
{
	work *k = calloc(1, sizeof(*k));

	if (!k)
		return SR_ENOMEM;
	k->w.data = k;
	k->fn = fn;
	k->done = done;
	k->ud = ud;
	if (uv_queue_work(priv(h)->ctx->loop, &k->w, work_run, work_after) != 0) {
		free(k);
		return SR_EIO;
	}
	return SR_OK;
}

/* ---------------------------------------------------------------- kv */

/* The plugin's area: its section, in the store of the state directory. */
static const char *kv_state(const sr_host *h, const char **ns)
{
	sr__host_priv *p = priv(h);

	*ns = p->plugin->section;
	return sr__ctx_state_dir(p->ctx);
}

static int h_kv_get(const sr_host *h, const char *key, char **value,
		    size_t *len)
{
	const char *ns, *state = kv_state(h, &ns);

	*value = NULL;
	return state ? sr__kv_get(state, ns, key, value, len) : SR_EIO;
}

static int h_kv_put(const sr_host *h, const char *key, const void *value,
		    size_t len)
{
	const char *ns, *state = kv_state(h, &ns);

	return state ? sr__kv_put(state, ns, key, value, len) : SR_EIO;
}

static int h_kv_delete(const sr_host *h, const char *key)
{
	const char *ns, *state = kv_state(h, &ns);

	return state ? sr__kv_delete(state, ns, key) : SR_EIO;
}

static int h_kv_cas(const sr_host *h, const char *key, const void *expected,
		    size_t expected_len, const void *value, size_t len)
{
	const char *ns, *state = kv_state(h, &ns);

	return state ? sr__kv_cas(state, ns, key, expected, expected_len, value, len) : SR_EIO;
}

static int h_kv_list(const sr_host *h, sr_kv_visit_fn visit, void *ud)
{
	const char *ns, *state = kv_state(h, &ns);

	return state ? sr__kv_list(state, ns, visit, ud) : SR_EIO;
}

/* ------------------------------------------------------------- table */

sr__host_priv *sr__host_new(sr__ctx *ctx, sr__plugin *p)
{
	sr__host_priv *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->ctx = ctx;
	h->plugin = p;
	h->pub.size = sizeof(sr_host);
	h->pub.abi_minor = SR_ABI_MINOR;
	h->pub.plugin = p->desc->name;
	h->pub.core = h;
	h->pub.log = h_log;
	h->pub.secret_register = h_secret_register;
	h->pub.strerror = sr__strerror;
	h->pub.config_get = h_config_get;
	h->pub.config_invalid = h_config_invalid;
	h->pub.state_dir = h_state_dir;
	h->pub.plugin_dir = h_plugin_dir;
	h->pub.timer_start = h_timer_start;
	h->pub.timer_stop = h_timer_stop;
	h->pub.http_request = h_http_request;
	h->pub.http_cancel = sr__http_cancel;
	h->pub.proc_spawn = h_proc_spawn;
	h->pub.proc_write = sr__proc_write;
	h->pub.proc_close_stdin = sr__proc_close_stdin;
	h->pub.proc_kill = sr__proc_kill;
	h->pub.proc_pid = sr__proc_pid;
	h->pub.random_bytes = h_random_bytes;
	h->pub.work = h_work;
	h->pub.kv_get = h_kv_get;
	h->pub.kv_put = h_kv_put;
	h->pub.kv_delete = h_kv_delete;
	h->pub.kv_list = h_kv_list;
	h->pub.free = free;
	h->pub.complete = h_complete;
	h->pub.http_stream = h_http_stream;
	h->pub.event = h_event;
	h->pub.kv_cas = h_kv_cas;
	h->pub.secret_hold = h_secret_hold;
	h->pub.secret_release = h_secret_release;
	h->pub.open_beneath = h_open_beneath;
	return h;
}

void sr__host_free(sr__host_priv *h)
{
	if (!h)
		return;
	for (proc_hold *ph = h->procs; ph; ph = ph->next)
		ph->owner = NULL; /* freed at its exit */
	free(h->plugin_dir);
	free(h);
}
