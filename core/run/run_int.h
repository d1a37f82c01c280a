/* The run's insides, shared by its files: run.c (the state machine and
 * the ending), run_plan.c (start and the plan), run_prepare.c (acquiring
 * and preparing the sandbox), run_agent.c (the agent and its ACP
 * session), run_perm.c (permissions), run_events.c (events). */
#ifndef SR_CORE_RUN_INT_H
#define SR_CORE_RUN_INT_H

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "core/run/acp.h"
#include "core/plugins/loader.h"
#include "core/tools/mcp_http.h"
#include "core/tools/relay.h"
#include "core/run/run.h"
#include "core/tools/tools.h"

#define SR__RUN_STDERR_TAIL 4096

/* The phases of a turn, in order: a run only ever moves forward. */
enum sr__run_phase {
	SR__RUN_PLANNING,   /* the gates that need the loop: user MCP host lookups */
	SR__RUN_ACQUIRING,  /* the provider creates or reconnects the sandbox */
	SR__RUN_PREPARING,  /* relay and tool specs, the harness's files */
	SR__RUN_STARTING,   /* the agent: exec, initialize, session, mode */
	SR__RUN_PROMPTING,  /* session/prompt sent: the turn itself */
	SR__RUN_CANCELLING, /* session/cancel sent: its answer ends the turn */
	SR__RUN_STOPPING,   /* the outcome is known: the agent is stopped and
			     * every callback still due comes in */
	SR__RUN_RELEASING,  /* pointer written, sandbox parked or destroyed */
	SR__RUN_DONE        /* nothing due any more: the caller frees the run */
};

typedef struct sr__run_perm sr__run_perm;
typedef struct sr__agent sr__agent;
typedef struct sr__mcp_lookups sr__mcp_lookups;

struct sr__run {
	sr__ctx *ctx;
	sr__run_opts o;
	enum sr__run_phase phase;
	int inflight;            /* operations whose callback is still due,
				  * the agent's channel included */
	int exit_code;
	sr__plugin *provider, *harness;
	json_t *desc;            /* the harness's describe */
	json_t *user_mcp;
	char *allow_buf;         /* [runner] mcp_allow_hosts, split in place */
	const char **allow;      /* its host names, NULL-terminated */
	sr__mcp_lookups *lookups; /* user MCP hosts being resolved */
	char *secrets_allow_buf; /* [secrets] allow_hosts, split in place */
	const char **secrets_allow;
	struct sr__creds *creds; /* credentials as bindings, when isolate */
	sr__secret_holds secrets; /* values it showed the sandbox, keys, until freed */
	sr__toolset *tools;
	sr__guard guard;
	sr__relay *relay;
	struct sr__bridge *bridge; /* a sandbox reached through the provider */
	sr__mcp_http *mcp_http;  /* the loopback server, when the harness asks */
	char session[32];
	int resumed;             /* a session record existed */
	int created;             /* the sandbox was created by this run */
	int warm;                /* it came from the warm pool */
	int shutdown;            /* cancelled by a service that stops */
	char *acquired;          /* the provider's answer that gave it */
	int retryable;           /* its failure is transient (exit 75) */
	int turn;                /* completed turns before this one */
	char *sandbox_id, *workspace, *home, *root;
	char relay_dir[4096], specs[4096];
	char shim_in_box[4200];  /* the shim uploaded to the sandbox, or "" */
	json_t *stored_shim;     /* the session's {"sandbox","sha256","path"} */
	/* run_remote.c's steps. */
	void (*remote_done)(sr__run *r);
	int remote_index, remote_mkdir, remote_attempts;
	int isolate;             /* credentials go to the provider as bindings */
	char remote_what[4400];
	char remote_tmp[4300];
	char creds_fp[65];       /* the bindings' fingerprint */
	char stored_fp[65];      /* the session's, when resumed */
	char shim_sha[65];       /* the shim's SHA-256, or "" */
	char machine[257];
	size_t machine_len;
	long long shim_size;
	json_t *files;           /* harness files still to write */
	size_t file_index;
	json_t *env;             /* the adapter's environment */
	/* The agent. */
	struct sr__agent *ag;    /* its process and ACP connection, while
				  * this run owns it */
	sr__acp *acp;            /* ag's, borrowed */
	int agent;               /* its channel is open: the exit is due */
	struct sr__agent *warm_agent; /* from the pool, not yet adopted */
	struct sr__agent *kept;  /* left alive at the end, for the pool */
	int reserved;            /* a place in the pool is held for it */
	int teardown;            /* enum sr__teardown: why it is let go */
	json_t *mcp_servers;     /* the ACP session's mcpServers */
	char *acp_session;
	int load_session;        /* the agent can session/load */
	int loading;             /* session/load sent: updates are history */
	char tail[SR__RUN_STDERR_TAIL]; /* its stderr, last bytes */
	size_t tail_len;
	sr__run_perm *perms;
	int next_perm;
	uint64_t t0, t_phase;
	sr__event_sink sink;     /* its plugins' events */
	/* The endpoints, resolved one after the other (run_prepare.c). */
	struct sr__endpoint_job *ep_job;
	size_t ep_index;
	json_t *ep_env;          /* {"name", "value"} for the agent */
	json_t *ep_routes;       /* {"service", "local", "url", "source"} */
	const char *ep_url;      /* the configured URL being resolved, borrowed
				  * from the configuration */
	/* The storage mounts (core/run/mount.h): mounted after the
	 * endpoints, before the preparation; unmounted first at release. */
	struct sr__mount_target *mt; /* --mount, parsed by the plan */
	size_t n_mt;
	const char *mount_ep;    /* [mount] endpoint */
	char *s3_url;            /* it, as the sandbox reaches it */
	struct sr__mount_job *mount_job;
	json_t *mounted;         /* paths a mounter ran for, still to unmount */
	/* The sandbox enrolled in the tunnel (run_enrol.c). */
	sr__plugin *tunnel;      /* started, when an endpoint used it */
	json_t *enrol_ports;     /* runner ports of endpoints that need it */
	int enrolled;            /* to release at the end */
	int enrol_step, enrol_tries, enrol_delay, enrol_join_status;
	json_t *enrol_answer;    /* the tunnel's: setup_key, command */
	char enrol_key_file[4300];
	char enrol_err[512];
	size_t enrol_err_len;
	void (*enrol_next)(sr__run *r);
};

