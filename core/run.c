/*
 * One agent turn. The steps chain through completion callbacks on the
 * loop:
 *
 *   start      plan gates, session record, harness description
 *   acquire    provider reconnect (resuming) or create
 *   prepare    relay directory and specs, harness files, relay sweep+start
 *   agent      provider exec of the adapter; ACP initialize; session/load
 *              or session/new; session/set_mode; session/prompt
 *   stream     session/update -> events; permission requests; fs requests
 *   end        stop the agent, park (or destroy) the sandbox, store the
 *              session pointer with a compare-and-set on the turn index
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/acp.h"
#include "core/cli.h"
#include "core/harness.h"
#include "core/log.h"
#include "core/mcp_http.h"
#include "core/plan.h"
#include "core/provider.h"
#include "core/relay.h"
#include "core/run.h"
#include "core/session.h"
#include "core/tools.h"

#define DEFAULT_ACP_TIMEOUT_MS 120000
#define STDERR_TAIL 4096

typedef struct perm {
	char id[32];
	json_t *acp_id;   /* the ACP request's id */
	json_t *options;  /* its options */
	struct perm *next;
} perm;

/* The lookups of user MCP hosts, shared by their requests: the run may
 * be gone (cancelled, freed) while a lookup still runs on the pool. */
typedef struct mcp_lookups {
	struct sr__run *r;      /* NULL once the run is freed */
	int pending;
	char why[600];          /* the first refusal */
} mcp_lookups;

typedef struct mcp_lookup {
	uv_getaddrinfo_t req;
	mcp_lookups *all;
	char *name, *url;
} mcp_lookup;

struct sr__run {
	sr__ctx *ctx;
	sr__run_opts o;
	sr__plugin *provider, *harness;
	json_t *desc;           /* the harness's describe */
	json_t *user_mcp;
	char *allow_buf;        /* [runner] mcp_allow_hosts, split in place */
	const char **allow;     /* its host names, NULL-terminated */
	mcp_lookups *lookups;   /* user MCP hosts being resolved */
	sr__toolset *tools;
	sr__guard guard;
	sr__relay *relay;
	sr__mcp_http *mcp_http;  /* the loopback server, when the harness asks */
	sr__acp *acp;
	char session[32];
	char *sandbox_id, *workspace, *home, *root;
	char *acp_session;
	char relay_dir[4096], specs[4096];
	int resumed;            /* a session record existed */
	int created;            /* the sandbox was created by this run */
	int turn;               /* completed turns before this one */
	uint64_t chan;          /* the adapter's channel (exec req) */
	int agent_running;
	int load_session;       /* the agent can session/load */
	int loading;            /* session/load sent: updates are history */
	char tail[STDERR_TAIL]; /* the adapter's stderr, last bytes */
	size_t tail_len;
	perm *perms;
	int next_perm;
	int phase_done;         /* set once run.finished or run.failed */
	int done;
	int exit_code;
	int cancelling;
	int tearing_down;
	uv_timer_t *kill_timer;
	uint64_t t0, t_phase;
	json_t *files;          /* harness files still to write */
	size_t file_index;
	json_t *env;            /* the adapter's environment */
};

static void fail(sr__run *r, const char *code, const char *fmt, ...)
	SR_PRINTF(3, 4);
static void teardown(sr__run *r);

/* ------------------------------------------------------------- events */

static void emit(sr__run *r, json_t *ev)
{
	if (r->o.event)
		r->o.event(r->o.ud, ev);
	json_decref(ev);
}

static void timing(sr__run *r, const char *stage)
{
	uint64_t now = uv_now(r->ctx->loop);

	emit(r, json_pack("{s:s, s:s, s:I}", "type", "timing", "stage", stage, "ms",
			  (json_int_t)(now - r->t_phase)));
	sr__log(SR_LOG_DEBUG, "run", "[timing] stage=%s ms=%llu", stage,
		(unsigned long long)(now - r->t_phase));
	r->t_phase = now;
}

static void on_relay_event(void *ud, json_t *ev)
{
	sr__run *r = ud;
	const char *type = json_string_value(json_object_get(ev, "type"));

	if (type && strcmp(type, "permission.request") == 0) {
		json_t *copy = json_copy(ev);
		json_object_set(copy, "request_id", json_object_get(ev, "call_id"));
		json_object_set_new(copy, "source", json_string("tool"));
		emit(r, copy);
		return;
	}
	emit(r, json_incref(ev));
}

static void fail(sr__run *r, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	json_t *ev;

	if (r->phase_done)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->phase_done = 1;
	r->exit_code = SR_RUN_EXIT_FAILED;
	ev = json_pack("{s:s, s:s, s:s, s:s}", "type", "run.failed", "code", code,
		       "message", msg, "session", r->session);
	if (r->tail_len) {
		r->tail[r->tail_len] = 0;
		json_object_set_new(ev, "stderr_tail", json_string(r->tail));
	}
	emit(r, ev);
	teardown(r);
}

/* --------------------------------------------------------------- end */

static void finished(sr__run *r)
{
	r->done = 1;
}

static void on_parked(void *ud, const sr_result *res)
{
	sr__run *r = ud;

	if (res->status != SR_OK)
		sr__log(SR_LOG_WARN, "run", "sandbox %s: %s", r->sandbox_id,
			res->message ? res->message : sr__strerror(res->status));
	finished(r);
}

/* The agent is gone: release the sandbox and write the pointer. */
static void release_sandbox(sr__run *r)
{
	const char *state = sr__ctx_state_dir(r->ctx);
	int ok = r->exit_code == SR_RUN_EXIT_OK || r->exit_code == SR_RUN_EXIT_CANCELLED;

	if (r->relay) {
		sr__relay_free(r->relay);
		r->relay = NULL;
	}
	if (r->mcp_http) {
		sr__mcp_http_stop(r->mcp_http);
		r->mcp_http = NULL;
	}
	if (!r->sandbox_id) {
		finished(r);
		return;
	}
	if (ok && state && r->acp_session) {
		json_t *rec = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}", "session", r->session,
					"sandbox", r->sandbox_id, "provider", r->provider->desc->name,
					"harness", r->harness->desc->name, "acp_session",
					r->acp_session, "turn", r->turn + 1);
		if (sr__session_store(state, r->session, rec, r->turn) == SR_ESTATE) {
			/* Another runner wrote a turn meanwhile: ours loses. */
			emit(r, json_pack("{s:s, s:s, s:s, s:s}", "type", "run.failed", "code",
					  "session_conflict", "message",
					  "another run recorded a turn of this session first; this turn's pointer was not written",
					  "session", r->session));
			r->exit_code = SR_RUN_EXIT_FAILED;
		}
		json_decref(rec);
	}
	if (ok) {
		/* Parked stopped: the agent process ends with this runner. */
		sr__provider_park(r->provider, sr__next_req(), r->sandbox_id,
				  SR_PARK_STOPPED, on_parked, r);
		return;
	}
	if (r->created) {
		sr__provider_destroy(r->provider, sr__next_req(), r->sandbox_id, on_parked, r);
		if (state)
			sr__session_remove(state, r->session);
		return;
	}
	sr__provider_park(r->provider, sr__next_req(), r->sandbox_id, SR_PARK_STOPPED,
			  on_parked, r);
}

