/*
 * sandrun-shim: the in-sandbox end of tool delivery.
 *
 *   sandrun-shim mcp  [--specs FILE] [--relay-dir DIR] [--timeout-ms N]
 *   sandrun-shim call [--relay-dir DIR] [--timeout-ms N] TOOL [ARGS_JSON]
 *
 * "mcp" is an MCP server over stdio that advertises the tools in the specs
 * file and turns every tools/call into a relay request; "call" makes one
 * call from a command line. Either way a request is a file published in the
 * relay directory and the answer is a file the runner publishes there (see
 * doc/relay-protocol.md). The shim holds no credential, executes nothing,
 * and keeps no state a kill and respawn would lose.
 *
 * Linked statically (glibc, jansson): it runs in any Linux sandbox image.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mcp_common.h"
#include "relay_proto.h"
#include "trace_timing.h"
#include "watch.h"

#define SHIM_VERSION "0.1.0"
#define MAX_LINE (4u << 20)
#define MAX_INFLIGHT 256
#define DEFAULT_TIMEOUT_MS (10L * 60 * 1000)
#define PAGE_SIZE_DEFAULT 100

/* Exit codes of "call" (documented in sandrun-shim --help). */
enum {
	EXIT_OK = 0,
	EXIT_TOOL_ERROR = 1,
	EXIT_USAGE = 2,
	EXIT_TIMEOUT = 3,
	EXIT_PAUSED = 4,
	EXIT_RELAY = 5
};

static const char *relay_dir;
static long timeout_ms = DEFAULT_TIMEOUT_MS;
static json_t *specs;        /* array of MCP tool objects */
static size_t page_size = PAGE_SIZE_DEFAULT;
static int inflight;          /* calls published and not yet answered */
static int trace_fd = -1;    /* SANDRUN_TRACE_TIMING, see trace_timing.h */
static uint64_t line_at;     /* when the line being handled was read, if tracing */

/* The stamps of one call, when tracing. */
enum { ST_RECEIVED, ST_PUBLISHED, ST_SEEN, ST_ANSWERED, ST_N };
static const char *const stage_names[ST_N] = { "received", "published", "seen", "answered" };

static inline void stamp(uint64_t *t, int stage)
{
	if (trace_fd >= 0)
		t[stage] = sr_timing_now();
}

/* ------------------------------------------------------------- relay */

/* One call in flight: published, waiting for its response. Every call
 * waits in the one poll loop of the process (serve_loop), on one inotify
 * watch of the relay directory, with its own deadline. */
typedef struct call_job {
	json_t *id;       /* the MCP request's id; NULL for "call" */
	char rid[64];     /* the relay id */
	int code;         /* EXIT_* */
	json_t *result;   /* MCP result object for ok, NULL otherwise */
	char message[512];
	uint64_t t[ST_N]; /* timing stamps, when tracing */
	long deadline;    /* now_ms() after which the call is withdrawn */
	long looked;      /* when the response was last looked for */
	int look;         /* an event may have named its response */
	int collected;    /* the response file was opened: remove it */
	int res_fd;       /* the response file, read-write, kept for reuse, or -1 */
	dev_t res_dev;    /* ... its device and inode */
	ino_t res_ino;
	struct call_job *next;
} call_job;

static call_job *calls;    /* in flight, newest first */
static int watch_fd = -1;  /* inotify on relay_dir (IN_MOVED_TO), or -1 */
static int spare_fd = -1;  /* a file for the next request, or -1 */
static char spare_path[4096]; /* its name (DIR/.spare/...), "" when anonymous */
static dev_t spare_dev;    /* ... the file it must still be */
static ino_t spare_ino;
static int keep_spares;    /* mcp: reuse collected responses for requests */
static int named_tmp;      /* O_TMPFILE or /proc unusable: named temporaries */

static void new_id(char *buf, size_t n)
{
	static unsigned long counter;
	unsigned char r[8];

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		memset(r, 0, sizeof(r));
	snprintf(buf, n, "s%02x%02x%02x%02x%02x%02x%02x%02x-%ld-%lu", r[0], r[1],
		 r[2], r[3], r[4], r[5], r[6], r[7], (long)getpid(), ++counter);
}

/* Open the anonymous file the next request is written into, ahead of the
 * call: making an inode is the slowest step of a publication (tens of
 * microseconds on ext4, far more when the disk is busy), and done here it
 * is off the path of the call. */
