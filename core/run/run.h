/* One agent turn (DESIGN section 5): plan, acquire a sandbox, prepare it,
 * start the harness's ACP agent, prompt, stream, relay tool calls and
 * permission requests, park the sandbox, record the session pointer. */
#ifndef SR_CORE_RUN_H
#define SR_CORE_RUN_H

#include <jansson.h>

#include "core/host/ctx.h"
#include "core/host/log.h"
#include "sandrun/plugin.h"

/* Exit codes of sandrun run (sandrun(1)). */
enum {
	SR_RUN_EXIT_OK = 0,        /* the turn ended (end_turn, max_tokens, ...) */
	SR_RUN_EXIT_REFUSED = 5,   /* a plan gate refused the run */
	SR_RUN_EXIT_FAILED = 6,    /* the run failed (event run.failed) */
	SR_RUN_EXIT_RETRY = 75,    /* failed on something transient (the
				    * provider timed out or answered 5xx): the
				    * session is kept, the same turn may be
				    * tried again (EX_TEMPFAIL) */
	SR_RUN_EXIT_CANCELLED = 130
};

#define SR__RUN_MAX_ENDPOINTS 8

typedef struct sr__run_opts {
	const char *harness;     /* NULL: the first enabled harness */
	const char *session;     /* resume this session, or NULL */
	const char *tools_path;  /* a tools file, or NULL */
	const char *mcp_path;    /* user MCP servers (ACP entries), or NULL */
	/* The same as JSON, borrowed for the run's life (sandrund has them in
	 * its request: no temporary file, which would have to be private,
	 * cleaned up after a crash, and read back on the loop). Each takes
	 * the place of its path when set. */
	json_t *tools;           /* a tools-file array, or NULL */
	json_t *mcp_servers;     /* an array of ACP mcpServers entries, or NULL */
	const char *model_url;   /* the model endpoint, or NULL */
	/* Runner-side services the agent reaches ([endpoint.NAME] names,
	 * resolved once the sandbox exists; the agent gets each URL as
	 * SANDRUN_ENDPOINT_<NAME>). */
	const char *endpoints[SR__RUN_MAX_ENDPOINTS];
	size_t n_endpoints;
	/* Storage mounts, s3://BUCKET/PREFIX:PATH (core/run/mount.h). */
	const char *mounts[SR__RUN_MAX_ENDPOINTS];
	size_t n_mounts;
	/* The values of the harness's credential variables, {NAME: value},
	 * borrowed for the run's life; NULL: the runner's environment (as
	 * sandrun run). With an object, only its values are used: a service
	 * never mixes a caller's credentials with its own. */
	json_t *credentials;
	/* The secrets of the run (what it is given and what it makes) are
	 * hidden from its own output and the log, not from other runs' (a
	 * scope of sr__secret_scope_new()); 0: from every output. */
	uint64_t secret_scope;
	const char *prompt;
	const char *shim_path;   /* sandrun-shim on the runner's host */
	int network;             /* SR_NET_OPEN or SR_NET_OFF */
	int enforcement_strict;
	int ask_policy;          /* enum sr__ask_policy */
	/* The caller asked for asks (the API's permission_mode "ask"): a
	 * harness that never asks (its description's asks_permission false)
	 * is refused. The default, SR_ASK_WAIT, is not asked for. */
	int ask_required;
	uint64_t acp_timeout_ms; /* initialize and session setup; 0: 120 s */
	/* sandrund's warm pool: a clean turn's sandbox stays running there,
	 * and the session's next turn takes it without a provider call. NULL
	 * (sandrun run): parked stopped. */
	struct sr__pool *pool;
	/* Every event, borrowed for the call. */
	void (*event)(void *ud, json_t *event);
	/* Once, when the run is done (sr__run_done); called from inside the
	 * run, which must not be freed before the call returns; never when
	 * sr__run_start fails. NULL: the caller polls sr__run_done. */
	void (*done)(void *ud);
	void *ud;
} sr__run_opts;

typedef struct sr__run sr__run;

/* Start a run; everything after the plan happens on the loop. Returns
 * SR_OK (and the run), or an exit code through *exit_code with the run
 * already over (a plan refusal, a bad option). */
int sr__run_start(sr__ctx *ctx, const sr__run_opts *o, sr__run **out,
		  int *exit_code);
/* Cancel the turn (Ctrl-C): session/cancel, pending permissions answered,
 * the agent stopped. */
void sr__run_cancel(sr__run *r);
/* Answer a permission.request event. SR_ENOTFOUND if none waits. */
/* The same, for a service that stops: a sandbox this run created is
 * destroyed rather than kept (SR__TD_SHUTDOWN). */
void sr__run_cancel_shutdown(sr__run *r);
int sr__run_permission(sr__run *r, const char *request_id, int allow);
/* No one will answer permission requests any more: deny them. */
void sr__run_deny_asks(sr__run *r);
int sr__run_done(const sr__run *r);
/* The run's phase: "planning", "acquiring", ..., "done". */
const char *sr__run_phase(const sr__run *r);
/* The exit code, once done; frees the run. */
int sr__run_finish(sr__run *r);

/* The harness's files (an array of {path, content, mode}) preceded by
 * mkdir steps for their parents below home or workspace (either may be
 * NULL); a file outside both is kept without parents. Borrows files;
 * returns a new reference. Exposed for tests. */
json_t *sr__run_expand_files(const char *home, const char *workspace,
			     json_t *files);

/* Append to env ({name, value} objects) the runner's values of desc's
 * passthrough_env and, unless caps has SR_CAP_ISOLATED_SECRETS, of its
 * credential_env (taken from creds, {NAME: value}, when not NULL: see
 * sr__creds_env), whose names then go into exposed: a provider that
 * isolates secrets receives them only through spec.credentials. Values of
 * credentials are held as secrets in holds either way (released by the
 * caller). Exposed for tests. */
void sr__run_env_from_runner(json_t *desc, uint32_t caps, json_t *creds,
			     json_t *env, json_t *exposed, sr__secret_holds *holds);
/* The lines [line, line + limit) of len bytes at data (line 1-based,
 * limit <= 0 for all): their offset and length. data need not end in a
 * NUL. Exposed for tests. */
void sr__run_select_lines(const void *data, size_t len, long long line,
			  long long limit, size_t *off, size_t *n);

#endif
