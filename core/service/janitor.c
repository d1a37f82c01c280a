/* sandrund's janitor: what a crash left behind (sandboxes no session
 * points at, the provider's secrets and leases, tunnel enrolments) is
 * removed without anyone running `sandrun janitor`. Every [janitor]
 * interval (and a few seconds after the start, which is when a crash
 * has left something), the service that takes the "janitor" lease runs
 * the sweep: the lease is held for the interval, so among replicas on one
 * database one sweeps per interval. The sweep is `sandrun janitor --json`
 * with the service's configuration, as a child process (the same rules as
 * the command, off the loop); its verdicts are counted in /metrics and
 * what it could not remove is tried again at the next sweep. */
#include "config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include <jansson.h>

#include "core/host/log.h"
#include "core/host/status.h"
#include "core/service/svc_int.h"

#define FIRST_SWEEP_MS 5000
#define LINE_MAX_BYTES 4096

struct sr__janitor {
	sr__svc *svc;
	uv_timer_t timer;
	uv_process_t proc;
	uv_pipe_t out, err;
	int running;          /* a sweep's process, until its exit and pipes close */
	int open_handles;     /* the timer, and while running the process and
			       * its two pipes: freed when none is left */
	int taking;           /* the lease is being taken */
	int stopping, freeing;
	char program[4096];   /* [janitor] program, or the sandrun beside us */
	int64_t status;       /* the sweep's exit */
	int sig;
	char line[LINE_MAX_BYTES], eline[LINE_MAX_BYTES];
	size_t len, elen;
	unsigned removed, failed;
};

static void verdict(sr__janitor *j, const char *line)
{
	json_t *o = json_loads(line, 0, NULL);
	const char *v = json_string_value(json_object_get(o, "verdict"));

	if (v && strcmp(v, "deleted") == 0)
		j->removed++;
	else if (v && strcmp(v, "failed") == 0)
		j->failed++;
	json_decref(o);
}

/* Whole lines out of a pipe's data into buf (len used); each to fn. A line
 * longer than the buffer is cut. */
static void lines(sr__janitor *j, char *buf, size_t *len, const char *data, size_t n,
		  void (*fn)(sr__janitor *j, const char *line))
{
	for (size_t i = 0; i < n; i++) {
		if (data[i] == '\n' || *len == LINE_MAX_BYTES - 1) {
			buf[*len] = 0;
			if (*len)
				fn(j, buf);
			*len = 0;
			if (data[i] == '\n')
				continue;
		}
		buf[(*len)++] = data[i];
	}
}

/* A line of the sweep's log ("sandrun: COMPONENT: LEVEL: ..."), logged
 * again at its own level (a line of another shape as a warning). */
static void said(sr__janitor *j, const char *line)
{
	static const struct { const char *tag; int level; } levels[] = {
		{ ": debug: ", SR_LOG_DEBUG }, { ": info: ", SR_LOG_INFO },
		{ ": warn: ", SR_LOG_WARN }, { ": error: ", SR_LOG_ERROR },
	};
	const char *first = NULL;
	int level = SR_LOG_WARN;

	(void)j;
	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		const char *at = strstr(line, levels[i].tag);
		if (at && (!first || at < first)) {
			first = at;
			level = levels[i].level;
		}
	}
	if (strncmp(line, "sandrun: ", 9) == 0)
		line += 9;
	sr__log(level, "janitor", "%s", line);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)h;
	buf->base = malloc(suggested);
	buf->len = buf->base ? suggested : 0;
}

static void on_closed(uv_handle_t *h);

static void on_out(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	sr__janitor *j = s->data;

	if (n > 0)
		lines(j, j->line, &j->len, buf->base, (size_t)n, verdict);
	else if (n < 0)
		uv_close((uv_handle_t *)s, on_closed); /* its end (or an error) */
	free(buf->base);
}

static void on_err(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	sr__janitor *j = s->data;

	if (n > 0)
		lines(j, j->eline, &j->elen, buf->base, (size_t)n, said);
	else if (n < 0)
		uv_close((uv_handle_t *)s, on_closed);
	free(buf->base);
}

/* The sweep's process has exited and both its pipes have ended: all it
 * said is read. */
static void finish(sr__janitor *j)
{
	if (j->len) {
		j->line[j->len] = 0;
		verdict(j, j->line);
	}
	if (j->elen) {
		j->eline[j->elen] = 0;
		said(j, j->eline);
	}
	if (j->status < 0)
		return; /* it did not start (logged then) */
	j->svc->m.janitor_sweeps++;
	j->svc->m.janitor_removed += j->removed;
	j->svc->m.janitor_failed += j->failed;
	if (j->status == 0 && !j->sig)
		sr__log(j->removed ? SR_LOG_INFO : SR_LOG_DEBUG, "janitor", "sweep: removed %u",
			j->removed);
	else
		sr__log(SR_LOG_WARN, "janitor", "sweep: removed %u, could not remove %u (%s %lld); "
			"the next sweep tries again", j->removed, j->failed,
			j->sig ? "signal" : "exit", j->sig ? (long long)j->sig : (long long)j->status);
}

static void on_closed(uv_handle_t *h)
{
	sr__janitor *j = h->data;

	if (--j->open_handles == 0 && j->freeing) {
		free(j);
		return;
	}
	/* The timer alone is left: the sweep is over. */
	if (j->open_handles == 1 && j->running) {
		j->running = 0;
		if (j->freeing)
			return;
		finish(j);
		if (j->stopping)
			sr__svc_check_drained(j->svc);
	}
}

static void on_sweep_exit(uv_process_t *p, int64_t status, int sig)
{
	sr__janitor *j = p->data;

	j->status = status;
	j->sig = sig;
	uv_close((uv_handle_t *)p, on_closed);
}

