/* A host table for fuzzing a plugin against a hostile control plane: every
 * HTTP request the plugin makes, and every process it starts, is answered
 * from the fuzzer's input, one piece at a time; timers fire in order of
 * a virtual clock; completions and work run on the next step. Single
 * threaded, no loop: fz_pump() delivers until nothing is pending (or a
 * step limit). The plugin is driven through its ops by the target.
 *
 * The input: pieces separated by "\n--\n". A piece for an HTTP answer is
 * "STATUS\n" and the body (a piece without a leading number is a body
 * with status 200; an empty input answers SR_ENETWORK). A process gets
 * one piece on stdout and the next on stderr, then exits 0 or 1. */
#ifndef SR_FUZZ_HOST_H
#define SR_FUZZ_HOST_H

#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandrun/plugin.h"

#define FZ_MAX 64

enum { FZ_HTTP, FZ_STREAM, FZ_TIMER, FZ_COMPLETE, FZ_WORK, FZ_PROC };

struct sr_timer {
	int live;
};
struct sr_http_call {
	int live;
};
struct sr_proc {
	int live;
};

typedef struct fz_item {
	int kind, used;
	uint64_t at;           /* timers: when (virtual ms) */
	uint64_t repeat;
	sr_done_fn done;
	const sr_http_stream_callbacks *scbs;
	const sr_proc_callbacks *pcbs;
	sr_timer_fn tfn;
	sr_work_fn wfn;
	sr_work_done_fn wdone;
	void *ud;
	sr_result res;
	char *msg, *json;
	void *handle;          /* sr_timer, sr_http_call or sr_proc */
} fz_item;

static struct {
	sr_host pub;
	const char *const *config;
	const uint8_t *in;
	size_t len, off;
	uint64_t now;
	fz_item items[FZ_MAX];
	char *kv_key[FZ_MAX], *kv_val[FZ_MAX];
	size_t kv_len[FZ_MAX];
	char dir[64];
} fz;

/* The next piece of the input, or NULL when it is used up. */
static const char *fz_piece(size_t *len)
{
	const char *p, *end;

	if (fz.off >= fz.len)
		return NULL;
	p = (const char *)fz.in + fz.off;
	end = memmem(p, fz.len - fz.off, "\n--\n", 4);
	*len = end ? (size_t)(end - p) : fz.len - fz.off;
	fz.off += *len + (end ? 4 : 0);
	return p;
}

static fz_item *fz_add(int kind)
{
	for (int i = 0; i < FZ_MAX; i++)
		if (!fz.items[i].used) {
			memset(&fz.items[i], 0, sizeof(fz.items[i]));
			fz.items[i].used = 1;
			fz.items[i].kind = kind;
			return &fz.items[i];
		}
	return NULL;
}

static void fz_free_item(fz_item *it)
{
	free(it->msg);
	free(it->json);
	free(it->handle);
	it->used = 0;
}

static void fz_log(const sr_host *h, int level, const char *fmt, ...)
{
	(void)h;
	(void)level;
	(void)fmt;
}

static void fz_secret(const sr_host *h, const char *v)
{
	(void)h;
	(void)v;
}

static const char *fz_strerror(int status)
{
	(void)status;
	return "error";
}

static const char *fz_config_get(const sr_host *h, const char *key)
{
	(void)h;
	for (const char *const *c = fz.config; c && *c; c += 2)
		if (strcmp(c[0], key) == 0)
			return c[1];
	return NULL;
}

static int fz_config_invalid(const sr_host *h, const char *key, const char *why)
{
	(void)h;
	(void)key;
	(void)why;
	return SR_EINVAL;
}

static const char *fz_dir(const sr_host *h)
{
	(void)h;
	return fz.dir;
}

static sr_timer *fz_timer_start(const sr_host *h, uint64_t after, uint64_t repeat,
				sr_timer_fn fn, void *ud)
{
	fz_item *it = fz_add(FZ_TIMER);
	sr_timer *t = calloc(1, sizeof(*t));

	(void)h;
	if (!it || !t) {
		if (it)
			it->used = 0;
		free(t);
		return NULL;
	}
	it->at = fz.now + after;
	it->repeat = repeat;
	it->tfn = fn;
	it->ud = ud;
	it->handle = t;
	t->live = 1;
	return t;
}

static void fz_timer_stop(sr_timer *t)
{
	for (int i = 0; t && i < FZ_MAX; i++)
		if (fz.items[i].used && fz.items[i].handle == t) {
			fz_free_item(&fz.items[i]);
			return;
		}
}

