/* The agent: its process in the sandbox (exec, I/O, stopping) and its ACP
 * session (initialize, session/new or load, mode, prompt), the requests it
 * makes (fs) and the updates it sends. */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plugins/harness.h"
#include "core/host/log.h"
#include "core/host/node.h"
#include "core/plugins/provider.h"
#include "core/host/fsutil.h"
#include "core/run/pool.h"
#include "core/run/run_int.h"
#include "core/host/status.h"

static void on_kill_timer_closed(uv_handle_t *h)
{
	free(h);
}

static void stop_kill_timer(sr__agent *a)
{
	if (a->kill_timer) {
		uv_timer_stop(a->kill_timer);
		uv_close((uv_handle_t *)a->kill_timer, on_kill_timer_closed);
		a->kill_timer = NULL;
	}
}

static void agent_free(sr__agent *a)
{
	stop_kill_timer(a);
	if (a->acp)
		sr__acp_free(a->acp);
	free(a->acp_session);
	sr__secret_holds_release(&a->secrets);
	free(a);
}

/* A signal for the agent; a channel that cannot take it is said in the
 * log (its exit, which the run waits for, is the provider's to report). */
static void signal_agent(sr__agent *a, int signum)
{
	int rc = sr__provider_channel_signal(a->provider, a->chan, signum);

	if (rc != SR_OK)
		sr__log(SR_LOG_WARN, "run", "cannot send signal %d to the agent: %s", signum,
			sr__strerror(rc));
}

static void on_kill_timer(uv_timer_t *t)
{
	/* It did not leave after its stdin closed and SIGTERM: */
	signal_agent(t->data, SIGKILL);
}

/* SIGKILL the agent after ms unless it left; without memory for a timer,
 * at once. */
static void start_kill_timer(sr__agent *a, uint64_t ms)
{
	stop_kill_timer(a);
	a->kill_timer = malloc(sizeof(*a->kill_timer));
	if (!a->kill_timer) {
		signal_agent(a, SIGKILL);
		return;
	}
	uv_timer_init(a->ctx->loop, a->kill_timer);
	a->kill_timer->data = a;
	uv_timer_start(a->kill_timer, on_kill_timer, ms, 0);
}

static void stop(sr__agent *a)
{
	if (a->exited || a->signalled)
		return;
	a->signalled = 1;
	/* The ACP object stays until the agent is freed: stopping may run
	 * inside one of its callbacks. Nothing more is fed to it. */
	if (sr__provider_channel_close_input(a->provider, a->chan) != SR_OK)
		sr__log(SR_LOG_DEBUG, "run", "the agent's stdin was already closed");
	signal_agent(a, SIGTERM);
	start_kill_timer(a, 3000);
}

void sr__run_stop_agent(sr__run *r)
{
	if (r->agent && r->ag)
		stop(r->ag);
}

void sr__run_cancel_agent(sr__run *r)
{
	sr__acp_notify(r->acp, "session/cancel", json_pack("{s:s}", "sessionId", r->acp_session));
	start_kill_timer(r->ag, 5000);
}

void sr__agent_watch(sr__agent *a, void (*gone)(void *ud), void *ud)
{
	a->gone = gone;
	a->gone_ud = ud;
}

void sr__agent_stop(sr__agent *a, void (*gone)(void *ud), void *ud)
{
	a->run = NULL;
	sr__agent_watch(a, gone, ud);
	stop(a);
}

static int acp_write(void *ud, const char *data, size_t len)
{
	sr__agent *a = ud;

	if (a->exited || a->signalled || (a->run && a->run->phase >= SR__RUN_STOPPING))
		return SR_ESTATE;
	return sr__provider_channel_write(a->provider, a->chan, data, len);
}

static void on_agent_stdout(void *ud, const void *data, size_t len)
{
	sr__agent *a = ud;

	if (len && a->acp && !a->signalled && (!a->run || a->run->phase < SR__RUN_STOPPING))
		sr__acp_feed(a->acp, data, len);
}

