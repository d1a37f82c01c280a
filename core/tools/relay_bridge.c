/*
 * The relay bridge: a relay directory inside a sandbox the runner reaches
 * only through its provider, mirrored into a runner-side directory that
 * the ordinary relay loop serves (claims, guard, execution, publication).
 *
 * Order of one call (doc/relay-protocol.md, "Remote sandboxes"):
 *   1. take: rename REMOTE/<id>.req to REMOTE/.<id>.taken (the one decision
 *      against the shim's withdrawal, as for the local relay);
 *   2. read the taken request (at most 1 MiB);
 *   3. mark: JOURNAL/<id>.bridged, runner-side, before the request can run;
 *   4. hand it over: LOCAL/<id>.req (temporary, then link), where the relay
 *      loop claims, runs and answers it with LOCAL/<id>.res;
 *   5. put the answer: REMOTE/.<id>.res.tmp, then rename to REMOTE/<id>.res;
 *   6. the marker becomes JOURNAL/<id>.answered; LOCAL/<id>.res goes;
 *   7. remove REMOTE/.<id>.taken, then the marker.
 * A runner that starts finds, in the sandbox, what an earlier one left:
 * a request not taken is answered "not run"; a taken one whose marker says
 * answered is only cleaned; any other taken one is answered with an error
 * (the tool ran at most once, and is not run again). So no tool runs twice
 * and no call goes unanswered, whatever the point of a crash.
 *
 * Pick-up is pushed: `sandrun-shim watch REMOTE` runs in the sandbox over
 * the provider's exec channel and prints each request's name; a listing
 * every poll_ms is the safety net (every lost_poll_ms while the watch is
 * down). A provider operation that fails is tried again with a doubling
 * delay, up to `attempts` times; then the call is reported failed (event
 * relay.bridge.failed) and left to the next sweep.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "core/host/log.h"
#include "core/host/status.h"
#include "core/plugins/provider.h"
#include "core/tools/relay_bridge.h"
#include "shim/relay_proto.h"

#define DEFAULT_POLL_MS 10000
#define DEFAULT_LOST_POLL_MS 1000
#define DEFAULT_ATTEMPTS 8
#define BACKOFF_MS 100
#define BACKOFF_MAX_MS 3000
#define WATCH_STALL_MS 20000 /* the shim prints "#" every 5 s when idle */
#define WATCH_RETRY_MS 500
#define WATCH_RETRY_MAX_MS 10000
#define TICK_MS 1000

enum { IT_TAKE, IT_READ, IT_LOCAL, IT_PUT, IT_PUBLISH, IT_CLEAN };
static const char *const step_names[] = { "take", "read", "hand over", "put", "publish",
					  "clean" };

typedef struct item item;
typedef struct watcher watcher;

struct item {
	sr__bridge *b;
	char id[SR_RELAY_ID_MAX + 1];
	int state;
	int busy;          /* a provider operation or a retry timer pending */
	unsigned attempts; /* of the current step */
	uv_timer_t *retry;
	char *data;        /* the request, then the answer */
	size_t len;
	int sweep;         /* a leftover of an earlier runner */
	item *next;
};

/* One run of `sandrun-shim watch` in the sandbox. */
struct watcher {
	sr__bridge *b;
	uint64_t req;
	int dead;          /* given up: its callbacks do nothing */
	char line[SR_RELAY_ID_MAX + 16];
	size_t len;
	int overlong;
	watcher *next;
};

struct sr__bridge {
	sr__ctx *ctx;
	sr__plugin *p;
	char *sandbox, *remote, *local, *journal, *shim;
	uint64_t poll_ms, lost_poll_ms;
	unsigned attempts;
	void (*event)(void *ud, json_t *event);
	void *ud;
	int refs;    /* callbacks and handles still to come */
	int closing;
	int started;
	uv_fs_event_t local_watch;
	int local_inited;
	uv_timer_t tick;
	uint64_t last_list;
	int listing;
	watcher *watch;    /* the live one, or NULL */
	watcher *watchers; /* every one not yet ended */
	uint64_t last_heard, retry_at;
	unsigned watch_failures;
	item *items;
	void (*closed)(void *ud);
	void *closed_ud;
	void (*sweep_done)(void *ud, int status, const char *message);
	void *sweep_ud;
	int sweep_status;
	char sweep_message[300];
	int sweep_listing;
};

