/*
 * The relay loop: picks up request files the shim publishes, claims them
 * durably, validates, runs the permission guard, executes the tool, and
 * publishes exactly one response per request.
 *
 * Order of a call (doc/relay-protocol.md):
 *   1+2. claim and take DIR/<id>.req in one step: rename it to
 *      JOURNAL/<id>.claim, never replacing (renameat2 RENAME_NOREPLACE).
 *      This is the one decision against the shim's withdrawal, which
 *      unlinks the request: exactly one of the two succeeds. Where the
 *      journal is on another file system (or the call is refused), the two
 *      steps are made apart instead:
 *   1. create JOURNAL/<id>.claim (a hard link to JOURNAL/.anchor, or O_EXCL;
 *      never replacing; runner-side, the sandbox cannot touch it);
 *   2. take DIR/<id>.req by renaming it to a hidden name, then read it
 *      (never following a symlink, never reading anything but a regular
 *      file of at most 1 MiB);
 *   3. validate, guard, execute;
 *   4. publish DIR/<id>.res (temporary, then rename: replacing whatever the
 *      sandbox may have planted; the runner never reads response files);
 *   5. remove the claim (and the taken entry, when apart).
 *   4+5. when the claim holds the request, in one step: the response is
 *      written into the claim, which is renamed to DIR/<id>.res.
 * A claim found at start belongs to a runner that died between 1 and 5: it
 * is answered with an error and the tool is not run again.
 *
 * DIR lies where the sandbox writes. It is opened once, at the start (its
 * last component made a real directory of the runner's), and every name
 * in it is then opened, renamed and removed beneath that descriptor: a
 * directory or a link the sandbox puts in its place later is never
 * followed, and the inotify watch stays on the directory opened.
 *
 * File reads and writes here are small (at most 1 MiB, usually a few
 * hundred bytes) and local, done on the loop thread.
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/host/fsutil.h"
#include "core/host/http.h"
#include "core/host/log.h"
#include "core/tools/relay.h"
#include "core/host/status.h"
#include "shim/mcp_common.h"
#include "shim/relay_proto.h"
#include "shim/trace_timing.h"

#define RESULT_TEXT_MAX 100000
#define CALLBACK_BODY_MAX (4u << 20)
#define DEFAULT_ASK_TIMEOUT_MS (10ULL * 60 * 1000)
#define DEFAULT_POLL_MS 2000
#define DEFAULT_PUBLISH_ATTEMPTS 10
#define PUBLISH_BACKOFF_MS 50      /* doubled after each failure... */
#define PUBLISH_BACKOFF_MAX_MS 2000 /* ...up to this */
#define DEFAULT_PER_ENDPOINT 16     /* callbacks at once to one host:port */
#define QUEUE_MAX 16384             /* calls waiting for one endpoint */

typedef struct call call;

/* A callback endpoint (scheme://host:port): at most max_per_endpoint
 * callbacks run at once; the rest wait in a FIFO, each with its own
 * timeout running. */
typedef struct endpoint {
	char key[300];
	unsigned active;
	size_t queued;
	call *head, *tail;
	int pumping;
	struct endpoint *next;
} endpoint;

struct sr__relay {
	sr__ctx *ctx;
	char *dir, *journal;
	const sr__toolset *tools;
	const sr__guard *guard;
	int ask_policy;
	uint64_t ask_timeout_ms, poll_ms;
	unsigned publish_attempts;
	unsigned max_per_endpoint;
	endpoint *endpoints;
	void (*event)(void *ud, json_t *event);
	void *ud;
	uv_poll_t watch;         /* on watch_fd */
	int watch_fd;            /* inotify, or -1 */
	uv_timer_t poll;
	int watching;
	int closing;
	int open_handles;
	/* The temporary of the next response, made ahead (see make_spare). */
	int spare_fd;            /* an O_TMPFILE in dir, or -1 */
	/* dir, opened once at the start: every request and response is
	 * opened, renamed and removed beneath it, so a directory (or a link)
	 * the sandbox puts in dir's place mid-turn changes nothing. */
	int dir_fd;
	int no_spare;            /* O_TMPFILE or /proc unusable here */
	/* Under a root runner, dir's parent belongs to the sandbox's agent's
	 * user: dir and every response are given to that user. */
	int give;
	unsigned give_uid, give_gid;
	int no_move;             /* claims cannot be taken by rename here */
	int trace_fd; /* SANDRUN_TRACE_TIMING, or -1 (shim/trace_timing.h) */
	/* The CPU latency request (see cpu_hold): the device, its open fd
	 * while held or -1, the timer that lets it go, whether it failed. */
	char *cpu_device;
	int cpu_fd;
	uv_timer_t *cpu_linger;
	int cpu_failed;
	call *calls;
};

enum call_state { CALL_NEW, CALL_ASKING, CALL_QUEUED, CALL_RUNNING, CALL_PUBLISHING };

/* Timing stamps of a call, taken only when tracing. */
enum { RT_PICKED, RT_CLAIMED, RT_READ, RT_SENDING, RT_ANSWERED, RT_PUBLISHED, RT_DONE, RT_N };
static const char *const stage_names[RT_N] = {
	"picked", "claimed", "read", "sending", "answered", "published", "done"
};

struct call {
	sr__relay *r;
	char id[SR_RELAY_ID_MAX + 1];
	char *tool_name;
	const sr__tool *tool;
	json_t *args;
	int state;
	uint64_t started;
	sr_http_call *http;
	uv_timer_t *ask_timer;
	uv_timer_t *retry_timer; /* publishing again after a failure */
	uv_timer_t *queue_timer; /* its timeout while it waits for a slot */
	endpoint *ep;            /* while queued or running a callback */
	call *qnext;
	uint64_t queued_at;
	json_t *response;        /* being published */
	unsigned attempts;
	sr__relay_done_fn done; /* in-process caller, or NULL: a file */
	void *done_ud;
	uint64_t t[RT_N];        /* when tracing */
	int unannounced;         /* dispatched, its tool.call not emitted yet */
	char taken[40];          /* its taken request entry, removed once answered */
	call *next;
};

static inline void stamp(call *c, int stage)
{
	if (c->r->trace_fd >= 0)
		c->t[stage] = sr_timing_now();
}

/* ------------------------------------------------------------ events */

/* Takes ev; NULL (it could not be built) is dropped. */
static void emit(sr__relay *r, json_t *ev)
{
	if (ev && r->event)
		r->event(r->ud, ev);
	json_decref(ev);
}

/* Emit the tool.call of a dispatched call, once. It waits until the
 * call's callback request is on its way (so that the event is written
 * while the tool works, not before it starts) or until anything else
 * happens to the call first: a result, a permission request, a handover
 * or a wait for a slot, which all follow it in the events. */
static void announce(call *c)
{
	if (!c->unannounced)
		return;
	c->unannounced = 0;
	emit(c->r, json_pack("{s:s, s:s, s:s, s:O}", "type", "tool.call", "call_id",
			     c->id, "tool", c->tool_name, "args", c->args));
}

static void reject_file(sr__relay *r, const char *name, const char *why)
{
	sr__log(SR_LOG_WARN, "relay", "%s/%s: %s", r->dir, name, why);
	/* A planted name need not be UTF-8. */
	emit(r, json_pack("{s:s, s:o, s:s}", "type", "relay.rejected", "file",
			  sr_json_text(name), "reason", why));
}

/* ------------------------------------------------------------- files */