static void on_agent_stderr(void *ud, const void *data, size_t len)
{
	sr__agent *a = ud;
	sr__run *r = a->run;

	if (!len || !r)
		return;
	if (len >= SR__RUN_STDERR_TAIL - 1) {
		memcpy(r->tail, (const char *)data + len - (SR__RUN_STDERR_TAIL - 1),
		       SR__RUN_STDERR_TAIL - 1);
		r->tail_len = SR__RUN_STDERR_TAIL - 1;
		return;
	}
	if (r->tail_len + len >= SR__RUN_STDERR_TAIL) {
		size_t drop = r->tail_len + len - (SR__RUN_STDERR_TAIL - 1);
		memmove(r->tail, r->tail + drop, r->tail_len - drop);
		r->tail_len -= drop;
	}
	memcpy(r->tail + r->tail_len, data, len);
	r->tail_len += len;
}

/* An agent no run owns ended (a warm one, or one being stopped): whoever
 * watches is told, and it is freed. */
static void gone(sr__agent *a)
{
	void (*fn)(void *) = a->gone;
	void *ud = a->gone_ud;

	a->gone = NULL;
	agent_free(a);
	if (fn)
		fn(ud);
}

/* The channel ended: the run that owns the agent, whose exit was due, or
 * NULL (one no run owns is gone and freed). */
static sr__run *ended(sr__agent *a)
{
	sr__run *r = a->run;

	a->exited = 1;
	stop_kill_timer(a);
	if (!r) {
		gone(a);
		return NULL;
	}
	r->agent = 0;
	return r;
}

/* The channel ended: its callback was due since exec. */
static void on_agent_exit(void *ud, int status, int sig)
{
	sr__run *r = ended(ud);

	if (!r)
		return;
	if (r->phase == SR__RUN_CANCELLING)
		sr__run_end_turn(r, "cancelled");
	else if (sig)
		sr__run_fail(r, "agent_exited", "the agent was killed by signal %d during the turn",
			     sig);
	else
		sr__run_fail(r, "agent_exited", "the agent exited with status %d during the turn",
			     status);
	sr__run_landed(r);
}

/* The agent's process could not start after exec returned, or its
 * channel was lost (a remote provider). */
static void on_agent_failed(void *ud, int status, const char *message)
{
	sr__run *r = ended(ud);

	if (!r)
		return;
	sr__run_fail(r, "agent_failed", "the agent's process failed: %s",
		     message ? message : sr__strerror(status));
	sr__run_landed(r);
}

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

	if (sr__run_landed(r) && r->acp) {
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
	int rc;

	if (!in_workspace(r, path)) {
		snprintf(msg, sizeof(msg), "%s: '%s' is outside the workspace %s", method,
			 path ? path : "", r->workspace);
		sr__acp_respond_error(r->acp, id, -32602, msg);
		return;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		sr__acp_respond_error(r->acp, id, -32603, "out of memory");
		return;
	}
	f->r = r;
	f->id = json_incref(id);
	f->params = json_incref(params);
	f->write = strcmp(method, "fs/write_text_file") == 0;
	if (f->write) {
		const char *content = json_string_value(json_object_get(params, "content"));
		rc = sr__provider_file_put(r->provider, sr__next_req(), r->sandbox_id, path,
					   content ? content : "", content ? strlen(content) : 0,
					   0644, on_fs_done, f);
	} else {
		rc = sr__provider_file_get(r->provider, sr__next_req(), r->sandbox_id, path,
					   16u << 20, on_fs_done, f);
	}
	if (rc == SR_OK) {
		r->inflight++;
		return;
	}
	sr__acp_respond_error(r->acp, id, -32603, sr__strerror(rc));
	json_decref(f->id);
	json_decref(f->params);
	free(f);
}

