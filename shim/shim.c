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
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static int inflight;
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

/* The outcome of one relay call. */
typedef struct outcome {
	int code;       /* EXIT_* */
	json_t *result; /* MCP result object for ok, NULL otherwise */
	char message[512];
	uint64_t t[ST_N]; /* timing stamps, when tracing */
	int watch_fd;     /* the wait's inotify descriptor, or -1 */
	int collected;    /* the response file was opened: remove it */
} outcome;

static void new_id(char *buf, size_t n)
{
	static unsigned long counter;
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	unsigned char r[8];
	unsigned long c;

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		memset(r, 0, sizeof(r));
	pthread_mutex_lock(&lock);
	c = ++counter;
	pthread_mutex_unlock(&lock);
	snprintf(buf, n, "s%02x%02x%02x%02x%02x%02x%02x%02x-%ld-%lu", r[0], r[1],
		 r[2], r[3], r[4], r[5], r[6], r[7], (long)getpid(), c);
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Publish DIR/<id>.req: write a hidden temporary, then link it to its final
 * name (link never replaces: an id in use is an error), then drop the
 * temporary. */
static int publish_request(const char *id, const char *tool, json_t *args,
			   uint64_t *t, char *err, size_t errlen)
{
	char tmp[4096], final[4096];
	json_t *req = json_pack("{s:i, s:s, s:s, s:O}", "v", SR_RELAY_VERSION,
				"id", id, "tool", tool, "args", args);
	char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
	int fd, rc = -1;

	json_decref(req);
	if (!text) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (strlen(text) > SR_RELAY_REQ_MAX) {
		snprintf(err, errlen, "request is %zu bytes, over the relay's limit of %u",
			 strlen(text), SR_RELAY_REQ_MAX);
		free(text);
		return -1;
	}
	snprintf(tmp, sizeof(tmp), "%s/.%s.req.tmp", relay_dir, id);
	snprintf(final, sizeof(final), "%s/%s" SR_RELAY_REQ_SUFFIX, relay_dir, id);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "cannot write in relay directory %s: %s",
			 relay_dir, strerror(errno));
		free(text);
		return -1;
	}
	if (write_all(fd, text, strlen(text)) != 0) {
		snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
	} else if (link(tmp, final) != 0) {
		snprintf(err, errlen, "cannot publish %s: %s", final, strerror(errno));
	} else {
		stamp(t, ST_PUBLISHED); /* the runner can see it from here on */
		rc = 0;
	}
	close(fd);
	unlink(tmp);
	free(text);
	return rc;
}

/* Read DIR/<id>.res if it is there. 1: read, 0: not yet, -1: unusable
 * (reported in o). The file is removed later, by relay_release(), so that
 * the answer goes out first. */
