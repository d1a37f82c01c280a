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
#include <unistd.h>

#include "core/ctx.h"
#include "core/host.h"
#include "core/http.h"
#include "core/log.h"
#include "core/proc.h"

#define KV_MAX_VALUE (1u << 20)

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

static sr_http_call *h_http_request(const sr_host *h,
				    const sr_http_request *req,
				    sr_done_fn done, void *ud)
{
	sr__ctx *ctx = priv(h)->ctx;

	if (!ctx->http && !(ctx->http = sr__http_new(ctx->loop))) {
		sr_result r = { sizeof(r), SR_ENETWORK,
				"HTTP unavailable: cannot load " SR_LIBCURL_SONAME,
				NULL, NULL, 0 };
		done(ud, &r);
		return NULL;
	}
	return sr__http_request(ctx->http, req, done, ud);
}

/* ------------------------------------------------------------- procs */

static int h_proc_spawn(const sr_host *h, const sr_proc_spec *spec,
			const sr_proc_callbacks *cbs, void *ud, sr_proc **out)
{
	char err[512];
	int rc = sr__proc_spawn(priv(h)->ctx->loop, spec, cbs, ud, out, err,
				sizeof(err));

	if (rc != SR_OK)
		sr__log(SR_LOG_DEBUG, priv(h)->plugin->section, "%s", err);
	return rc;
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

int sr__kv_valid_key(const char *key)
{
	size_t n = 0;

	if (!key || key[0] == '.')
		return 0;
	for (; key[n]; n++) {
		char c = key[n];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return n >= 1 && n <= 128;
}

int sr__kv_get(const char *dir, const char *key, char **value, size_t *len)
{
	char path[4096];
	struct stat st;
	char *buf;
	ssize_t n;
	int fd;

	*value = NULL;
	if (len)
		*len = 0;
	if (!sr__kv_valid_key(key))
		return SR_EINVAL;
	snprintf(path, sizeof(path), "%s/%s", dir, key);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? SR_ENOTFOUND : SR_EIO;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > KV_MAX_VALUE) {
		close(fd);
		return SR_EIO;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return SR_ENOMEM;
	}
	n = read(fd, buf, (size_t)st.st_size);
	close(fd);
	if (n != st.st_size) {
		free(buf);
		return SR_EIO;
	}
	buf[n] = 0;
	*value = buf;
	if (len)
		*len = (size_t)n;
	return SR_OK;
}

int sr__kv_put(const char *dir, const char *key, const void *value,
	       size_t len)
{
	char path[4096], tmp[4200];
	int fd;
	ssize_t n;

	if (!sr__kv_valid_key(key))
		return SR_EINVAL;
	if (len > KV_MAX_VALUE)
		return SR_ETOOBIG;
	if (sr__mkdirs(dir, 0700) != SR_OK)
		return SR_EIO;
	snprintf(path, sizeof(path), "%s/%s", dir, key);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp.%ld", dir, key, (long)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return SR_EIO;
	n = write(fd, value, len);
	if (n != (ssize_t)len || fsync(fd) != 0) {
		close(fd);
		unlink(tmp);
		return SR_EIO;
	}
	close(fd);
	if (rename(tmp, path) != 0) {
		unlink(tmp);
		return SR_EIO;
	}
	return SR_OK;
}

int sr__kv_delete(const char *dir, const char *key)
{
	char path[4096];

	if (!sr__kv_valid_key(key))
		return SR_EINVAL;
	snprintf(path, sizeof(path), "%s/%s", dir, key);
	if (unlink(path) != 0)
		return errno == ENOENT ? SR_ENOTFOUND : SR_EIO;
	return SR_OK;
}

int sr__kv_list(const char *dir, sr_kv_visit_fn visit, void *ud)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return errno == ENOENT ? SR_OK : SR_EIO;
	while ((e = readdir(d)))
		if (sr__kv_valid_key(e->d_name) && visit(ud, e->d_name))
			break;
	closedir(d);
	return SR_OK;
}

static const char *kv_dir(const sr_host *h, char *buf, size_t n)
{
	const char *pd = h_plugin_dir(h);

	if (!pd)
		return NULL;
	snprintf(buf, n, "%s/kv", pd);
	return buf;
}

static int h_kv_get(const sr_host *h, const char *key, char **value,
		    size_t *len)
{
	char dir[4096];

	*value = NULL;
	return kv_dir(h, dir, sizeof(dir)) ? sr__kv_get(dir, key, value, len) :
					     SR_EIO;
}

static int h_kv_put(const sr_host *h, const char *key, const void *value,
		    size_t len)
{
	char dir[4096];

	return kv_dir(h, dir, sizeof(dir)) ? sr__kv_put(dir, key, value, len) :
					     SR_EIO;
}

static int h_kv_delete(const sr_host *h, const char *key)
{
	char dir[4096];

	return kv_dir(h, dir, sizeof(dir)) ? sr__kv_delete(dir, key) : SR_EIO;
}

static int h_kv_list(const sr_host *h, sr_kv_visit_fn visit, void *ud)
{
	char dir[4096];

	return kv_dir(h, dir, sizeof(dir)) ? sr__kv_list(dir, visit, ud) : SR_EIO;
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
	return h;
}

void sr__host_free(sr__host_priv *h)
{
	if (!h)
		return;
	free(h->plugin_dir);
	free(h);
}