static void path_in(char *buf, size_t n, const char *dir, const char *id,
		    const char *suffix)
{
	snprintf(buf, n, "%s/%s%s", dir, id, suffix);
}

/* The journal's anchor: an empty file that claims are hard links to. Its
 * name is hidden, so no scan of the journal takes it for a claim. */
#define CLAIM_ANCHOR ".anchor"

static void make_anchor(sr__relay *r)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/" CLAIM_ANCHOR, r->journal);
	fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
}

/* Create JOURNAL/<id>.claim, failing if it exists. A claim is a name, not
 * content: it is made as a hard link to the anchor, which creates a
 * directory entry and no inode (on ext4, about 3 us instead of 25 for a
 * new file), with the same guarantees as O_CREAT|O_EXCL: link() never
 * replaces, and the name survives the runner's process. Without the
 * anchor, or where links fail (EMLINK at 65,000 claims on ext4, file
 * systems without hard links), a new file is made instead. */
static int claim(sr__relay *r, const char *id)
{
	char path[4096], anchor[4096];
	int fd;

	path_in(path, sizeof(path), r->journal, id, ".claim");
	snprintf(anchor, sizeof(anchor), "%s/" CLAIM_ANCHOR, r->journal);
	if (link(anchor, path) == 0)
		return SR_OK;
	if (errno == EEXIST)
		return SR_EEXIST;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno == EEXIST ? SR_EEXIST : SR_EIO;
	close(fd);
	return SR_OK;
}

static void unclaim(sr__relay *r, const char *id)
{
	char path[4096];

	path_in(path, sizeof(path), r->journal, id, ".claim");
	if (unlink(path) != 0 && errno == EISDIR)
		rmdir(path);
}

/* Claim and take DIR/name in one step (see the top of this file): rename
 * it to JOURNAL/<id>.claim, never replacing. Returns 0, or the errno:
 * EEXIST, a call with this id is in flight; ENOENT, withdrawn; EXDEV and
 * the like, this cannot be done here (no_move is set, and the caller
 * claims and takes apart from now on). */
static int claim_by_move(sr__relay *r, const char *name, const char *id)
{
	char to[4096];

	path_in(to, sizeof(to), r->journal, id, ".claim");
	if (renameat2(r->dir_fd, name, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno == EEXIST || errno == ENOENT)
		return errno;
	if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EPERM ||
	    errno == EOPNOTSUPP)
		r->no_move = 1;
	return errno;
}

/* A moved request that is no request (a directory, a FIFO, a symlink, too
 * big): its claim becomes a plain one, and the entry is moved aside under
 * a hidden name and removed, so that a non-empty directory, which stays,
 * is never taken for a claim at the next start. */