static void on_kill_timer_closed(uv_handle_t *h)
{
	free(h);
}

static void stop_kill_timer(sr__run *r)
{
	if (r->kill_timer) {
		uv_timer_stop(r->kill_timer);
		uv_close((uv_handle_t *)r->kill_timer, on_kill_timer_closed);
		r->kill_timer = NULL;
	}
}

static void on_kill_timer(uv_timer_t *t)
{
	sr__run *r = t->data;

	/* It did not leave after its stdin closed and SIGTERM: */
	sr__provider_channel_signal(r->provider, r->chan, SIGKILL);
}

/* SIGKILL the agent after ms unless it left; without memory for a timer,
 * at once. */
static void start_kill_timer(sr__run *r, uint64_t ms)
{
	stop_kill_timer(r);
	r->kill_timer = malloc(sizeof(*r->kill_timer));
	if (!r->kill_timer) {
		sr__provider_channel_signal(r->provider, r->chan, SIGKILL);
		return;
	}
	uv_timer_init(r->ctx->loop, r->kill_timer);
	r->kill_timer->data = r;
	uv_timer_start(r->kill_timer, on_kill_timer, ms, 0);
}

static void teardown(sr__run *r)
{
	if (r->tearing_down)
		return;
	r->tearing_down = 1;
	/* The ACP object stays until run_free: teardown may be running inside
	 * one of its callbacks. Nothing more is fed to it or sent through it. */
	if (r->agent_running) {
		sr__provider_channel_close_input(r->provider, r->chan);
		sr__provider_channel_signal(r->provider, r->chan, SIGTERM);
		start_kill_timer(r, 3000);
		return; /* on_agent_exit continues */
	}
	release_sandbox(r);
}

static void end_turn(sr__run *r, const char *stop_reason)
{
	json_t *ev;

	if (r->phase_done)
		return;
	r->phase_done = 1;
	r->exit_code = strcmp(stop_reason, "cancelled") == 0 ? SR_RUN_EXIT_CANCELLED :
							      SR_RUN_EXIT_OK;
	ev = json_pack("{s:s, s:s, s:s, s:s, s:I}", "type", "run.finished", "stop_reason",
		       stop_reason, "session", r->session, "sandbox", r->sandbox_id,
		       "ms", (json_int_t)(uv_now(r->ctx->loop) - r->t0));
	emit(r, ev);
	teardown(r);
}

/* ------------------------------------------------------------ agent I/O */

static int acp_write(void *ud, const char *data, size_t len)
{
	sr__run *r = ud;

	if (!r->agent_running || r->tearing_down)
		return SR_ESTATE;
	return sr__provider_channel_write(r->provider, r->chan, data, len);
}

static void on_agent_stdout(void *ud, const void *data, size_t len)
{
	sr__run *r = ud;

	if (len && r->acp && !r->tearing_down)
		sr__acp_feed(r->acp, data, len);
}

static void on_agent_stderr(void *ud, const void *data, size_t len)
{
	sr__run *r = ud;

	if (!len)
		return;
	if (len >= STDERR_TAIL - 1) {
		memcpy(r->tail, (const char *)data + len - (STDERR_TAIL - 1), STDERR_TAIL - 1);
		r->tail_len = STDERR_TAIL - 1;
		return;
	}
	if (r->tail_len + len >= STDERR_TAIL) {
		size_t drop = r->tail_len + len - (STDERR_TAIL - 1);
		memmove(r->tail, r->tail + drop, r->tail_len - drop);
		r->tail_len -= drop;
	}
	memcpy(r->tail + r->tail_len, data, len);
	r->tail_len += len;
}

static void on_agent_exit(void *ud, int status, int sig)
{
	sr__run *r = ud;

	r->agent_running = 0;
	stop_kill_timer(r);
	if (!r->phase_done && r->cancelling) {
		end_turn(r, "cancelled");
		return;
	}
	if (!r->phase_done) {
		if (sig)
			fail(r, "agent_exited", "the agent was killed by signal %d during the turn", sig);
		else
			fail(r, "agent_exited", "the agent exited with status %d during the turn", status);
		return;
	}
	if (r->tearing_down)
		release_sandbox(r);
}

/* ------------------------------------------------------- permissions */

static json_t *pick_option(json_t *options, const char *kind)
{
	size_t i;
	json_t *o;

	json_array_foreach(options, i, o)
		if (strcmp(json_string_value(json_object_get(o, "kind")) ?
			   json_string_value(json_object_get(o, "kind")) : "", kind) == 0)
			return json_object_get(o, "optionId");
	return NULL;
}

/* Allow: an allow-once option (never "always"); deny: reject-once. */
static void answer_permission(sr__run *r, json_t *acp_id, json_t *options,
			      int allow)
{
	json_t *opt = pick_option(options, allow ? "allow_once" : "reject_once");

	if (!opt)
		opt = pick_option(options, allow ? "allow_always" : "reject_always");
	if (!r->acp || r->tearing_down)
		return;
	if (!opt)
		sr__acp_respond(r->acp, acp_id, json_pack("{s:{s:s}}", "outcome",
							  "outcome", "cancelled"));
	else
		sr__acp_respond(r->acp, acp_id, json_pack("{s:{s:s, s:O}}", "outcome",
							  "outcome", "selected", "optionId", opt));
}

static void on_permission_request(sr__run *r, json_t *id, json_t *params)
{
	int (*own)(void *, const char *) = SR__OP(r->harness, sr_harness_ops, is_own_permission);
	json_t *options = json_object_get(params, "options");
	json_t *tool = json_object_get(params, "toolCall");
	char *text = json_dumps(params, JSON_COMPACT);
	int platform = own && text && own(r->harness->self, text);
	perm *p;

	free(text);
	if (r->cancelling) {
		sr__acp_respond(r->acp, id, json_pack("{s:{s:s}}", "outcome", "outcome", "cancelled"));
		return;
	}
	/* A platform tool: the relay's guard decides when it executes. */
	if (platform || r->o.ask_policy != SR_ASK_WAIT) {
		answer_permission(r, id, options, platform || r->o.ask_policy == SR_ASK_APPROVE);
		return;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		/* Nobody can be asked: the safe answer is no. */
		answer_permission(r, id, options, 0);
		return;
	}
	snprintf(p->id, sizeof(p->id), "perm-%d", ++r->next_perm);
	p->acp_id = json_incref(id);
	p->options = json_incref(options);
	p->next = r->perms;
	r->perms = p;
	emit(r, json_pack("{s:s, s:s, s:s, s:s, s:O}", "type", "permission.request",
			  "request_id", p->id, "source", "agent", "tool",
			  json_string_value(json_object_get(tool, "title")) ?
			  json_string_value(json_object_get(tool, "title")) : "a tool",
			  "tool_call", tool ? tool : json_null()));
}

