/* Processes in a Daytona sandbox, through toolbox sessions: one session
 * per channel (commands of a session run one after another in one shell),
 * the process started as an async command with its input not echoed into
 * its output (suppressInputEcho: the daemon's SendInput appends what it
 * writes to the command's log unless told not to), its stdin fed through the
 * input endpoint in whole lines (one POST at a time, in order; the daemon
 * appends a newline to any input that lacks one), its stdout read from
 * the command's log. The daemon follows a log over a WebSocket only: a
 * plain GET of .../logs answers the log so far, whatever ?follow says
 * (GetSessionCommandLogs, apps/daemon/pkg/session/log.go), so the log is
 * read again and again: at once while output comes, then after a wait that
 * doubles from POLL_MIN_MS to POLL_MAX_MS while it does not (back to the
 * shortest when input is written), asking for the command's exit code when
 * a read brings nothing; once the exit is known, one last read. Each read
 * is the whole log: what was delivered is skipped. The log merges stdout
 * and stderr (sandrun sends no SDK version, so the daemon strips its
 * stream markers), so the process's stderr goes to a file in the sandbox
 * and is read when it exits. A read that fails is tried again; reads that
 * keep failing fail the channel with on_failed, so a run never hangs on
 * them. Signals go through process/execute and kill(1).
 *
 * watch: the directory is listed every watch interval; each new name is
 * an event (the first listing reports what is there).
 *
 * A channel's callbacks are never called from inside the provider call
 * that caused them: endings are delivered from a zero timer. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daytona.h"

#define REATTACH_MAX 5       /* consecutive failed reads of the log */
#define POLL_MIN_MS 20
#define POLL_MAX_MS 400
#define STDERR_MAX (64u << 10)
#define DY_LINE_MAX (16u << 20) /* an input line held for its newline */
#define WATCH_MS 250
#define WATCH_FAILS_MAX 8

typedef struct dy_wbuf {
	char *data;
	size_t len;
	struct dy_wbuf *next;
} dy_wbuf;

static void noop_done(void *ud, const sr_result *r)
{
	(void)ud;
	(void)r;
}

/* Stop an internal op without its done reaching the channel. */
static void op_abort(dy_op *op)
{
	if (op->done)
		op->done = noop_done;
	op->ud = NULL;
	dy__op_cancel(op);
}

static void chan_unlink(dy_chan *c)
{
	for (dy_chan **pp = &c->d->chans; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			return;
		}
	}
}

static void chan_free(dy_chan *c)
{
	while (c->wq) {
		dy_wbuf *w = c->wq;
		c->wq = w->next;
		free(w->data);
		free(w);
	}
	if (c->timer)
		c->d->host->timer_stop(c->timer);
	if (c->wtimer)
		c->d->host->timer_stop(c->wtimer);
	if (c->ptimer)
		c->d->host->timer_stop(c->ptimer);
	json_decref(c->seen);
	free(c->id);
	free(c->toolbox);
	free(c->command);
	free(c->cwd);
	free(c->ending_msg);
	free(c->err);
	free(c->line);
	free(c);
}

/* Cancel whatever the channel has in flight; callbacks that run from
 * inside the cancels see c->ended and do nothing. */
static void chan_quiesce(dy_chan *c)
{
	const sr_host *h = c->d->host;
	sr_http_call *s;

	c->ended = 1;
	if (c->setup) {
		dy_op *op = c->setup;
		c->setup = NULL;
		if (c->d->closing)
			op->done = NULL; /* unloading: no delivery at all */
		op_abort(op);
	}
	if ((s = c->stream)) {
		c->stream = NULL;
		h->http_cancel(s);
	}
	if ((s = c->wcall)) {
		c->wcall = NULL;
		h->http_cancel(s);
	}
	if (c->timer) {
		h->timer_stop(c->timer);
		c->timer = NULL;
	}
	if (c->wtimer) {
		h->timer_stop(c->wtimer);
		c->wtimer = NULL;
	}
	if (c->ptimer) {
		h->timer_stop(c->ptimer);
		c->ptimer = NULL;
	}
}

static void delete_session(dy_chan *c)
{
	char url[2048];

	if (!c->toolbox || !c->sid[0] || c->is_watch)
		return;
	snprintf(url, sizeof(url), "%s/process/session/%s", c->toolbox, c->sid);
	dy__fire_and_forget(c->d, "DELETE", url, NULL);
}