static void unclaim_aside(sr__relay *r, const char *id)
{
	char from[4096], to[4096];
	unsigned char rnd[8] = { 0 };

	(void)!getrandom(rnd, sizeof(rnd), 0);
	path_in(from, sizeof(from), r->journal, id, ".claim");
	snprintf(to, sizeof(to), "%s/.rejected.%02x%02x%02x%02x%02x%02x%02x%02x", r->journal,
		 rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	if (rename(from, to) == 0) {
		if (unlink(to) != 0 && errno == EISDIR)
			rmdir(to);
		(void)claim(r, id);
	}
}

static int write_text(int fd, const char *text, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t w = write(fd, text + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return errno;
		off += (size_t)w;
	}
	return 0;
}

/* Make the file of the next response ahead of it, anonymous (O_TMPFILE
 * in the relay directory): creating an inode is the slowest step of a
 * publication (tens of microseconds on ext4, far more when the disk is
 * busy), and made once a call has been answered, it is off the path of
 * the next one. It has no name until the response is written into it, so
 * the sandbox cannot see it and a sweep does not touch it. Where
 * O_TMPFILE is not supported, every publication makes its temporary. */
/* A file the runner made for the sandbox becomes its agent's (give). */
static void give(const sr__relay *r, int fd)
{
	if (r->give && fd >= 0)
		(void)fchown(fd, r->give_uid, r->give_gid);
}

static void make_spare(sr__relay *r)
{
	if (r->spare_fd >= 0 || r->closing || r->no_spare)
		return;
	r->spare_fd = openat(r->dir_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	if (r->spare_fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL))
		r->no_spare = 1;
	give(r, r->spare_fd);
}

static void drop_spare(sr__relay *r)
{
	if (r->spare_fd >= 0)
		close(r->spare_fd);
	r->spare_fd = -1;
}

/* Write the response into the spare, give it the temporary name tmp
 * (linkat through /proc/self/fd), and rename that to final (both names in
 * dir). 0: published;
 * ENOENT: no spare, or no /proc to link it by (the caller makes a named
 * temporary); another errno: the write, the link or the rename failed. */
static int publish_spare(sr__relay *r, const char *text, size_t len,
			 const char *tmp, const char *final)
{
	char proc[64];
	int fd = r->spare_fd, e;

	if (fd < 0)
		return ENOENT;
	r->spare_fd = -1;
	e = write_text(fd, text, len);
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (!e && linkat(AT_FDCWD, proc, r->dir_fd, tmp, AT_SYMLINK_FOLLOW) != 0) {
		e = errno == EPERM || errno == EACCES ? ENOENT : errno;
		if (e == ENOENT)
			r->no_spare = 1; /* no /proc: named temporaries from now on */
		close(fd);
		return e;
	}
	if (close(fd) != 0 && !e)
		e = errno;
	if (!e && renameat(r->dir_fd, tmp, r->dir_fd, final) != 0) {
		e = errno;
		unlinkat(r->dir_fd, tmp, 0);
	}
	return e;
}

/* Publish the response in the claim itself, which holds the request the
 * runner moved there (claimed and taken in one rename): overwritten with
 * the response and renamed to DIR/<id>.res, it is published and unclaimed
 * in one step, with no new inode (making one is the dearest part of a
 * publication on ext4). Only a regular file with no other link is reused;
 * the sandbox may still hold it open, but the response is for the sandbox
 * anyway, and the runner never reads it back. 0: published (the claim is
 * gone); otherwise the claim is still there (its content no longer
 * matters: a claim is a name) and the caller publishes the usual way. */
static int publish_in_claim(sr__relay *r, const char *id, const char *text, size_t len)
{
	char claim[4096], final[4096];
	struct stat st;
	size_t off = 0;
	int fd, e = 0;

	path_in(claim, sizeof(claim), r->journal, id, ".claim");
	fd = open(claim, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return ENOENT;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
		close(fd);
		return ENOENT;
	}
	while (!e && off < len) {
		ssize_t w = pwrite(fd, text + off, len - off, (off_t)off);
		if (w < 0 && errno != EINTR)
			e = errno;
		else if (w > 0)
			off += (size_t)w;
	}
	/* Only a longer request leaves bytes behind to cut. */
	if (!e && st.st_size > (off_t)len && ftruncate(fd, (off_t)len) != 0)
		e = errno;
	if (!e && st.st_uid != r->give_uid)
		give(r, fd);
	if (close(fd) != 0 && !e)
		e = errno;
	snprintf(final, sizeof(final), "%s%s", id, SR_RELAY_RES_SUFFIX);
	if (!e && renameat(AT_FDCWD, claim, r->dir_fd, final) != 0)
		e = errno;
	return e;
}

/* Write DIR/<id>.res by temporary and rename: the spare made ahead, or
 * where there is none, a new one. On failure the errno is in *why
 * (ENOMEM when the response cannot be serialized). in_claim: try the
 * claim first (publish_in_claim); *claimed is then 0 when it went that
 * way and the claim is gone. */
static int publish_as(sr__relay *r, const char *id, json_t *response, int in_claim,
		      int *claimed, int *why)
{
	char tmp[4096], final[4096];
	unsigned char rnd[6] = { 0 };
	char *text = json_dumps(response, JSON_COMPACT);
	size_t len;
	int fd, rc = SR_OK;

	*why = 0;
	*claimed = 1;
	if (!text) {
		*why = ENOMEM;
		return SR_ENOMEM;
	}
	len = strlen(text);
	if (in_claim && publish_in_claim(r, id, text, len) == 0) {
		*claimed = 0;
		free(text);
		return SR_OK;
	}
	snprintf(final, sizeof(final), "%s%s", id, SR_RELAY_RES_SUFFIX);
	(void)!getrandom(rnd, sizeof(rnd), 0);
	snprintf(tmp, sizeof(tmp), ".%s.res.tmp.%02x%02x%02x%02x%02x%02x",
		 id, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
	*why = publish_spare(r, text, len, tmp, final);
	if (*why == 0) {
		free(text);
		return SR_OK;
	}
	if (*why != ENOENT) {
		free(text);
		sr__log(SR_LOG_ERROR, "relay", "cannot publish %s/%s: %s", r->dir, final,
			strerror(*why));
		return SR_EIO;
	}
	fd = sr__open_beneath(r->dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL, 0600, 0);
	give(r, fd);
	if (fd < 0) {
		*why = errno;
		free(text);
		sr__log(SR_LOG_ERROR, "relay", "cannot write %s/%s: %s", r->dir, tmp,
			strerror(*why));
		return SR_EIO;
	}
	*why = write_text(fd, text, len);
	if (*why)
		rc = SR_EIO;
	if (close(fd) != 0 && rc == SR_OK) {
		*why = errno;
		rc = SR_EIO;
	}
	free(text);
	if (rc == SR_OK && renameat(r->dir_fd, tmp, r->dir_fd, final) != 0) {
		*why = errno;
		rc = SR_EIO;
	}
	if (rc != SR_OK) {
		unlinkat(r->dir_fd, tmp, 0);
		sr__log(SR_LOG_ERROR, "relay", "cannot publish %s/%s: %s", r->dir, final,
			strerror(*why));
	}
	return rc;
}

static int publish(sr__relay *r, const char *id, json_t *response, int *why)
{
	int claimed;

	return publish_as(r, id, response, 0, &claimed, why);
}

/* ---------------------------------------------------------- responses */

static json_t *response_ok(const char *id, json_t *result)
{
	return json_pack("{s:i, s:s, s:s, s:o}", "v", SR_RELAY_VERSION, "id", id,
			 "status", "ok", "result", result);
}

/* message is made valid UTF-8 (it may quote a name from the request). */
static json_t *response_error(const char *id, const char *message)
{
	return json_pack("{s:i, s:s, s:s, s:o}", "v", SR_RELAY_VERSION, "id", id,
			 "status", "error", "error", sr_json_text(message));
}

static json_t *response_paused(const char *id, const char *message)
{
	return json_pack("{s:i, s:s, s:s, s:o}", "v", SR_RELAY_VERSION, "id", id,
			 "status", "paused", "message", sr_json_text(message));
}

static void unlink_call(call *c)
{
	for (call **pp = &c->r->calls; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			return;
		}
}

static void on_ask_timer_closed(uv_handle_t *h)
{
	free(h);
}

/* ------------------------------------------------ CPU latency request */

/* While calls are in flight (and SR__RELAY_CPU_LINGER_MS after), hold a
 * PM QoS request for zero CPU wakeup latency: idle CPUs poll rather than
 * halt, so the wakeups of a call (shim, runner, endpoint and back) cost
 * no interrupt and, in a virtual machine, no exit to the host. Held as
 * long as the device stays open; a device that cannot be opened (it is
 * root's) is said once, and calls go on without. */
static void cpu_let_go(sr__relay *r)
{
	if (r->cpu_fd >= 0) {
		close(r->cpu_fd);
		r->cpu_fd = -1;
	}
}

static void on_cpu_linger(uv_timer_t *t)
{
	cpu_let_go(t->data);
}

static void cpu_hold(sr__relay *r)
{
	int32_t zero = 0;

	if (!r->cpu_device || r->cpu_failed)
		return;
	if (r->cpu_linger)
		uv_timer_stop(r->cpu_linger);
	if (r->cpu_fd >= 0)
		return;
	r->cpu_fd = open(r->cpu_device, O_WRONLY | O_CLOEXEC);
	if (r->cpu_fd >= 0 && write(r->cpu_fd, &zero, sizeof(zero)) == (ssize_t)sizeof(zero))
		return;
	sr__log(SR_LOG_WARN, "relay", "cannot request low CPU latency through %s (%s): "
		"tool calls go on without it", r->cpu_device, strerror(errno));
	r->cpu_failed = 1;
	cpu_let_go(r);
}

/* A call ended: with none left, let the request go after the linger. */
static void cpu_release(sr__relay *r)
{
	if (r->cpu_fd < 0 || r->calls || r->closing)
		return;
	if (!r->cpu_linger) {
		r->cpu_linger = malloc(sizeof(*r->cpu_linger));
		if (!r->cpu_linger) {
			cpu_let_go(r);
			return;
		}
		uv_timer_init(r->ctx->loop, r->cpu_linger);
		r->cpu_linger->data = r;
	}
	uv_timer_start(r->cpu_linger, on_cpu_linger, SR__RELAY_CPU_LINGER_MS, 0);
}

/* ---------------------------------------------------------- endpoints */

/* "scheme://host:port" of url, the host in lower case. */
static void endpoint_key(const char *url, char *key, size_t n)
{
	const char *h = strstr(url, "://");
	const char *end, *at;
	size_t scheme, len, o;
	int https = strncasecmp(url, "https", 5) == 0;

	if (!h) {
		snprintf(key, n, "%s", url);
		return;
	}
	scheme = (size_t)(h - url);
	h += 3;
	end = h + strcspn(h, "/?#");
	for (at = end; at > h && at[-1] != '@'; at--)
		;
	len = (size_t)(end - at);
	o = (size_t)snprintf(key, n, "%.*s://", (int)scheme, url);
	for (size_t i = 0; i < len && o + 1 < n; i++)
		key[o++] = (char)tolower((unsigned char)at[i]);
	key[o < n ? o : n - 1] = 0;
	/* No port (an IPv6 literal ends in ']'): the scheme's. */
	if (!memchr(at, ':', len) || at[len - 1] == ']')
		snprintf(key + strlen(key), n - strlen(key), ":%s", https ? "443" : "80");
}

static endpoint *endpoint_for(sr__relay *r, const char *url)
{
	char key[300];
	endpoint *ep;

	endpoint_key(url, key, sizeof(key));
	for (ep = r->endpoints; ep; ep = ep->next)
		if (strcmp(ep->key, key) == 0)
			return ep;
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return NULL;
	snprintf(ep->key, sizeof(ep->key), "%s", key);
	ep->next = r->endpoints;
	r->endpoints = ep;
	return ep;
}

static void free_endpoints(sr__relay *r)
{
	while (r->endpoints) {
		endpoint *ep = r->endpoints;
		r->endpoints = ep->next;
		free(ep);
	}
}

static void enqueue(call *c)
{
	endpoint *ep = c->ep;

	c->qnext = NULL;
	if (ep->tail)
		ep->tail->qnext = c;
	else
		ep->head = c;
	ep->tail = c;
	ep->queued++;
}

static void dequeue(call *c)
{
	endpoint *ep = c->ep;
	call *prev = NULL;

	for (call *q = ep->head; q; prev = q, q = q->qnext)
		if (q == c) {
			if (prev)
				prev->qnext = c->qnext;
			else
				ep->head = c->qnext;
			if (ep->tail == c)
				ep->tail = prev;
			ep->queued--;
			break;
		}
	c->qnext = NULL;
}

static void call_free(call *c)
{
	if (c->ask_timer) {
		uv_timer_stop(c->ask_timer);
		uv_close((uv_handle_t *)c->ask_timer, on_ask_timer_closed);
	}
	if (c->retry_timer) {
		uv_timer_stop(c->retry_timer);
		uv_close((uv_handle_t *)c->retry_timer, on_ask_timer_closed);
	}
	if (c->state == CALL_QUEUED)
		dequeue(c);
	if (c->queue_timer) {
		uv_timer_stop(c->queue_timer);
		uv_close((uv_handle_t *)c->queue_timer, on_ask_timer_closed);
	}
	json_decref(c->response);
	json_decref(c->args);
	free(c->tool_name);
	cpu_release(c->r); /* unlinked already */
	free(c);
}

static void remove_entry(sr__relay *r, const char *name);

/* The response reached its reader (or, when failed is not NULL, never
 * will): emit tool.result, remove the taken request, forget the call. */
static void delivered(call *c, const char *failed)
{
	sr__relay *r = c->r;
	json_t *response = c->response;
	const char *status = json_string_value(json_object_get(response, "status"));
	json_t *result = json_object_get(response, "result");
	json_t *ev;

	ev = json_pack("{s:s, s:s, s:s, s:s, s:b, s:I}", "type", "tool.result",
		       "call_id", c->id, "tool", c->tool_name ? c->tool_name : "",
		       "status", failed ? "error" : status ? status : "error", "is_error",
		       failed || strcmp(status ? status : "error", "error") == 0 ||
			       json_is_true(json_object_get(result, "isError")),
		       "ms", (json_int_t)(uv_now(r->ctx->loop) - c->started));
	if (ev && failed)
		json_object_set_new(ev, "error", json_string(failed));
	else if (ev && json_object_get(response, "error"))
		json_object_set(ev, "error", json_object_get(response, "error"));
	emit(r, ev);
	/* Removed only now, off the path of the answer: a taken entry has a
	 * hidden name that no scan looks at, so it cannot be answered again
	 * meanwhile, and one left by a crash goes with the next sweep. */
	if (c->taken[0])
		remove_entry(r, c->taken);
	if (r->trace_fd >= 0) {
		stamp(c, RT_DONE);
		sr_timing_write(r->trace_fd, "relay", c->id, stage_names, c->t, RT_N);
	}
	unlink_call(c);
	call_free(c);
	make_spare(r);
}

static void try_publish(call *c);

static void on_retry_timer(uv_timer_t *t)
{
	try_publish(t->data);
}

/* Publish the response file; on failure (a full disk, say) try again
 * later on the loop, with a doubling delay and a bounded number of
 * attempts. The claim stays until the response is published, so if it
 * never is, a restarted runner answers the call as interrupted. */
static void try_publish(call *c)
{
	sr__relay *r = c->r;
	char msg[300];
	uint64_t delay;
	int why, claimed;

	if (publish_as(r, c->id, c->response, !r->no_move, &claimed, &why) == SR_OK) {
		stamp(c, RT_PUBLISHED);
		if (claimed)
			unclaim(r, c->id);
		delivered(c, NULL);
		return;
	}
	if (++c->attempts >= r->publish_attempts) {
		snprintf(msg, sizeof(msg),
			 "the response could not be published after %u attempts (%s); "
			 "its claim stays, so a restarted runner answers the call as interrupted",
			 c->attempts, strerror(why));
		sr__log(SR_LOG_ERROR, "relay", "%s/%s.res: %s", r->dir, c->id, msg);
		delivered(c, msg);
		return;
	}
	if (!c->retry_timer) {
		c->retry_timer = malloc(sizeof(*c->retry_timer));
		if (!c->retry_timer) {
			delivered(c, "the response could not be published: out of memory");
			return;
		}
		uv_timer_init(r->ctx->loop, c->retry_timer);
		c->retry_timer->data = c;
	}
	delay = (uint64_t)PUBLISH_BACKOFF_MS << (c->attempts - 1 < 6 ? c->attempts - 1 : 6);
	if (delay > PUBLISH_BACKOFF_MAX_MS)
		delay = PUBLISH_BACKOFF_MAX_MS;
	uv_timer_start(c->retry_timer, on_retry_timer, delay, 0);
}

/* Deliver the one response of a call, then forget the call. Takes
 * response; NULL (it could not be built) becomes an error response, so
 * the call is still answered. */
static void finish(call *c, json_t *response)
{
	announce(c);
	if (!response)
		response = response_error(c->id, "the runner could not build the response");
	c->response = response;
	c->state = CALL_PUBLISHING;
	if (c->done) {
		c->done(c->done_ud, response);
		unclaim(c->r, c->id);
		delivered(c, NULL);
		return;
	}
	try_publish(c);
}

static void finish_error(call *c, const char *message)
{
	finish(c, response_error(c->id, message));
}

/* ------------------------------------------------- callback results */

/* Cut text items so that their text adds up to at most RESULT_TEXT_MAX
 * bytes (on a UTF-8 boundary), telling the model what was cut. */
static void cap_text(json_t *result)
{
	json_t *content = json_object_get(result, "content"), *item;
	size_t used = 0, dropped = 0, i;
	int cut = 0;

	json_array_foreach(content, i, item) {
		const char *text = json_string_value(json_object_get(item, "text"));
		size_t len, keep;
		if (!text)
			continue;
		len = strlen(text);
		if (used + len <= RESULT_TEXT_MAX) {
			used += len;
			continue;
		}
		keep = RESULT_TEXT_MAX > used ? RESULT_TEXT_MAX - used : 0;
		while (keep > 0 && ((unsigned char)text[keep] & 0xC0) == 0x80)
			keep--;
		dropped += len - keep;
		json_object_set_new(item, "text", json_stringn(text, keep));
		used += keep;
		cut = 1;
	}
	if (cut) {
		char note[200];
		snprintf(note, sizeof(note),
			 "[sandrun: the tool's result was cut at %d bytes; %zu bytes were left out]",
			 RESULT_TEXT_MAX, dropped);
		json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text",
							 "text", note));
	}
}