static void make_spare(void)
{
	if (spare_fd >= 0 || named_tmp)
		return;
	spare_fd = open(relay_dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	if (spare_fd < 0 && errno != EINTR && errno != EMFILE && errno != ENFILE &&
	    errno != ENOSPC && errno != EDQUOT)
		named_tmp = 1; /* no O_TMPFILE here: EOPNOTSUPP, EISDIR, EINVAL */
}

static int pwrite_all(int fd, const char *p, size_t n)
{
	off_t at = 0;

	while (n) {
		ssize_t w = pwrite(fd, p, n, at);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
		at += w;
	}
	return 0;
}

/* Drop a named spare (on failure, and at exit). */
static void drop_spare(void)
{
	if (spare_fd >= 0 && spare_path[0]) {
		char *slash = strrchr(spare_path, '/');
		unlink(spare_path);
		close(spare_fd);
		spare_fd = -1;
		*slash = 0;
		rmdir(spare_path); /* when no other shim keeps one */
	}
	spare_path[0] = 0;
}

/* Whether path is still the file dev/ino (nothing replaced it). */
static int same_file(const char *path, dev_t dev, ino_t ino)
{
	struct stat st;

	return lstat(path, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

/* Keep the collected response DIR/<id>.res (open read-write as fd) as the
 * file the next request is written into: moved to DIR/.spare/ under a
 * random name, where the runner's watch of DIR does not see it. Reusing
 * the inode saves making one per call and freeing one per call, the two
 * dearest steps of a call on ext4 (whose allocator also skips inodes
 * freed in the last seconds, one by one, when it has no journal). Only a
 * file that is ours alone: a regular file of one link, writable. The
 * shim holds a lock on it (flock) while it is kept, which tells other
 * shims sweeping the directory that it is not left over. 1 if kept. */
static int keep_spare(const char *path, int fd, dev_t dev, ino_t ino)
{
	static int have_dir;
	static unsigned char r[6];
	static unsigned long n;
	char dir[4096];

	if (!keep_spares || spare_fd >= 0 || named_tmp || flock(fd, LOCK_EX | LOCK_NB) != 0)
		return 0;
	if (!n++ && getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return 0;
	snprintf(dir, sizeof(dir), "%s/" SR_RELAY_SPARE_DIR, relay_dir);
	snprintf(spare_path, sizeof(spare_path), "%s/%02x%02x%02x%02x%02x%02x%04lx", dir,
		 r[0], r[1], r[2], r[3], r[4], r[5], n & 0xffff);
	/* The directory goes when the last shim using it exits. */
	for (int tries = 0; tries < 2; tries++) {
		if (!have_dir && mkdir(dir, 0700) != 0 && errno != EEXIST)
			break;
		have_dir = 1;
		if (renameat2(AT_FDCWD, path, AT_FDCWD, spare_path, RENAME_NOREPLACE) == 0) {
			/* (The name moved may not be the file read, published
			 * again meanwhile: publish_kept then finds it is not.) */
			spare_fd = fd;
			spare_dev = dev;
			spare_ino = ino;
			return 1;
		}
		if (errno != ENOENT)
			break;
		have_dir = 0;
	}
	spare_path[0] = 0;
	return 0;
}

/* Remove the spares that shims which are gone left behind (killed before
 * their exit could): files in DIR/.spare/ that no process holds a lock
 * on. */
static void sweep_spares(void)
{
	char dir[4096], path[8192];
	struct dirent *e;
	struct stat st;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/" SR_RELAY_SPARE_DIR, relay_dir);
	if (!(d = opendir(dir)))
		return;
	while ((e = readdir(d))) {
		int fd;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ELOOP)
				unlink(path);
			continue;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 &&
		    same_file(path, st.st_dev, st.st_ino))
			unlink(path);
		close(fd);
	}
	closedir(d);
}

/* Publish text as final from a kept spare: write it over the old
 * content, then move it to its name, never replacing (renameat2
 * RENAME_NOREPLACE, or a link and an unlink where the file system refuses
 * that). 0; 1 for no kept spare, or one that failed before anything was
 * visible (dropped: the caller publishes another way); -1 with errno set. */
static int publish_kept(const char *text, size_t len, const char *final)
{
	if (spare_fd < 0 || !spare_path[0])
		return 1;
	if (!same_file(spare_path, spare_dev, spare_ino)) {
		/* Not ours any more (or never was): left alone, for the sweep
		 * of the next shim to start. */
		close(spare_fd);
		spare_fd = -1;
		spare_path[0] = 0;
		return 1;
	}
	if (pwrite_all(spare_fd, text, len) != 0 || ftruncate(spare_fd, (off_t)len) != 0) {
		drop_spare();
		return 1;
	}
	if (renameat2(AT_FDCWD, spare_path, AT_FDCWD, final, RENAME_NOREPLACE) != 0) {
		int e = errno;
		if ((e == EINVAL || e == ENOSYS) && link(spare_path, final) == 0) {
			unlink(spare_path);
		} else {
			drop_spare();
			if (e == EEXIST) {
				errno = e;
				return -1; /* the id is in use: never replaced */
			}
			return 1;
		}
	}
	close(spare_fd); /* and its lock */
	spare_fd = -1;
	spare_path[0] = 0;
	return 0;
}

/* Publish text as final from the anonymous spare: write it, then give it
 * its name with linkat() through /proc/self/fd (a link never replaces).
 * 0, 1 to fall back to a named temporary (no usable spare or no /proc),
 * or -1 with errno set. */
static int publish_anonymous(const char *text, size_t len, const char *final)
{
	char proc[64];
	int fd;

	make_spare();
	if (spare_fd < 0)
		return 1;
	fd = spare_fd;
	spare_fd = -1;
	if (pwrite_all(fd, text, len) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (linkat(AT_FDCWD, proc, AT_FDCWD, final, AT_SYMLINK_FOLLOW) == 0) {
		close(fd);
		return 0;
	}
	if (errno == ENOENT || errno == EACCES || errno == EPERM || errno == ENOTDIR) {
		/* No /proc in this sandbox (or it hides our descriptors); a
		 * missing relay directory says so again on the named path. */
		close(fd);
		named_tmp = 1;
		return 1;
	}
	{
		int e = errno;
		close(fd);
		errno = e;
	}
	return -1;
}

/* The fallback: write .<id>.req.tmp (O_EXCL), link it to final, drop it. */
static int publish_named(const char *id, const char *text, size_t len,
			 const char *final, char *err, size_t errlen)
{
	char tmp[4096];
	int fd, rc = -1;

	snprintf(tmp, sizeof(tmp), "%s/.%s.req.tmp", relay_dir, id);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "cannot write in relay directory %s: %s",
			 relay_dir, strerror(errno));
		return -1;
	}
	if (pwrite_all(fd, text, len) != 0)
		snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
	else if (link(tmp, final) != 0)
		snprintf(err, errlen, "cannot publish %s: %s", final, strerror(errno));
	else
		rc = 0;
	close(fd);
	unlink(tmp);
	return rc;
}

/* Publish DIR/<id>.req so that it appears whole or not at all, and never
 * replaces anything: an anonymous file linked to its name, or where that
 * cannot be done, a hidden temporary linked to it. */
static int publish_request(const char *id, const char *tool, json_t *args,
			   uint64_t *t, char *err, size_t errlen)
{
	char final[4096];
	json_t *req = json_pack("{s:i, s:s, s:s, s:O}", "v", SR_RELAY_VERSION,
				"id", id, "tool", tool, "args", args);
	char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
	size_t len;
	int rc;

	json_decref(req);
	if (!text) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	len = strlen(text);
	if (len > SR_RELAY_REQ_MAX) {
		snprintf(err, errlen, "request is %zu bytes, over the relay's limit of %u",
			 len, SR_RELAY_REQ_MAX);
		free(text);
		return -1;
	}
	snprintf(final, sizeof(final), "%s/%s" SR_RELAY_REQ_SUFFIX, relay_dir, id);
	rc = publish_kept(text, len, final);
	if (rc > 0)
		rc = publish_anonymous(text, len, final);
	if (rc < 0)
		snprintf(err, errlen, "cannot publish %s: %s", final, strerror(errno));
	else if (rc > 0)
		rc = publish_named(id, text, len, final, err, errlen);
	if (rc == 0)
		stamp(t, ST_PUBLISHED); /* the runner can see it from here on */
	free(text);
	return rc;
}

/* Read DIR/<id>.res if it is there. 1: read, 0: not yet, -1: unusable
 * (reported in job). The file is removed later, by relay_release(), so
 * that the answer goes out first. */
static int take_response(call_job *job)
{
	const char *id = job->rid;
	char path[4096];
	struct stat st;
	json_error_t jerr;
	json_t *res;
	const char *status, *rid;
	char *buf;
	ssize_t n;
	int fd, rw = 0;

	snprintf(path, sizeof(path), "%s/%s" SR_RELAY_RES_SUFFIX, relay_dir, id);
	/* Read-write where it may be kept as the next request's file. */
	fd = -1;
	if (keep_spares && spare_fd < 0) {
		fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT)
			return 0;
		rw = fd >= 0;
	}
	if (fd < 0)
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 0;
	job->collected = 1;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > SR_RELAY_RES_MAX) {
		close(fd);
		snprintf(job->message, sizeof(job->message), "relay response for %s is unusable", id);
		job->code = EXIT_RELAY;
		return -1;
	}
	buf = malloc((size_t)st.st_size + 1);
	n = buf ? read(fd, buf, (size_t)st.st_size) : -1;
	/* Kept until relay_release when it can be reused: ours alone. */
	if (n == st.st_size && rw && st.st_nlink == 1) {
		job->res_fd = fd;
		job->res_dev = st.st_dev;
		job->res_ino = st.st_ino;
	} else {
		close(fd);
	}
	if (n != st.st_size) {
		free(buf);
		snprintf(job->message, sizeof(job->message), "cannot read the relay response for %s", id);
		job->code = EXIT_RELAY;
		return -1;
	}
	res = json_loadb(buf, (size_t)n, 0, &jerr);
	free(buf);
	status = json_string_value(json_object_get(res, "status"));
	rid = json_string_value(json_object_get(res, "id"));
	if (!status || !rid || strcmp(rid, id) != 0) {
		json_decref(res);
		snprintf(job->message, sizeof(job->message), "malformed relay response for %s", id);
		job->code = EXIT_RELAY;
		return -1;
	}
	if (strcmp(status, "ok") == 0 && json_is_object(json_object_get(res, "result"))) {
		job->result = json_incref(json_object_get(res, "result"));
		job->code = json_is_true(json_object_get(job->result, "isError")) ?
				    EXIT_TOOL_ERROR : EXIT_OK;
	} else if (strcmp(status, "paused") == 0) {
		const char *m = json_string_value(json_object_get(res, "message"));
		snprintf(job->message, sizeof(job->message), "%s",
			 m ? m : "the call was handed to the user; its result will come later");
		job->code = EXIT_PAUSED;
	} else {
		const char *m = json_string_value(json_object_get(res, "error"));
		snprintf(job->message, sizeof(job->message), "%s", m ? m : "the tool call failed");
		job->code = EXIT_TOOL_ERROR;
	}
	json_decref(res);
	return 1;
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* The one watch of the process: inotify on the relay directory, made
 * before the first request is published, so that no publication of a
 * response can fall between a look and a wait. The runner publishes by
 * rename(), so only IN_MOVED_TO is watched: its other work in the
 * directory does not wake the shim. Without inotify every call is looked
 * for every 500 ms. */
