/* The warm pool (DESIGN section 5; sandrund): after a clean turn the
 * session's sandbox stays parked running for a live window, so that the
 * session's next turn acquires it with no provider call at all; then it is
 * parked stopped, and destroyed after a TTL when one is set. Capacity is
 * strict: a sandbox is kept running only when a place is free at that
 * moment, otherwise it is parked stopped.
 *
 * Every teardown has a typed reason, and what becomes of the sandbox is
 * decided in one table (sr__teardown_disposition). */
#ifndef SR_CORE_POOL_H
#define SR_CORE_POOL_H

#include <jansson.h>

#include "core/host/ctx.h"
#include "core/plugins/loader.h"

enum sr__teardown {
	SR__TD_COMPLETED,   /* a clean turn: kept warm when there is room */
	SR__TD_CAPACITY,    /* a clean turn with the pool full */
	SR__TD_FAILED,      /* the turn failed */
	SR__TD_CANCELLED,   /* the caller cancelled the turn */
	SR__TD_SHUTDOWN,    /* the service stops (an idle warm sandbox, or
			     * the sandbox of a run it cancelled) */
	SR__TD_EXPIRED,     /* the live window ended */
	SR__TD_TTL,         /* parked stopped longer than the TTL */
	SR__TD_CREDENTIALS, /* the credentials changed since the last turn */
	SR__TD_DELETED,     /* the session was deleted */
	SR__TD_UNMOUNT_FAILED, /* a clean turn whose mount did not come
				* down: never kept running (its mounter,
				* with the turn's credentials, would be) */
	SR__TD_COUNT
};

enum sr__disposition {
	SR__KEEP_RUNNING, /* parked running (in the pool when it has room) */
	SR__PARK_STOPPED, /* parked stopped; the session keeps it */
	SR__DESTROY       /* destroyed; the session forgets it */
};

/* What becomes of a sandbox torn down for why; created: the turn that
 * ends made it (a fresh sandbox no turn completed in). */
enum sr__disposition sr__teardown_disposition(enum sr__teardown why, int created);
/* "completed", "capacity", ...: for events, logs and metrics. */
const char *sr__teardown_name(enum sr__teardown why);

typedef struct sr__pool sr__pool;

/* An agent kept alive between turns (core/run/run_agent.c). */
struct sr__agent;
/* Stop it (stdin closed, SIGTERM, SIGKILL 3 s later); gone (when not NULL)
 * once it has exited, after which it is freed. */
void sr__agent_stop(struct sr__agent *a, void (*gone)(void *ud), void *ud);
/* While it is nobody's turn: gone is called if it exits (then it is
 * freed); NULL stops watching. */
void sr__agent_watch(struct sr__agent *a, void (*gone)(void *ud), void *ud);

/* A pool on ctx's loop: live_s the live window (0: nothing is kept
 * running), max_warm the places of each provider, ttl_s the TTL of what it parked stopped
 * (0: none). */
sr__pool *sr__pool_new(sr__ctx *ctx, unsigned live_s, unsigned max_warm,
		       unsigned ttl_s);
/* New limits for what comes next (a reload); what is warm stays. */
void sr__pool_configure(sr__pool *p, unsigned live_s, unsigned max_warm,
			unsigned ttl_s);
/* Take one of provider's places (max_warm each) for a clean turn's
 * sandbox (and agent): 1 when one was free (reserved until sr__pool_put
 * or sr__pool_unreserve), 0 when provider's are all taken or the pool
 * keeps nothing (the caller parks it stopped: SR__TD_CAPACITY; a full
 * pool is logged). */
int sr__pool_reserve(sr__pool *p, sr__plugin *provider);
void sr__pool_unreserve(sr__pool *p, sr__plugin *provider);
/* With a place reserved: keep the sandbox running for the live window.
 * 1, and the pool owns the sandbox and agent (NULL: none kept) from now
 * on; 0 (out of memory: the place is released, nothing is taken).
 * acquired is the provider's answer that gave the sandbox (its JSON
 * text), network the policy it has. */
int sr__pool_put(sr__pool *p, sr__plugin *provider, const char *session,
		 const char *sandbox, const char *acquired, int network,
		 struct sr__agent *agent);
/* A sandbox the caller parked stopped: destroyed after the TTL unless a
 * turn takes it first. Nothing when there is no TTL. */
void sr__pool_parked(sr__pool *p, sr__plugin *provider, const char *session,
		     const char *sandbox);
/* When the pool is parking or destroying the session's sandbox (its
 * provider call not answered yet): done(ud) on the loop once it has
 * answered, and 1, so that the session's next turn reconnects it only
 * then; 0 otherwise (and when another waits already: done not called). */
int sr__pool_settle(sr__pool *p, const char *session, void (*done)(void *ud), void *ud);
/* The session's next turn: when sandbox is warm in the pool with the same
 * network policy, the provider's answer that gave it (a new string, to
 * free), and its agent in *agent (NULL when none was kept or it has
 * exited since; the caller's then); NULL otherwise (the turn reconnects
 * through the provider). Whatever the pool held for the session is no
 * longer its own after the call. */
char *sr__pool_take(sr__pool *p, const char *session, const char *sandbox,
		    int network, struct sr__agent **agent);
/* The session is deleted: the pool forgets its sandbox without a provider
 * call (the caller destroys it). 1 when it had one. */
int sr__pool_drop(sr__pool *p, const char *session);
/* Record what the pool holds in state's database from now on, and take
 * what services that no longer run recorded: their running sandboxes are
 * parked stopped (their agents died with them), their parked ones
 * destroyed when the TTL ends. SR_EIO (logged) when the database cannot
 * be used. */
int sr__pool_record(sr__pool *p, const char *state);
/* Each session whose sandbox the pool holds (running or waiting for its
 * TTL). */
void sr__pool_foreach(const sr__pool *p, void (*fn)(void *ud, const char *session), void *ud);
/* Sandboxes kept running (reserved places included), and parked stopped
 * waiting for their TTL. */
void sr__pool_counts(const sr__pool *p, unsigned *running, unsigned *stopped);
/* The service stops: every warm agent is stopped and every warm sandbox
 * parked stopped (SR__TD_SHUTDOWN), the timers end; done (once, later)
 * when every agent has exited and every provider call has answered. */
void sr__pool_close(sr__pool *p, void (*done)(void *ud), void *ud);
/* After sr__pool_close's done. */
void sr__pool_free(sr__pool *p);

#endif
