/* cloudflared tunnel plugin: a Cloudflare quick tunnel per runner-side
 * service. resolve starts
 *
 *	cloudflared tunnel --no-autoupdate --url URL --metrics 127.0.0.1:PORT
 *
 * through the host's process API, then reads the tunnel's name from the
 * metrics server's /quicktunnel (which listens only once the tunnel
 * exists: refused connections are retried until start_timeout). A quick
 * tunnel gets a new name at every start: when its process ends, the next
 * resolve starts another and answers the new URL, and the plugin emits
 * tunnel.failed so that runs using the old one know. Quick tunnels carry
 * no server-sent events and at most 200 requests in flight; resolve's
 * answer says so ("limits"). release stops every cloudflared it started. */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sandrun/plugin.h"

#define GRACE "3s" /* cloudflared's --grace-period; release waits 5 s */

#define POLL_MS 200
#define TAIL_MAX 2048

typedef struct waiter {
	uint64_t req;
	sr_done_fn done;
	void *ud;
	struct waiter *next;
} waiter;

enum { T_STARTING, T_READY, T_DEAD };

typedef struct qt {
	struct cf *cf;
	char *local;          /* the service's URL */
	int state;
	sr_proc *proc;        /* NULL once it exited */
	int mport;
	char *hostname;       /* once known */
	char tail[TAIL_MAX];  /* the end of its standard error */
	size_t tail_len;
	sr_timer *poll;
	sr_http_call *call;
	uint64_t deadline_ms;
	waiter *waiters;
	struct qt *next;
} qt;

typedef struct cf {
	const sr_host *h;
	const char *binary;
	unsigned start_timeout_ms;
	qt *tunnels;
	/* release in progress: done when every process has exited */
	sr_done_fn release_done;
	void *release_ud;
	sr_timer *release_kill;
} cf;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A free TCP port on 127.0.0.1 for the metrics server, or 0. */
static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;

	if (fd < 0)
		return 0;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

/* The last line of what the process wrote on standard error. */
static const char *last_line(qt *t, char *buf, size_t n)
{
	size_t end = t->tail_len, start;

	while (end && (t->tail[end - 1] == '\n' || t->tail[end - 1] == '\r'))
		end--;
	start = end;
	while (start && t->tail[start - 1] != '\n')
		start--;
	snprintf(buf, n, "%.*s", (int)(end - start), t->tail + start);
	return buf;
}

/* The quick tunnel's URL for t's service: https://HOST and the service's
 * path and query. cloudflared ignores the path of --url (ValidateUrl in
 * its ingress code keeps scheme and host) and forwards each request's own
 * path, so the path is the URL's to carry. */
static void public_url(const qt *t, char *url, size_t n)
{
	const char *p = strstr(t->local, "://");

	p = p ? p + 3 : t->local;
	p += strcspn(p, "/?#");
	snprintf(url, n, "https://%s%.*s", t->hostname, (int)strcspn(p, "#"), p);
}

/* Answer every waiter of t: its URL, or the failure. */
static void answer(qt *t, int status, const char *fmt, ...) SR_PRINTF(3, 4);
static void answer(qt *t, int status, const char *fmt, ...)
{
	char msg[800], *json = NULL;
	sr_result r = { .size = sizeof(r), .status = status };
	waiter *w;

	if (status == SR_OK) {
		char url[4400];
		json_t *j;
		public_url(t, url, sizeof(url));
		j = json_pack("{s:s, s:{s:b, s:i}, s:b}", "url", url, "limits", "sse", 0,
			      "max_in_flight", 200, "ends_with_runner", 1);
		json = j ? json_dumps(j, JSON_COMPACT) : NULL;
		json_decref(j);
		if (!json) {
			r.status = SR_ENOMEM;
			r.message = "out of memory";
		}
		r.json = json;
	} else {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		r.message = msg;
	}
	while ((w = t->waiters)) {
		t->waiters = w->next;
		w->done(w->ud, &r);
		free(w);
	}
	free(json);
}