static void open_watch(void)
{
	watch_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (watch_fd >= 0 && inotify_add_watch(watch_fd, relay_dir, IN_MOVED_TO) < 0) {
		close(watch_fd);
		watch_fd = -1;
	}
}

static call_job *find_call(const char *name, size_t len)
{
	for (call_job *j = calls; j; j = j->next)
		if (strlen(j->rid) == len && memcmp(j->rid, name, len) == 0)
			return j;
	return NULL;
}

/* Mark the calls whose response the pending inotify events name (all of
 * them when events were lost). */
static void read_events(void)
{
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n;

	while ((n = read(watch_fd, buf, sizeof(buf))) > 0) {
		for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
			const struct inotify_event *ev = (const void *)(buf + off);
			size_t len = ev->len ? sr_relay_id_of(ev->name, SR_RELAY_RES_SUFFIX) : 0;
			call_job *j;
			if (ev->mask & IN_Q_OVERFLOW) {
				for (j = calls; j; j = j->next)
					j->look = 1;
			} else if (len && (j = find_call(ev->name, len))) {
				j->look = 1;
			}
			off += (ssize_t)sizeof(*ev) + ev->len;
		}
	}
}

/* The call's deadline passed: withdraw the request if the runner has not
 * taken it yet. */
static void time_out(call_job *job)
{
	char req[4096];

	snprintf(req, sizeof(req), "%s/%s" SR_RELAY_REQ_SUFFIX, relay_dir, job->rid);
	if (unlink(req) == 0)
		snprintf(job->message, sizeof(job->message),
			 "no runner picked up the call within %ld ms (withdrawn)", timeout_ms);
	else
		snprintf(job->message, sizeof(job->message),
			 "the runner did not answer within %ld ms", timeout_ms);
	job->code = EXIT_TIMEOUT;
}