static void deliver_ending(void *ud)
{
	dy_chan *c = ud;

	c->d->host->timer_stop(c->timer);
	c->timer = NULL;
	chan_unlink(c);
	delete_session(c);
	if (c->is_watch) {
		if (c->ending_status != SR_ECANCELED && c->wcbs.on_lost)
			c->wcbs.on_lost(c->ud, c->ending_status, c->ending_msg);
	} else if (c->have_exit) {
		if (c->cbs.on_stdout)
			c->cbs.on_stdout(c->ud, NULL, 0);
		if (c->cbs.on_stderr && c->err && c->n_err)
			c->cbs.on_stderr(c->ud, c->err, c->n_err);
		if (c->cbs.on_stderr)
			c->cbs.on_stderr(c->ud, NULL, 0);
		if (c->cbs.on_exit)
			c->cbs.on_exit(c->ud, c->exit_code, 0);
	} else if (c->cbs.on_failed) {
		c->cbs.on_failed(c->ud, c->ending_status, c->ending_msg);
	}
	chan_free(c);
}

/* End the channel: on_failed (or on_lost) with status and msg, or on_exit
 * when the exit is known. Delivered from a zero timer. */
static void chan_end(dy_chan *c, int status, const char *msg)
{
	if (c->ending)
		return;
	chan_quiesce(c);
	c->ending = 1;
	c->ending_status = status;
	c->ending_msg = msg ? strdup(msg) : NULL;
	if (!c->have_exit && status != SR_ECANCELED)
		c->d->host->log(c->d->host, SR_LOG_WARN, "%s", msg ? msg : "channel lost");
	c->timer = c->d->host->timer_start(c->d->host, 0, 0, deliver_ending, c);
	if (!c->timer)
		deliver_ending(c);
}

static dy_chan *find_chan(dy *d, uint64_t req)
{
	for (dy_chan *c = d->chans; c; c = c->next)
		if (c->req == req && !c->ended)
			return c;
	return NULL;
}

/* -------------------------------------------------------- internal ops */

/* An internal op of channel c: its done goes to after with c. */
static dy_op *chan_op(dy_chan *c, sr_done_fn after)
{
	dy_op *op = dy__op_new(c->d, DY_AUX, 0, c->id, after, c);

	if (op)
		op->xdata = c;
	c->setup = op;
	return op;
}

static void chan_op_started(dy_chan *c, dy_op *op, int rc)
{
	if (dy__op_start(op, rc) != SR_OK) {
		c->setup = NULL;
		chan_end(c, rc, "daytona: cannot send a toolbox call");
	}
}

static void fail_from(dy_chan *c, const sr_result *r, const char *what)
{
	char msg[1200];

	snprintf(msg, sizeof(msg), "daytona: sandbox '%s': %s: %s", c->id, what,
		 r->message ? r->message : c->d->host->strerror(r->status));
	chan_end(c, r->status, msg);
}

/* -------------------------------------------------------------- writes */

static void write_next(dy_chan *c);
static void poll_sooner(dy_chan *c);

static void write_again(void *ud)
{
	dy_chan *c = ud;

	c->d->host->timer_stop(c->wtimer);
	c->wtimer = NULL;
	write_next(c);
}

static void on_written(void *ud, const sr_result *r)
{
	dy_chan *c = ud;
	json_t *meta;
	int http;
	char msg[600];
	dy_wbuf *w;

	c->wcall = NULL;
	if (c->ended)
		return;
	meta = r->json ? json_loads(r->json, 0, NULL) : NULL;
	http = (int)json_integer_value(json_object_get(meta, "status"));
	json_decref(meta);
	if (r->status == SR_OK && http == 410) {
		/* The command ended: what is left cannot be taken; its exit
		 * comes through the followed log. */
		c->input_closed = 1;
		while ((w = c->wq)) {
			c->wq = w->next;
			free(w->data);
			free(w);
		}
		c->wq_tail = &c->wq;
		return;
	}
	/* The command is queued in its session, or its input pipe not made
	 * yet: the daemon answers 500 "failed to open input pipe" (SendInput
	 * opens the FIFO its wrapper makes when the command starts), older
	 * ones 409. Tried again for up to 5 s. */
	if (r->status == SR_OK && (http == 409 || http == 500) && ++c->w409 <= 200) {
		c->wtimer = c->d->host->timer_start(c->d->host, 25, 0, write_again, c);
		if (!c->wtimer)
			chan_end(c, SR_ENOMEM, "daytona: cannot start a timer");
		return;
	}
	if (r->status != SR_OK || http >= 300) {
		snprintf(msg, sizeof(msg), "daytona: sandbox '%s': POST /process/session/%s/command/"
			 "%s/input: %s%d", c->id, c->sid, c->cid,
			 r->status != SR_OK ? "failed, status " : "HTTP ",
			 r->status != SR_OK ? r->status : http);
		chan_end(c, r->status != SR_OK ? r->status : dy__http_error(http), msg);
		return;
	}
	c->w409 = 0;
	poll_sooner(c);
	w = c->wq;
	c->wq = w->next;
	if (!c->wq)
		c->wq_tail = &c->wq;
	free(w->data);
	free(w);
	write_next(c);
}