static void step(item *it);

/* ------------------------------------------------------------ basics */

static void emit(sr__bridge *b, json_t *ev)
{
	if (ev && b->event && !b->closing)
		b->event(b->ud, ev);
	json_decref(ev);
}

static void really_free(sr__bridge *b)
{
	void (*closed)(void *) = b->closed;
	void *closed_ud = b->closed_ud;

	while (b->watchers) {
		watcher *w = b->watchers;
		b->watchers = w->next;
		free(w);
	}
	free(b->sandbox);
	free(b->remote);
	free(b->local);
	free(b->journal);
	free(b->shim);
	free(b);
	if (closed)
		closed(closed_ud);
}

static void hold(sr__bridge *b)
{
	b->refs++;
}

static void release(sr__bridge *b)
{
	if (--b->refs == 0 && b->closing)
		really_free(b);
}

static void on_handle_closed(uv_handle_t *h)
{
	release(h->data);
}

static void remote_path(sr__bridge *b, char *buf, size_t n, const char *pre,
			const char *id, const char *suffix)
{
	snprintf(buf, n, "%s/%s%s%s", b->remote, pre, id, suffix);
}

static void marker(sr__bridge *b, char *buf, size_t n, const char *id, const char *kind)
{
	snprintf(buf, n, "%s/%s.%s", b->journal, id, kind);
}

static item *find(sr__bridge *b, const char *id)
{
	for (item *it = b->items; it; it = it->next)
		if (strcmp(it->id, id) == 0)
			return it;
	return NULL;
}

static void sweep_item_ended(sr__bridge *b);

/* Forget an item (its operations have all come back). */
static void item_free(item *it)
{
	sr__bridge *b = it->b;
	int sweep = it->sweep;

	for (item **pp = &b->items; *pp; pp = &(*pp)->next)
		if (*pp == it) {
			*pp = it->next;
			break;
		}
	free(it->data);
	free(it);
	if (sweep && !b->closing)
		sweep_item_ended(b);
}

static void on_retry_closed(uv_handle_t *h)
{
	item *it = h->data;
	sr__bridge *b = it->b;

	free(h);
	it->retry = NULL;
	it->busy = 0;
	if (b->closing)
		item_free(it);
	release(b);
}

static void free_handle(uv_handle_t *h)
{
	free(h);
}

static void on_retry(uv_timer_t *t)
{
	item *it = t->data;

	uv_close((uv_handle_t *)t, free_handle);
	it->retry = NULL;
	it->busy = 0;
	if (it->b->closing) {
		sr__bridge *b = it->b;
		item_free(it);
		release(b);
		return;
	}
	step(it);
	release(it->b);
}

/* The current step failed: again later, or give the call up. */
static void failed(item *it, int status, const char *message)
{
	sr__bridge *b = it->b;
	uint64_t delay;
	char msg[600];

	snprintf(msg, sizeof(msg), "%s", message ? message : sr__strerror(status));
	if (++it->attempts < b->attempts) {
		delay = (uint64_t)BACKOFF_MS << (it->attempts - 1 < 5 ? it->attempts - 1 : 5);
		if (delay > BACKOFF_MAX_MS)
			delay = BACKOFF_MAX_MS;
		sr__log(SR_LOG_DEBUG, "relay", "bridge: %s of call %s failed (%s); again in "
			"%llu ms", step_names[it->state], it->id, msg, (unsigned long long)delay);
		if ((it->retry = malloc(sizeof(*it->retry)))) {
			uv_timer_init(b->ctx->loop, it->retry);
			it->retry->data = it;
			it->busy = 1;
			hold(b);
			uv_timer_start(it->retry, on_retry, delay, 0);
			return;
		}
	}
	if (it->state == IT_CLEAN) {
		/* The answer is delivered; what is left goes with the next sweep. */
		sr__log(SR_LOG_WARN, "relay", "bridge: cannot remove %s/.%s.taken: %s",
			b->remote, it->id, msg);
	} else {
		sr__log(SR_LOG_ERROR, "relay", "bridge: call %s: %s failed %u times, the last "
			"with: %s; the next turn's sweep answers it", it->id,
			step_names[it->state], it->attempts, msg);
		emit(b, json_pack("{s:s, s:s, s:s, s:s}", "type", "relay.bridge.failed", "call_id",
				  it->id, "step", step_names[it->state], "message", msg));
		if (it->sweep && b->sweep_status == SR_OK) {
			b->sweep_status = status ? status : SR_EIO;
			snprintf(b->sweep_message, sizeof(b->sweep_message),
				 "cannot answer call %s left in %s: %s", it->id, b->remote, msg);
		}
	}
	item_free(it);
}