static perm *take_perm(sr__run *r, const char *id)
{
	for (perm **pp = &r->perms; *pp; pp = &(*pp)->next)
		if (!id || strcmp((*pp)->id, id) == 0) {
			perm *p = *pp;
			*pp = p->next;
			return p;
		}
	return NULL;
}

static void free_perm(perm *p)
{
	json_decref(p->acp_id);
	json_decref(p->options);
	free(p);
}

int sr__run_permission(sr__run *r, const char *request_id, int allow)
{
	perm *p = take_perm(r, request_id);

	if (!p)
		return r->relay ? sr__relay_permission(r->relay, request_id, allow) :
				  SR_ENOTFOUND;
	answer_permission(r, p->acp_id, p->options, allow);
	free_perm(p);
	return SR_OK;
}

void sr__run_deny_asks(sr__run *r)
{
	perm *p;

	r->o.ask_policy = SR_ASK_DENY;
	while ((p = take_perm(r, NULL))) {
		answer_permission(r, p->acp_id, p->options, 0);
		free_perm(p);
	}
	if (r->relay)
		sr__relay_set_ask_policy(r->relay, SR_ASK_DENY);
}

/* ------------------------------------------------------ fs requests */

/* A path the agent may touch: absolute, inside the workspace, no "..". */
static int in_workspace(const sr__run *r, const char *path)
{
	size_t n = strlen(r->workspace);

	if (!path || path[0] != '/' || strncmp(path, r->workspace, n) != 0 ||
	    (path[n] != '/' && path[n] != 0))
		return 0;
	for (const char *p = path; (p = strstr(p, "..")); p += 2)
		if ((p == path || p[-1] == '/') && (p[2] == '/' || p[2] == 0))
			return 0;
	return 1;
}

void sr__run_select_lines(const void *data, size_t len, long long line,
			  long long limit, size_t *off, size_t *n)
{
	const char *s = data ? data : "", *end = s + (data ? len : 0), *e;

	for (long long i = 1; line > 1 && i < line && s < end; i++)
		s = (e = memchr(s, '\n', (size_t)(end - s))) ? e + 1 : end;
	e = end;
	if (limit > 0)
		for (e = s; limit-- > 0 && e < end;) {
			const char *nl = memchr(e, '\n', (size_t)(end - e));
			e = nl ? nl + 1 : end;
		}
	*off = (size_t)(s - (const char *)(data ? data : ""));
	*n = (size_t)(e - s);
}

typedef struct fs_req {
	sr__run *r;
	json_t *id;
	json_t *params;
	int write;
} fs_req;

static void on_fs_done(void *ud, const sr_result *res)
{
	fs_req *f = ud;
	sr__run *r = f->r;

	if (r->acp && !r->tearing_down) {
		if (res->status != SR_OK) {
			sr__acp_respond_error(r->acp, f->id, -32603, res->message ? res->message :
					      sr__strerror(res->status));
		} else if (f->write) {
			sr__acp_respond(r->acp, f->id, json_null());
		} else {
			size_t off, n;
			sr__run_select_lines(res->data, res->data ? res->len : 0,
				json_integer_value(json_object_get(f->params, "line")),
				json_integer_value(json_object_get(f->params, "limit")),
				&off, &n);
			sr__acp_respond(r->acp, f->id, json_pack("{s:s%}", "content",
				res->data ? (const char *)res->data + off : "", n));
		}
	}
	json_decref(f->id);
	json_decref(f->params);
	free(f);
}

static void on_fs_request(sr__run *r, json_t *id, const char *method,
			  json_t *params)
{
	const char *path = json_string_value(json_object_get(params, "path"));
	fs_req *f;
	char msg[600];

	if (!in_workspace(r, path)) {
		snprintf(msg, sizeof(msg), "%s: '%s' is outside the workspace %s", method,
			 path ? path : "", r->workspace);
		sr__acp_respond_error(r->acp, id, -32602, msg);
		return;
	}
	f = calloc(1, sizeof(*f));
	f->r = r;
	f->id = json_incref(id);
	f->params = json_incref(params);
	f->write = strcmp(method, "fs/write_text_file") == 0;
	if (f->write) {
		const char *content = json_string_value(json_object_get(params, "content"));
		sr__provider_file_put(r->provider, sr__next_req(), r->sandbox_id, path,
				      content ? content : "", content ? strlen(content) : 0,
				      0644, on_fs_done, f);
	} else {
		sr__provider_file_get(r->provider, sr__next_req(), r->sandbox_id, path,
				      16u << 20, on_fs_done, f);
	}
}

/* ------------------------------------------------------ ACP dispatch */

static void on_agent_request(void *ud, json_t *id, const char *method,
			     json_t *params)
{
	sr__run *r = ud;
	char msg[200];

	if (strcmp(method, "session/request_permission") == 0) {
		on_permission_request(r, id, params);
	} else if (strcmp(method, "fs/read_text_file") == 0 ||
		   strcmp(method, "fs/write_text_file") == 0) {
		on_fs_request(r, id, method, params);
	} else {
		snprintf(msg, sizeof(msg), "Method not found: %.150s", method);
		sr__acp_respond_error(r->acp, id, -32601, msg);
	}
}

static void on_update(sr__run *r, json_t *update)
{
	const char *kind = json_string_value(json_object_get(update, "sessionUpdate"));
	json_t *content = json_object_get(update, "content");
	const char *text = json_string_value(json_object_get(content, "text"));

	if (!kind)
		return;
	if (r->loading) {
		/* session/load replays the conversation before it answers. */
		if ((strcmp(kind, "agent_message_chunk") == 0 ||
		     strcmp(kind, "user_message_chunk") == 0) && text)
			emit(r, json_pack("{s:s, s:s, s:s}", "type", "agent.history", "role",
					  kind[0] == 'a' ? "agent" : "user", "text", text));
		return;
	}
	if (strcmp(kind, "agent_message_chunk") == 0 && text) {
		emit(r, json_pack("{s:s, s:s}", "type", "agent.message", "text", text));
	} else if (strcmp(kind, "agent_thought_chunk") == 0 && text) {
		emit(r, json_pack("{s:s, s:s}", "type", "agent.thought", "text", text));
	} else if (strcmp(kind, "tool_call") == 0 || strcmp(kind, "tool_call_update") == 0) {
		json_t *ev = json_pack("{s:s, s:O}", "type",
				       strcmp(kind, "tool_call") == 0 ? "agent.tool_call" :
								      "agent.tool_update",
				       "id", json_object_get(update, "toolCallId") ?
				       json_object_get(update, "toolCallId") : json_null());
		static const char *const keys[] = { "title", "kind", "status", "rawInput",
						    "rawOutput", NULL };
		for (const char *const *k = keys; *k; k++)
			if (json_object_get(update, *k))
				json_object_set(ev, *k, json_object_get(update, *k));
		emit(r, ev);
	} else if (strcmp(kind, "plan") == 0 || strcmp(kind, "available_commands_update") == 0 ||
		   strcmp(kind, "current_mode_update") == 0 || strcmp(kind, "usage_update") == 0 ||
		   strcmp(kind, "session_info_update") == 0 ||
		   strcmp(kind, "config_option_update") == 0) {
		json_t *ev = json_pack("{s:s, s:s, s:O}", "type", "agent.update", "kind", kind,
				       "update", update);
		emit(r, ev);
	}
	/* Unknown variants are ignored. */
}