static void write_next(dy_chan *c)
{
	const sr_host *h = c->d->host;
	sr_pair hdr[4];
	sr_http_request rq = { sizeof(rq), "POST", NULL, hdr, 0, NULL, 0,
			       c->d->request_timeout_ms, 0 };
	char url[2048];
	json_t *j;
	char *s;
	int rc;

	if (c->ended || c->wcall || c->wtimer || !c->wq || !c->cid[0])
		return;
	j = json_pack("{s:s%}", "data", c->wq->data, c->wq->len);
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s) {
		chan_end(c, SR_ENOMEM, "daytona: out of memory");
		return;
	}
	snprintf(url, sizeof(url), "%s/process/session/%s/command/%s/input", c->toolbox, c->sid,
		 c->cid);
	rq.url = url;
	rq.body = s;
	rq.body_len = strlen(s);
	dy__headers(c->d, hdr, &rq.n_headers, "application/json");
	rc = h->http_request(h, &rq, on_written, c, &c->wcall);
	free(s);
	if (rc != SR_OK) {
		c->wcall = NULL;
		chan_end(c, rc, "daytona: cannot send the process's input");
	}
}

/* Queue len bytes of data as one input POST. */
static int enqueue_input(dy_chan *c, const char *data, size_t len)
{
	dy_wbuf *w = calloc(1, sizeof(*w));
	json_t *probe;

	if (!w || !(w->data = malloc(len))) {
		free(w);
		return SR_ENOMEM;
	}
	/* The input endpoint takes a JSON string: text only. */
	if (!(probe = json_stringn(data, len))) {
		free(w->data);
		free(w);
		c->d->host->log(c->d->host, SR_LOG_WARN, "sandbox '%s': input to the process is "
				"not UTF-8 text; Daytona's input endpoint carries text only", c->id);
		return SR_EINVAL;
	}
	json_decref(probe);
	memcpy(w->data, data, len);
	w->len = len;
	*c->wq_tail = w;
	c->wq_tail = &w->next;
	write_next(c);
	return SR_OK;
}

/* Input goes out in whole lines: the daemon appends a newline to any
 * input that does not end with one (SendInput, "Ensure newline for
 * commands like read"), so a line cut in two would reach the process as
 * two. What follows the last newline is held for the next write. */
int dy__channel_write(void *self, uint64_t req, const void *data, size_t len)
{
	dy_chan *c = find_chan(self, req);
	char *buf;
	size_t n, whole;
	int rc;

	if (!c || c->is_watch)
		return SR_ENOTFOUND;
	if (c->input_closed)
		return SR_ESTATE;
	if (len == 0)
		return SR_OK;
	n = c->n_line + len;
	if (n > DY_LINE_MAX) {
		c->d->host->log(c->d->host, SR_LOG_WARN, "sandbox '%s': an input line of over "
				"%u bytes: Daytona's input endpoint takes whole lines", c->id,
				(unsigned)DY_LINE_MAX);
		return SR_EINVAL;
	}
	if (!(buf = realloc(c->line, n)))
		return SR_ENOMEM;
	memcpy(buf + c->n_line, data, len);
	c->line = buf;
	c->n_line = n;
	for (whole = n; whole > 0 && buf[whole - 1] != '\n'; whole--)
		;
	if (whole == 0)
		return SR_OK;
	rc = enqueue_input(c, buf, whole);
	if (rc != SR_OK) {
		c->n_line -= len; /* this write is refused whole */
		return rc;
	}
	memmove(buf, buf + whole, n - whole);
	c->n_line = n - whole;
	return SR_OK;
}

int dy__channel_close_input(void *self, uint64_t req)
{
	dy_chan *c = find_chan(self, req);

	if (!c || c->is_watch)
		return SR_ENOTFOUND;
	/* A last line without its newline goes as it is: the daemon gives it
	 * one. */
	if (c->n_line && !c->input_closed && enqueue_input(c, c->line, c->n_line) == SR_OK)
		c->n_line = 0;
	/* The toolbox cannot close a command's stdin; further writes are
	 * refused and the caller's signal ends the process. */
	c->input_closed = 1;
	return SR_EUNSUPPORTED;
}