json_t *sr__relay_callback_result(int http_status, const char *body,
				  size_t len)
{
	json_t *parsed = NULL, *result;

	if (http_status < 200 || http_status > 299) {
		char text[700];
		snprintf(text, sizeof(text), "the tool's callback answered HTTP %d: %.500s",
			 http_status, body ? body : "");
		return sr_mcp_text_result(text, 1);
	}
	if (body && len)
		parsed = json_loadb(body, len, 0, NULL);
	if (json_is_object(parsed) && json_is_array(json_object_get(parsed, "content"))) {
		result = json_pack("{s:O, s:b}", "content", json_object_get(parsed, "content"),
				   "isError", json_is_true(json_object_get(parsed, "isError")));
		if (json_object_get(parsed, "structuredContent"))
			json_object_set(result, "structuredContent",
					json_object_get(parsed, "structuredContent"));
	} else {
		/* Any bytes at all: invalid UTF-8 becomes U+FFFD. */
		result = json_pack("{s:[{s:s, s:o}], s:b}", "content", "type", "text",
				   "text", sr_json_textn(body, body ? len : 0), "isError", 0);
	}
	if (!result) {
		json_decref(parsed);
		return sr_mcp_text_result("the runner could not read the tool's answer", 1);
	}
	json_decref(parsed);
	cap_text(result);
	return result;
}