static void on_agent_notification(void *ud, const char *method, json_t *params)
{
	sr__run *r = ud;

	if (strcmp(method, "session/update") == 0)
		on_update(r, json_object_get(params, "update"));
}

static void on_protocol_error(void *ud, const char *message)
{
	sr__log(SR_LOG_WARN, "run", "agent: %s", message);
	(void)ud;
}

/* ------------------------------------------------------------ prompt */

static void on_prompt(void *ud, json_t *result, json_t *error, const char *message)
{
	sr__run *r = ud;
	const char *reason = json_string_value(json_object_get(result, "stopReason"));

	if (error || !result) {
		fail(r, "prompt_failed", "session/prompt failed: %s",
		     error ? json_string_value(json_object_get(error, "message")) : message);
		return;
	}
	timing(r, "turn");
	end_turn(r, reason ? reason : "end_turn");
}

static void prompt(sr__run *r)
{
	json_t *params = json_pack("{s:s, s:[{s:s, s:s}]}", "sessionId", r->acp_session,
				   "prompt", "type", "text", "text", r->o.prompt);

	emit(r, json_pack("{s:s, s:s}", "type", "agent.prompt_sent", "session", r->session));
	sr__acp_request(r->acp, "session/prompt", params, 0, on_prompt, r);
}

static void on_set_mode(void *ud, json_t *result, json_t *error, const char *message)
{
	sr__run *r = ud;

	(void)result;
	if (error || message)
		sr__log(SR_LOG_WARN, "run", "session/set_mode: %s",
			message ? message : json_string_value(json_object_get(error, "message")));
	prompt(r);
}

/* Switch to the harness's mode when the session offers it. */
static void set_mode_then_prompt(sr__run *r, json_t *modes)
{
	const char *want = json_string_value(json_object_get(r->desc, "mode"));
	json_t *available = json_object_get(modes, "availableModes"), *m;
	size_t i;

	if (want) {
		const char *current = json_string_value(json_object_get(modes, "currentModeId"));
		json_array_foreach(available, i, m)
			if (strcmp(json_string_value(json_object_get(m, "id")) ?
				   json_string_value(json_object_get(m, "id")) : "", want) == 0 &&
			    (!current || strcmp(current, want) != 0)) {
				sr__acp_request(r->acp, "session/set_mode",
						json_pack("{s:s, s:s}", "sessionId", r->acp_session,
							  "modeId", want),
						r->o.acp_timeout_ms, on_set_mode, r);
				return;
			}
	}
	prompt(r);
}

static void on_session(void *ud, json_t *result, json_t *error, const char *message)
{
	sr__run *r = ud;
	const char *sid = json_string_value(json_object_get(result, "sessionId"));

	r->loading = 0;
	if (error || message) {
		fail(r, message ? "agent_timeout" : "session_failed", "%s failed: %s",
		     r->resumed && r->load_session ? "session/load" : "session/new",
		     message ? message : json_string_value(json_object_get(error, "message")));
		return;
	}
	if (sid) {
		free(r->acp_session);
		r->acp_session = strdup(sid);
	}
	if (!r->acp_session) {
		fail(r, "session_failed", "session/new answered without a sessionId");
		return;
	}
	timing(r, "create_session");
	set_mode_then_prompt(r, json_object_get(result, "modes"));
}

static json_t *mcp_servers(sr__run *r, json_t *run_json)
{
	int (*fn)(void *, const char *, sr_done_fn, void *) =
		SR__OP(r->harness, sr_harness_ops, mcp_servers);
	char *text = json_dumps(run_json, JSON_COMPACT);
	sr__wait w = { 0 };
	json_t *servers;

	if (fn)
		fn(r->harness->self, text, sr__wait_done, &w);
	free(text);
	servers = w.json ? json_loads(w.json, 0, NULL) : NULL;
	sr__wait_clear(&w);
	return json_is_array(servers) ? servers : json_array();
}

static json_t *run_json(sr__run *r);

static void on_initialize(void *ud, json_t *result, json_t *error, const char *message)
{
	sr__run *r = ud;
	json_t *caps = json_object_get(result, "agentCapabilities");
	json_t *rj, *servers, *params;
	const char *method;

	if (error || message) {
		fail(r, message ? "agent_timeout" : "agent_failed",
		     "the agent did not answer initialize: %s",
		     message ? message : json_string_value(json_object_get(error, "message")));
		return;
	}
	timing(r, "probe_capabilities");
	r->load_session = json_is_true(json_object_get(caps, "loadSession"));
	rj = run_json(r);
	servers = mcp_servers(r, rj);
	json_decref(rj);
	if (r->resumed && r->load_session && r->acp_session) {
		method = "session/load";
		r->loading = 1;
		params = json_pack("{s:s, s:s, s:o}", "sessionId", r->acp_session, "cwd",
				   r->workspace, "mcpServers", servers);
	} else {
		method = "session/new";
		free(r->acp_session);
		r->acp_session = NULL;
		params = json_pack("{s:s, s:o}", "cwd", r->workspace, "mcpServers", servers);
	}
	emit(r, json_pack("{s:s, s:s}", "type", "agent.session", "method", method));
	sr__acp_request(r->acp, method, params, r->o.acp_timeout_ms, on_session, r);
}

/* ------------------------------------------------------------- agent */