int dy__channel_signal(void *self, uint64_t req, int signum)
{
	dy *d = self;
	dy_chan *c = find_chan(d, req);
	char url[2048], cmd[256];
	json_t *body;
	int rc;

	if (!c || c->is_watch)
		return SR_ENOTFOUND;
	if (signum <= 0 || signum > 64)
		return SR_EINVAL;
	if (!c->cid[0] || !c->toolbox) {
		/* Not started yet: sent once it is. */
		c->pending_signal = signum;
		return SR_OK;
	}
	/* The pid file is written as the command starts, which may be just
	 * after the exec's answer: waited for, up to 5 s. */
	snprintf(cmd, sizeof(cmd), "sh -c 'i=0; while [ ! -s /tmp/%s.pid ] && [ $i -lt 50 ]; do "
		 "sleep 0.1; i=$((i+1)); done; kill -%d \"$(cat /tmp/%s.pid)\"'", c->sid, signum,
		 c->sid);
	snprintf(url, sizeof(url), "%s/process/execute", c->toolbox);
	body = json_pack("{s:s, s:i}", "command", cmd, "timeout", 10);
	rc = body ? dy__fire_and_forget(d, "POST", url, body) : SR_ENOMEM;
	json_decref(body);
	return rc;
}

/* ------------------------------------------------------------- follow */

static void follow(dy_chan *c);
static void follow_later(void *ud);
static void check_command(dy_chan *c);
static void fetch_stderr(dy_chan *c);

static void on_stream_headers(void *ud, int http_status, const char *headers_json)
{
	dy_chan *c = ud;

	(void)headers_json;
	c->stream_http = http_status;
}

static void on_stream_chunk(void *ud, const void *data, size_t len)
{
	dy_chan *c = ud;
	const char *p = data;

	if (c->ended || c->stream_http != 200)
		return;
	if (c->skip) {
		size_t s = c->skip < len ? (size_t)c->skip : len;
		c->skip -= s;
		p += s;
		len -= s;
	}
	if (!len)
		return;
	c->delivered += len;
	c->progress = 1;
	if (c->cbs.on_stdout)
		c->cbs.on_stdout(c->ud, p, len);
}

static void on_stream_done(void *ud, const sr_result *r)
{
	dy_chan *c = ud;

	c->stream = NULL;
	if (c->ended)
		return;
	/* 404: no log yet (the command's wrapper makes it as the command
	 * starts); the command check says whether it is there at all. */
	c->stream_clean = r->status == SR_OK && (c->stream_http == 200 || c->stream_http == 404);
	if (!c->stream_clean) {
		c->d->host->log(c->d->host, SR_LOG_INFO,
				"sandbox '%s': a read of the process's output failed (%s, HTTP %d); "
				"checking the command", c->id, c->d->host->strerror(r->status),
				c->stream_http);
		c->final_read = 0; /* not the last read: it read nothing */
		check_command(c);
		return;
	}
	c->reattach_fails = 0;
	if (c->final_read) {
		fetch_stderr(c); /* everything the command wrote is delivered */
		return;
	}
	if (c->progress) {
		c->idle_ms = POLL_MIN_MS;
		follow(c); /* more may be there already */
		return;
	}
	check_command(c);
}

/* Read the log again after the current wait, doubled for the next. */
static void follow_after_wait(dy_chan *c)
{
	unsigned wait = c->idle_ms ? c->idle_ms : POLL_MIN_MS;

	c->idle_ms = wait * 2 > POLL_MAX_MS ? POLL_MAX_MS : wait * 2;
	c->ptimer = c->d->host->timer_start(c->d->host, wait, 0, follow_later, c);
	if (!c->ptimer)
		chan_end(c, SR_ENOMEM, "daytona: cannot start a timer");
}

/* Input was written: its answer may come soon, so the next read too. */
static void poll_sooner(dy_chan *c)
{
	c->idle_ms = POLL_MIN_MS;
	if (!c->ptimer)
		return;
	c->d->host->timer_stop(c->ptimer);
	c->ptimer = NULL;
	follow_after_wait(c);
}