static void pump(endpoint *ep, sr__relay *r);

/* A callback ended: its endpoint may start the next one waiting. */
static void release_slot(call *c)
{
	endpoint *ep = c->ep;
	sr__relay *r = c->r;

	c->ep = NULL;
	if (!ep)
		return;
	ep->active--;
	if (!r->closing)
		pump(ep, r);
}

static void on_callback_done(void *ud, const sr_result *res)
{
	call *c = ud;
	char text[600];
	int status;

	stamp(c, RT_ANSWERED);
	c->http = NULL;
	if (res->status == SR_ECANCELED) {
		/* The relay is going away; the claim stays for a restart. */
		if (c->ep)
			c->ep->active--;
		c->ep = NULL;
		unlink_call(c);
		call_free(c);
		return;
	}
	release_slot(c);
	if (res->status != SR_OK) {
		/* The model and the sandbox see the tool and the failure, never
		 * the callback's URL (its userinfo and query may be
		 * credentials); the runner's log has the transport's detail. */
		sr__log(SR_LOG_WARN, "relay", "tool '%s': callback failed: %s", c->tool->name,
			res->message ? res->message : sr__strerror(res->status));
		switch (res->status) {
		case SR_ETIMEDOUT:
			snprintf(text, sizeof(text),
				 "tool '%s': the tool's callback did not answer within %llu ms",
				 c->tool->name, (unsigned long long)c->tool->timeout_ms);
			break;
		case SR_ETOOBIG:
			snprintf(text, sizeof(text),
				 "tool '%s': the tool's callback answered more than %u bytes; nothing of it was kept",
				 c->tool->name, CALLBACK_BODY_MAX);
			break;
		case SR_ECONNREFUSED:
			snprintf(text, sizeof(text), "tool '%s': the tool's callback refused the connection",
				 c->tool->name);
			break;
		default:
			snprintf(text, sizeof(text), "tool '%s': the tool's callback failed (%s)",
				 c->tool->name, sr__strerror(res->status));
		}
		finish(c, response_ok(c->id, sr_mcp_text_result(text, 1)));
		return;
	}
	status = (int)sr__http_code(res);
	finish(c, response_ok(c->id, sr__relay_callback_result(status, res->data, res->len)));
}

/* ---------------------------------------------------------- execution */

/* Start the HTTP request of a callback call; its endpoint has a slot for
 * it (counted here). The call's timeout counts from the moment it
 * started waiting for the slot. */
static void start_callback(call *c)
{
	const sr__tool *t = c->tool;
	uint64_t waited = uv_now(c->r->ctx->loop) - c->queued_at;
	json_t *body;
	char *text;
	sr_pair *headers;
	sr_http_request req;
	sr_http_call *http;

	c->state = CALL_RUNNING;
	c->ep->active++;
	body = json_pack("{s:s, s:s, s:O}", "tool", t->name, "call_id", c->id,
			 "arguments", c->args);
	text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	headers = calloc(t->n_headers + 2, sizeof(*headers));
	if (!text || !headers) {
		free(text);
		free(headers);
		release_slot(c);
		finish_error(c, "out of memory");
		return;
	}
	headers[0].name = "Content-Type";
	headers[0].value = "application/json";
	memcpy(headers + 1, t->headers, t->n_headers * sizeof(*headers));
	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.method = "POST";
	req.url = t->url;
	req.headers = headers;
	req.n_headers = t->n_headers + 1;
	req.body = text;
	req.body_len = strlen(text);
	req.timeout_ms = t->timeout_ms > waited ? t->timeout_ms - waited : 1;
	req.max_response = CALLBACK_BODY_MAX;
	/* A request that cannot start calls back before returning, and the
	 * call is gone then: only a started one is remembered. */
	http = sr__http_request_bare(c->r->ctx->http, &req, on_callback_done, c);
	if (http) {
		c->http = http;
		stamp(c, RT_SENDING);
		announce(c);
	}
	free(headers);
	free(text);
}

/* Start waiting calls while their endpoint has free slots. Iterative:
 * a callback that fails at once releases its slot from inside. */
static void pump(endpoint *ep, sr__relay *r)
{
	if (ep->pumping)
		return;
	ep->pumping = 1;
	while (ep->head && ep->active < r->max_per_endpoint) {
		call *c = ep->head;
		dequeue(c);
		if (c->queue_timer)
			uv_timer_stop(c->queue_timer);
		start_callback(c);
	}
	ep->pumping = 0;
}

static void on_queue_timeout(uv_timer_t *t)
{
	call *c = t->data;
	char text[300];

	dequeue(c);
	c->ep = NULL;
	snprintf(text, sizeof(text),
		 "tool '%s': the tool's callback did not answer within %llu ms "
		 "(the call waited for a free connection to its endpoint)",
		 c->tool->name, (unsigned long long)c->tool->timeout_ms);
	finish(c, response_ok(c->id, sr_mcp_text_result(text, 1)));
}

/* Wait for a slot of the endpoint, with the call's timeout running. */
static void wait_for_slot(call *c)
{
	char text[300];

	if (c->ep->queued >= QUEUE_MAX) {
		c->ep = NULL;
		snprintf(text, sizeof(text),
			 "tool '%s': too many calls (%d) are waiting for the tool's endpoint; "
			 "try again later", c->tool->name, QUEUE_MAX);
		finish(c, response_ok(c->id, sr_mcp_text_result(text, 1)));
		return;
	}
	if (!c->queue_timer) {
		c->queue_timer = malloc(sizeof(*c->queue_timer));
		if (!c->queue_timer) {
			c->ep = NULL;
			finish_error(c, "out of memory");
			return;
		}
		uv_timer_init(c->r->ctx->loop, c->queue_timer);
		c->queue_timer->data = c;
	}
	announce(c);
	c->state = CALL_QUEUED;
	enqueue(c);
	uv_timer_start(c->queue_timer, on_queue_timeout, c->tool->timeout_ms, 0);
}

static void execute(call *c)
{
	const sr__tool *t = c->tool;

	c->state = CALL_RUNNING;
	if (t->kind == SR_TOOL_CLIENT) {
		announce(c);
		emit(c->r, json_pack("{s:s, s:s, s:s, s:O}", "type", "client_tool.call",
				     "call_id", c->id, "tool", t->name, "args", c->args));
		finish(c, response_paused(c->id,
			"this tool runs on the user's side: the call was handed over and its result will come with the next turn"));
		return;
	}
	if (!sr__ctx_http(c->r->ctx)) {
		finish(c, response_ok(c->id, sr_mcp_text_result(
			"HTTP is unavailable on the runner (libcurl cannot be loaded)", 1)));
		return;
	}
	c->ep = endpoint_for(c->r, t->url);
	if (!c->ep) {
		finish_error(c, "out of memory");
		return;
	}
	c->queued_at = uv_now(c->r->ctx->loop);
	if (c->ep->active < c->r->max_per_endpoint && !c->ep->head)
		start_callback(c);
	else
		wait_for_slot(c);
}