static int fz_http(const sr_host *h, const sr_http_request *req, sr_done_fn done, void *ud,
		   sr_http_call **call)
{
	fz_item *it = fz_add(FZ_HTTP);

	(void)h;
	(void)req;
	if (!it || !(it->handle = calloc(1, sizeof(sr_http_call)))) {
		if (it)
			it->used = 0;
		return SR_ENOMEM;
	}
	it->done = done;
	it->ud = ud;
	if (call)
		*call = it->handle;
	return SR_OK;
}

static int fz_stream(const sr_host *h, const sr_http_request *req,
		     const sr_http_stream_callbacks *cbs, void *ud, sr_http_call **call)
{
	int rc = fz_http(h, req, cbs->done, ud, call);

	if (rc == SR_OK)
		for (int i = 0; i < FZ_MAX; i++)
			if (fz.items[i].used && fz.items[i].handle == *call) {
				fz.items[i].kind = FZ_STREAM;
				fz.items[i].scbs = cbs;
			}
	return rc;
}

/* Cancelling answers at once, from inside the call (the ABI's rule). */
static void fz_http_cancel(sr_http_call *call)
{
	for (int i = 0; call && i < FZ_MAX; i++)
		if (fz.items[i].used && fz.items[i].handle == call &&
		    (fz.items[i].kind == FZ_HTTP || fz.items[i].kind == FZ_STREAM)) {
			sr_result r = { sizeof(r), SR_ECANCELED, "cancelled", NULL, NULL, 0 };
			sr_done_fn done = fz.items[i].done;
			void *ud = fz.items[i].ud;
			fz_free_item(&fz.items[i]);
			done(ud, &r);
			return;
		}
}

static int fz_spawn(const sr_host *h, const sr_proc_spec *spec, const sr_proc_callbacks *cbs,
		    void *ud, sr_proc **out)
{
	fz_item *it = fz_add(FZ_PROC);

	(void)h;
	(void)spec;
	if (!it || !(it->handle = calloc(1, sizeof(sr_proc)))) {
		if (it)
			it->used = 0;
		return SR_ENOMEM;
	}
	it->pcbs = cbs;
	it->ud = ud;
	*out = it->handle;
	return SR_OK;
}

static int fz_proc_write(sr_proc *p, const void *d, size_t n)
{
	(void)p;
	(void)d;
	(void)n;
	return SR_OK;
}

static int fz_proc_close(sr_proc *p)
{
	(void)p;
	return SR_OK;
}

static int fz_proc_kill(sr_proc *p, int sig)
{
	(void)p;
	(void)sig;
	return SR_OK;
}

static long fz_proc_pid(const sr_proc *p)
{
	(void)p;
	return 4242;
}

static int fz_random(const sr_host *h, void *buf, size_t len)
{
	(void)h;
	memset(buf, 0x5a, len);
	return SR_OK;
}

static int fz_work(const sr_host *h, sr_work_fn fn, sr_work_done_fn done, void *ud)
{
	fz_item *it = fz_add(FZ_WORK);

	(void)h;
	if (!it)
		return SR_ENOMEM;
	it->wfn = fn;
	it->wdone = done;
	it->ud = ud;
	return SR_OK;
}

static int fz_kv_find(const char *key)
{
	for (int i = 0; i < FZ_MAX; i++)
		if (fz.kv_key[i] && strcmp(fz.kv_key[i], key) == 0)
			return i;
	return -1;
}

static int fz_kv_get(const sr_host *h, const char *key, char **value, size_t *len)
{
	int i = fz_kv_find(key);

	(void)h;
	if (i < 0)
		return SR_ENOTFOUND;
	if (!(*value = malloc(fz.kv_len[i] + 1)))
		return SR_ENOMEM;
	memcpy(*value, fz.kv_val[i], fz.kv_len[i]);
	(*value)[fz.kv_len[i]] = 0;
	if (len)
		*len = fz.kv_len[i];
	return SR_OK;
}

static int fz_kv_put(const sr_host *h, const char *key, const void *value, size_t len)
{
	int i = fz_kv_find(key);

	(void)h;
	for (int j = 0; i < 0 && j < FZ_MAX; j++)
		if (!fz.kv_key[j] && (fz.kv_key[j] = strdup(key)))
			i = j;
	if (i < 0)
		return SR_EIO;
	free(fz.kv_val[i]);
	if (!(fz.kv_val[i] = malloc(len + 1)))
		return SR_ENOMEM;
	memcpy(fz.kv_val[i], value, len);
	fz.kv_len[i] = len;
	return SR_OK;
}