static void follow(dy_chan *c)
{
	const sr_host *h = c->d->host;
	sr_pair hdr[4];
	sr_http_request rq = { sizeof(rq), "GET", NULL, hdr, 0, NULL, 0,
			       c->d->stream_idle_ms, (size_t)1 << 40 };
	sr_http_stream_callbacks cbs = { sizeof(cbs), on_stream_headers, on_stream_chunk,
					 on_stream_done };
	char url[2048];
	int rc;

	if (c->timer) {
		h->timer_stop(c->timer);
		c->timer = NULL;
	}
	if (c->ptimer) {
		h->timer_stop(c->ptimer);
		c->ptimer = NULL;
	}
	snprintf(url, sizeof(url), "%s/process/session/%s/command/%s/logs", c->toolbox, c->sid,
		 c->cid);
	rq.url = url;
	dy__headers(c->d, hdr, &rq.n_headers, NULL);
	c->skip = c->delivered;
	c->stream_http = 0;
	c->progress = 0;
	rc = h->http_stream(h, &rq, &cbs, c, &c->stream);
	if (rc != SR_OK) {
		c->stream = NULL;
		chan_end(c, rc, "daytona: cannot read the process's output");
	}
}

static void follow_later(void *ud)
{
	dy_chan *c = ud;

	c->d->host->timer_stop(c->ptimer);
	c->ptimer = NULL;
	follow(c);
}

static void stderr_got(void *ud, const sr_result *r)
{
	dy_chan *c = ud;

	c->setup = NULL;
	if (c->ended)
		return;
	if (r->status == SR_OK && r->len) {
		size_t n = r->len > STDERR_MAX ? STDERR_MAX : r->len;
		c->err = malloc(n);
		if (c->err) {
			/* The end is what explains a failure. */
			memcpy(c->err, (const char *)r->data + (r->len - n), n);
			c->n_err = n;
		}
	}
	chan_end(c, SR_OK, NULL);
}

static void stderr_answer(dy_op *op, const dy_resp *r)
{
	const char *text = json_string_value(json_object_get(r->json, "result"));

	if (r->status == SR_OK && r->http == 200 && text)
		dy__op_finish(op, SR_OK, NULL, text, strlen(text), NULL);
	else
		dy__op_finish(op, SR_OK, NULL, NULL, 0, NULL); /* no stderr */
}

/* The tail of the process's stderr, read and removed with its pid file in
 * one call: nothing of the command is left in the sandbox's /tmp. */
static void fetch_stderr(dy_chan *c)
{
	dy_op *op = chan_op(c, stderr_got);
	char url[2048], cmd[256];
	json_t *body;
	int rc;

	if (!op) {
		chan_end(c, SR_OK, NULL);
		return;
	}
	snprintf(url, sizeof(url), "%s/process/execute", c->toolbox);
	snprintf(cmd, sizeof(cmd), "sh -c 'tail -c %u /tmp/%s.err 2>/dev/null; "
		 "rm -f /tmp/%s.err /tmp/%s.pid'", STDERR_MAX, c->sid, c->sid, c->sid);
	body = json_pack("{s:s, s:i}", "command", cmd, "timeout", 30);
	rc = body ? dy__api_json(op, "POST", url, body, stderr_answer) : SR_ENOMEM;
	json_decref(body);
	chan_op_started(c, op, rc);
}

static void check_later(void *ud)
{
	check_command(ud);
}

static void command_checked(void *ud, const sr_result *r)
{
	dy_chan *c = ud;
	json_t *j;
	json_t *code;
	uint64_t wait;

	c->setup = NULL;
	if (c->ended)
		return;
	if (r->status != SR_OK) {
		if (r->status == SR_ENOTFOUND || r->status == SR_ESTATE || r->status == SR_EPERM ||
		    ++c->reattach_fails > REATTACH_MAX) {
			fail_from(c, r, "the process's output cannot be read and the command "
				  "cannot be found");
			return;
		}
		wait = 250u << (c->reattach_fails < 4 ? c->reattach_fails : 4);
		c->timer = c->d->host->timer_start(c->d->host, wait, 0, check_later, c);
		if (!c->timer)
			chan_end(c, SR_ENOMEM, "daytona: cannot start a timer");
		return;
	}
	j = json_loads(r->json ? r->json : "{}", 0, NULL);
	code = json_object_get(j, "exitCode");
	if (json_is_integer(code)) {
		c->exit_code = (int)json_integer_value(code);
		c->have_exit = 1;
	}
	json_decref(j);
	if (!c->stream_clean && ++c->reattach_fails > REATTACH_MAX) {
		char msg[600];
		snprintf(msg, sizeof(msg), "daytona: sandbox '%s': the process's output could not "
			 "be read %d times in a row; giving up", c->id, REATTACH_MAX);
		chan_end(c, SR_EIO, msg);
		return;
	}
	if (c->have_exit) {
		/* The exit code is written once the output is: one more read
		 * takes what came since the last. */
		c->final_read = 1;
		follow(c);
		return;
	}
	if (!c->stream_clean) {
		wait = 250u << (c->reattach_fails < 4 ? c->reattach_fails : 4);
		c->ptimer = c->d->host->timer_start(c->d->host, wait, 0, follow_later, c);
		if (!c->ptimer)
			chan_end(c, SR_ENOMEM, "daytona: cannot start a timer");
		return;
	}
	follow_after_wait(c); /* running, quiet */
}