/* A copy of o's string member key, or NULL. */
static inline char *sr__run_json_str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? strdup(s) : NULL;
}

/* run.c: moving on, counting, ending. */
void sr__run_enter(sr__run *r, enum sr__run_phase next);
/* An operation of the run started (rc from the call): its callback is
 * now due. On failure the run fails with code and what. */
int sr__run_started(sr__run *r, int rc, const char *code, const char *what);
/* Every callback of an operation the run started comes here first: 1
 * when the run goes on with it, 0 when the run is ending (the ending
 * then goes on once the last callback is in). */
int sr__run_landed(sr__run *r);
void sr__run_fail(sr__run *r, const char *code, const char *fmt, ...)
	SR_PRINTF(3, 4);
void sr__run_end_turn(sr__run *r, const char *stop_reason);
/* A plan gate that needed the loop refused: nothing was acquired. */
void sr__run_refuse_late(sr__run *r, const char *code, const char *msg);
void sr__run_free(sr__run *r);

/* run_plan.c */
void sr__run_check_mcp_hosts(sr__run *r);
/* Lookups still running answer to nobody once the run is freed. */
void sr__run_forget_lookups(sr__run *r);

/* run_prepare.c */
void sr__run_acquire(sr__run *r);
json_t *sr__run_json(sr__run *r);

/* run_prepare.c: a mount job's event into the run's stream; a path a
 * mounter runs for is remembered, to be unmounted at release. */
void sr__run_on_mount_event(void *ud, json_t *ev);

/* run_enrol.c: an endpoint (its configured URL) resolved through a route
 * only an enrolled sandbox has: its runner port is one to enrol for. */
void sr__run_note_enrolment(sr__run *r, const char *url);
/* Enrol the sandbox in tunnel (started) when a port was noted, then
 * next(r); a failure fails the run. */
void sr__run_enrol(sr__run *r, sr__plugin *tunnel, void (*next)(sr__run *r));
/* At release: SR_OK when a release is under way (its callback lands). */
int sr__run_release_enrolment(sr__run *r);
void sr__run_enrol_free(sr__run *r);

/* run_prepare.c: the relay on dir, swept; SR_OK, or the run failed. */
int sr__run_new_relay(sr__run *r, const char *dir, const char *journal);

/* run_remote.c: tools through the provider's operations; next(r) once
 * the relay and its bridge run. */
void sr__run_prepare_remote_tools(sr__run *r, void (*next)(sr__run *r));

/* run_agent.c */
void sr__run_start_agent(sr__run *r);
/* session/prompt, on a session that is set up. */
void sr__run_prompt(sr__run *r);
/* Stopping: stdin closed, SIGTERM, SIGKILL after 3 s (once). */
void sr__run_stop_agent(sr__run *r);
/* Cancelling: session/cancel; SIGKILL after 5 s unless the turn ends. */
void sr__run_cancel_agent(sr__run *r);
/* Stopping, when the agent may live on in the warm pool: it leaves the
 * run (into r->kept) with a place reserved. 1 when it did. */
int sr__run_keep_agent(sr__run *r);
/* r->warm_agent is cleared if it exits before the run adopts it. */
void sr__run_watch_warm_agent(sr__run *r);
/* The agents the run holds for the pool stopped, its place released;
 * all: its own agent too (freed, or stopped when it still runs). */
void sr__run_free_agents(sr__run *r, int all);

/* The agent's process and ACP connection. A run owns it for a turn; the
 * warm pool holds it between turns (run NULL). */
struct sr__agent {
	sr__ctx *ctx;
	sr__plugin *provider;
	uint64_t chan;           /* its channel (exec req) */
	sr__acp *acp;
	sr__run *run;            /* the turn it serves; NULL between turns */
	int exited;              /* the channel ended */
	int signalled;           /* stdin closed, SIGTERM sent */
	uv_timer_t *kill_timer;
	char fp[65];             /* its command, environment and session */
	char *acp_session;       /* between turns: its ACP session */
	int load_session;
	void (*gone)(void *ud);  /* between turns: it exited */
	void *gone_ud;
	sr__secret_holds secrets; /* kept warm: the secrets in its environment */
};

/* run_perm.c */
void sr__run_on_permission_request(sr__run *r, json_t *id, json_t *params);
/* Answer every waiting request "cancelled". */
void sr__run_perms_cancel(sr__run *r);
void sr__run_perms_free(sr__run *r);

/* run_events.c */
void sr__run_emit(sr__run *r, json_t *ev);
void sr__run_timing(sr__run *r, const char *stage);
void sr__run_on_relay_event(void *ud, json_t *ev);
void sr__run_plugin_event(void *ud, json_t *ev);
/* A session/update of the agent as an event. */
void sr__run_on_update(sr__run *r, json_t *update);

#endif