static int fz_kv_cas(const sr_host *h, const char *key, const void *expected, size_t elen,
		     const void *value, size_t len)
{
	int i = fz_kv_find(key);

	if ((i < 0) != (expected == NULL) ||
	    (i >= 0 && (fz.kv_len[i] != elen || memcmp(fz.kv_val[i], expected, elen) != 0)))
		return SR_ESTATE;
	return fz_kv_put(h, key, value, len);
}

static int fz_kv_delete(const sr_host *h, const char *key)
{
	int i = fz_kv_find(key);

	(void)h;
	if (i < 0)
		return SR_ENOTFOUND;
	free(fz.kv_key[i]);
	free(fz.kv_val[i]);
	fz.kv_key[i] = fz.kv_val[i] = NULL;
	return SR_OK;
}

static int fz_kv_list(const sr_host *h, sr_kv_visit_fn visit, void *ud)
{
	(void)h;
	for (int i = 0; i < FZ_MAX; i++)
		if (fz.kv_key[i] && visit(ud, fz.kv_key[i]))
			break;
	return SR_OK;
}

static int fz_complete(const sr_host *h, sr_done_fn done, void *ud, const sr_result *r)
{
	fz_item *it = fz_add(FZ_COMPLETE);

	(void)h;
	if (!it)
		return SR_ENOMEM;
	it->done = done;
	it->ud = ud;
	it->res = *r;
	it->msg = r->message ? strdup(r->message) : NULL;
	it->json = r->json ? strdup(r->json) : NULL;
	it->res.message = it->msg;
	it->res.json = it->json;
	it->res.data = NULL; /* (no plugin completes with data it owns) */
	it->res.len = 0;
	return SR_OK;
}

static void fz_event(const sr_host *h, const char *type, const char *fields)
{
	(void)h;
	(void)type;
	(void)fields;
}

/* Answer one HTTP call from the input. */
static void fz_answer(fz_item *it)
{
	size_t len = 0, skip = 0;
	const char *p = fz_piece(&len);
	char json[64];
	int status = 200;
	sr_done_fn done = it->done;
	const sr_http_stream_callbacks *scbs = it->scbs;
	void *ud = it->ud;
	int kind = it->kind;
	sr_result r = { sizeof(r), SR_OK, NULL, NULL, NULL, 0 };

	fz_free_item(it);
	if (!p) {
		r.status = SR_ENETWORK;
		r.message = "no answer";
		done(ud, &r);
		return;
	}
	if (len && p[0] >= '1' && p[0] <= '5') {
		status = 0;
		for (; skip < len && skip < 3 && p[skip] >= '0' && p[skip] <= '9'; skip++)
			status = status * 10 + (p[skip] - '0');
		while (skip < len && p[skip] != '\n')
			skip++;
		if (skip < len)
			skip++;
	}
	snprintf(json, sizeof(json), "{\"status\":%d,\"headers\":{}}", status);
	if (kind == FZ_STREAM) {
		if (scbs->on_headers)
			scbs->on_headers(ud, status, "{}");
		if (scbs->on_chunk && len > skip)
			scbs->on_chunk(ud, p + skip, len - skip);
		r.json = json;
		done(ud, &r);
		return;
	}
	r.json = json;
	r.data = p + skip;
	r.len = len - skip;
	done(ud, &r);
}

static void fz_run_proc(fz_item *it)
{
	size_t len = 0;
	const sr_proc_callbacks *cbs = it->pcbs;
	void *ud = it->ud;
	const char *p;

	fz_free_item(it);
	if ((p = fz_piece(&len)) && len && cbs->on_stdout)
		cbs->on_stdout(ud, p, len);
	if (cbs->on_stdout)
		cbs->on_stdout(ud, "", 0);
	if ((p = fz_piece(&len)) && len && cbs->on_stderr)
		cbs->on_stderr(ud, p, len);
	if (cbs->on_stderr)
		cbs->on_stderr(ud, "", 0);
	if (cbs->on_exit)
		cbs->on_exit(ud, p && len && p[0] == '0' ? 0 : 1, 0);
}

