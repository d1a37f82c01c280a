/* The service's insides, shared by its files: service.c (start, stop),
 * api.c (routes and answers), runs.c (the runs going on, their events
 * and the streams that follow them). */
#ifndef SR_CORE_SERVICE_INT_H
#define SR_CORE_SERVICE_INT_H

#include <jansson.h>
#include <microhttpd.h>
#include <uv.h>

#include "core/host/conf.h"
#include "core/run/pool.h"
#include "core/run/run.h"
#include "core/service/auth.h"
#include "core/service/httpd.h"
#include "core/service/metrics.h"
#include "core/service/request.h"
#include "core/service/runlog.h"
#include "core/service/service.h"

#define SR__RUN_ID_LEN 24 /* "run-" and 16 hex digits, NUL */

typedef struct sr__svc_run sr__svc_run;
typedef struct sr__follower sr__follower;
typedef struct sr__api_req sr__api_req;

struct sr__svc {
	sr__ctx *ctx;
	sr__service_conf conf;
	sr__svc_opts o;
	sr__tokens *tokens;      /* NULL: no authentication (a Unix socket) */
	sr__httpd *httpd;
	sr__runlog *log;
	sr__svc_run *runs;       /* going on, or ended and still followed */
	unsigned active;         /* runs not done */
	unsigned streams;        /* streaming answers not ended */
	json_t *deleting;        /* sessions being deleted: {id: true} */
	sr__api_req *suspended;  /* requests waiting on an operation */
	sr__svc_metrics m;
	sr__pool *pool;          /* the warm sandboxes */
	int pool_closing, pool_closed;
	int draining;
	int cancelled_all;       /* the runs going on were told to stop */
	uv_timer_t grace;        /* their time to finish, at a stop */
	void (*cancelling)(void *ud);
	void (*drained)(void *ud);
	void *drained_ud;
	uv_timer_t drain_check;
	/* leases.c */
	char owner[320];         /* "host:pid", in the leases table */
	json_t *leasing;         /* sessions whose lease is being taken */
	uv_timer_t beat;         /* the leases' heartbeat */
	int beating, beat_again; /* one written at a time */
	unsigned lease_ops;      /* calls on the thread pool (the drain waits) */
	int leases_closing;      /* no call starts any more */
	struct sr__db *lease_db; /* the leases' connection (thread pool) */
	struct sr__janitor *janitor; /* janitor.c: the periodic sweep, or NULL */
};

struct sr__svc_run {
	sr__svc *svc;
	char id[SR__RUN_ID_LEN];
	sr__run *run;            /* NULL before the start and once finished */
	sr__svc_request req;     /* what the run borrows (tools, credentials) */
	uint64_t scope;          /* its secrets' (req.secrets.scope, kept past
				  * the request's clearing) */
	int refs;                /* the table's, and one per follower */
	int done;                /* no more events will come */
	int exit_code;
	char session[40];        /* the session it is on, once known */
	json_t *summary;         /* as the log has it */
	uint64_t t0;             /* uv_now at the request */
	sr__follower *waiters;   /* suspended streams waiting for an event */
	uv_timer_t reaper;       /* finishes the run outside its own call */
	sr__svc_run *next;
};

/* runs.c */
/* Start a run for q (taken, cleared on failure too). SR_OK with *out
 * (a run that a plan gate refused is a run too: its events say so). */
int sr__svc_run_new(sr__svc *s, sr__svc_request *q, sr__svc_run **out,
		    char *msg, size_t n);
/* Drop the caller's reference that sr__svc_run_new gave. */
void sr__svc_run_release(sr__svc_run *sr);
sr__svc_run *sr__svc_run_find(sr__svc *s, const char *id);
/* Whether a run going on uses session id. */
int sr__svc_session_busy(sr__svc *s, const char *id);
/* GET /v1/runs/ID: the summary (new reference), with the phase of a run
 * going on, or NULL. */
json_t *sr__svc_run_summary(sr__svc *s, const char *id);
/* A streaming answer of id's events after seq after, following the run
 * while it goes on; NULL when there is no such run. */
struct MHD_Response *sr__svc_follow(sr__svc *s, const char *id, uint64_t after,
				    struct MHD_Connection *conn);
/* Runs by state and the active ones by phase, for the metrics. */
void sr__svc_run_counts(sr__svc *s, json_t *by_state, json_t *by_phase);
/* Shutdown: cancel every run going on. */
void sr__svc_runs_cancel_all(sr__svc *s);
void sr__svc_runs_free(sr__svc *s);

/* api.c: libmicrohttpd's callbacks. */
enum MHD_Result sr__api_request(void *cls, struct MHD_Connection *conn, const char *url,
				const char *method, const char *version,
				const char *upload, size_t *upload_size, void **state);
void sr__api_completed(void *cls, struct MHD_Connection *conn, void **state,
		       enum MHD_RequestTerminationCode code);
/* Shutdown: every suspended request answered 503. */
void sr__api_resume_all(sr__svc *s);

/* leases.c: session leases, so that two services on one database never
 * run one session at once. */
void sr__svc_leases_init(sr__svc *s);
/* Take session's lease for a turn, off the loop; done(ud, rc, holder) on
 * the loop: SR_OK, SR_ESTATE (holder says who has it), SR_EIO. The
 * session counts as busy here until sr__svc_lease_settled (a run holds it
 * then, or nothing came of it). */
int sr__svc_lease_take(sr__svc *s, const char *session,
		       void (*done)(void *ud, int rc, const char *holder), void *ud);
void sr__svc_lease_settled(sr__svc *s, const char *session);
/* A lease on work of the service's (not a session) for ttl_ms, held by
 * "OWNER/what" (no heartbeat releases it): done with SR_OK when this
 * service took it, SR_ESTATE (and who holds it) when another did. */
int sr__svc_lease_take_work(sr__svc *s, const char *key, const char *what, int64_t ttl_ms,
			    void (*done)(void *ud, int rc, const char *holder), void *ud);
/* Renew the leases now (a turn ended: its session is released, or kept
 * while warm). */
void sr__svc_leases_kick(sr__svc *s);
/* A stop: no lease call starts from now on (before the connections
 * close); then the heartbeat ends and every lease is released (waits). */
void sr__svc_leases_quiesce(sr__svc *s);
void sr__svc_leases_close(sr__svc *s);

/* service.c: a stream ended, a run finished: drained yet? */
void sr__svc_check_drained(sr__svc *s);

/* janitor.c: the periodic sweep ([janitor] interval; nothing when 0).
 * stop kills a sweep going on; busy: one is (the drain waits for it). */
typedef struct sr__janitor sr__janitor;
int sr__svc_janitor_start(sr__svc *s);
int sr__svc_janitor_busy(sr__svc *s);
void sr__svc_janitor_stop(sr__svc *s);
void sr__svc_janitor_free(sr__svc *s);

#endif