static int take_response(const char *id, outcome *o)
{
	char path[4096];
	struct stat st;
	json_error_t jerr;
	json_t *res;
	const char *status, *rid;
	char *buf;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s" SR_RELAY_RES_SUFFIX, relay_dir, id);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 0;
	o->collected = 1;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > SR_RELAY_RES_MAX) {
		close(fd);
		snprintf(o->message, sizeof(o->message), "relay response for %s is unusable", id);
		o->code = EXIT_RELAY;
		return -1;
	}
	buf = malloc((size_t)st.st_size + 1);
	n = buf ? read(fd, buf, (size_t)st.st_size) : -1;
	close(fd);
	if (n != st.st_size) {
		free(buf);
		snprintf(o->message, sizeof(o->message), "cannot read the relay response for %s", id);
		o->code = EXIT_RELAY;
		return -1;
	}
	res = json_loadb(buf, (size_t)n, 0, &jerr);
	free(buf);
	status = json_string_value(json_object_get(res, "status"));
	rid = json_string_value(json_object_get(res, "id"));
	if (!status || !rid || strcmp(rid, id) != 0) {
		json_decref(res);
		snprintf(o->message, sizeof(o->message), "malformed relay response for %s", id);
		o->code = EXIT_RELAY;
		return -1;
	}
	if (strcmp(status, "ok") == 0 && json_is_object(json_object_get(res, "result"))) {
		o->result = json_incref(json_object_get(res, "result"));
		o->code = json_is_true(json_object_get(o->result, "isError")) ?
				  EXIT_TOOL_ERROR : EXIT_OK;
	} else if (strcmp(status, "paused") == 0) {
		const char *m = json_string_value(json_object_get(res, "message"));
		snprintf(o->message, sizeof(o->message), "%s",
			 m ? m : "the call was handed to the user; its result will come later");
		o->code = EXIT_PAUSED;
	} else {
		const char *m = json_string_value(json_object_get(res, "error"));
		snprintf(o->message, sizeof(o->message), "%s", m ? m : "the tool call failed");
		o->code = EXIT_TOOL_ERROR;
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

/* Whether the inotify events in buf (n bytes) may mean that the response
 * named name is there: one names it, or events were lost. */
static int names_response(const char *buf, ssize_t n, const char *name)
{
	ssize_t off = 0;

	while (off + (ssize_t)sizeof(struct inotify_event) <= n) {
		const struct inotify_event *ev = (const void *)(buf + off);
		if ((ev->mask & IN_Q_OVERFLOW) || (ev->len && strcmp(ev->name, name) == 0))
			return 1;
		off += (ssize_t)sizeof(*ev) + ev->len;
	}
	return 0;
}

/* Wait for the answer: inotify on the directory, with a look every 500 ms
 * as a safety net. The watch is added before the first look, so no
 * publication can fall between the look and the wait. The runner
 * publishes by rename(), so only IN_MOVED_TO is watched, and the file is
 * looked for only when an event names it: the runner's other work in the
 * directory (taking requests, writing temporaries) wakes this thread once
 * at most, and never makes it open anything. The watch stays open until
 * relay_release(): closing an inotify descriptor can wait for the kernel
 * (an SRCU grace period), which the answer need not. */
static void await_response(const char *id, outcome *o)
{
	char evbuf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	char name[SR_RELAY_ID_MAX + sizeof(SR_RELAY_RES_SUFFIX) + 1];
	long deadline = now_ms() + timeout_ms, looked = 0;
	int ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK), look = 1;

	snprintf(name, sizeof(name), "%s" SR_RELAY_RES_SUFFIX, id);
	o->watch_fd = ifd;
	if (ifd >= 0 && inotify_add_watch(ifd, relay_dir, IN_MOVED_TO) < 0) {
		close(ifd);
		o->watch_fd = ifd = -1;
	}
	for (;;) {
		struct pollfd pfd = { ifd, POLLIN, 0 };
		long now = now_ms(), left = deadline - now;
		ssize_t n;
		if (look || now - looked >= 500) {
			looked = now;
			if (take_response(id, o) != 0) {
				stamp(o->t, ST_SEEN);
				break;
			}
		}
		if (left <= 0) {
			char req[4096];
			snprintf(req, sizeof(req), "%s/%s" SR_RELAY_REQ_SUFFIX, relay_dir, id);
			/* Withdraw it if the runner has not claimed it yet. */
			if (unlink(req) == 0)
				snprintf(o->message, sizeof(o->message),
					 "no runner picked up the call within %ld ms (withdrawn)",
					 timeout_ms);
			else
				snprintf(o->message, sizeof(o->message),
					 "the runner did not answer within %ld ms", timeout_ms);
			o->code = EXIT_TIMEOUT;
			break;
		}
		look = poll(&pfd, ifd >= 0 ? 1 : 0, left < 500 ? (int)left : 500) <= 0;
		while (ifd >= 0 && (n = read(ifd, evbuf, sizeof(evbuf))) > 0)
			look |= names_response(evbuf, n, name);
	}
}

/* Publish the request of a call (o->t[ST_RECEIVED] is the caller's; the
 * rest of o is set here). 0, or -1 with o->code and o->message set. */
static int relay_publish(const char *tool, json_t *args, char *id, size_t idlen,
			 outcome *o)
{
	uint64_t received = o->t[ST_RECEIVED];

	memset(o, 0, sizeof(*o));
	o->t[ST_RECEIVED] = received;
	o->watch_fd = -1;
	new_id(id, idlen);
	if (publish_request(id, tool, args, o->t, o->message, sizeof(o->message)) != 0) {
		o->code = EXIT_RELAY;
		return -1;
	}
	return 0;
}