/* Whether the call is over (answered or timed out), looking for its
 * response if an event named it or the safety net's 500 ms are up. */
static int call_over(call_job *job, long now)
{
	if (job->look || now - job->looked >= 500) {
		job->look = 0;
		job->looked = now;
		if (take_response(job) != 0) {
			stamp(job->t, ST_SEEN);
			return 1;
		}
	}
	if (now >= job->deadline) {
		time_out(job);
		return 1;
	}
	return 0;
}

/* Milliseconds until some call needs looking at, or -1 for none. */
static int next_wake(long now)
{
	long soonest = -1;

	for (call_job *j = calls; j; j = j->next) {
		long at = j->looked + 500 < j->deadline ? j->looked + 500 : j->deadline;
		long in = at > now ? at - now : 0;
		if (soonest < 0 || in < soonest)
			soonest = in;
	}
	return (int)soonest;
}

/* Publish the request of job (job->t[ST_RECEIVED] is the caller's). 0, or
 * -1 with job->code and job->message set. */
static int relay_publish(call_job *job, const char *tool, json_t *args)
{
	long now = now_ms();

	new_id(job->rid, sizeof(job->rid));
	job->looked = now;
	job->deadline = now + timeout_ms;
	if (publish_request(job->rid, tool, args, job->t, job->message,
			    sizeof(job->message)) != 0) {
		job->code = EXIT_RELAY;
		return -1;
	}
	return 0;
}