static void on_agent_request(void *ud, json_t *id, const char *method,
			     json_t *params)
{
	sr__agent *a = ud;
	sr__run *r = a->run;
	char msg[200];

	if (!r) {
		sr__acp_respond_error(a->acp, id, -32603, "no turn is going on");
		return;
	}
	if (strcmp(method, "session/request_permission") == 0) {
		sr__run_on_permission_request(r, id, params);
	} else if (strcmp(method, "fs/read_text_file") == 0 ||
		   strcmp(method, "fs/write_text_file") == 0) {
		on_fs_request(r, id, method, params);
	} else {
		snprintf(msg, sizeof(msg), "Method not found: %.150s", method);
		sr__acp_respond_error(r->acp, id, -32601, msg);
	}
}

static void on_agent_notification(void *ud, const char *method, json_t *params)
{
	sr__agent *a = ud;
	sr__run *r = a->run;

	if (r && strcmp(method, "session/update") == 0)
		sr__run_on_update(r, json_object_get(params, "update"));
}

static void on_protocol_error(void *ud, const char *message)
{
	sr__log(SR_LOG_WARN, "run", "agent: %s", message);
	(void)ud;
}

static void on_prompt(void *ud, json_t *result, json_t *error, const char *message)
{
	sr__run *r = ud;
	const char *reason = json_string_value(json_object_get(result, "stopReason"));

	if (r->phase >= SR__RUN_STOPPING)
		return;
	if (error || !result) {
		sr__run_fail(r, "prompt_failed", "session/prompt failed: %s",
			     error ? json_string_value(json_object_get(error, "message")) : message);
		return;
	}
	sr__run_timing(r, "turn");
	sr__run_end_turn(r, reason ? reason : "end_turn");
}

void sr__run_prompt(sr__run *r)
{
	json_t *params;

	if (r->phase >= SR__RUN_STOPPING)
		return;
	params = json_pack("{s:s, s:[{s:s, s:s}]}", "sessionId", r->acp_session, "prompt",
			   "type", "text", "text", r->o.prompt);
	sr__run_enter(r, SR__RUN_PROMPTING);
	sr__run_emit(r, json_pack("{s:s, s:s}", "type", "agent.prompt_sent", "session",
				  r->session));
	sr__acp_request(r->acp, "session/prompt", params, 0, on_prompt, r);
}

static void on_set_mode(void *ud, json_t *result, json_t *error, const char *message)
{
	sr__run *r = ud;

	(void)result;
	if (error || message)
		sr__log(SR_LOG_WARN, "run", "session/set_mode: %s",
			message ? message : json_string_value(json_object_get(error, "message")));
	sr__run_prompt(r);
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
	sr__run_prompt(r);
}

static void on_session(void *ud, json_t *result, json_t *error, const char *message)
{
	sr__run *r = ud;
	const char *sid = json_string_value(json_object_get(result, "sessionId"));

	r->loading = 0;
	if (r->phase >= SR__RUN_STOPPING)
		return;
	if (error || message) {
		sr__run_fail(r, message ? "agent_timeout" : "session_failed", "%s failed: %s",
			     r->resumed && r->load_session ? "session/load" : "session/new",
			     message ? message : json_string_value(json_object_get(error, "message")));
		return;
	}
	if (sid) {
		free(r->acp_session);
		r->acp_session = strdup(sid);
	}
	if (!r->acp_session) {
		sr__run_fail(r, "session_failed", "session/new answered without a sessionId");
		return;
	}
	sr__run_timing(r, "create_session");
	set_mode_then_prompt(r, json_object_get(result, "modes"));
}