static void next_step(item *it, int state)
{
	it->state = state;
	it->attempts = 0;
	step(it);
}

/* An error answer for the call, to be put in the sandbox. */
static void answer_error(item *it, const char *message)
{
	json_t *res = json_pack("{s:i, s:s, s:s, s:s}", "v", SR_RELAY_VERSION, "id", it->id,
				"status", "error", "error", message);

	free(it->data);
	it->data = res ? json_dumps(res, JSON_COMPACT) : NULL;
	it->len = it->data ? strlen(it->data) : 0;
	json_decref(res);
	if (!it->data) {
		failed(it, SR_ENOMEM, "out of memory");
		return;
	}
	next_step(it, IT_PUT);
}

/* ------------------------------------------------------- local side */

static int write_local(item *it, char *why, size_t n)
{
	sr__bridge *b = it->b;
	char tmp[4400], final[4400], mark[4400];
	size_t off = 0;
	int fd;

	marker(b, mark, sizeof(mark), it->id, "bridged");
	fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		snprintf(why, n, "cannot write %s: %s", mark, strerror(errno));
		return -1;
	}
	close(fd);
	snprintf(tmp, sizeof(tmp), "%s/.%s.req.bridge.tmp", b->local, it->id);
	snprintf(final, sizeof(final), "%s/%s" SR_RELAY_REQ_SUFFIX, b->local, it->id);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		snprintf(why, n, "cannot write %s: %s", tmp, strerror(errno));
		return -1;
	}
	while (off < it->len) {
		ssize_t w = write(fd, it->data + off, it->len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			snprintf(why, n, "cannot write %s: %s", tmp, strerror(errno));
			close(fd);
			unlink(tmp);
			return -1;
		}
		off += (size_t)w;
	}
	if (close(fd) != 0 || (link(tmp, final) != 0 && errno != EEXIST)) {
		snprintf(why, n, "cannot publish %s: %s", final, strerror(errno));
		unlink(tmp);
		return -1;
	}
	unlink(tmp);
	return 0;
}

/* If the relay loop answered it, read the answer and put it remotely. */
static void collect(item *it)
{
	char path[4400];
	struct stat st;
	char *buf;
	ssize_t n;
	int fd;

	if (it->state != IT_LOCAL || it->busy)
		return;
	snprintf(path, sizeof(path), "%s/%s" SR_RELAY_RES_SUFFIX, it->b->local, it->id);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > SR_RELAY_RES_MAX ||
	    !(buf = malloc((size_t)st.st_size + 1))) {
		close(fd);
		answer_error(it, "the runner's answer could not be read");
		return;
	}
	n = read(fd, buf, (size_t)st.st_size);
	close(fd);
	if (n != st.st_size) {
		free(buf);
		return; /* being written? The relay renames whole files: next look */
	}
	free(it->data);
	it->data = buf;
	it->len = (size_t)n;
	next_step(it, IT_PUT);
}

static void on_local_event(uv_fs_event_t *h, const char *name, int events, int status)
{
	sr__bridge *b = h->data;
	size_t n;
	char id[SR_RELAY_ID_MAX + 1];
	item *it;

	(void)events;
	if (status < 0 || !name || b->closing)
		return;
	if (!(n = sr_relay_id_of(name, SR_RELAY_RES_SUFFIX)))
		return;
	snprintf(id, sizeof(id), "%.*s", (int)n, name);
	if ((it = find(b, id)))
		collect(it);
}

/* ------------------------------------------------------------ steps */