/* After the answer went out: remove the response file. */
static void relay_release(call_job *job)
{
	char path[4096];

	if (job->collected) {
		snprintf(path, sizeof(path), "%s/%s" SR_RELAY_RES_SUFFIX, relay_dir, job->rid);
		if (job->res_fd >= 0 && keep_spare(path, job->res_fd, job->res_dev, job->res_ino))
			job->res_fd = -1;
		else
			unlink(path);
		job->collected = 0;
	}
	if (job->res_fd >= 0) {
		close(job->res_fd);
		job->res_fd = -1;
	}
}

/* ------------------------------------------------------------- specs */

static int load_specs(const char *path)
{
	json_error_t err;
	json_t *raw, *out, *spec;
	size_t i;

	if (!path) {
		specs = json_array();
		return 0;
	}
	raw = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
	if (!json_is_array(raw)) {
		fprintf(stderr, "sandrun-shim: %s: %s\n", path,
			raw ? "expected a JSON array of tool specs" : err.text);
		json_decref(raw);
		return -1;
	}
	out = json_array();
	json_array_foreach(raw, i, spec) {
		const char *name = json_string_value(json_object_get(spec, "name"));
		json_t *schema = json_object_get(spec, "inputSchema");
		json_t *t;
		if (!schema)
			schema = json_object_get(spec, "input_schema");
		if (!name) {
			fprintf(stderr, "sandrun-shim: %s: tool %zu has no name\n", path, i);
			json_decref(raw);
			json_decref(out);
			return -1;
		}
		t = json_pack("{s:s}", "name", name);
		if (json_is_string(json_object_get(spec, "description")))
			json_object_set(t, "description", json_object_get(spec, "description"));
		if (json_is_object(schema))
			json_object_set(t, "inputSchema", schema);
		else
			json_object_set_new(t, "inputSchema",
				json_pack("{s:s, s:{}, s:b}", "type", "object",
					  "properties", "additionalProperties", 1));
		json_array_append_new(out, t);
	}
	json_decref(raw);
	specs = out;
	return 0;
}

static json_t *find_spec(const char *name)
{
	size_t i;
	json_t *t;

	json_array_foreach(specs, i, t)
		if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0)
			return t;
	return NULL;
}

/* --------------------------------------------------------------- MCP */

static void send_json(json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);

	if (!text)
		return;
	fputs(text, stdout);
	fputc('\n', stdout);
	fflush(stdout);
	free(text);
}

static void send_result(json_t *id, json_t *result)
{
	json_t *msg = sr_mcp_response(id, result);

	send_json(msg);
	json_decref(msg);
}

static void send_error(json_t *id, int code, const char *message)
{
	json_t *msg = sr_mcp_error(id, code, message);

	send_json(msg);
	json_decref(msg);
}

static void on_tools_list(json_t *id, json_t *params)
{
	json_t *result = sr_mcp_tools_page(specs, params, page_size);

	if (result)
		send_result(id, result);
	else
		send_error(id, SR_MCP_INVALID_PARAMS, "invalid cursor");
}

/* Free a job (not in the list of calls). */
static void job_free(call_job *job)
{
	json_decref(job->id);
	json_decref(job->result);
	free(job);
}

/* Answer a call, then clean up after it. */
static void answer_call(call_job *job)
{
	if (job->result)
		send_result(job->id, json_incref(job->result));
	else if (job->code == EXIT_PAUSED)
		send_result(job->id, sr_mcp_text_result(job->message, 0));
	else
		send_result(job->id, sr_mcp_text_result(job->message, 1));
	if (trace_fd >= 0) {
		stamp(job->t, ST_ANSWERED);
		sr_timing_write(trace_fd, "shim", job->rid, stage_names, job->t, ST_N);
	}
	relay_release(job);
	job_free(job);
}

