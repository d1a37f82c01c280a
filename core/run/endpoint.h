/* Endpoint resolution: how a sandbox reaches a runner-side service (an S3
 * store for mounts, a tool endpoint). Three sources, in this order:
 *
 *   1. the configured URL itself, when a sandbox of this provider can
 *      reach it: a public host for a remote provider (never localhost,
 *      .local, a dotless name, or a name or address in a private,
 *      loopback, link-local or shared range), any host for a provider
 *      whose sandboxes share the runner's network;
 *   2. the operator's public override ([endpoint.NAME] public_url);
 *   3. the configured tunnel ([runner] tunnel): started, asked to
 *      resolve the configured URL, and the answer probed.
 *
 * A candidate is used only once a route probe answers (any HTTP status
 * below 500: an S3 store's 403 counts as alive; a 5xx is what a tunnel
 * edge answers when it cannot reach the service). Probes and the tunnel
 * are retried a bounded number of times with a doubling delay. Every
 * decision is an event; when no source works, the failure names the
 * service and every source with why it was not used. Never a silent
 * fallback, never a hang. */
#ifndef SR_CORE_ENDPOINT_H
#define SR_CORE_ENDPOINT_H

#include <jansson.h>

#include "core/host/ctx.h"

typedef struct sr__endpoint_spec {
	const char *service;    /* its [endpoint.NAME], or NULL: "url" */
	const char *url;        /* where the runner reaches it */
	const char *public_url; /* the operator's override, or NULL */
	int host_network;       /* sandboxes share the runner's network */
	sr__plugin *tunnel;     /* started, or NULL: none configured */
	/* What the service needs of a route: a tunnel whose resolve says it
	 * cannot carry it ("limits": {"sse": false, "max_in_flight": N}) is
	 * not used. */
	int needs_sse;          /* server-sent events pass unbuffered */
	unsigned min_in_flight; /* requests at once; 0: any */
	/* A tunnel that routes only for an enrolled sandbox (resolve says
	 * "enrolment": true, as NetBird's) is used only when the caller
	 * enrols it, or answers for such a sandbox (sandrun endpoint). */
	int enrolled;
	/* The route must outlive this process (sandrun endpoint --keep): a
	 * tunnel whose resolve says "ends_with_runner": true (a route held by
	 * a process of the plugin's, as cloudflared's quick tunnels) is not
	 * used. */
	int keep;
	unsigned attempts;      /* tries per source; 0: 4 */
	unsigned backoff_ms;    /* first delay, doubled each time; 0: 500 */
	unsigned probe_timeout_ms; /* 0: 5000 */
} sr__endpoint_spec;

/* The configured service name's spec (url and public_url of
 * [endpoint.NAME]; the strings are borrowed from ctx's configuration).
 * SR_ENOTFOUND or SR_EINVAL with the reason in why. */
int sr__endpoint_config(sr__ctx *ctx, const char *name, sr__endpoint_spec *spec,
			char *why, size_t n);

/* Each decision: {"type": "endpoint.skipped" | "endpoint.retry" |
 * "endpoint.resolved" | "endpoint.failed", "service", "source":
 * "configured" | "override" | "tunnel", ...}, borrowed. A resolution
 * through a tunnel that needs enrolment says "enrolment": true. */
typedef void (*sr__endpoint_event_fn)(void *ud, json_t *ev);
/* The outcome: SR_OK with the URL the sandbox uses and its source, or a
 * failure with the message naming every source tried. Borrowed. */
typedef void (*sr__endpoint_done_fn)(void *ud, int status, const char *url,
				     const char *source, const char *message);

typedef struct sr__endpoint_job sr__endpoint_job;

/* Start resolving spec (copied). done runs exactly once, never from
 * inside this call; NULL (and no callback) when out of memory. */
sr__endpoint_job *sr__endpoint_resolve(sr__ctx *ctx, const sr__endpoint_spec *spec,
				       sr__endpoint_event_fn event,
				       sr__endpoint_done_fn done, void *ud);
/* Stop a job: its done runs with SR_ECANCELED, from inside this call. */
void sr__endpoint_cancel(sr__endpoint_job *j);

/* Whether a sandbox that does not share the runner's network can reach
 * url's host by its name or literal address alone (no lookup): 0 with
 * the reason in why for localhost, .local, a dotless name, a private
 * literal address, or a URL that is not http(s) or carries credentials. */
int sr__endpoint_host_public(const char *url, char *why, size_t n);
/* Whether url carries user information (user:password@host). */
int sr__endpoint_has_userinfo(const char *url);

#endif