static void on_initialize(void *ud, json_t *result, json_t *error, const char *message)
{
	sr__run *r = ud;
	json_t *caps = json_object_get(result, "agentCapabilities");
	json_t *servers, *params;
	const char *method;

	if (r->phase >= SR__RUN_STOPPING)
		return;
	if (error || message) {
		sr__run_fail(r, message ? "agent_timeout" : "agent_failed",
			     "the agent did not answer initialize: %s",
			     message ? message : json_string_value(json_object_get(error, "message")));
		return;
	}
	sr__run_timing(r, "probe_capabilities");
	r->load_session = json_is_true(json_object_get(caps, "loadSession"));
	servers = json_incref(r->mcp_servers);
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
	sr__run_emit(r, json_pack("{s:s, s:s}", "type", "agent.session", "method", method));
	sr__acp_request(r->acp, method, params, r->o.acp_timeout_ms, on_session, r);
}

/* What the agent reads on the runner's host, for a provider that confines
 * a local sandbox: the adapter (its install directory and command), the
 * shim, and sandrun's Node.js runtime. */
static json_t *host_paths(sr__run *r)
{
	json_t *paths = json_array();
	char *node = sr__node_dir(r->ctx);

	json_array_append(paths, json_array_get(json_object_get(r->desc, "command"), 0));
	if (json_is_string(json_object_get(r->desc, "install_dir")))
		json_array_append(paths, json_object_get(r->desc, "install_dir"));
	if (r->tools && r->o.shim_path)
		json_array_append_new(paths, json_string(r->o.shim_path));
	if (node)
		json_array_append_new(paths, json_string(node));
	free(node);
	return paths;
}

/* The adapter's command in the sandbox: as described, or, in a remote
 * sandbox, with the harness's install directory (on the runner's host)
 * replaced by [runner] remote_harness_dir/NAME (the image's layout, see
 * sandrun image-recipe). NULL when out of memory. */
static char *command_in_sandbox(sr__run *r, const char *cmd)
{
	const char *dir = json_string_value(json_object_get(r->desc, "install_dir"));
	size_t n = dir ? strlen(dir) : 0;
	char *out;

	if (!(sr__provider_capabilities(r->provider) & SR_CAP_REMOTE) || !n ||
	    strncmp(cmd, dir, n) != 0 || cmd[n] != '/')
		return strdup(cmd);
	out = malloc(strlen(r->ctx->rc.remote_harness_dir) + strlen(r->harness->desc->name) +
		     strlen(cmd + n) + 2);
	if (out)
		sprintf(out, "%s/%s%s", r->ctx->rc.remote_harness_dir, r->harness->desc->name,
			cmd + n);
	return out;
}

/* The tools as the agent sees them (the specs file is read once, when
 * its MCP server starts) and as they are guarded. */
static json_t *tools_seen(const sr__run *r)
{
	json_t *arr = json_array();

	for (size_t i = 0; r->tools && i < r->tools->n; i++) {
		const sr__tool *t = &r->tools->tools[i];
		json_array_append_new(arr, json_pack("{s:s, s:s, s:O, s:i, s:i, s:b}", "name",
						     t->name, "description", t->description,
						     "inputSchema", t->input_schema, "kind", t->kind,
						     "permission", t->permission, "read_only",
						     t->read_only));
	}
	return arr;
}

/* What the agent was started with and its session set up with: an agent
 * is reused for a turn only when all of it is the same (the credentials
 * are in env: a changed key means a new agent; each tool's name,
 * description, schema and permission: changed tools mean a new agent). */