static void on_tools_call(json_t *id, json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments");
	call_job *job;
	json_t *owned;
	char msg[300];
	int rc;

	if (!name) {
		send_error(id, -32602, "tools/call needs a tool name");
		return;
	}
	if (!find_spec(name)) {
		snprintf(msg, sizeof(msg), "Unknown tool: %.200s", name);
		send_error(id, -32602, msg);
		return;
	}
	if (args && !json_is_object(args) && !json_is_null(args)) {
		send_error(id, -32602, "tools/call arguments must be an object");
		return;
	}
	if (inflight >= MAX_INFLIGHT) {
		send_error(id, -32603, "too many tool calls in flight");
		return;
	}
	job = calloc(1, sizeof(*job));
	if (!job) {
		send_error(id, -32603, "out of memory");
		return;
	}
	job->id = json_incref(id);
	job->res_fd = -1;
	job->t[ST_RECEIVED] = line_at;
	owned = json_is_object(args) ? json_incref(args) : json_object();
	rc = relay_publish(job, name, owned);
	json_decref(owned);
	if (rc != 0) {
		answer_call(job);
		return;
	}
	/* Waited for in serve_loop(), with the other calls in flight. */
	job->next = calls;
	calls = job;
	inflight++;
}

static void handle_message(const char *line, size_t len)
{
	json_error_t err;
	json_t *msg = json_loadb(line, len, 0, &err);
	json_t *id, *params;
	const char *method;

	if (!msg) {
		send_error(NULL, -32700, "Parse error");
		return;
	}
	if (!json_is_object(msg)) {
		send_error(NULL, -32600, json_is_array(msg) ?
			   "batches are not supported" : "Invalid Request");
		json_decref(msg);
		return;
	}
	id = json_object_get(msg, "id");
	method = json_string_value(json_object_get(msg, "method"));
	params = json_object_get(msg, "params");
	if (!method) {
		/* A response to a request we never sent, or junk. */
		if (!json_object_get(msg, "result") && !json_object_get(msg, "error"))
			send_error(id, -32600, "Invalid Request");
		json_decref(msg);
		return;
	}
	if (!id || json_is_null(id)) { /* notifications need no answer */
		json_decref(msg);
		return;
	}
	if (!json_is_string(id) && !json_is_integer(id)) {
		send_error(NULL, -32600, "Invalid Request: id must be a string or number");
	} else if (strcmp(method, "initialize") == 0) {
		send_result(id, sr_mcp_initialize(params, SHIM_VERSION));
	} else if (strcmp(method, "ping") == 0) {
		send_result(id, json_object());
	} else if (strcmp(method, "tools/list") == 0) {
		on_tools_list(id, params);
	} else if (strcmp(method, "tools/call") == 0) {
		on_tools_call(id, params);
	} else {
		/* Includes the 2026-07-28 server/discover probe: answered at
		 * once so that clients fall back to initialize. */
		char text[200];
		snprintf(text, sizeof(text), "Method not found: %.150s", method);
		send_error(id, -32601, text);
	}
	json_decref(msg);
}

/* Answer every call that is over, looking for the responses that events
 * named and the ones whose safety-net look or deadline is due. */
static void finish_calls(void (*answer)(call_job *))
{
	long now = now_ms();

	for (call_job **pp = &calls; *pp;) {
		call_job *j = *pp;
		if (!call_over(j, now)) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		inflight--;
		answer(j);
	}
}

/* Standard input: complete lines are handled as they arrive. A line longer
 * than MAX_LINE is answered with an error and skipped, never held whole. */
typedef struct line_buf {
	char *data;
	size_t len, cap;
	int skipping; /* inside a line over MAX_LINE: drop up to its end */
	int eof;
} line_buf;

static void handle_line(char *line, size_t n)
{
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = 0;
	if (n > 0)
		handle_message(line, n);
}

/* Read what stdin has, handle the complete lines in it. */
static void read_input(line_buf *in)
{
	size_t start = 0;
	ssize_t n;
	char *nl;

	if (in->cap - in->len < 65536) {
		size_t cap = in->cap ? in->cap * 2 : (size_t)65536 * 2;
		char *g = realloc(in->data, cap);
		if (!g) {
			/* Without memory, drop what is buffered, as one bad line. */
			send_error(NULL, -32603, "out of memory");
			in->len = 0;
			in->skipping = 1;
			return;
		}
		in->data = g;
		in->cap = cap;
	}
	n = read(0, in->data + in->len, in->cap - in->len - 1);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		in->eof = 1;
		if (in->len && !in->skipping) {
			in->data[in->len] = 0;
			handle_line(in->data, in->len);
		}
		in->len = 0;
		return;
	}
	if (trace_fd >= 0)
		line_at = sr_timing_now();
	in->len += (size_t)n;
	while ((nl = memchr(in->data + start, '\n', in->len - start))) {
		size_t end = (size_t)(nl - in->data);
		*nl = 0;
		if (!in->skipping)
			handle_line(in->data + start, end - start);
		in->skipping = 0;
		start = end + 1;
	}
	memmove(in->data, in->data + start, in->len - start);
	in->len -= start;
	if (in->len > MAX_LINE) {
		if (!in->skipping)
			send_error(NULL, -32600, "message too large");
		in->skipping = 1;
		in->len = 0;
	}
}