static void sweep(sr__janitor *j)
{
	sr__svc *s = j->svc;
	const char *conf = sr__config_file(s->ctx->config);
	char *args[8];
	size_t a = 0;
	uv_stdio_container_t io[3];
	uv_process_options_t o;
	int rc;

	args[a++] = j->program;
	args[a++] = "janitor";
	args[a++] = "--json";
	if (s->conf.janitor_grace) {
		args[a++] = "--grace";
		args[a++] = (char *)s->conf.janitor_grace;
	}
	if (conf) {
		args[a++] = "--config";
		args[a++] = (char *)conf;
	}
	args[a] = NULL;
	memset(&o, 0, sizeof(o));
	uv_pipe_init(s->ctx->loop, &j->out, 0);
	uv_pipe_init(s->ctx->loop, &j->err, 0);
	j->out.data = j->err.data = j->proc.data = j;
	io[0].flags = UV_IGNORE;
	io[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	io[1].data.stream = (uv_stream_t *)&j->out;
	io[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	io[2].data.stream = (uv_stream_t *)&j->err;
	o.file = args[0];
	o.args = args;
	o.stdio = io;
	o.stdio_count = 3;
	o.exit_cb = on_sweep_exit;
	j->removed = j->failed = 0;
	j->status = 0;
	j->sig = 0;
	j->len = j->elen = 0;
	j->running = 1;
	j->open_handles += 3;
	rc = uv_spawn(s->ctx->loop, &j->proc, &o);
	if (rc != 0) {
		sr__log(SR_LOG_ERROR, "janitor", "cannot run %s: %s (set [janitor] program)",
			args[0], uv_strerror(rc));
		j->status = rc;
		uv_close((uv_handle_t *)&j->proc, on_closed);
		uv_close((uv_handle_t *)&j->out, on_closed);
		uv_close((uv_handle_t *)&j->err, on_closed);
		return;
	}
	uv_read_start((uv_stream_t *)&j->out, on_alloc, on_out);
	uv_read_start((uv_stream_t *)&j->err, on_alloc, on_err);
}

static void on_lease(void *ud, int rc, const char *holder)
{
	sr__janitor *j = ud;

	j->taking = 0;
	if (j->stopping) {
		sr__svc_check_drained(j->svc);
		return;
	}
	if (rc == SR_OK)
		sweep(j);
	else if (rc == SR_ESTATE)
		sr__log(SR_LOG_DEBUG, "janitor", "no sweep here: the interval's lease is held "
			"(%s)", holder);
	else
		sr__log(SR_LOG_WARN, "janitor", "no sweep: the store cannot be used (%s)",
			sr__strerror(rc));
}

static void on_timer(uv_timer_t *t)
{
	sr__janitor *j = t->data;
	sr__svc *s = j->svc;

	if (j->running || j->taking || s->draining)
		return;
	if (sr__svc_lease_take_work(s, "janitor", "janitor",
				    (int64_t)s->conf.janitor_interval_s * 1000, on_lease, j) == SR_OK)
		j->taking = 1;
}

/* [janitor] program, or the sandrun installed beside this sandrund (the
 * build tree's beside the build tree's), or BINDIR's. */
static void find_program(const sr__svc *s, char *out, size_t n)
{
	char self[4096];
	ssize_t len;

	if (s->conf.janitor_program) {
		snprintf(out, n, "%s", s->conf.janitor_program);
		return;
	}
	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len > 0) {
		self[len] = 0;
		if (strrchr(self, '/')) {
			*strrchr(self, '/') = 0;
			snprintf(out, n, "%s/sandrun", self);
			if (access(out, X_OK) == 0)
				return;
		}
	}
	snprintf(out, n, "%s", SR_BINDIR "/sandrun");
}

int sr__svc_janitor_start(sr__svc *s)
{
	sr__janitor *j;
	uint64_t interval;

	if (!s->conf.janitor_interval_s)
		return SR_OK;
	if (!(j = calloc(1, sizeof(*j))))
		return SR_ENOMEM;
	j->svc = s;
	find_program(s, j->program, sizeof(j->program));
	uv_timer_init(s->ctx->loop, &j->timer);
	j->timer.data = j;
	j->open_handles = 1;
	s->janitor = j;
	interval = (uint64_t)s->conf.janitor_interval_s * 1000;
	uv_timer_start(&j->timer, on_timer, FIRST_SWEEP_MS < interval ? FIRST_SWEEP_MS : interval,
		       interval);
	sr__log(SR_LOG_INFO, "janitor", "sweeps every %u s ([janitor] interval), one replica "
		"at a time", s->conf.janitor_interval_s);
	return SR_OK;
}

int sr__svc_janitor_busy(sr__svc *s)
{
	sr__janitor *j = s->janitor;

	return j && (j->running || j->taking);
}

void sr__svc_janitor_stop(sr__svc *s)
{
	sr__janitor *j = s->janitor;

	if (!j || j->stopping)
		return;
	j->stopping = 1;
	uv_timer_stop(&j->timer);
	/* A sweep stopped halfway loses nothing: the next one finds the rest. */
	if (j->running)
		uv_process_kill(&j->proc, SIGTERM);
}

void sr__svc_janitor_free(sr__svc *s)
{
	sr__janitor *j = s->janitor;

	if (!j)
		return;
	sr__svc_janitor_stop(s);
	s->janitor = NULL;
	/* Freed once its handles are closed: the timer now, a sweep's
	 * process and pipes (killed) when it has exited. */
	j->freeing = 1;
	uv_close((uv_handle_t *)&j->timer, on_closed);
}