static void start_agent(sr__run *r)
{
	static const sr__acp_handlers h = { acp_write, on_agent_request,
					    on_agent_notification, on_protocol_error };
	sr_channel_callbacks cbs = { sizeof(cbs), on_agent_stdout, on_agent_stderr,
				     on_agent_exit };
	json_t *cmd = json_object_get(r->desc, "command");
	const char **argv = calloc(json_array_size(cmd) + 1, sizeof(*argv));
	sr_pair *env = calloc(json_array_size(r->env) + 1, sizeof(*env));
	sr_exec_spec spec = { sizeof(spec), argv, env, json_array_size(r->env), r->workspace };
	size_t i;
	json_t *v;
	int rc;

	if (!argv || !env) {
		free(argv);
		free(env);
		fail(r, "agent_not_started", "cannot start the agent: out of memory");
		return;
	}
	json_array_foreach(cmd, i, v)
		argv[i] = json_string_value(v);
	json_array_foreach(r->env, i, v) {
		env[i].name = json_string_value(json_object_get(v, "name"));
		env[i].value = json_string_value(json_object_get(v, "value"));
	}
	r->acp = sr__acp_new(r->ctx->loop, &h, r);
	r->chan = sr__next_req();
	if (!r->acp)
		rc = SR_ENOMEM;
	else
		rc = argv[0] ? sr__provider_exec(r->provider, r->chan, r->sandbox_id, &spec,
						 &cbs, r) : SR_EINVAL;
	free(argv);
	free(env);
	if (rc != SR_OK) {
		fail(r, "agent_not_started", "cannot start the agent '%s': %s (is it installed? "
		     "run 'sandrun install-harness %s')",
		     json_string_value(json_array_get(cmd, 0)) ? json_string_value(json_array_get(cmd, 0)) : "",
		     sr__strerror(rc), r->harness->desc->name);
		return;
	}
	r->agent_running = 1;
	emit(r, json_pack("{s:s, s:s}", "type", "agent.starting", "harness",
			  r->harness->desc->name));
	sr__acp_request(r->acp, "initialize",
			json_pack("{s:i, s:{s:{s:b, s:b}, s:b}, s:{s:s, s:s}}",
				  "protocolVersion", 1, "clientCapabilities", "fs",
				  "readTextFile", 1, "writeTextFile", 1, "terminal", 0,
				  "clientInfo", "name", "sandrun", "version", PACKAGE_VERSION),
			r->o.acp_timeout_ms, on_initialize, r);
}

/* ----------------------------------------------------------- prepare */

static json_t *run_json(sr__run *r)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:b, s:o}", "workspace", r->workspace,
			      "home", r->home ? r->home : r->workspace, "session", r->session,
			      "as_root", geteuid() == 0, "user_mcp_servers",
			      r->user_mcp ? json_incref(r->user_mcp) : json_array());

	if (r->o.model_url)
		json_object_set_new(j, "model_url", json_string(r->o.model_url));
	if (r->tools) {
		json_object_set_new(j, "shim", json_string(r->o.shim_path));
		json_object_set_new(j, "specs", json_string(r->specs));
		json_object_set_new(j, "relay_dir", json_string(r->relay_dir));
	}
	if (r->mcp_http)
		json_object_set_new(j, "mcp_http", json_pack("{s:s, s:s}", "url",
			sr__mcp_http_url(r->mcp_http), "token", sr__mcp_http_token(r->mcp_http)));
	return j;
}

static void write_next_file(sr__run *r);

static void on_file_written(void *ud, const sr_result *res)
{
	sr__run *r = ud;

	if (res->status != SR_OK && res->status != SR_EEXIST) {
		fail(r, "prepare_failed", "cannot write %s in the sandbox: %s",
		     json_string_value(json_object_get(json_array_get(r->files, r->file_index),
						       "path")),
		     res->message ? res->message : sr__strerror(res->status));
		return;
	}
	r->file_index++;
	write_next_file(r);
}

/* Harness files, one after another; "mkdir" entries come first for each
 * missing parent (created by prepare_files). */
static void write_next_file(sr__run *r)
{
	json_t *f = json_array_get(r->files, r->file_index);
	const char *path, *content;

	if (!f) {
		timing(r, "prepare_workspace");
		start_agent(r);
		return;
	}
	path = json_string_value(json_object_get(f, "path"));
	content = json_string_value(json_object_get(f, "content"));
	if (json_is_true(json_object_get(f, "dir")))
		sr__provider_file_mkdir(r->provider, sr__next_req(), r->sandbox_id, path, 0700,
					on_file_written, r);
	else
		sr__provider_file_put(r->provider, sr__next_req(), r->sandbox_id, path,
				      content ? content : "", content ? strlen(content) : 0,
				      (uint32_t)json_integer_value(json_object_get(f, "mode")),
				      on_file_written, r);
}

/* The length of base when path lies strictly below it, else 0. */
static size_t below(const char *path, const char *base)
{
	size_t n = base ? strlen(base) : 0;

	while (n > 1 && base[n - 1] == '/')
		n--;
	return n && strncmp(path, base, n) == 0 && path[n] == '/' ? n : 0;
}

json_t *sr__run_expand_files(const char *home, const char *workspace,
			     json_t *files)
{
	json_t *out = json_array(), *f;
	size_t i;

	json_array_foreach(files, i, f) {
		const char *path = json_string_value(json_object_get(f, "path"));
		size_t n;
		char buf[4096];
		if (!path || path[0] != '/')
			continue;
		/* Parents are made only below the home or the workspace; a
		 * file elsewhere is put as it is. */
		n = below(path, home);
		if (!n)
			n = below(path, workspace);
		for (const char *p = n ? path + n + 1 : NULL; p && (p = strchr(p, '/')); p++) {
			snprintf(buf, sizeof(buf), "%.*s", (int)(p - path), path);
			json_array_append_new(out, json_pack("{s:s, s:b}", "path", buf, "dir", 1));
		}
		json_array_append(out, f);
	}
	return out;
}

/* Append the runner's values of the env names desc lists under key to
 * env ({name, value} objects); each value is registered as a secret when
 * names is not NULL, and its name appended there. */
static void copy_env(json_t *desc, const char *key, json_t *env, json_t *names)
{
	json_t *v;
	size_t i;

	json_array_foreach(json_object_get(desc, key), i, v) {
		const char *name = json_string_value(v);
		const char *value = name ? getenv(name) : NULL;
		if (!value || !*value)
			continue;
		if (names) {
			sr__secret_register(value);
			json_array_append_new(names, json_string(name));
		}
		if (env)
			json_array_append_new(env, json_pack("{s:s, s:s}", "name", name,
							     "value", value));
	}
}

void sr__run_env_from_runner(json_t *desc, uint32_t caps, json_t *env,
			     json_t *exposed)
{
	json_t *names = json_array();

	copy_env(desc, "passthrough_env", env, NULL);
	/* A provider that isolates secrets gets them through
	 * spec.credentials only: never also as plain environment. */
	if (caps & SR_CAP_ISOLATED_SECRETS) {
		copy_env(desc, "credential_env", NULL, names);
	} else {
		copy_env(desc, "credential_env", env, names);
		json_array_extend(exposed, names);
	}
	json_decref(names);
}