static void stop_polling(qt *t)
{
	if (t->poll) {
		t->cf->h->timer_stop(t->poll);
		t->poll = NULL;
	}
	if (t->call) {
		sr_http_call *c = t->call;
		t->call = NULL;
		t->cf->h->http_cancel(c);
	}
}

static void qt_free(qt *t)
{
	for (qt **p = &t->cf->tunnels; *p; p = &(*p)->next)
		if (*p == t) {
			*p = t->next;
			break;
		}
	free(t->local);
	free(t->hostname);
	free(t);
}

static void poll_quicktunnel(void *ud);

static void on_quicktunnel(void *ud, const sr_result *r)
{
	qt *t = ud;
	json_t *b = NULL;
	const char *host;

	if (!t->call)
		return; /* cancelled by stop_polling */
	t->call = NULL;
	if (t->state != T_STARTING)
		return;
	if (r->status == SR_OK)
		b = json_loadb(r->data ? r->data : "", r->len, 0, NULL);
	host = json_string_value(json_object_get(b, "hostname"));
	if (host && *host && strspn(host, "abcdefghijklmnopqrstuvwxyz0123456789-.") == strlen(host)) {
		free(t->hostname);
		t->hostname = strdup(host);
		json_decref(b);
		if (!t->hostname) {
			answer(t, SR_ENOMEM, "out of memory");
			return;
		}
		t->state = T_READY;
		t->cf->h->log(t->cf->h, SR_LOG_INFO, "quick tunnel to %s: https://%s", t->local,
			      t->hostname);
		answer(t, SR_OK, NULL);
		return;
	}
	json_decref(b);
	if (now_ms() >= t->deadline_ms) {
		char line[400];
		answer(t, SR_ETIMEDOUT, "cloudflared had no quick tunnel to %s after %u s (its "
		       "last words: %s)", t->local, t->cf->start_timeout_ms / 1000,
		       last_line(t, line, sizeof(line)));
		t->cf->h->proc_kill(t->proc, SIGTERM);
		t->state = T_DEAD;
		return;
	}
	t->poll = t->cf->h->timer_start(t->cf->h, POLL_MS, 0, poll_quicktunnel, t);
}

static void poll_quicktunnel(void *ud)
{
	qt *t = ud;
	char url[100];
	sr_http_request req = { .size = sizeof(req), .method = "GET", .url = url,
				.timeout_ms = 2000, .max_response = 4096 };

	if (t->poll) {
		t->cf->h->timer_stop(t->poll);
		t->poll = NULL;
	}
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/quicktunnel", t->mport);
	if (t->cf->h->http_request(t->cf->h, &req, on_quicktunnel, t, &t->call) != SR_OK) {
		t->call = NULL;
		t->poll = t->cf->h->timer_start(t->cf->h, POLL_MS, 0, poll_quicktunnel, t);
	}
}

static void on_stderr(void *ud, const void *data, size_t len)
{
	qt *t = ud;

	if (!len)
		return;
	if (len >= TAIL_MAX) {
		data = (const char *)data + len - (TAIL_MAX - 1);
		len = TAIL_MAX - 1;
	}
	if (t->tail_len + len >= TAIL_MAX) {
		size_t drop = t->tail_len + len - (TAIL_MAX - 1);
		memmove(t->tail, t->tail + drop, t->tail_len - drop);
		t->tail_len -= drop;
	}
	memcpy(t->tail + t->tail_len, data, len);
	t->tail_len += len;
}

static void on_stdout(void *ud, const void *data, size_t len)
{
	on_stderr(ud, data, len);
}

static void release_check(cf *c);

