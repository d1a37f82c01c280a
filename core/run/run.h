/* One agent turn (DESIGN section 5): plan, acquire a sandbox, prepare it,
 * start the harness's ACP agent, prompt, stream, relay tool calls and
 * permission requests, park the sandbox, record the session pointer. */
#ifndef SR_CORE_RUN_H
#define SR_CORE_RUN_H

#include <jansson.h>

#include "core/host/ctx.h"
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

typedef struct sr__run_opts {
	const char *harness;     /* NULL: the first enabled harness */
	const char *session;     /* resume this session, or NULL */
	const char *tools_path;  /* a tools file, or NULL */
	const char *mcp_path;    /* user MCP servers (ACP entries), or NULL */
	const char *model_url;   /* the model endpoint, or NULL */
	const char *prompt;
	const char *shim_path;   /* sandrun-shim on the runner's host */
	int network;             /* SR_NET_OPEN or SR_NET_OFF */
	int enforcement_strict;
	int ask_policy;          /* enum sr__ask_policy */
	uint64_t acp_timeout_ms; /* initialize and session setup; 0: 120 s */
	/* Every event, borrowed for the call. */
	void (*event)(void *ud, json_t *event);
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
int sr__run_permission(sr__run *r, const char *request_id, int allow);
/* No one will answer permission requests any more: deny them. */
void sr__run_deny_asks(sr__run *r);
int sr__run_done(const sr__run *r);
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
 * credential_env, whose names then go into exposed: a provider that
 * isolates secrets receives them only through spec.credentials. Values of
 * credentials are registered as secrets either way. Exposed for tests. */
void sr__run_env_from_runner(json_t *desc, uint32_t caps, json_t *env,
			     json_t *exposed);
/* The lines [line, line + limit) of len bytes at data (line 1-based,
 * limit <= 0 for all): their offset and length. data need not end in a
 * NUL. Exposed for tests. */
void sr__run_select_lines(const void *data, size_t len, long long line,
			  long long limit, size_t *off, size_t *n);

#endif