/* The shim's one loop: standard input (unless in is NULL), the watch,
 * and the deadlines of the calls in flight. Returns when the input is
 * over and no call is left. The spare file of the next request is made
 * when nothing else is waiting, so that it costs no call any time. */
static void serve_loop(line_buf *in, void (*answer)(call_job *))
{
	while ((in && !in->eof) || calls) {
		struct pollfd pfd[2];
		int n = 0, in_at = -1, watch_at = -1, ready;

		if (in && !in->eof) {
			pfd[n] = (struct pollfd){ 0, POLLIN, 0 };
			in_at = n++;
		}
		if (watch_fd >= 0 && calls) {
			pfd[n] = (struct pollfd){ watch_fd, POLLIN, 0 };
			watch_at = n++;
		}
		ready = poll(pfd, (nfds_t)n, 0);
		if (ready == 0) {
			/* With a call in flight, its response is kept instead. */
			if (!keep_spares || !calls)
				make_spare();
			ready = poll(pfd, (nfds_t)n, next_wake(now_ms()));
		}
		if (ready < 0 && errno != EINTR)
			break;
		if (ready > 0 && watch_at >= 0 && pfd[watch_at].revents)
			read_events();
		if (calls)
			finish_calls(answer);
		if (ready > 0 && in_at >= 0 && pfd[in_at].revents)
			read_input(in);
	}
}

static int serve_mcp(void)
{
	line_buf in = { 0 };

	keep_spares = 1;
	sweep_spares();
	atexit(drop_spare);
	open_watch();
	/* After the input ends, the calls in flight are still answered
	 * (each is bounded by the call timeout). */
	serve_loop(&in, answer_call);
	free(in.data);
	return 0;
}

/* -------------------------------------------------------------- call */

static char *read_stdin(void)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	ssize_t n;

	while (buf && (n = read(0, buf + len, cap - len - 1)) > 0) {
		len += (size_t)n;
		if (len > SR_RELAY_REQ_MAX) {
			free(buf);
			return NULL;
		}
		if (cap - len < 2) {
			char *g = realloc(buf, cap *= 2);
			if (!g) {
				free(buf);
				return NULL;
			}
			buf = g;
		}
	}
	if (buf)
		buf[len] = 0;
	return buf;
}

static int print_result(json_t *result)
{
	size_t i;
	json_t *item;

	json_array_foreach(json_object_get(result, "content"), i, item) {
		const char *text = json_string_value(json_object_get(item, "text"));
		if (text)
			printf("%s%s", i ? "\n" : "", text);
		else
			printf("%s[%s content]", i ? "\n" : "",
			       json_string_value(json_object_get(item, "type")) ?
			       json_string_value(json_object_get(item, "type")) : "unknown");
	}
	putchar('\n');
	return 0;
}

/* "call" keeps the outcome of its one call here. */
static call_job *call_outcome;

static void keep_outcome(call_job *job)
{
	call_outcome = job;
}

static int run_call(const char *tool, const char *args_text)
{
	json_error_t err;
	char *owned = NULL;
	json_t *args;
	call_job *job;
	int code;

	if (!sr_relay_valid_id(tool, strlen(tool)) && strlen(tool) > 0) {
		/* Tool names follow the same alphabet as ids. */
		fprintf(stderr, "sandrun-shim: invalid tool name '%s'\n", tool);
		return EXIT_USAGE;
	}
	if (!args_text) {
		owned = read_stdin();
		if (!owned) {
			fprintf(stderr, "sandrun-shim: cannot read arguments from standard input\n");
			return EXIT_USAGE;
		}
		args_text = owned;
	}
	args = json_loads(*args_text ? args_text : "{}", 0, &err);
	free(owned);
	if (!json_is_object(args)) {
		fprintf(stderr, "sandrun-shim: arguments must be a JSON object%s%s\n",
			args ? "" : ": ", args ? "" : err.text);
		json_decref(args);
		return EXIT_USAGE;
	}
	job = calloc(1, sizeof(*job));
	if (!job) {
		json_decref(args);
		fprintf(stderr, "sandrun-shim: out of memory\n");
		return EXIT_RELAY;
	}
	job->res_fd = -1;
	open_watch();
	if (relay_publish(job, tool, args) == 0) {
		calls = job;
		serve_loop(NULL, keep_outcome);
		job = call_outcome;
	}
	json_decref(args);
	if (job->result) {
		print_result(job->result);
	} else {
		fprintf(stderr, "sandrun-shim: %s: %s\n", tool, job->message);
	}
	fflush(stdout);
	relay_release(job);
	code = job->code;
	job_free(job);
	return code;
}

