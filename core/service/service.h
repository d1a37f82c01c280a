/* sandrund: the runner as a long-lived service (DESIGN section 6). An HTTP
 * API on the libuv loop (libmicrohttpd) that starts runs of the same core
 * as sandrun run, streams their events as NDJSON, replays them, answers
 * their permission requests, cancels them and manages sessions; doc/api.yaml
 * is its contract. */
#ifndef SR_CORE_SERVICE_H
#define SR_CORE_SERVICE_H

#include <stddef.h>

#include "core/host/ctx.h"

typedef struct sr__svc sr__svc;

typedef struct sr__svc_opts {
	const char *shim_path;   /* sandrun-shim on this host */
	uint64_t acp_timeout_ms; /* 0: the run's default */
} sr__svc_opts;

/* Start serving on ctx's loop with ctx's [service] configuration:
 * tokens read, the socket bound. SR_OK, or an error with err saying why
 * (no tokens on a TCP socket, an unreadable tokens file, a busy port). */
int sr__svc_start(sr__ctx *ctx, const sr__service_conf *conf,
		  const sr__svc_opts *o, sr__svc **out, char *err, size_t n);
/* Where it listens (for the log). */
const char *sr__svc_where(const sr__svc *s);
/* Stop: no new connections or runs; the runs going on may finish within
 * [service] drain_timeout, then they are cancelled (cancelling called,
 * maybe from within this call); drained (once, from the loop) when every
 * run is done and every stream ended. */
void sr__svc_shutdown(sr__svc *s, void (*cancelling)(void *ud),
		      void (*drained)(void *ud), void *ud);
/* After sr__svc_shutdown: cancel the runs going on now (a second signal). */
void sr__svc_cancel_now(sr__svc *s);
/* Apply a reloaded [service] section to what comes next: the tokens (read
 * again; on an error nothing changes and err says why), max_runs,
 * max_body, drain_timeout. listen, event_buffer and runs_kept stay as
 * they were made (logged when changed). */
int sr__svc_reload(sr__svc *s, const sr__service_conf *conf, char *err, size_t n);
/* After drained: stop the server and free everything. */
void sr__svc_free(sr__svc *s);

#endif