static void on_exit_proc(void *ud, int status, int sig)
{
	qt *t = ud;
	cf *c = t->cf;
	char line[400];

	t->proc = NULL;
	stop_polling(t);
	last_line(t, line, sizeof(line));
	if (t->waiters)
		answer(t, SR_EIO, "cloudflared for %s exited (%s %d) before its quick tunnel "
		       "existed: %s", t->local, sig ? "signal" : "status", sig ? sig : status, line);
	if (t->state == T_READY && !c->release_done) {
		char fields[900];
		json_t *j = json_pack("{s:s, s:s, s:s}", "url", t->local, "public_host",
				      t->hostname ? t->hostname : "", "reason", line);
		char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
		c->h->log(c->h, SR_LOG_WARN, "cloudflared for %s (https://%s) exited: %s; the "
			  "next resolve starts a new quick tunnel, under a new name", t->local,
			  t->hostname ? t->hostname : "?", line);
		snprintf(fields, sizeof(fields), "%s", s ? s : "{}");
		c->h->event(c->h, "tunnel.failed", fields);
		free(s);
		json_decref(j);
	}
	t->state = T_DEAD;
	qt_free(t);
	release_check(c);
}

/* Start cloudflared for local; NULL with why and *status set when it
 * cannot (SR_EINVAL: the binary cannot be started, which no retry mends). */
static qt *spawn(cf *c, const char *local, char *why, size_t n, int *status)
{
	static const sr_proc_callbacks cbs = {
		.size = sizeof(cbs),
		.on_stdout = on_stdout,
		.on_stderr = on_stderr,
		.on_exit = on_exit_proc,
	};
	char metrics[40];
	/* --grace-period: on SIGTERM cloudflared waits that long for requests
	 * in flight, then ends (default 30 s); sandrun's own wait is longer. */
	const char *argv[] = { c->binary, "tunnel", "--no-autoupdate", "--grace-period",
			       GRACE, "--url", local, "--metrics", metrics, NULL };
	sr_proc_spec spec = { .size = sizeof(spec), .argv = argv, .flags = SR_PROC_GROUP };
	qt *t = calloc(1, sizeof(*t));

	snprintf(why, n, "out of memory");
	*status = SR_ENOMEM;
	if (!t || !(t->local = strdup(local))) {
		free(t);
		return NULL;
	}
	t->cf = c;
	if (!(t->mport = free_port())) {
		snprintf(why, n, "no free port on 127.0.0.1 for cloudflared's metrics server");
		*status = SR_EIO;
		free(t->local);
		free(t);
		return NULL;
	}
	snprintf(metrics, sizeof(metrics), "127.0.0.1:%d", t->mport);
	if (c->h->proc_spawn(c->h, &spec, &cbs, t, &t->proc) != SR_OK) {
		snprintf(why, n, "cannot start '%s' (set [tunnel.cloudflared] binary)", c->binary);
		*status = SR_EINVAL;
		c->h->log(c->h, SR_LOG_ERROR, "%s", why);
		free(t->local);
		free(t);
		return NULL;
	}
	t->state = T_STARTING;
	t->deadline_ms = now_ms() + c->start_timeout_ms;
	t->next = c->tunnels;
	c->tunnels = t;
	t->poll = c->h->timer_start(c->h, POLL_MS, 0, poll_quicktunnel, t);
	return t;
}

/* ------------------------------------------------------------------ ops */

static int cf_start(void *self, uint64_t req, sr_done_fn done, void *ud)
{
	cf *c = self;
	sr_result r = { .size = sizeof(r), .status = SR_OK };

	(void)req;
	/* Quick tunnels start per service, in resolve. */
	return c->h->complete(c->h, done, ud, &r);
}

static int cf_resolve(void *self, uint64_t req, const char *local_url, sr_done_fn done,
		      void *ud)
{
	cf *c = self;
	char why[600];
	waiter *w;
	int status;
	qt *t;

	if (!local_url ||
	    (strncmp(local_url, "http://", 7) != 0 && strncmp(local_url, "https://", 8) != 0)) {
		c->h->log(c->h, SR_LOG_ERROR, "'%s' is not an http(s) URL", local_url ? local_url : "");
		return SR_EINVAL;
	}
	if (c->release_done)
		return SR_ESTATE;
	for (t = c->tunnels; t; t = t->next)
		if (t->state != T_DEAD && strcmp(t->local, local_url) == 0)
			break;
	if (t && t->state == T_READY) {
		char url[4400];
		json_t *j;
		char *s;
		sr_result r = { .size = sizeof(r), .status = SR_OK };
		int rc;
		public_url(t, url, sizeof(url));
		j = json_pack("{s:s, s:{s:b, s:i}, s:b}", "url", url, "limits", "sse", 0,
			      "max_in_flight", 200, "ends_with_runner", 1);
		s = j ? json_dumps(j, JSON_COMPACT) : NULL;
		json_decref(j);
		if (!s)
			return SR_ENOMEM;
		r.json = s;
		rc = c->h->complete(c->h, done, ud, &r);
		free(s);
		return rc;
	}
	if (!(w = calloc(1, sizeof(*w))))
		return SR_ENOMEM;
	if (!t && !(t = spawn(c, local_url, why, sizeof(why), &status))) {
		sr_result r = { .size = sizeof(r), .status = status, .message = why };
		free(w);
		/* The cause is the run's message, not a separate log line. */
		return c->h->complete(c->h, done, ud, &r);
	}
	w->req = req;
	w->done = done;
	w->ud = ud;
	w->next = t->waiters;
	t->waiters = w;
	return SR_OK;
}