/* -------------------------------------------------------------- main */

#ifndef SR_SHIM_FUZZ /* tests/fuzz/fuzz_mcp_line.c includes this file */
static void usage(FILE *out)
{
	fprintf(out,
		"Usage: sandrun-shim mcp  [--specs FILE] [--relay-dir DIR] [--timeout-ms N]\n"
		"       sandrun-shim call [--relay-dir DIR] [--timeout-ms N] TOOL [ARGS_JSON]\n"
		"       sandrun-shim watch [--for SECONDS] DIR\n"
		"\n"
		"The in-sandbox end of sandrun's tool delivery. 'mcp' serves the tools in\n"
		"the specs file as an MCP server over stdio; 'call' makes one call, with the\n"
		"arguments from ARGS_JSON or standard input, and prints the result's text.\n"
		"Each call is a request file in the relay directory, answered by the runner.\n"
		"'watch' prints the name of each request in DIR as it appears (and '#'\n"
		"after 5 s of quiet), for a runner that reaches the sandbox only through an\n"
		"exec channel; it ends with 0 after SECONDS (default 3600).\n"
		"\n"
		"Environment: SANDRUN_TOOL_SPECS, SANDRUN_RELAY_DIR, SANDRUN_SHIM_TIMEOUT_MS\n"
		"(default %ld), SANDRUN_SHIM_PAGE_SIZE (tools/list page, default %d).\n"
		"\n"
		"Exit codes of 'call': 0 ok, 1 the tool reported an error, 2 usage,\n"
		"3 no answer in time, 4 paused (handed to the user), 5 relay failure.\n",
		DEFAULT_TIMEOUT_MS, PAGE_SIZE_DEFAULT);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "specs", required_argument, NULL, 's' },
		{ "relay-dir", required_argument, NULL, 'r' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	const char *mode, *specs_path = getenv("SANDRUN_TOOL_SPECS");
	const char *env;
	struct stat st;
	int c;

	relay_dir = getenv("SANDRUN_RELAY_DIR");
	trace_fd = sr_timing_open();
	/* For tests: the path taken where O_TMPFILE or /proc is missing. */
	named_tmp = getenv("SANDRUN_SHIM_NAMED_TMP") != NULL;
	if ((env = getenv("SANDRUN_SHIM_TIMEOUT_MS")))
		timeout_ms = strtol(env, NULL, 10);
	if ((env = getenv("SANDRUN_SHIM_PAGE_SIZE")) && atoi(env) > 0)
		page_size = (size_t)atoi(env);
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	mode = argv[1];
	if (strcmp(mode, "--help") == 0 || strcmp(mode, "-h") == 0) {
		usage(stdout);
		return EXIT_OK;
	}
	if (strcmp(mode, "--version") == 0) {
		printf("sandrun-shim %s (relay protocol %d)\n", SHIM_VERSION, SR_RELAY_VERSION);
		return EXIT_OK;
	}
	if (strcmp(mode, "watch") == 0)
		return shim_watch_main(argc, argv);
	optind = 2;
	while ((c = getopt_long(argc, argv, "+s:r:t:hV", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			specs_path = optarg;
			break;
		case 'r':
			relay_dir = optarg;
			break;
		case 't':
			timeout_ms = strtol(optarg, NULL, 10);
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (timeout_ms <= 0) {
		fprintf(stderr, "sandrun-shim: the timeout must be a positive number of milliseconds\n");
		return EXIT_USAGE;
	}
	if (!relay_dir || !*relay_dir) {
		fprintf(stderr, "sandrun-shim: no relay directory (--relay-dir or SANDRUN_RELAY_DIR)\n");
		return EXIT_USAGE;
	}
	if (stat(relay_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "sandrun-shim: relay directory %s: %s\n", relay_dir,
			errno ? strerror(errno) : "not a directory");
		return EXIT_RELAY;
	}
	if (strcmp(mode, "mcp") == 0) {
		if (optind != argc) {
			usage(stderr);
			return EXIT_USAGE;
		}
		if (load_specs(specs_path) != 0)
			return EXIT_USAGE;
		return serve_mcp();
	}
	if (strcmp(mode, "call") == 0) {
		if (optind >= argc || argc - optind > 2) {
			usage(stderr);
			return EXIT_USAGE;
		}
		return run_call(argv[optind], optind + 1 < argc ? argv[optind + 1] : NULL);
	}
	fprintf(stderr, "sandrun-shim: unknown mode '%s'\n", mode);
	usage(stderr);
	return EXIT_USAGE;
}
#endif /* SR_SHIM_FUZZ */