/* Deliver what is due, step by step, up to max steps. */
static void fz_pump(int max)
{
	for (int step = 0; step < max; step++) {
		fz_item *next = NULL;
		for (int i = 0; i < FZ_MAX && !next; i++)
			if (fz.items[i].used && (fz.items[i].kind == FZ_COMPLETE ||
						 fz.items[i].kind == FZ_WORK))
				next = &fz.items[i];
		for (int i = 0; i < FZ_MAX && !next; i++)
			if (fz.items[i].used && (fz.items[i].kind == FZ_HTTP ||
						 fz.items[i].kind == FZ_STREAM ||
						 fz.items[i].kind == FZ_PROC))
				next = &fz.items[i];
		for (int i = 0; i < FZ_MAX; i++)
			if (fz.items[i].used && fz.items[i].kind == FZ_TIMER && fz.items[i].tfn &&
			    (!next || (next->kind == FZ_TIMER && fz.items[i].at < next->at)))
				next = &fz.items[i];
		if (!next)
			return;
		switch (next->kind) {
		case FZ_COMPLETE: {
			fz_item copy = *next;
			next->used = 0;
			copy.done(copy.ud, &copy.res);
			free(copy.msg);
			free(copy.json);
			break;
		}
		case FZ_WORK: {
			sr_work_done_fn wdone = next->wdone;
			void *ud = next->ud;
			int rc = next->wfn(ud);
			next->used = 0;
			wdone(ud, rc);
			break;
		}
		case FZ_TIMER: {
			sr_timer_fn fn = next->tfn;
			void *ud = next->ud;
			if (next->at > fz.now)
				fz.now = next->at;
			/* A one-shot timer stays, spent, until the plugin stops it. */
			if (next->repeat)
				next->at = fz.now + next->repeat;
			else
				next->tfn = NULL;
			fn(ud);
			break;
		}
		case FZ_PROC:
			fz_run_proc(next);
			break;
		default:
			fz_answer(next);
		}
	}
}

static void fz_init(const uint8_t *data, size_t size, const char *const *config)
{
	fz.in = data;
	fz.len = size;
	fz.off = 0;
	fz.now = 0;
	fz.config = config;
	if (!fz.dir[0]) {
		snprintf(fz.dir, sizeof(fz.dir), "/tmp/sandrun-fuzz-host-%ld", (long)getpid());
		mkdir(fz.dir, 0700);
	}
	memset(&fz.pub, 0, sizeof(fz.pub));
	fz.pub.size = sizeof(fz.pub);
	fz.pub.abi_minor = SR_ABI_MINOR;
	fz.pub.plugin = "fuzz";
	fz.pub.log = fz_log;
	fz.pub.secret_register = fz_secret;
	fz.pub.strerror = fz_strerror;
	fz.pub.config_get = fz_config_get;
	fz.pub.config_invalid = fz_config_invalid;
	fz.pub.state_dir = fz_dir;
	fz.pub.plugin_dir = fz_dir;
	fz.pub.timer_start = fz_timer_start;
	fz.pub.timer_stop = fz_timer_stop;
	fz.pub.http_request = fz_http;
	fz.pub.http_cancel = fz_http_cancel;
	fz.pub.proc_spawn = fz_spawn;
	fz.pub.proc_write = fz_proc_write;
	fz.pub.proc_close_stdin = fz_proc_close;
	fz.pub.proc_kill = fz_proc_kill;
	fz.pub.proc_pid = fz_proc_pid;
	fz.pub.random_bytes = fz_random;
	fz.pub.work = fz_work;
	fz.pub.kv_get = fz_kv_get;
	fz.pub.kv_put = fz_kv_put;
	fz.pub.kv_delete = fz_kv_delete;
	fz.pub.kv_list = fz_kv_list;
	fz.pub.free = free;
	fz.pub.complete = fz_complete;
	fz.pub.http_stream = fz_stream;
	fz.pub.event = fz_event;
	fz.pub.kv_cas = fz_kv_cas;
	fz.pub.secret_hold = fz_secret;
	fz.pub.secret_release = fz_secret;
}

/* Everything left after the plugin's fini: the host's own records. */
static void fz_reset(void)
{
	for (int i = 0; i < FZ_MAX; i++) {
		if (fz.items[i].used)
			fz_free_item(&fz.items[i]);
		free(fz.kv_key[i]);
		free(fz.kv_val[i]);
		fz.kv_key[i] = fz.kv_val[i] = NULL;
	}
}

#endif