static void release_now(void *ud)
{
	cf *c = ud;

	c->h->timer_stop(c->release_kill);
	c->release_kill = NULL;
	for (qt *t = c->tunnels; t; t = t->next)
		if (t->proc)
			c->h->proc_kill(t->proc, SIGKILL);
}

static void release_check(cf *c)
{
	sr_done_fn done = c->release_done;
	sr_result r = { .size = sizeof(r), .status = SR_OK };

	if (!done || c->tunnels)
		return;
	if (c->release_kill) {
		c->h->timer_stop(c->release_kill);
		c->release_kill = NULL;
	}
	c->release_done = NULL;
	done(c->release_ud, &r);
}

static int cf_release(void *self, uint64_t req, const char *sandbox_id, sr_done_fn done,
		      void *ud)
{
	cf *c = self;
	sr_result r = { .size = sizeof(r), .status = SR_OK };

	(void)req;
	/* Quick tunnels are the runner's, not a sandbox's. */
	if (sandbox_id || !c->tunnels)
		return c->h->complete(c->h, done, ud, &r);
	if (c->release_done)
		return SR_ESTATE;
	c->release_done = done;
	c->release_ud = ud;
	for (qt *t = c->tunnels; t; t = t->next) {
		stop_polling(t);
		if (t->waiters)
			answer(t, SR_ECANCELED, "the tunnel is being released");
		if (t->proc)
			c->h->proc_kill(t->proc, SIGTERM);
	}
	c->release_kill = c->h->timer_start(c->h, 5000, 0, release_now, c);
	return SR_OK;
}

static int cf_cancel(void *self, uint64_t req)
{
	cf *c = self;
	sr_result r = { .size = sizeof(r), .status = SR_ECANCELED, .message = "cancelled" };

	for (qt *t = c->tunnels; t; t = t->next)
		for (waiter **p = &t->waiters; *p; p = &(*p)->next)
			if ((*p)->req == req) {
				waiter *w = *p;
				*p = w->next;
				w->done(w->ud, &r);
				free(w);
				return SR_OK;
			}
	return SR_ENOTFOUND;
}

/* doctor: `cloudflared --version` runs. */
typedef struct check {
	cf *c;
	sr_done_fn done;
	void *ud;
	char out[256];
	size_t len;
} check;

static void check_out(void *ud, const void *data, size_t len)
{
	check *k = ud;

	if (len > sizeof(k->out) - 1 - k->len)
		len = sizeof(k->out) - 1 - k->len;
	memcpy(k->out + k->len, data, len);
	k->len += len;
	k->out[k->len] = 0;
}

static void check_exit(void *ud, int status, int sig)
{
	check *k = ud;
	char detail[400];
	json_t *j;
	char *s;
	sr_result r = { .size = sizeof(r), .status = SR_OK };

	k->out[strcspn(k->out, "\n")] = 0;
	if (status == 0 && !sig)
		snprintf(detail, sizeof(detail), "%s (%s)", k->out, k->c->binary);
	else
		snprintf(detail, sizeof(detail), "'%s --version' failed (%s %d)", k->c->binary,
			 sig ? "signal" : "status", sig ? sig : status);
	j = json_pack("{s:b, s:s}", "ok", status == 0 && !sig, "detail", detail);
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	r.json = s;
	if (!s) {
		r.status = SR_ENOMEM;
		r.message = "out of memory";
	}
	k->done(k->ud, &r);
	free(s);
	free(k);
}