static void on_ask_timeout(uv_timer_t *t)
{
	call *c = t->data;
	char msg[160];

	snprintf(msg, sizeof(msg), "permission denied: nobody answered the permission request within %llu s",
		 (unsigned long long)(c->r->ask_timeout_ms / 1000));
	finish(c, response_ok(c->id, sr_mcp_text_result(msg, 1)));
}

static void decide(call *c, int allow)
{
	if (allow)
		execute(c);
	else
		finish(c, response_ok(c->id, sr_mcp_text_result(
			"permission denied: the user did not allow this tool call", 1)));
}

static void ask(call *c)
{
	sr__relay *r = c->r;

	if (r->ask_policy != SR_ASK_WAIT) {
		decide(c, r->ask_policy == SR_ASK_APPROVE);
		return;
	}
	announce(c);
	c->state = CALL_ASKING;
	c->ask_timer = malloc(sizeof(*c->ask_timer));
	if (c->ask_timer) {
		uv_timer_init(r->ctx->loop, c->ask_timer);
		c->ask_timer->data = c;
		uv_timer_start(c->ask_timer, on_ask_timeout, r->ask_timeout_ms, 0);
	}
	emit(r, json_pack("{s:s, s:s, s:s, s:O}", "type", "permission.request",
			  "call_id", c->id, "tool", c->tool->name, "args", c->args));
}

/* Validate a parsed request and run it. Takes nothing; c owns args. */
static void dispatch(call *c)
{
	char err[300];
	int verdict;

	c->unannounced = 1;
	c->tool = sr__tools_find(c->r->tools, c->tool_name);
	if (!c->tool) {
		snprintf(err, sizeof(err), "unknown tool '%.100s'", c->tool_name);
		finish_error(c, err);
		return;
	}
	if (sr__tools_check_args(c->tool, c->args, err, sizeof(err)) != SR_OK) {
		finish_error(c, err);
		return;
	}
	verdict = sr__guard_decide(c->r->guard, c->tool);
	if (verdict == SR_PERM_DENY)
		finish(c, response_ok(c->id, sr_mcp_text_result(
			"permission denied: the runner's policy does not allow this tool", 1)));
	else if (verdict == SR_PERM_ASK)
		ask(c);
	else
		execute(c);
}

static call *call_new(sr__relay *r, const char *id, size_t id_len)
{
	call *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->r = r;
	memcpy(c->id, id, id_len);
	c->id[id_len] = 0;
	c->started = uv_now(r->ctx->loop);
	stamp(c, RT_PICKED);
	c->next = r->calls;
	r->calls = c;
	cpu_hold(r);
	return c;
}

/* ----------------------------------------------------------- requests */

/* Read a request file safely. Returns the text (malloc'd) or NULL with
 * the reason in why. */
static char *read_request(int dir_fd, const char *dir, const char *name, char *why,
			  size_t n)
{
	char path[4096];
	struct stat st;
	char *buf;
	ssize_t got;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = dir_fd >= 0 ? sr__open_beneath(dir_fd, name, O_RDONLY | O_NONBLOCK, 0, 0) :
			   open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, n, errno == ELOOP || errno == EXDEV ? "the request is a symbolic link" :
			 "cannot open the request: %s", strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(why, n, "the request is not a regular file");
		return NULL;
	}
	if (st.st_size > SR_RELAY_REQ_MAX) {
		close(fd);
		snprintf(why, n, "the request is %lld bytes, over the limit of %u",
			 (long long)st.st_size, SR_RELAY_REQ_MAX);
		return NULL;
	}
	buf = malloc((size_t)st.st_size + 1);
	got = buf ? read(fd, buf, (size_t)st.st_size) : -1;
	close(fd);
	if (got != st.st_size) {
		free(buf);
		snprintf(why, n, "cannot read the request");
		return NULL;
	}
	buf[got] = 0;
	return buf;
}

/* Remove whatever sits at DIR/name (file, link, FIFO, or an empty
 * directory). A non-empty directory stays, under its hidden name. */
static void remove_entry(sr__relay *r, const char *name)
{
	if (unlinkat(r->dir_fd, name, 0) != 0 && errno == EISDIR)
		unlinkat(r->dir_fd, name, AT_REMOVEDIR);
}

/* Take DIR/name away from the shim: rename it, whatever it is, to a
 * hidden name of the runner's (written into taken). This is the one place
 * where a request is decided: the shim withdraws a request by unlinking
 * <id>.req, and of that unlink and this rename exactly one succeeds. A
 * taken name is never seen by a scan again, so it is answered once even
 * when it cannot be removed (a non-empty directory). Returns 0, or the
 * errno of the rename (ENOENT: withdrawn, or already gone). */