/* After the answer went out: remove the response file, close the watch. */
static void relay_release(const char *id, outcome *o)
{
	char path[4096];

	if (o->collected) {
		snprintf(path, sizeof(path), "%s/%s" SR_RELAY_RES_SUFFIX, relay_dir, id);
		unlink(path);
		o->collected = 0;
	}
	if (o->watch_fd >= 0)
		close(o->watch_fd);
	o->watch_fd = -1;
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
	pthread_mutex_lock(&out_lock);
	fputs(text, stdout);
	fputc('\n', stdout);
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
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

typedef struct call_job {
	json_t *id;
	char *tool;
	json_t *args;
	char rid[64]; /* the relay id */
	outcome o;
} call_job;

/* Free a job and count it out of the calls in flight. */
static void job_done(call_job *job)
{
	json_decref(job->id);
	json_decref(job->args);
	free(job->tool);
	free(job);
	pthread_mutex_lock(&count_lock);
	inflight--;
	pthread_mutex_unlock(&count_lock);
}

/* Answer a call from its outcome, then clean up after it. */
static void answer_call(call_job *job)
{
	outcome *o = &job->o;

	if (o->result) {
		send_result(job->id, o->result);
	} else if (o->code == EXIT_PAUSED) {
		send_result(job->id, sr_mcp_text_result(o->message, 0));
	} else {
		send_result(job->id, sr_mcp_text_result(o->message, 1));
	}
	if (trace_fd >= 0) {
		stamp(o->t, ST_ANSWERED);
		sr_timing_write(trace_fd, "shim", job->rid, stage_names, o->t, ST_N);
	}
	relay_release(job->rid, o);
	job_done(job);
}

/* The wait for one published request. */
static void *call_thread(void *arg)
{
	call_job *job = arg;

	await_response(job->rid, &job->o);
	answer_call(job);
	return NULL;
}

static void on_tools_call(json_t *id, json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments");
	pthread_attr_t attr;
	pthread_t th;
	call_job *job;
	char msg[300];

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
	pthread_mutex_lock(&count_lock);
	if (inflight >= MAX_INFLIGHT) {
		pthread_mutex_unlock(&count_lock);
		send_error(id, -32603, "too many tool calls in flight");
		return;
	}
	inflight++;
	pthread_mutex_unlock(&count_lock);
	job = calloc(1, sizeof(*job));
	job->id = json_incref(id);
	job->tool = strdup(name);
	job->args = json_is_object(args) ? json_incref(args) : json_object();
	job->o.t[ST_RECEIVED] = line_at;
	/* Published here, before a thread is started for the wait: the
	 * runner gets to work while the thread starts. */
	if (relay_publish(job->tool, job->args, job->rid, sizeof(job->rid), &job->o) != 0) {
		answer_call(job);
		return;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, (size_t)256 * 1024);
	/* The request is out, so it is answered even without a thread. */
	if (pthread_create(&th, &attr, call_thread, job) != 0)
		call_thread(job);
	pthread_attr_destroy(&attr);
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

static int serve_mcp(void)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	while ((n = getline(&line, &cap, stdin)) >= 0) {
		if (trace_fd >= 0)
			line_at = sr_timing_now();
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = 0;
		if (n == 0)
			continue;
		if ((size_t)n > MAX_LINE) {
			send_error(NULL, -32600, "message too large");
			continue;
		}
		handle_message(line, (size_t)n);
	}
	free(line);
	/* The client closed stdin: finish the calls in flight so that their
	 * answers are written (each is bounded by the call timeout). */
	for (;;) {
		int left;
		pthread_mutex_lock(&count_lock);
		left = inflight;
		pthread_mutex_unlock(&count_lock);
		if (left == 0)
			break;
		usleep(5000);
	}
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

static int run_call(const char *tool, const char *args_text)
{
	json_error_t err;
	char *owned = NULL, id[64];
	json_t *args;
	outcome o = { 0 };

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
	if (relay_publish(tool, args, id, sizeof(id), &o) == 0)
		await_response(id, &o);
	json_decref(args);
	if (o.result) {
		print_result(o.result);
		json_decref(o.result);
	} else {
		fprintf(stderr, "sandrun-shim: %s: %s\n", tool, o.message);
	}
	fflush(stdout);
	relay_release(id, &o);
	return o.code;
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