static int cf_doctor(void *self, sr_done_fn done, void *ud)
{
	static const sr_proc_callbacks cbs = {
		.size = sizeof(cbs), .on_stdout = check_out, .on_stderr = check_out,
		.on_exit = check_exit,
	};
	cf *c = self;
	const char *argv[] = { c->binary, "--version", NULL };
	sr_proc_spec spec = { .size = sizeof(spec), .argv = argv };
	check *k = calloc(1, sizeof(*k));
	sr_proc *p;

	if (!k)
		return SR_ENOMEM;
	k->c = c;
	k->done = done;
	k->ud = ud;
	if (c->h->proc_spawn(c->h, &spec, &cbs, k, &p) != SR_OK) {
		sr_result r = { .size = sizeof(r), .status = SR_OK,
				.json = "{\"ok\":false,\"detail\":\"cloudflared cannot be started: "
					"install it, or set [tunnel.cloudflared] binary\"}" };
		free(k);
		return c->h->complete(c->h, done, ud, &r);
	}
	/* k is the process's now: check_exit frees it. */
	// cppcheck-suppress memleak
	return SR_OK;
}

/* ------------------------------------------------------------ lifecycle */

static int cf_init(const sr_host *h, void **self)
{
	const char *bin = h->config_get(h, "binary");
	const char *st = h->config_get(h, "start_timeout");
	unsigned long secs = 30;
	cf *c;

	if (bin && !*bin)
		return h->config_invalid(h, "binary", "a command name or path");
	if (st) {
		char *end;
		secs = strtoul(st, &end, 10);
		if (!*st || *end || secs < 1 || secs > 600)
			return h->config_invalid(h, "start_timeout", "seconds, 1 to 600");
	}
	if (!(c = calloc(1, sizeof(*c))))
		return SR_ENOMEM;
	c->h = h;
	c->binary = bin ? bin : "cloudflared";
	c->start_timeout_ms = (unsigned)secs * 1000u;
	*self = c;
	return SR_OK;
}

static void cf_fini(void *self)
{
	cf *c = self;
	qt *t, *next;

	for (t = c->tunnels; t; t = next) {
		next = t->next;
		stop_polling(t);
		if (t->waiters)
			answer(t, SR_ECANCELED, "the plugin is stopping");
		if (t->proc) {
			/* A graceful stop: cloudflared unregisters its tunnel and
			 * ends within its grace period, on its own (nothing here
			 * waits any more). */
			c->h->proc_kill(t->proc, SIGTERM);
			c->h->log(c->h, SR_LOG_INFO, "cloudflared for %s stopped at exit", t->local);
		}
		free(t->local);
		free(t->hostname);
		free(t);
	}
	c->tunnels = NULL;
	if (c->release_kill)
		c->h->timer_stop(c->release_kill);
	free(c);
}

static const sr_tunnel_ops cloudflared_ops = {
	.size = sizeof(sr_tunnel_ops),
	.start = cf_start,
	.resolve = cf_resolve,
	.release = cf_release,
	.cancel = cf_cancel,
};

static const char *const cloudflared_keys[] = { "binary", "start_timeout", NULL };

static const sr_plugin_descriptor cloudflared_descriptor = {
	.abi_major = SR_ABI_MAJOR,
	.abi_minor = SR_ABI_MINOR,
	.size = sizeof(sr_plugin_descriptor),
	.kind = SR_PLUGIN_TUNNEL,
	.name = "cloudflared",
	.version = "0.1.0",
	.description = "runner-side services through Cloudflare quick tunnels (cloudflared)",
	.ops = &cloudflared_ops,
	.config_keys = cloudflared_keys,
	.init = cf_init,
	.fini = cf_fini,
	.doctor = cf_doctor,
};

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &cloudflared_descriptor;
}