static int take_entry(sr__relay *r, const char *name, char *taken, size_t n)
{
	unsigned char rnd[8] = { 0 };

	(void)!getrandom(rnd, sizeof(rnd), 0);
	snprintf(taken, n, ".taken.tmp.%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
		 rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	return renameat(r->dir_fd, name, r->dir_fd, taken) == 0 ? 0 : errno;
}

/* "<anything>.req", not hidden: a request, valid or to be rejected. */
static int is_request_name(const char *name)
{
	size_t n = strlen(name), s = strlen(SR_RELAY_REQ_SUFFIX);

	return name[0] != '.' && n > s &&
	       strcmp(name + n - s, SR_RELAY_REQ_SUFFIX) == 0;
}

static void take_request(sr__relay *r, const char *name)
{
	size_t id_len = sr_relay_id_of(name, SR_RELAY_REQ_SUFFIX);
	char why[300], taken[sizeof(((call *)0)->taken)], *text;
	json_t *req;
	const char *tool, *rid, *bad = NULL;
	json_t *args;
	call *c;
	int rc;

	if (name[0] == '.')
		return;
	if (id_len == 0) {
		/* Never rewritten into a valid id: with no valid id there is
		 * no name to answer under, so the entry goes, with an event. */
		if (take_entry(r, name, taken, sizeof(taken)) == 0) {
			remove_entry(r, taken);
			reject_file(r, name, "invalid request id (ids are 1 to 128 of [A-Za-z0-9_-])");
		}
		return;
	}
	c = call_new(r, name, id_len);
	if (!c)
		return;
	rc = r->no_move ? EXDEV : claim_by_move(r, name, c->id);
	if (rc == 0) {
		stamp(c, RT_CLAIMED);
		snprintf(taken, sizeof(taken), "%s.claim", c->id);
		text = read_request(-1, r->journal, taken, why, sizeof(why));
		if (!text)
			unclaim_aside(r, c->id);
		goto parse;
	}
	if (rc == ENOENT) {
		sr__log(SR_LOG_DEBUG, "relay", "%s/%s: withdrawn before it was taken", r->dir, name);
		unlink_call(c);
		call_free(c);
		return;
	}
	rc = rc == EEXIST ? SR_EEXIST : claim(r, c->id);
	if (rc != SR_OK) {
		/* In flight already (a second publication of the same id), or
		 * the journal is unusable: either way, not ours to answer. */
		unlink_call(c);
		call_free(c);
		if (rc == SR_EEXIST) {
			if (take_entry(r, name, taken, sizeof(taken)) == 0) {
				remove_entry(r, taken);
				reject_file(r, name, "duplicate request id: a call with this id is in flight");
			}
		} else {
			reject_file(r, name, "cannot record the claim in the runner's journal");
		}
		return;
	}
	rc = take_entry(r, name, taken, sizeof(taken));
	if (rc == ENOENT) {
		/* The shim withdrew it (or it was answered already): it will
		 * never run, and nobody waits for an answer. */
		sr__log(SR_LOG_DEBUG, "relay", "%s/%s: withdrawn before it was taken", r->dir, name);
		unclaim(r, c->id);
		unlink_call(c);
		call_free(c);
		return;
	}
	if (rc != 0) {
		snprintf(why, sizeof(why), "cannot take the request: %s", strerror(rc));
		text = NULL;
	} else {
		stamp(c, RT_CLAIMED);
		text = read_request(r->dir_fd, r->dir, taken, why, sizeof(why));
		memcpy(c->taken, taken, sizeof(c->taken));
	}
parse:
	if (!text) {
		reject_file(r, name, why);
		finish_error(c, why);
		return;
	}
	req = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
	free(text);
	tool = json_string_value(json_object_get(req, "tool"));
	rid = json_string_value(json_object_get(req, "id"));
	args = json_object_get(req, "args");
	if (!json_is_object(req))
		bad = "the request is not a JSON object";
	else if (json_integer_value(json_object_get(req, "v")) != SR_RELAY_VERSION)
		bad = "unsupported relay protocol version (this runner speaks 1)";
	else if (!rid || strcmp(rid, c->id) != 0)
		bad = "the request's id does not match its file name";
	else if (!tool)
		bad = "the request names no tool";
	else if (args && !json_is_object(args))
		bad = "the request's args must be an object";
	if (bad || !tool) {
		json_decref(req);
		reject_file(r, name, bad ? bad : "the request names no tool");
		finish_error(c, bad ? bad : "the request names no tool");
		return;
	}
	c->tool_name = strdup(tool);
	c->args = args ? json_incref(args) : json_object();
	json_decref(req);
	if (!c->tool_name || !c->args) {
		finish_error(c, "out of memory");
		return;
	}
	stamp(c, RT_READ);
	dispatch(c);
}

int sr__relay_take(sr__relay *r, const char *name)
{
	if (!name || strchr(name, '/'))
		return SR_EINVAL;
	if (is_request_name(name))
		take_request(r, name);
	return SR_OK;
}

static void scan(sr__relay *r)
{
	int fd = dup(r->dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d); /* (a dup shares its offset with dir_fd's other dups) */
	/* Collect first: taking a request changes the directory. */
	while ((e = readdir(d))) {
		if (!is_request_name(e->d_name))
			continue;
		if (n == cap) {
			char **g = realloc(names, (cap = cap ? cap * 2 : 32) * sizeof(*g));
			if (!g)
				break;
			names = g;
		}
		names[n++] = strdup(e->d_name);
	}
	closedir(d);
	for (size_t i = 0; i < n; i++) {
		if (names[i] && !r->closing)
			take_request(r, names[i]);
		free(names[i]);
	}
	free(names);
}

/* The watch: inotify on the directory for the two events that can bring a
 * request (a name created in it, a name moved into it) and no others, so
 * that the runner is not woken by its own takes or by the shim removing
 * the responses it has read. A lost event (queue overflow) means a scan;
 * a watch that stops (the directory removed) leaves the poll. */
static void on_watch(uv_poll_t *h, int status, int events)
{
	sr__relay *r = h->data;
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n;

	(void)events;
	if (status < 0) {
		scan(r);
		return;
	}
	while ((n = read(r->watch_fd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const void *)p;
			p += sizeof(*ev) + ev->len;
			if (ev->mask & IN_Q_OVERFLOW) {
				scan(r);
			} else if (ev->mask & IN_IGNORED) {
				sr__log(SR_LOG_WARN, "relay", "%s: the inotify watch stopped; polling "
					"every %llu ms", r->dir, (unsigned long long)r->poll_ms);
				r->watching = 0;
			} else if (ev->len && !r->closing && is_request_name(ev->name)) {
				/* A name that is gone again (withdrawn at once) is
				 * found gone by take_request. */
				take_request(r, ev->name);
			}
		}
	}
	if (!r->watching && !r->closing && uv_is_active((uv_handle_t *)&r->watch))
		uv_poll_stop(&r->watch);
}

static void on_poll(uv_timer_t *t)
{
	scan(t->data);
}

/* ------------------------------------------------------------ public */

static int own_dir(const char *dir);

int sr__relay_new(sr__ctx *ctx, const sr__relay_opts *o, sr__relay **out,
		  char *err, size_t errlen)
{
	sr__relay *r;
	int parent;

	*out = NULL;
	if (sr__mkdirs(o->dir, 0700) != SR_OK) {
		snprintf(err, errlen, "cannot create relay directory %s: %s", o->dir,
			 strerror(errno));
		return SR_EIO;
	}
	if (sr__mkdirs(o->journal, 0700) != SR_OK) {
		snprintf(err, errlen, "cannot create relay journal %s: %s", o->journal,
			 strerror(errno));
		return SR_EIO;
	}
	/* The relay directory may lie where the sandbox writes: a link put in
	 * its place is removed, not followed (a sweep would empty, and a chmod
	 * change, the directory it names). */
	if (own_dir(o->dir) != 0) {
		snprintf(err, errlen, "relay directory %s: not a directory of its own, and "
			 "cannot be made one: %s", o->dir, strerror(errno));
		return SR_EIO;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return SR_ENOMEM;
	r->ctx = ctx;
	r->dir = strdup(o->dir);
	r->journal = strdup(o->journal);
	r->cpu_device = o->cpu_latency_device ? strdup(o->cpu_latency_device) : NULL;
	if (!r->dir || !r->journal || (o->cpu_latency_device && !r->cpu_device)) {
		free(r->dir);
		free(r->journal);
		free(r->cpu_device);
		free(r);
		return SR_ENOMEM;
	}
	r->tools = o->tools;
	r->guard = o->guard;
	r->ask_policy = o->ask_policy;
	r->ask_timeout_ms = o->ask_timeout_ms ? o->ask_timeout_ms : DEFAULT_ASK_TIMEOUT_MS;
	r->poll_ms = o->poll_ms ? o->poll_ms : DEFAULT_POLL_MS;
	r->publish_attempts = o->publish_attempts ? o->publish_attempts :
						    DEFAULT_PUBLISH_ATTEMPTS;
	r->max_per_endpoint = o->max_per_endpoint ? o->max_per_endpoint :
						    DEFAULT_PER_ENDPOINT;
	r->event = o->event;
	r->ud = o->ud;
	r->trace_fd = sr_timing_open();
	r->dir_fd = open(o->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (r->dir_fd < 0) {
		snprintf(err, errlen, "relay directory %s: %s", o->dir, strerror(errno));
		if (r->trace_fd >= 0)
			close(r->trace_fd);
		free(r->dir);
		free(r->journal);
		free(r->cpu_device);
		free(r);
		return SR_EIO;
	}
	r->spare_fd = -1;
	r->watch_fd = -1;
	r->cpu_fd = -1;
	parent = openat(r->dir_fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (parent >= 0) {
		r->give = sr__owner_to_give(parent, &r->give_uid, &r->give_gid);
		close(parent);
	}
	give(r, r->dir_fd);
	make_anchor(r);
	*out = r;
	return SR_OK;
}

/* Answer every claim an earlier runner left: it died mid-call. */
static void recover(sr__relay *r)
{
	DIR *d = opendir(r->journal);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		size_t len = sr_relay_id_of(e->d_name, ".claim");
		char id[SR_RELAY_ID_MAX + 1], req[4096];
		json_t *res;
		int why;
		if (!len)
			continue;
		memcpy(id, e->d_name, len);
		id[len] = 0;
		snprintf(req, sizeof(req), "%s%s", id, SR_RELAY_REQ_SUFFIX);
		unlinkat(r->dir_fd, req, 0);
		res = response_error(id,
			"interrupted: the runner restarted while this call was in progress; "
			"it was not run again and may or may not have taken effect");
		/* Unpublished, the claim stays for the next start. */
		if (publish(r, id, res, &why) == SR_OK)
			unclaim(r, id);
		json_decref(res);
		emit(r, json_pack("{s:s, s:s}", "type", "tool.interrupted", "call_id", id));
	}
	closedir(d);
}

int sr__relay_start(sr__relay *r)
{
	char proc[64];
	const char *watched;
	int rc;

	/* The directory opened at the start, not whatever has its name now. */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", r->dir_fd);
	watched = access(proc, F_OK) == 0 ? proc : r->dir;

	recover(r);
	uv_timer_init(r->ctx->loop, &r->poll);
	r->poll.data = r;
	r->open_handles++;
	r->watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (r->watch_fd < 0 ||
	    inotify_add_watch(r->watch_fd, watched, IN_CREATE | IN_MOVED_TO | IN_ONLYDIR) < 0) {
		rc = uv_translate_sys_error(errno);
	} else if ((rc = uv_poll_init(r->ctx->loop, &r->watch, r->watch_fd)) == 0) {
		r->watch.data = r;
		r->open_handles++;
		rc = uv_poll_start(&r->watch, UV_READABLE, on_watch);
		r->watching = rc == 0;
	}
	if (!r->watching)
		sr__log(SR_LOG_WARN, "relay", "%s: no inotify watch (%s); polling every %llu ms",
			r->dir, uv_strerror(rc), (unsigned long long)r->poll_ms);
	uv_timer_start(&r->poll, on_poll, 0, r->poll_ms);
	make_spare(r);
	return SR_OK;
}

/* Make dir's last component a real directory, mode 0700: a symbolic link
 * or another file there is removed and the directory made. 0, or -1 with
 * errno. */
static int own_dir(const char *dir)
{
	struct stat st;
	int fd;

	if (lstat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
		if (unlink(dir) != 0 || mkdir(dir, 0700) != 0)
			return -1;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fchmod(fd, 0700) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	close(fd);
	return 0;
}

/* Remove the files that match of the directory open at dir_fd (kept). */
static int sweep_fd(int dir_fd, int (*match)(const char *name))
{
	int fd = dup(dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	int count = 0;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	rewinddir(d);
	while ((e = readdir(d))) {
		if (!match(e->d_name))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) == 0)
			count++;
	}
	closedir(d);
	return count;
}

/* Remove the files of dir that match, beneath the directory itself: a link
 * in its place is not followed. */
static int sweep_dir(const char *dir, int (*match)(const char *name))
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int count = fd >= 0 ? sweep_fd(fd, match) : 0;

	if (fd >= 0)
		close(fd);
	return count;
}

static int is_protocol_file(const char *name)
{
	if (name[0] == '.')
		return strstr(name, ".tmp") != NULL;
	return sr_relay_id_of(name, SR_RELAY_REQ_SUFFIX) ||
	       sr_relay_id_of(name, SR_RELAY_RES_SUFFIX);
}

static int is_claim(const char *name)
{
	return sr_relay_id_of(name, ".claim") != 0;
}

int sr__relay_sweep(sr__relay *r)
{
	int n;

	if (r->calls)
		return SR_ESTATE;
	n = sweep_fd(r->dir_fd, is_protocol_file) + sweep_dir(r->journal, is_claim);
	if (n)
		emit(r, json_pack("{s:s, s:i}", "type", "relay.swept", "files", n));
	return SR_OK;
}

static call *find_call(sr__relay *r, const char *id)
{
	for (call *c = r->calls; c; c = c->next)
		if (strcmp(c->id, id) == 0)
			return c;
	return NULL;
}

int sr__relay_permission(sr__relay *r, const char *call_id, int allow)
{
	call *c = call_id ? find_call(r, call_id) : NULL;

	if (!c || c->state != CALL_ASKING)
		return SR_ENOTFOUND;
	uv_timer_stop(c->ask_timer);
	decide(c, allow);
	return SR_OK;
}

void sr__relay_set_ask_policy(sr__relay *r, int policy)
{
	call *c, *next;

	r->ask_policy = policy;
	if (policy == SR_ASK_WAIT)
		return;
	for (c = r->calls; c; c = next) {
		next = c->next;
		if (c->state == CALL_ASKING)
			decide(c, policy == SR_ASK_APPROVE);
	}
}

size_t sr__relay_in_flight(const sr__relay *r)
{
	size_t n = 0;

	for (call *c = r->calls; c; c = c->next)
		n++;
	return n;
}

int sr__relay_call(sr__relay *r, const char *tool, json_t *args,
		   sr__relay_done_fn done, void *ud)
{
	unsigned char rnd[8];
	char id[40];
	call *c;

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return SR_EIO;
	snprintf(id, sizeof(id), "h%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
		 rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	c = call_new(r, id, strlen(id));
	if (!c)
		return SR_ENOMEM;
	if (claim(r, c->id) != SR_OK) {
		unlink_call(c);
		call_free(c);
		return SR_EIO;
	}
	c->done = done;
	c->done_ud = ud;
	c->tool_name = strdup(tool);
	c->args = json_is_object(args) ? json_incref(args) : json_object();
	if (!c->tool_name || !c->args) {
		finish_error(c, "out of memory");
		return SR_OK; /* answered (done ran) */
	}
	dispatch(c);
	return SR_OK;
}

static void destroy(sr__relay *r)
{
	free_endpoints(r);
	if (r->trace_fd >= 0)
		close(r->trace_fd);
	if (r->watch_fd >= 0)
		close(r->watch_fd); /* after its poll handle is closed */
	if (r->dir_fd >= 0)
		close(r->dir_fd);
	free(r->dir);
	free(r->journal);
	free(r->cpu_device);
	free(r);
}

static void on_handle_closed(uv_handle_t *h)
{
	sr__relay *r = h->data;

	if (--r->open_handles == 0)
		destroy(r);
}

void sr__relay_free(sr__relay *r)
{
	if (!r)
		return;
	r->closing = 1;
	while (r->calls) {
		call *c = r->calls;
		if (c->http) {
			sr_http_call *h = c->http;
			c->http = NULL;
			/* on_callback_done sees SR_ECANCELED, unlinks c from
			 * r->calls and frees it; the claim stays for a
			 * restarted relay to answer. */
			sr__http_cancel(h);
			continue;
		}
		r->calls = c->next;
		call_free(c);
	}
	drop_spare(r);
	cpu_let_go(r);
	if (r->cpu_linger) {
		uv_timer_stop(r->cpu_linger);
		uv_close((uv_handle_t *)r->cpu_linger, on_ask_timer_closed);
		r->cpu_linger = NULL;
	}
	if (r->open_handles == 0) {
		destroy(r);
		return;
	}
	uv_timer_stop(&r->poll);
	uv_close((uv_handle_t *)&r->poll, on_handle_closed);
	if (r->open_handles > 1) {
		uv_poll_stop(&r->watch);
		uv_close((uv_handle_t *)&r->watch, on_handle_closed);
	}
}