static void command_answer(dy_op *op, const dy_resp *r)
{
	char *s;

	if (r->status != SR_OK || r->http >= 300) {
		dy__op_fail(op, r);
		return;
	}
	s = json_dumps(r->json ? r->json : json_object(), JSON_COMPACT);
	dy__op_finish(op, SR_OK, s, NULL, 0, NULL);
	free(s);
}

static void check_command(dy_chan *c)
{
	dy_op *op;
	char url[2048];
	int rc;

	if (c->timer) {
		c->d->host->timer_stop(c->timer);
		c->timer = NULL;
	}
	if (!(op = chan_op(c, command_checked))) {
		chan_end(c, SR_ENOMEM, "daytona: out of memory");
		return;
	}
	snprintf(url, sizeof(url), "%s/process/session/%s/command/%s", c->toolbox, c->sid,
		 c->cid);
	rc = dy__api(op, "GET", url, NULL, NULL, 0, 0, command_answer);
	chan_op_started(c, op, rc);
}

/* -------------------------------------------------------------- setup */

static char *build_command(const char *sid, const char *cwd, const char *program);

static void setup_done(void *ud, const sr_result *r)
{
	dy_chan *c = ud;

	c->setup = NULL;
	if (c->ended)
		return;
	if (r->status != SR_OK) {
		fail_from(c, r, "the process could not be started");
		return;
	}
	follow(c);
	write_next(c);
	if (c->pending_signal)
		(void)dy__channel_signal(c->d, c->req, c->pending_signal);
}

static void exec_started(dy_op *op, const dy_resp *r)
{
	dy_chan *c = op->xdata;
	const char *cid;

	if (r->status != SR_OK || r->http >= 300) {
		dy__op_fail(op, r);
		return;
	}
	cid = json_string_value(json_object_get(r->json, "cmdId"));
	if (!cid || !dy__valid_id(cid) || strlen(cid) >= sizeof(c->cid)) {
		dy__op_finish(op, SR_EPROTO, NULL, NULL, 0,
			      "daytona: sandbox '%s': %s: no valid cmdId in the answer", c->id,
			      op->what);
		return;
	}
	memcpy(c->cid, cid, strlen(cid) + 1); /* length checked above */
	dy__op_finish(op, SR_OK, NULL, NULL, 0, NULL);
}

static void session_opened(dy_op *op, const dy_resp *r)
{
	dy_chan *c = op->xdata;
	char url[2048];
	json_t *body;

	if (r->status != SR_OK || r->http >= 300) {
		dy__op_fail(op, r);
		return;
	}
	snprintf(url, sizeof(url), "%s/process/session/%s/exec", c->toolbox, c->sid);
	body = json_pack("{s:s, s:b, s:b, s:b}", "command", c->command, "runAsync", 1, "async", 1,
			 "suppressInputEcho", 1);
	dy__api_json(op, "POST", url, body, exec_started);
	json_decref(body);
}

static void open_session(dy_op *op, const dy_resp *unused)
{
	dy_chan *c = op->xdata;
	char url[2048];
	json_t *body;

	(void)unused;
	dy_box *b = dy__box(c->d, c->id);
	char *cmd;

	if (!c->toolbox && b)
		c->toolbox = strdup(b->toolbox);
	cmd = c->toolbox && b && b->workspace ?
		build_command(c->sid, c->cwd ? c->cwd : b->workspace, c->command) : NULL;
	if (cmd) {
		free(c->command);
		c->command = cmd;
	} else {
		if (op->in_call)
			op->start_rc = SR_ENOMEM;
		else
			dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return;
	}
	snprintf(url, sizeof(url), "%s/process/session", c->toolbox);
	body = json_pack("{s:s}", "sessionId", c->sid);
	dy__api_json(op, "POST", url, body, session_opened);
	json_decref(body);
}

/* The program part of the shell command: exec the program with its
 * environment, stderr to a file of its own. The caller frees it. */