sr_credential *sr__run_credentials(json_t *desc, const char *host, size_t *n)
{
	json_t *list = json_object_get(desc, "credential_env"), *v;
	sr_credential *creds = calloc(json_array_size(list) + 1, sizeof(*creds));
	size_t i;

	*n = 0;
	if (!creds)
		return NULL;
	json_array_foreach(list, i, v) {
		const char *name = json_string_value(v);
		const char *value = name ? getenv(name) : NULL;
		if (!value || !*value)
			continue;
		sr__secret_register(value);
		creds[*n].env_name = name;
		creds[*n].value = value;
		creds[*n].host = host;
		(*n)++;
	}
	return creds;
}

static int add_credentials(sr__run *r)
{
	json_t *exposed = json_array();

	sr__run_env_from_runner(r->desc, sr__provider_capabilities(r->provider), r->env,
				exposed);
	if (json_array_size(exposed))
		emit(r, json_pack("{s:s, s:O, s:s}", "type", "credentials.exposed", "names",
				  exposed, "reason",
				  "this provider cannot hide secrets: the sandbox sees them in its environment"));
	json_decref(exposed);
	return SR_OK;
}

static int start_relay(sr__run *r)
{
	char err[600], journal[4200];
	sr__relay_opts o;
	json_t *specs;
	const char *state = sr__ctx_state_dir(r->ctx);

	snprintf(r->relay_dir, sizeof(r->relay_dir), "%s/relay", r->root);
	snprintf(r->specs, sizeof(r->specs), "%s/tool-specs.json", r->root);
	snprintf(journal, sizeof(journal), "%s/relay/%s", state ? state : "/nonexistent",
		 r->session);
	specs = sr__tools_specs(r->tools);
	if (json_dump_file(specs, r->specs, JSON_COMPACT) != 0) {
		json_decref(specs);
		fail(r, "prepare_failed", "cannot write the tool specs at %s", r->specs);
		return SR_EIO;
	}
	json_decref(specs);
	memset(&o, 0, sizeof(o));
	o.dir = r->relay_dir;
	o.journal = journal;
	o.tools = r->tools;
	o.guard = &r->guard;
	o.ask_policy = r->o.ask_policy;
	o.max_per_endpoint = r->ctx->rc.callback_concurrency;
	o.event = on_relay_event;
	o.ud = r;
	if (sr__relay_new(r->ctx, &o, &r->relay, err, sizeof(err)) != SR_OK) {
		fail(r, "prepare_failed", "%s", err);
		return SR_EIO;
	}
	/* Stale files of an earlier turn go before the prompt is sent. */
	sr__relay_sweep(r->relay);
	sr__relay_start(r->relay);
	/* The loopback MCP server, for a harness that takes its tools over
	 * HTTP from an agent on this host (the provider is not remote here). */
	if (json_is_true(json_object_get(r->desc, "wants_mcp_http")) &&
	    sr__mcp_http_start(r->ctx->loop, r->relay, r->tools, &r->mcp_http, err,
			       sizeof(err)) != SR_OK) {
		fail(r, "prepare_failed", "%s", err);
		return SR_EIO;
	}
	return SR_OK;
}

static void prepare(sr__run *r)
{
	int (*fn)(void *, uint64_t, const char *, sr_done_fn, void *) =
		SR__OP(r->harness, sr_harness_ops, prepare);
	json_t *rj, *res, *v;
	sr__wait w = { 0 };
	char *text;
	size_t i;

	if (r->tools && !r->root) {
		fail(r, "tools_on_remote_provider",
		     "provider '%s' gave no runner-side path for the sandbox: platform tools need one",
		     r->provider->desc->name);
		return;
	}
	if (r->tools && start_relay(r) != SR_OK)
		return;
	rj = run_json(r);
	text = json_dumps(rj, JSON_COMPACT);
	json_decref(rj);
	if (fn)
		fn(r->harness->self, sr__next_req(), text, sr__wait_done, &w);
	free(text);
	if (fn && w.status != SR_OK) {
		fail(r, "prepare_failed", "harness '%s' could not prepare the sandbox: %s",
		     r->harness->desc->name, w.message ? w.message : sr__strerror(w.status));
		sr__wait_clear(&w);
		return;
	}
	res = w.json ? json_loads(w.json, 0, NULL) : json_object();
	sr__wait_clear(&w);
	r->env = json_array();
	json_array_foreach(json_object_get(r->desc, "env"), i, v)
		json_array_append(r->env, v);
	json_array_foreach(json_object_get(res, "env"), i, v)
		json_array_append(r->env, v);
	add_credentials(r);
	r->files = sr__run_expand_files(r->home, r->workspace, json_object_get(res, "files"));
	json_decref(res);
	r->file_index = 0;
	write_next_file(r);
}

/* ----------------------------------------------------------- acquire */

static char *json_dup(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? strdup(s) : NULL;
}

static void on_sandbox(void *ud, const sr_result *res)
{
	sr__run *r = ud;
	json_t *j;

	if (res->status != SR_OK) {
		if (r->resumed && res->status == SR_ENOTFOUND) {
			const char *state = sr__ctx_state_dir(r->ctx);
			if (state)
				sr__session_remove(state, r->session);
		}
		fail(r, r->resumed ? "sandbox_unavailable" : "sandbox_failed", "%s: %s",
		     r->resumed ? "cannot reconnect the session's sandbox" : "cannot create a sandbox",
		     res->message ? res->message : sr__strerror(res->status));
		return;
	}
	j = json_loads(res->json ? res->json : "{}", 0, NULL);
	free(r->sandbox_id);
	r->sandbox_id = json_dup(j, "id");
	r->workspace = json_dup(j, "workspace");
	r->home = json_dup(j, "home");
	if (!(sr__provider_capabilities(r->provider) & SR_CAP_REMOTE))
		r->root = json_dup(j, "root");
	json_decref(j);
	if (!r->sandbox_id || !r->workspace) {
		fail(r, "sandbox_failed", "provider '%s' answered without an id and a workspace",
		     r->provider->desc->name);
		return;
	}
	emit(r, json_pack("{s:s, s:s, s:s, s:s}", "type", "sandbox.acquired", "how",
			  r->resumed ? "reconnected" : "created", "sandbox", r->sandbox_id,
			  "workspace", r->workspace));
	timing(r, "sandbox_start");
	prepare(r);
}

/* The host of url (for a credential bound to it), or NULL. */
static const char *url_host(const char *url, char *buf, size_t n)
{
	const char *h = url ? strstr(url, "://") : NULL;
	size_t len;

	if (!h)
		return NULL;
	h += 3;
	len = strcspn(h, "/:?#");
	if (memchr(h, '@', len))
		return NULL;
	snprintf(buf, n, "%.*s", (int)len, h);
	return len ? buf : NULL;
}