static void fingerprint(sr__run *r, const char *const *argv, json_t *paths, char out[65])
{
	json_t *args = json_array(), *all;
	char *text;

	out[0] = 0;
	for (size_t i = 0; argv[i]; i++)
		json_array_append_new(args, json_string(argv[i]));
	all = json_pack("{s:o, s:O, s:s, s:O, s:O, s:s, s:o}", "argv", args, "env", r->env, "cwd",
			r->workspace, "paths", paths, "mcp", r->mcp_servers, "harness",
			r->harness->desc->name, "tools", tools_seen(r));
	text = all ? json_dumps(all, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	if (text)
		sr__sha256_hex(text, strlen(text), out);
	free(text);
	json_decref(all);
}

/* The session's agent, alive from the last turn and started the same
 * way: this turn goes straight to session/prompt. */
static void adopt(sr__run *r, sr__agent *a)
{
	sr__agent_watch(a, NULL, NULL);
	a->run = r;
	r->ag = a;
	r->acp = a->acp;
	r->agent = 1;
	r->inflight++; /* its exit lands */
	r->load_session = a->load_session;
	free(r->acp_session);
	r->acp_session = a->acp_session;
	a->acp_session = NULL;
	sr__run_emit(r, json_pack("{s:s, s:s, s:b}", "type", "agent.starting", "harness",
			  r->harness->desc->name, "warm", 1));
	sr__run_timing(r, "create_session");
	sr__run_prompt(r);
}

/* The agent the run holds for the pool, or got from it, exited. */
static void on_kept_gone(void *ud)
{
	((sr__run *)ud)->kept = NULL;
}

static void on_warm_gone(void *ud)
{
	((sr__run *)ud)->warm_agent = NULL;
}

void sr__run_watch_warm_agent(sr__run *r)
{
	if (r->warm_agent)
		sr__agent_watch(r->warm_agent, on_warm_gone, r);
}

/* Stopping after a clean turn: the agent lives on with the sandbox in the
 * warm pool when nothing else of the run involves it. */
int sr__run_keep_agent(sr__run *r)
{
	sr__agent *a = r->ag;

	/* A turn with mounts keeps no agent: the next turn's mounts are made
	 * with no process of the sandbox running. */
	if (!r->o.pool || !a || !r->agent || a->exited || a->signalled || r->shutdown || r->n_mt ||
	    r->exit_code != SR_RUN_EXIT_OK || !r->acp_session || r->inflight != 1 ||
	    sr__acp_pending(a->acp) || r->perms || !r->sandbox_id)
		return 0;
	if (!r->reserved && !(r->reserved = sr__pool_reserve(r->o.pool, r->provider)))
		return 0;
	if (!(a->acp_session = strdup(r->acp_session)))
		return 0;
	a->load_session = r->load_session;
	/* Its environment has the run's secrets, which it outlives: what it
	 * prints later is still redacted. */
	a->secrets.scope = r->secrets.scope;
	for (size_t i = 0; i < r->secrets.n; i++)
		sr__secret_hold_in(&a->secrets, r->secrets.values[i]);
	a->run = NULL;
	r->ag = NULL;
	r->acp = NULL;
	r->agent = 0;
	r->inflight--;
	r->kept = a;
	sr__agent_watch(a, on_kept_gone, r);
	return 1;
}

void sr__run_free_agents(sr__run *r, int all)
{
	if (all && r->ag) {
		/* Its exit came (the run waits for it), or the run never got
		 * as far as starting it. */
		if (r->ag->exited || !r->agent)
			agent_free(r->ag);
		else
			sr__agent_stop(r->ag, NULL, NULL);
		r->ag = NULL;
		r->acp = NULL;
	}
	if (r->kept)
		sr__agent_stop(r->kept, NULL, NULL);
	if (r->warm_agent)
		sr__agent_stop(r->warm_agent, NULL, NULL);
	r->kept = r->warm_agent = NULL;
	if (r->reserved && r->o.pool)
		sr__pool_unreserve(r->o.pool, r->provider);
	r->reserved = 0;
}

void sr__run_start_agent(sr__run *r)
{
	static const sr__acp_handlers h = { acp_write, on_agent_request,
					    on_agent_notification, on_protocol_error };
	sr_channel_callbacks cbs = { sizeof(cbs), on_agent_stdout, on_agent_stderr,
				     on_agent_exit, on_agent_failed };
	json_t *cmd = json_object_get(r->desc, "command");
	const char **argv = calloc(json_array_size(cmd) + 1, sizeof(*argv));
	sr_pair *env = calloc(json_array_size(r->env) + 1, sizeof(*env));
	json_t *paths = host_paths(r), *rj;
	const char **hp = calloc(json_array_size(paths) + 1, sizeof(*hp));
	sr_exec_spec spec = { sizeof(spec), argv, env, json_array_size(r->env), r->workspace,
			      hp, json_array_size(paths) };
	size_t i;
	json_t *v;
	const char *first = json_string_value(json_array_get(cmd, 0));
	char *cmd0 = first ? command_in_sandbox(r, first) : NULL;
	sr__agent *a;
	int rc;

	sr__run_enter(r, SR__RUN_STARTING);
	rj = sr__run_json(r);
	r->mcp_servers = sr__harness_mcp_servers(r->harness, rj);
	json_decref(rj);
	a = calloc(1, sizeof(*a));
	if (!argv || !env || !hp || (first && !cmd0) || !r->mcp_servers || !a) {
		free(argv);
		free(env);
		free(hp);
		free(cmd0);
		free(a);
		json_decref(paths);
		sr__run_fail(r, "agent_not_started", "cannot start the agent: out of memory");
		return;
	}
	json_array_foreach(cmd, i, v)
		argv[i] = json_string_value(v);
	if (cmd0)
		argv[0] = cmd0;
	json_array_foreach(paths, i, v)
		hp[i] = json_string_value(v);
	json_array_foreach(r->env, i, v) {
		env[i].name = json_string_value(json_object_get(v, "name"));
		env[i].value = json_string_value(json_object_get(v, "value"));
	}
	if (argv[0])
		fingerprint(r, argv, paths, a->fp);
	if (r->warm_agent) {
		sr__agent *w = r->warm_agent;
		r->warm_agent = NULL;
		if (a->fp[0] && strcmp(w->fp, a->fp) == 0 && r->acp_session && w->acp_session &&
		    strcmp(w->acp_session, r->acp_session) == 0) {
			free(argv);
			free(env);
			free(hp);
			free(cmd0);
			free(a);
			json_decref(paths);
			adopt(r, w);
			return;
		}
		/* Started otherwise (another key, other tools): a new one. */
		sr__log(SR_LOG_INFO, "run", "session %s: the warm agent was started otherwise; "
			"starting a new one", r->session);
		sr__agent_stop(w, NULL, NULL);
	}
	a->ctx = r->ctx;
	a->provider = r->provider;
	a->run = r;
	a->acp = sr__acp_new(r->ctx->loop, &h, a);
	a->chan = sr__next_req();
	r->ag = a;
	r->acp = a->acp;
	if (!a->acp)
		rc = SR_ENOMEM;
	else
		rc = argv[0] && hp ? sr__provider_exec(r->provider, a->chan, r->sandbox_id,
						       &spec, &cbs, a) : SR_EINVAL;
	free(argv);
	free(env);
	free(hp);
	json_decref(paths);
	if (rc != SR_OK) {
		sr__run_fail(r, "agent_not_started",
			     "cannot start the agent '%s': %s (is it installed? run "
			     "'sandrun install-harness %s'%s)",
			     cmd0 ? cmd0 : "", sr__strerror(rc), r->harness->desc->name,
			     sr__provider_capabilities(r->provider) & SR_CAP_REMOTE ?
				     ", or, for a remote sandbox, see 'sandrun image-recipe'" : "");
		free(cmd0);
		return;
	}
	free(cmd0);
	r->agent = 1;
	r->inflight++; /* its exit lands */
	sr__run_emit(r, json_pack("{s:s, s:s}", "type", "agent.starting", "harness",
			  r->harness->desc->name));
	sr__acp_request(r->acp, "initialize",
			json_pack("{s:i, s:{s:{s:b, s:b}, s:b}, s:{s:s, s:s}}",
				  "protocolVersion", 1, "clientCapabilities", "fs",
				  "readTextFile", 1, "writeTextFile", 1, "terminal", 0,
				  "clientInfo", "name", "sandrun", "version", PACKAGE_VERSION),
			r->o.acp_timeout_ms, on_initialize, r);
}