static void on_op(void *ud, const sr_result *r)
{
	item *it = ud;
	sr__bridge *b = it->b;
	char why[600];

	it->busy = 0;
	if (b->closing) {
		item_free(it);
		release(b);
		return;
	}
	switch (it->state) {
	case IT_TAKE:
		if (r->status == SR_ENOTFOUND)
			item_free(it); /* withdrawn by the shim, or taken already */
		else if (r->status != SR_OK)
			failed(it, r->status, r->message);
		else
			next_step(it, IT_READ);
		break;
	case IT_READ:
		if (r->status == SR_ETOOBIG) {
			answer_error(it, "the request is over the relay's limit of 1 MiB");
		} else if (r->status == SR_ENOTFOUND) {
			item_free(it); /* the sandbox removed it */
		} else if (r->status != SR_OK) {
			failed(it, r->status, r->message);
		} else if (it->sweep) {
			answer_error(it, "the call was not run: it was made while an earlier "
				     "runner served this sandbox, which ended; make it again");
		} else {
			free(it->data);
			it->len = r->len;
			it->data = malloc(r->len ? r->len : 1);
			if (!it->data) {
				failed(it, SR_ENOMEM, "out of memory");
			} else {
				if (r->len)
					memcpy(it->data, r->data, r->len);
				if (write_local(it, why, sizeof(why)) != 0) {
					failed(it, SR_EIO, why);
				} else {
					it->state = IT_LOCAL;
					collect(it);
				}
			}
		}
		break;
	case IT_PUT:
		if (r->status != SR_OK)
			failed(it, r->status, r->message);
		else
			next_step(it, IT_PUBLISH);
		break;
	case IT_PUBLISH:
		if (r->status == SR_ENOTFOUND) {
			it->state = IT_PUT; /* the temporary went: put it again */
			failed(it, r->status, r->message);
		} else if (r->status != SR_OK) {
			failed(it, r->status, r->message);
		} else {
			char from[4400], to[4400], res[4400];
			marker(b, from, sizeof(from), it->id, "bridged");
			marker(b, to, sizeof(to), it->id, "answered");
			if (rename(from, to) != 0) {
				int fd = open(to, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
				if (fd >= 0)
					close(fd);
			}
			snprintf(res, sizeof(res), "%s/%s" SR_RELAY_RES_SUFFIX, b->local, it->id);
			unlink(res);
			next_step(it, IT_CLEAN);
		}
		break;
	case IT_CLEAN:
		if (r->status != SR_OK && r->status != SR_ENOTFOUND) {
			failed(it, r->status, r->message);
		} else {
			char mark[4400];
			marker(b, mark, sizeof(mark), it->id, "answered");
			unlink(mark);
			marker(b, mark, sizeof(mark), it->id, "bridged");
			unlink(mark);
			item_free(it);
		}
		break;
	default:
		break;
	}
	release(b);
}

static void step(item *it)
{
	sr__bridge *b = it->b;
	char a[4400], c[4400];
	int rc;

	if (it->state == IT_LOCAL)
		return; /* the relay loop has it */
	it->busy = 1;
	hold(b);
	switch (it->state) {
	case IT_TAKE:
		remote_path(b, a, sizeof(a), "", it->id, SR_RELAY_REQ_SUFFIX);
		remote_path(b, c, sizeof(c), ".", it->id, ".taken");
		rc = sr__provider_file_rename(b->p, sr__next_req(), b->sandbox, a, c, on_op, it);
		break;
	case IT_READ:
		remote_path(b, a, sizeof(a), ".", it->id, ".taken");
		rc = sr__provider_file_get(b->p, sr__next_req(), b->sandbox, a, SR_RELAY_REQ_MAX,
					   on_op, it);
		break;
	case IT_PUT:
		remote_path(b, a, sizeof(a), ".", it->id, ".res.tmp");
		rc = sr__provider_file_put(b->p, sr__next_req(), b->sandbox, a, it->data, it->len,
					   0600, on_op, it);
		break;
	case IT_PUBLISH:
		remote_path(b, a, sizeof(a), ".", it->id, ".res.tmp");
		remote_path(b, c, sizeof(c), "", it->id, SR_RELAY_RES_SUFFIX);
		rc = sr__provider_file_rename(b->p, sr__next_req(), b->sandbox, a, c, on_op, it);
		break;
	default: /* IT_CLEAN */
		remote_path(b, a, sizeof(a), ".", it->id, ".taken");
		rc = sr__provider_file_remove(b->p, sr__next_req(), b->sandbox, a, on_op, it);
		break;
	}
	if (rc != SR_OK) {
		it->busy = 0;
		release(b);
		failed(it, rc, NULL);
	}
}

static item *item_new(sr__bridge *b, const char *id, size_t len, int state, int sweep)
{
	item *it = calloc(1, sizeof(*it));

	if (!it)
		return NULL;
	it->b = b;
	snprintf(it->id, sizeof(it->id), "%.*s", (int)len, id);
	it->state = state;
	it->sweep = sweep;
	it->next = b->items;
	b->items = it;
	return it;
}

/* A name seen in the sandbox's directory. */
static void offer(sr__bridge *b, const char *name)
{
	size_t n = sr_relay_id_of(name, SR_RELAY_REQ_SUFFIX);
	char id[SR_RELAY_ID_MAX + 1];
	item *it;

	if (!n || b->closing || !b->started)
		return;
	snprintf(id, sizeof(id), "%.*s", (int)n, name);
	if (find(b, id))
		return;
	if ((it = item_new(b, name, n, IT_TAKE, 0)))
		step(it);
}

/* ------------------------------------------------------ listing */

static void on_list(void *ud, const sr_result *r)
{
	sr__bridge *b = ud;
	json_t *list, *e;
	size_t i;

	b->listing = 0;
	if (!b->closing && r->status == SR_OK &&
	    (list = json_loads(r->json ? r->json : "", 0, NULL))) {
		json_array_foreach(list, i, e)
			offer(b, json_string_value(json_object_get(e, "name")) ?
					 json_string_value(json_object_get(e, "name")) : "");
		json_decref(list);
	} else if (!b->closing) {
		sr__log(SR_LOG_DEBUG, "relay", "bridge: cannot list %s: %s", b->remote,
			r->message ? r->message : sr__strerror(r->status));
	}
	release(b);
}

static void list_remote(sr__bridge *b)
{
	if (b->listing)
		return;
	b->listing = 1;
	b->last_list = uv_now(b->ctx->loop);
	hold(b);
	if (sr__provider_file_list(b->p, sr__next_req(), b->sandbox, b->remote, on_list, b) !=
	    SR_OK) {
		b->listing = 0;
		release(b);
	}
}

/* ------------------------------------------------------- the watch */

static void watch_start(sr__bridge *b);

static void watcher_gone(watcher *w)
{
	sr__bridge *b = w->b;

	for (watcher **pp = &b->watchers; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	free(w);
	release(b);
}

static void watch_lost(sr__bridge *b, const char *why)
{
	uint64_t delay;

	if (!b->watch)
		return;
	b->watch->dead = 1;
	(void)sr__provider_channel_signal(b->p, b->watch->req, SIGKILL);
	b->watch = NULL;
	b->watch_failures++;
	delay = (uint64_t)WATCH_RETRY_MS << (b->watch_failures < 5 ? b->watch_failures : 5);
	if (delay > WATCH_RETRY_MAX_MS)
		delay = WATCH_RETRY_MAX_MS;
	b->retry_at = uv_now(b->ctx->loop) + delay;
	sr__log(SR_LOG_WARN, "relay", "bridge: the watch of %s stopped (%s); listing every "
		"%llu ms, watching again in %llu ms", b->remote, why,
		(unsigned long long)b->lost_poll_ms, (unsigned long long)delay);
	emit(b, json_pack("{s:s, s:s, s:s}", "type", "relay.bridge.watch", "state", "lost",
			  "message", why));
	list_remote(b); /* what came meanwhile */
}

static void on_watch_out(void *ud, const void *data, size_t len)
{
	watcher *w = ud;
	sr__bridge *b = w->b;
	const char *p = data;

	if (w->dead || b->closing)
		return;
	b->last_heard = uv_now(b->ctx->loop);
	if (b->watch_failures && w == b->watch)
		b->watch_failures = 0;
	for (size_t i = 0; i < len; i++) {
		if (p[i] != '\n') {
			if (w->len + 1 < sizeof(w->line))
				w->line[w->len++] = p[i];
			else
				w->overlong = 1;
			continue;
		}
		w->line[w->len] = 0;
		if (!w->overlong && strcmp(w->line, "#") != 0)
			offer(b, w->line);
		w->len = 0;
		w->overlong = 0;
	}
}

static void on_watch_err(void *ud, const void *data, size_t len)
{
	watcher *w = ud;

	if (!w->dead && len)
		sr__log(SR_LOG_WARN, "relay", "bridge: watch: %.*s", (int)(len > 300 ? 300 : len),
			(const char *)data);
}

static void on_watch_exit(void *ud, int status, int sig)
{
	watcher *w = ud;
	char why[100];

	if (!w->dead && !w->b->closing && status == 0 && sig == 0) {
		/* Its lifetime (--for) is over: a new one, at once. */
		w->b->watch = NULL;
		watch_start(w->b);
	} else if (!w->dead && !w->b->closing) {
		snprintf(why, sizeof(why), "sandrun-shim watch ended (status %d, signal %d)",
			 status, sig);
		watch_lost(w->b, why);
	}
	watcher_gone(w);
}

static void on_watch_failed(void *ud, int status, const char *message)
{
	watcher *w = ud;
	char why[400];

	if (!w->dead && !w->b->closing) {
		snprintf(why, sizeof(why), "%s", message ? message : sr__strerror(status));
		watch_lost(w->b, why);
	}
	watcher_gone(w);
}

static void watch_start(sr__bridge *b)
{
	static const sr_channel_callbacks cbs = { sizeof(cbs), on_watch_out, on_watch_err,
						  on_watch_exit, on_watch_failed };
	const char *argv[] = { b->shim, "watch", "--for", "3600", b->remote, NULL };
	/* A confined local sandbox shows the shim read-only at its path. */
	const char *host[] = { b->shim };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, host, 1 };
	watcher *w;
	int rc;

	if (!b->shim || b->watch || b->closing || !(w = calloc(1, sizeof(*w))))
		return;
	w->b = b;
	w->req = sr__next_req();
	hold(b);
	rc = sr__provider_exec(b->p, w->req, b->sandbox, &spec, &cbs, w);
	if (rc != SR_OK) {
		free(w);
		release(b);
		b->watch_failures++;
		b->retry_at = uv_now(b->ctx->loop) + WATCH_RETRY_MAX_MS;
		sr__log(SR_LOG_WARN, "relay", "bridge: cannot start sandrun-shim watch in %s: %s",
			b->sandbox, sr__strerror(rc));
		return;
	}
	w->next = b->watchers;
	b->watchers = w;
	b->watch = w;
	b->last_heard = uv_now(b->ctx->loop);
	b->retry_at = 0;
	(void)sr__provider_channel_close_input(b->p, w->req); /* it reads nothing */
	emit(b, json_pack("{s:s, s:s}", "type", "relay.bridge.watch", "state", "started"));
}

static void on_tick(uv_timer_t *t)
{
	sr__bridge *b = t->data;
	uint64_t now = uv_now(b->ctx->loop);

	if (b->closing)
		return;
	if (b->watch && now - b->last_heard > WATCH_STALL_MS)
		watch_lost(b, "no word from sandrun-shim watch in 20 s");
	if (!b->watch && b->shim && b->retry_at && now >= b->retry_at)
		watch_start(b);
	if (now - b->last_list >= (b->watch ? b->poll_ms : b->lost_poll_ms))
		list_remote(b);
	for (item *it = b->items, *next; it; it = next) {
		next = it->next;
		collect(it);
	}
}

/* ------------------------------------------------------------ sweep */

/* Markers of calls no longer in the sandbox: nothing to answer. */
static void drop_markers(sr__bridge *b)
{
	DIR *d = opendir(b->journal);
	struct dirent *e;
	char path[4400];

	while (d && (e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if ((n > 8 && strcmp(e->d_name + n - 8, ".bridged") == 0) ||
		    (n > 9 && strcmp(e->d_name + n - 9, ".answered") == 0)) {
			snprintf(path, sizeof(path), "%s/%s", b->journal, e->d_name);
			unlink(path);
		}
	}
	if (d)
		closedir(d);
}

static void sweep_finish(sr__bridge *b)
{
	void (*done)(void *, int, const char *) = b->sweep_done;

	b->sweep_done = NULL;
	if (b->sweep_status == SR_OK)
		drop_markers(b);
	if (done)
		done(b->sweep_ud, b->sweep_status,
		     b->sweep_status == SR_OK ? NULL : b->sweep_message);
}

static void sweep_item_ended(sr__bridge *b)
{
	if (!b->sweep_done || b->sweep_listing)
		return;
	for (item *it = b->items; it; it = it->next)
		if (it->sweep)
			return;
	sweep_finish(b);
}

static void on_sweep_removed(void *ud, const sr_result *r)
{
	(void)r;
	release(ud);
}

static void on_sweep_list(void *ud, const sr_result *r)
{
	sr__bridge *b = ud;
	json_t *list = NULL, *e;
	size_t i, n;
	char path[4400], mark[4400];

	if (b->closing) {
		b->sweep_listing = 0;
		release(b);
		return;
	}
	if (r->status == SR_ENOTFOUND) {
		list = json_array(); /* nothing was ever there */
	} else if (r->status != SR_OK || !(list = json_loads(r->json ? r->json : "", 0, NULL))) {
		b->sweep_status = r->status != SR_OK ? r->status : SR_EPROTO;
		snprintf(b->sweep_message, sizeof(b->sweep_message), "cannot list %s: %s",
			 b->remote, r->message ? r->message : sr__strerror(b->sweep_status));
	}
	json_array_foreach(list, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		item *it = NULL;
		if (!name)
			continue;
		if ((n = sr_relay_id_of(name, SR_RELAY_REQ_SUFFIX))) {
			it = item_new(b, name, n, IT_TAKE, 1);
		} else if (name[0] == '.' && (n = sr_relay_id_of(name + 1, ".taken"))) {
			char id[SR_RELAY_ID_MAX + 1];
			snprintf(id, sizeof(id), "%.*s", (int)n, name + 1);
			marker(b, mark, sizeof(mark), id, "answered");
			it = item_new(b, name + 1, n, IT_CLEAN, 1);
			if (it && access(mark, F_OK) != 0)
				answer_error(it, "the runner serving this sandbox ended while the "
					     "call was in progress; it is not run again, and its "
					     "result, if it had one, is lost");
			else if (it)
				step(it);
			continue;
		} else if (sr_relay_id_of(name, SR_RELAY_RES_SUFFIX) ||
			   (name[0] == '.' && strstr(name, ".tmp"))) {
			snprintf(path, sizeof(path), "%s/%s", b->remote, name);
			hold(b);
			if (sr__provider_file_remove(b->p, sr__next_req(), b->sandbox, path,
						     on_sweep_removed, b) != SR_OK)
				release(b);
		}
		if (it)
			step(it);
	}
	json_decref(list);
	b->sweep_listing = 0;
	sweep_item_ended(b);
	release(b);
}

int sr__bridge_sweep(sr__bridge *b, void (*done)(void *ud, int status, const char *message),
		     void *ud)
{
	int rc;

	if (b->sweep_done || b->started)
		return SR_ESTATE;
	b->sweep_done = done;
	b->sweep_ud = ud;
	b->sweep_status = SR_OK;
	b->sweep_listing = 1;
	hold(b);
	rc = sr__provider_file_list(b->p, sr__next_req(), b->sandbox, b->remote, on_sweep_list,
				    b);
	if (rc != SR_OK) {
		b->sweep_done = NULL;
		b->sweep_listing = 0;
		release(b);
	}
	return rc;
}

/* ---------------------------------------------------------- lifetime */

int sr__bridge_new(sr__ctx *ctx, const sr__bridge_opts *o, sr__bridge **out, char *err,
		   size_t errlen)
{
	sr__bridge *b;

	*out = NULL;
	if (!o->provider || !o->sandbox || !o->remote_dir || o->remote_dir[0] != '/' ||
	    !o->local_dir || !o->journal) {
		snprintf(err, errlen, "relay bridge: a provider, a sandbox, an absolute remote "
			 "directory, a local directory and a journal are needed");
		return SR_EINVAL;
	}
	if (!(b = calloc(1, sizeof(*b))))
		return SR_ENOMEM;
	b->ctx = ctx;
	b->p = o->provider;
	b->sandbox = strdup(o->sandbox);
	b->remote = strdup(o->remote_dir);
	b->local = strdup(o->local_dir);
	b->journal = strdup(o->journal);
	b->shim = o->shim ? strdup(o->shim) : NULL;
	b->poll_ms = o->poll_ms ? o->poll_ms : DEFAULT_POLL_MS;
	b->lost_poll_ms = o->lost_poll_ms ? o->lost_poll_ms : DEFAULT_LOST_POLL_MS;
	b->attempts = o->attempts ? o->attempts : DEFAULT_ATTEMPTS;
	b->event = o->event;
	b->ud = o->ud;
	b->refs = 1; /* the owner's, given back by sr__bridge_free */
	if (!b->sandbox || !b->remote || !b->local || !b->journal || (o->shim && !b->shim)) {
		really_free(b);
		return SR_ENOMEM;
	}
	*out = b;
	return SR_OK;
}

int sr__bridge_start(sr__bridge *b)
{
	int rc;

	if (b->started || b->sweep_done)
		return SR_ESTATE;
	b->started = 1;
	uv_timer_init(b->ctx->loop, &b->tick);
	b->tick.data = b;
	hold(b);
	if ((rc = uv_fs_event_init(b->ctx->loop, &b->local_watch)) == 0) {
		b->local_watch.data = b;
		b->local_inited = 1;
		hold(b);
		rc = uv_fs_event_start(&b->local_watch, on_local_event, b->local, 0);
	}
	if (rc != 0)
		sr__log(SR_LOG_WARN, "relay", "bridge: no inotify watch of %s (%s); looking "
			"every %d ms", b->local, uv_strerror(rc), TICK_MS);
	watch_start(b);
	if (!b->watch && b->shim)
		b->retry_at = uv_now(b->ctx->loop) + WATCH_RETRY_MS;
	list_remote(b);
	uv_timer_start(&b->tick, on_tick, TICK_MS, TICK_MS);
	return SR_OK;
}

size_t sr__bridge_in_flight(const sr__bridge *b)
{
	size_t n = 0;

	for (const item *it = b->items; it; it = it->next)
		n++;
	return n;
}

static void on_deferred(uv_timer_t *t)
{
	sr__bridge *b = t->data;

	uv_close((uv_handle_t *)t, free_handle);
	release(b);
}

void sr__bridge_free(sr__bridge *b, void (*closed)(void *ud), void *ud)
{
	uv_timer_t *later;

	if (!b) {
		if (closed)
			closed(ud);
		return;
	}
	b->closing = 1;
	b->closed = closed;
	b->closed_ud = ud;
	/* closed is never called from inside this call: the owner's release
	 * goes through the loop once. */
	if ((later = malloc(sizeof(*later)))) {
		uv_timer_init(b->ctx->loop, later);
		later->data = b;
		hold(b);
		uv_timer_start(later, on_deferred, 0, 0);
	}
	b->sweep_done = NULL;
	if (b->watch) {
		b->watch->dead = 1;
		(void)sr__provider_channel_signal(b->p, b->watch->req, SIGKILL);
		b->watch = NULL;
	}
	for (item *it = b->items, *next; it; it = next) {
		next = it->next;
		if (it->retry) {
			uv_timer_stop(it->retry);
			uv_close((uv_handle_t *)it->retry, on_retry_closed);
		} else if (!it->busy) {
			item_free(it);
		}
	}
	if (b->started) {
		uv_timer_stop(&b->tick);
		uv_close((uv_handle_t *)&b->tick, on_handle_closed);
		if (b->local_inited) {
			uv_fs_event_stop(&b->local_watch);
			uv_close((uv_handle_t *)&b->local_watch, on_handle_closed);
		}
	}
	release(b);
}