static char *build_program(const char *sid, const sr_exec_spec *spec)
{
	size_t cap = 4096, n = 0;
	char *out = malloc(cap), *q, tail[128];

	if (!out)
		return NULL;
	out[0] = 0;
#define ADD(s) do { \
		size_t l_ = strlen(s); \
		if (n + l_ + 2 > cap) { \
			char *g_ = realloc(out, cap = (n + l_ + 2) * 2); \
			if (!g_) { free(out); free(q); return NULL; } \
			out = g_; \
		} \
		memcpy(out + n, s, l_); \
		n += l_; \
		out[n] = 0; \
	} while (0)
	q = NULL;
	ADD("exec env");
	for (size_t i = 0; i < spec->n_env; i++) {
		char *kv = malloc(strlen(spec->env[i].name) + strlen(spec->env[i].value) + 2);
		if (!kv) {
			free(out);
			return NULL;
		}
		sprintf(kv, "%s=%s", spec->env[i].name, spec->env[i].value);
		q = dy__shq(kv);
		free(kv);
		if (!q) {
			free(out);
			return NULL;
		}
		ADD(" ");
		ADD(q);
		free(q);
		q = NULL;
	}
	for (const char *const *a = spec->argv; *a; a++) {
		if (!(q = dy__shq(*a))) {
			free(out);
			return NULL;
		}
		ADD(" ");
		ADD(q);
		free(q);
		q = NULL;
	}
	snprintf(tail, sizeof(tail), " 2>>/tmp/%s.err", sid);
	ADD(tail);
#undef ADD
	return out;
}

/* The whole command: record the pid (for signals), enter cwd, run the
 * program; in `sh -c` so that $$ is the program's pid after exec. */
static char *build_command(const char *sid, const char *cwd, const char *program)
{
	char *qcwd = dy__shq(cwd), *inner, *qi, *outer = NULL;

	if (!qcwd)
		return NULL;
	inner = malloc(strlen(qcwd) + strlen(program) + 128);
	if (inner) {
		sprintf(inner, "echo $$ >/tmp/%s.pid; cd %s || exit 126; %s", sid, qcwd, program);
		if ((qi = dy__shq(inner)) && (outer = malloc(strlen(qi) + 8)))
			sprintf(outer, "sh -c %s", qi);
		free(qi);
	}
	free(inner);
	free(qcwd);
	return outer;
}