static void acquire(sr__run *r)
{
	sr_network_policy np = { r->o.network, NULL, 0 };
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0, np, NULL, 0 };
	sr_pair labels[2] = { { "sandrun.session", r->session },
			      { "sandrun.harness", r->harness->desc->name } };
	sr_credential *creds = NULL;
	char host[256];

	spec.labels = labels;
	spec.n_labels = 2;
	if (r->resumed) {
		sr__provider_reconnect(r->provider, sr__next_req(), r->sandbox_id, &np,
				       on_sandbox, r);
		return;
	}
	/* Isolated secrets travel only here, each bound to the model's host
	 * (NULL when no model URL was given: the provider decides). */
	if (sr__provider_capabilities(r->provider) & SR_CAP_ISOLATED_SECRETS) {
		creds = sr__run_credentials(r->desc, url_host(r->o.model_url, host, sizeof(host)),
					    &spec.n_credentials);
		spec.credentials = creds;
	}
	r->created = 1;
	sr__provider_create(r->provider, sr__next_req(), &spec, on_sandbox, r);
	free(creds);
}

/* A plan gate that needed the loop (a DNS lookup) refused: nothing was
 * acquired yet. */
static void refuse_late(sr__run *r, const char *code, const char *msg)
{
	if (r->phase_done)
		return;
	r->phase_done = 1;
	r->exit_code = SR_RUN_EXIT_REFUSED;
	emit(r, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "run.failed", "code", code,
			  "message", msg, "phase", "plan", "session", r->session));
	finished(r);
}

static void on_mcp_lookup(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	mcp_lookup *l = req->data;
	mcp_lookups *all = l->all;
	char why[600];
	sr__run *r;

	if (all->r && !all->why[0] &&
	    !sr__plan_mcp_addrs_ok(l->url, status == 0 ? res : NULL, why, sizeof(why)))
		snprintf(all->why, sizeof(all->why), "MCP server '%s': %s", l->name, why);
	uv_freeaddrinfo(res);
	free(l->name);
	free(l->url);
	free(l);
	if (--all->pending > 0)
		return;
	r = all->r;
	snprintf(why, sizeof(why), "%s", all->why);
	free(all);
	if (!r)
		return;
	r->lookups = NULL;
	if (r->phase_done || r->cancelling)
		return;
	if (why[0])
		refuse_late(r, "mcp_url_refused", why);
	else
		acquire(r);
}

/* The SSRF gate on what user MCP host names resolve to, on the thread
 * pool (uv_getaddrinfo), then acquire. */
static void check_mcp_hosts(sr__run *r)
{
	mcp_lookups *all = calloc(1, sizeof(*all));
	struct addrinfo hints;
	json_t *s;
	size_t i;

	if (!all) {
		refuse_late(r, "mcp_url_refused", "out of memory checking the MCP servers");
		return;
	}
	all->r = r;
	all->pending = 1; /* until every lookup is started */
	r->lookups = all;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	json_array_foreach(r->user_mcp, i, s) {
		const char *url = json_string_value(json_object_get(s, "url"));
		char host[256];
		mcp_lookup *l;
		if (!url || !sr__plan_mcp_host_to_resolve(url, r->allow, host, sizeof(host)))
			continue;
		l = calloc(1, sizeof(*l));
		if (!l || !(l->url = strdup(url)) ||
		    !(l->name = strdup(json_string_value(json_object_get(s, "name"))))) {
			if (l)
				free(l->url);
			free(l);
			snprintf(all->why, sizeof(all->why), "out of memory checking the MCP servers");
			break;
		}
		l->all = all;
		l->req.data = l;
		all->pending++;
		if (uv_getaddrinfo(r->ctx->loop, &l->req, on_mcp_lookup, host, NULL, &hints) != 0) {
			all->pending--;
			snprintf(all->why, sizeof(all->why), "MCP server '%s': '%s' cannot be resolved",
				 l->name, url);
			free(l->name);
			free(l->url);
			free(l);
			break;
		}
	}
	/* The last reference: answer now if no lookup is running. */
	if (--all->pending > 0)
		return;
	r->lookups = NULL;
	if (all->why[0]) {
		char why[600];
		snprintf(why, sizeof(why), "%s", all->why);
		free(all);
		refuse_late(r, "mcp_url_refused", why);
		return;
	}
	free(all);
	acquire(r);
}