static dy_chan *chan_new(dy *d, uint64_t req, const char *id, void *ud)
{
	dy_chan *c = calloc(1, sizeof(*c));
	unsigned char rnd[8];

	if (!c)
		return NULL;
	c->d = d;
	c->req = req;
	c->ud = ud;
	c->wq_tail = &c->wq;
	if (!(c->id = strdup(id)) || d->host->random_bytes(d->host, rnd, sizeof(rnd)) != SR_OK) {
		free(c->id);
		free(c);
		return NULL;
	}
	snprintf(c->sid, sizeof(c->sid), "sandrun-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0],
		 rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	c->next = d->chans;
	d->chans = c;
	return c;
}

int dy__exec(void *self, uint64_t req, const char *id,
	     const sr_exec_spec *spec, const sr_channel_callbacks *cbs,
	     void *ud)
{
	dy *d = self;
	dy_chan *c;
	dy_op *op;
	int rc;

	if (!dy__valid_id(id) || !spec || spec->size < SR_TABLE_HAS(sr_exec_spec, cwd) ||
	    !spec->argv || !spec->argv[0] || !cbs)
		return SR_EINVAL;
	/* env(1) would take a program name with '=' for an assignment. */
	if (strchr(spec->argv[0], '='))
		return SR_EINVAL;
	for (size_t i = 0; i < spec->n_env; i++)
		if (!spec->env[i].name || !spec->env[i].value)
			return SR_EINVAL;
	if (find_chan(d, req))
		return SR_EEXIST;
	if (!(c = chan_new(d, req, id, ud)))
		return SR_ENOMEM;
	memcpy(&c->cbs, cbs, cbs->size < sizeof(c->cbs) ? cbs->size : sizeof(c->cbs));
	c->cbs.size = sizeof(c->cbs);
	if (!(c->command = build_program(c->sid, spec)) ||
	    (spec->cwd && !(c->cwd = strdup(spec->cwd))) || !(op = chan_op(c, setup_done))) {
		chan_unlink(c);
		chan_free(c);
		return SR_ENOMEM;
	}
	rc = dy__with_toolbox(op, open_session);
	rc = dy__op_start(op, rc);
	if (rc != SR_OK) {
		chan_unlink(c);
		chan_free(c);
	}
	return rc;
}

/* -------------------------------------------------------------- watch */

static void watch_tick(void *ud);

static void watch_listed(void *ud, const sr_result *r)
{
	dy_chan *c = ud;
	json_t *list, *now, *it;
	size_t i;

	c->setup = NULL;
	if (c->ended)
		return;
	if (r->status != SR_OK) {
		if (r->status == SR_ENOTFOUND || r->status == SR_EPERM ||
		    ++c->reattach_fails > WATCH_FAILS_MAX)
			fail_from(c, r, "the watch stopped");
		return;
	}
	c->reattach_fails = 0;
	list = json_loads(r->json ? r->json : "[]", 0, NULL);
	now = json_object();
	json_array_foreach(list, i, it) {
		const char *name = json_string_value(json_object_get(it, "name"));
		if (!name)
			continue;
		json_object_set_new(now, name, json_true());
		if (!json_object_get(c->seen, name) && c->wcbs.on_event) {
			c->wcbs.on_event(c->ud, name);
			if (c->ended)
				break; /* cancelled from inside on_event */
		}
	}
	json_decref(list);
	json_decref(c->seen);
	c->seen = now;
}

static void watch_answer(dy_op *op, const dy_resp *r)
{
	char *s;

	if (r->status != SR_OK || r->http >= 300) {
		dy__op_fail(op, r);
		return;
	}
	if (!json_is_array(r->json)) {
		dy__op_finish(op, SR_EPROTO, NULL, NULL, 0, "daytona: %s: not a JSON array",
			      op->what);
		return;
	}
	s = json_dumps(r->json, JSON_COMPACT);
	dy__op_finish(op, SR_OK, s, NULL, 0, NULL);
	free(s);
}

static void watch_tick(void *ud)
{
	dy_chan *c = ud;
	char *enc, url[4096];
	dy_op *op;
	int rc;

	if (c->ended || c->setup)
		return;
	if (!c->toolbox) {
		const char *tb = dy__box_toolbox(c->d, c->id);
		if (!tb) {
			chan_end(c, SR_ESTATE, "daytona: the sandbox's toolbox is not known (reconnect "
				 "it first)");
			return;
		}
		c->toolbox = strdup(tb);
	}
	if (!c->toolbox || !(enc = dy__urlenc(c->command)) || !(op = chan_op(c, watch_listed))) {
		chan_end(c, SR_ENOMEM, "daytona: out of memory");
		return;
	}
	snprintf(url, sizeof(url), "%s/files?path=%s", c->toolbox, enc);
	free(enc);
	rc = dy__api(op, "GET", url, NULL, NULL, 0, 16u << 20, watch_answer);
	chan_op_started(c, op, rc);
}

int dy__watch(void *self, uint64_t req, const char *id, const char *path,
	      const sr_watch_callbacks *cbs, void *ud)
{
	dy *d = self;
	dy_chan *c;

	if (!dy__valid_id(id) || !path || !*path || !cbs)
		return SR_EINVAL;
	if (!dy__box_toolbox(d, id))
		return SR_ESTATE; /* the sandbox was not created or reconnected here */
	if (find_chan(d, req))
		return SR_EEXIST;
	if (!(c = chan_new(d, req, id, ud)))
		return SR_ENOMEM;
	c->is_watch = 1;
	memcpy(&c->wcbs, cbs, cbs->size < sizeof(c->wcbs) ? cbs->size : sizeof(c->wcbs));
	c->seen = json_object();
	c->command = dy__path_in_box(d, id, path); /* the directory watched */
	c->timer = d->host->timer_start(d->host, 0, WATCH_MS, watch_tick, c);
	if (!c->command || !c->seen || !c->timer) {
		chan_unlink(c);
		chan_free(c);
		return SR_ENOMEM;
	}
	return SR_OK;
}

/* ------------------------------------------------------------ cancel */

int dy__chan_cancel(dy *d, uint64_t req)
{
	dy_chan *c = find_chan(d, req);

	if (!c)
		return SR_ENOTFOUND;
	if (c->is_watch) {
		chan_end(c, SR_ECANCELED, NULL);
		return SR_OK;
	}
	/* A process: killed; its exit comes through the stream. */
	return dy__channel_signal(d, req, SIGKILL);
}

/* The sandbox goes away (park stopped, destroy): its channels are lost. */
void dy__chans_end(dy *d, const char *id, const char *why)
{
	char msg[600];

	for (dy_chan *c = d->chans; c; c = c->next) {
		if (c->ended || strcmp(c->id, id) != 0)
			continue;
		snprintf(msg, sizeof(msg), "daytona: sandbox '%s': %s", id, why);
		chan_end(c, c->is_watch ? SR_ENOTFOUND : SR_ECANCELED, msg);
	}
}

/* At fini: nothing more is called. */
void dy__chans_free(dy *d)
{
	while (d->chans) {
		dy_chan *c = d->chans;
		chan_quiesce(c);
		d->chans = c->next;
		chan_free(c);
	}
}