/* Split the comma-separated allow-list into r->allow. */
static int split_allow(sr__run *r, const char *list)
{
	size_t n = 2;
	char *tok, *save;

	for (const char *p = list; *p; p++)
		n += *p == ',';
	r->allow_buf = strdup(list);
	r->allow = calloc(n, sizeof(*r->allow));
	if (!r->allow_buf || !r->allow)
		return SR_ENOMEM;
	n = 0;
	for (tok = strtok_r(r->allow_buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
		r->allow[n++] = tok;
	return SR_OK;
}

/* ------------------------------------------------------------- start */

static int harness_enabled(const sr__ctx *ctx, const char *name)
{
	char *list = strdup(ctx->rc.harnesses), *tok, *save;
	int found = 0;

	for (tok = strtok_r(list, ", ", &save); tok && !found; tok = strtok_r(NULL, ", ", &save))
		found = strcmp(tok, name) == 0;
	free(list);
	return found;
}

static const char *first_harness(const sr__ctx *ctx, char *buf, size_t n)
{
	size_t len = strcspn(ctx->rc.harnesses, ", ");

	if (len == 0 || len >= n)
		return NULL;
	memcpy(buf, ctx->rc.harnesses, len);
	buf[len] = 0;
	return buf;
}

static int refuse(sr__run *r, const char *code, const char *msg, int *exit_code)
{
	emit(r, json_pack("{s:s, s:s, s:s, s:s}", "type", "run.failed", "code", code,
			  "message", msg, "phase", "plan"));
	*exit_code = SR_RUN_EXIT_REFUSED;
	return SR_EPERM;
}

static void run_free(sr__run *r)
{
	perm *p;

	while ((p = take_perm(r, NULL)))
		free_perm(p);
	if (r->relay)
		sr__relay_free(r->relay);
	if (r->mcp_http)
		sr__mcp_http_stop(r->mcp_http);
	if (r->acp)
		sr__acp_free(r->acp);
	sr__tools_free(r->tools);
	sr__guard_clear(&r->guard);
	json_decref(r->desc);
	json_decref(r->user_mcp);
	if (r->lookups)
		r->lookups->r = NULL;
	free(r->allow_buf);
	free(r->allow);
	json_decref(r->files);
	json_decref(r->env);
	free(r->sandbox_id);
	free(r->workspace);
	free(r->home);
	free(r->root);
	free(r->acp_session);
	free(r);
}

int sr__run_start(sr__ctx *ctx, const sr__run_opts *o, sr__run **out,
		  int *exit_code)
{
	sr__run *r = calloc(1, sizeof(*r));
	sr__plan plan;
	const char *code, *state;
	char msg[1024], hbuf[64] = "", err[600];
	int rc;

	*out = NULL;
	*exit_code = SR_RUN_EXIT_FAILED;
	if (!r) {
		fprintf(stderr, "sandrun: out of memory\n");
		return SR_ENOMEM;
	}
	r->ctx = ctx;
	r->o = *o;
	if (!r->o.acp_timeout_ms)
		r->o.acp_timeout_ms = DEFAULT_ACP_TIMEOUT_MS;
	r->t0 = r->t_phase = uv_now(ctx->loop);
	/* Resuming: the session's own harness, unless one is named. */
	if (!r->o.harness && o->session && sr__ctx_state_dir(ctx)) {
		json_t *rec = NULL;
		if (sr__session_load(sr__ctx_state_dir(ctx), o->session, &rec) == SR_OK &&
		    json_string_value(json_object_get(rec, "harness")))
			snprintf(hbuf, sizeof(hbuf), "%s",
				 json_string_value(json_object_get(rec, "harness")));
		json_decref(rec);
		if (hbuf[0])
			r->o.harness = hbuf;
	}
	if (!r->o.harness)
		r->o.harness = first_harness(ctx, hbuf, sizeof(hbuf));
	if (!r->o.harness)
		r->o.harness = "claude";
	memset(&plan, 0, sizeof(plan));
	plan.prompt = o->prompt;
	plan.provider_name = ctx->rc.provider;
	plan.harness_name = r->o.harness;
	plan.network = o->network;
	plan.enforcement_strict = o->enforcement_strict;
	r->provider = sr__registry_find(ctx->reg, SR_PLUGIN_PROVIDER, ctx->rc.provider);
	r->harness = sr__registry_find(ctx->reg, SR_PLUGIN_HARNESS, r->o.harness);
	plan.provider_loaded = r->provider && sr__plugin_start(ctx, r->provider) == SR_OK;
	plan.harness_enabled = harness_enabled(ctx, r->o.harness);
	plan.harness_loaded = r->harness && sr__plugin_start(ctx, r->harness) == SR_OK;
	if (plan.provider_loaded)
		plan.provider_caps = sr__provider_capabilities(r->provider);
	r->desc = plan.harness_loaded ? sr__harness_describe(r->harness) : json_object();
	plan.harness_tools = json_object_get(r->desc, "tools");
	if (o->tools_path) {
		if (sr__tools_load(o->tools_path, &r->tools, err, sizeof(err)) != SR_OK) {
			refuse(r, "tools_invalid", err, exit_code);
			run_free(r);
			return SR_EINVAL;
		}
		plan.has_tools = r->tools->n > 0;
	}
	if (o->mcp_path) {
		json_error_t jerr;
		r->user_mcp = json_load_file(o->mcp_path, 0, &jerr);
		if (!json_is_array(r->user_mcp)) {
			snprintf(msg, sizeof(msg), "%s: expected a JSON array of MCP server entries%s%s",
				 o->mcp_path, r->user_mcp ? "" : ": ", r->user_mcp ? "" : jerr.text);
			refuse(r, "mcp_server_invalid", msg, exit_code);
			run_free(r);
			return SR_EINVAL;
		}
	}
	plan.user_mcp = r->user_mcp;
	if (split_allow(r, ctx->rc.mcp_allow_hosts ? ctx->rc.mcp_allow_hosts : "") != SR_OK) {
		run_free(r);
		return SR_ENOMEM;
	}
	plan.mcp_allow_hosts = r->allow;
	if (sr__plan_check(&plan, &code, msg, sizeof(msg)) != SR_OK) {
		refuse(r, code, msg, exit_code);
		run_free(r);
		return SR_EPERM;
	}
	if (!r->provider || !r->harness) { /* the plan made sure of both */
		run_free(r);
		return SR_EINVAL;
	}
	r->guard.default_mode = SR_PERM_ALLOW_READS;
	state = sr__ctx_state_dir(ctx);
	if (o->session) {
		json_t *rec = NULL;
		rc = state ? sr__session_load(state, o->session, &rec) : SR_EIO;
		if (rc != SR_OK) {
			snprintf(msg, sizeof(msg), rc == SR_EINVAL ?
				 "'%s' is not a session id (ses- and 16 hex digits)" :
				 "no session '%s' (it ended, or was never recorded here)", o->session);
			refuse(r, "unknown_session", msg, exit_code);
			json_decref(rec);
			run_free(r);
			return SR_ENOTFOUND;
		}
		if (strcmp(json_string_value(json_object_get(rec, "harness")) ?
			   json_string_value(json_object_get(rec, "harness")) : "",
			   r->harness->desc->name) != 0) {
			snprintf(msg, sizeof(msg), "session '%s' belongs to harness '%s'", o->session,
				 json_string_value(json_object_get(rec, "harness")));
			refuse(r, "session_incompatible", msg, exit_code);
			json_decref(rec);
			run_free(r);
			return SR_EINVAL;
		}
		snprintf(r->session, sizeof(r->session), "%s", o->session);
		r->sandbox_id = json_dup(rec, "sandbox");
		r->acp_session = json_dup(rec, "acp_session");
		r->turn = (int)json_integer_value(json_object_get(rec, "turn"));
		r->resumed = 1;
		json_decref(rec);
	} else {
		sr__session_new_id(r->session, sizeof(r->session));
	}
	emit(r, json_pack("{s:s, s:s, s:s, s:s, s:i}", "type", "run.started", "session",
			  r->session, "harness", r->harness->desc->name, "provider",
			  r->provider->desc->name, "turn", r->turn + 1));
	*out = r;
	check_mcp_hosts(r);
	return SR_OK;
}

void sr__run_cancel(sr__run *r)
{
	perm *p;

	if (r->phase_done || r->cancelling)
		return;
	r->cancelling = 1;
	emit(r, json_pack("{s:s}", "type", "run.cancelling"));
	if (!r->acp || !r->acp_session) {
		end_turn(r, "cancelled");
		return;
	}
	sr__acp_notify(r->acp, "session/cancel", json_pack("{s:s}", "sessionId", r->acp_session));
	while ((p = take_perm(r, NULL))) {
		sr__acp_respond(r->acp, p->acp_id, json_pack("{s:{s:s}}", "outcome", "outcome",
							     "cancelled"));
		free_perm(p);
	}
	if (r->relay)
		sr__relay_set_ask_policy(r->relay, SR_ASK_DENY);
	/* The prompt's answer (stopReason cancelled) ends the turn; an agent
	 * that does not answer is stopped by the teardown after 3 s. */
	start_kill_timer(r, 5000);
}

int sr__run_done(const sr__run *r)
{
	return r->done;
}

int sr__run_finish(sr__run *r)
{
	int code = r->exit_code;

	stop_kill_timer(r);
	run_free(r);
	return code;
}
