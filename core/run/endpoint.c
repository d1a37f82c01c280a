/* Endpoint resolution (core/run/endpoint.h): a small state machine on the
 * loop, one source after the other, each step started from the job's
 * timer so that no answer is ever delivered from inside the call that
 * asked for it. */
#include "config.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/host/http.h"
#include "core/host/log.h"
#include "core/host/status.h"
#include "core/plugins/provider.h"
#include "core/plugins/tunnel.h"
#include "core/run/endpoint.h"
#include "core/run/plan.h"

enum { SRC_CONFIGURED, SRC_OVERRIDE, SRC_TUNNEL, SRC_NONE };
enum { ST_BEGIN, ST_LOOKUP, ST_PROBE, ST_START, ST_RESOLVE, ST_TUNNEL_PROBE };

static const char *const source_names[] = { "configured", "override", "tunnel" };

struct sr__endpoint_job {
	sr__ctx *ctx;
	char *service, *url, *public_url;
	int host_network;
	sr__plugin *tunnel;
	unsigned attempts, backoff_ms, probe_timeout_ms;
	sr__endpoint_event_fn event;
	sr__endpoint_done_fn done;
	void *ud;

	int source, state;
	unsigned attempt;      /* of the current source, from 1 */
	char *candidate;       /* the URL being checked */
	char why[3][512];      /* why each source was not used */
	uv_timer_t timer;
	uv_getaddrinfo_t gai;
	sr_http_call *call;    /* the core's probe in flight */
	uint64_t treq;         /* the tunnel's request in flight, or 0 */
	int looking_up;        /* gai in flight */
	int named;             /* a configured [endpoint.NAME] */
	int needs_sse;
	unsigned min_in_flight;
	int enrolled;          /* speaks for an enrolled sandbox */
	int keep;              /* the route must outlive this process */
	int enrolment;         /* the tunnel's route needs enrolment */
	int refs;              /* the timer (the job's own), a lookup, a tunnel call */
	int finished;
};

static void step(sr__endpoint_job *j);

static void unref(sr__endpoint_job *j)
{
	if (--j->refs > 0)
		return;
	free(j->service);
	free(j->url);
	free(j->public_url);
	free(j->candidate);
	free(j);
}

static void on_timer_closed(uv_handle_t *h)
{
	unref(h->data);
}

static void emit(sr__endpoint_job *j, const char *type, json_t *fields)
{
	json_t *ev = json_pack("{s:s, s:s}", "type", type, "service", j->service);

	if (ev && j->source < SRC_NONE)
		json_object_set_new(ev, "source", json_string(source_names[j->source]));
	if (ev && fields)
		json_object_update(ev, fields);
	json_decref(fields);
	if (ev && j->event)
		j->event(j->ud, ev);
	json_decref(ev);
}

static void finish(sr__endpoint_job *j, int status, const char *message)
{
	if (j->finished)
		return;
	j->finished = 1;
	uv_timer_stop(&j->timer);
	if (status == SR_OK) {
		emit(j, "endpoint.resolved", j->source == SRC_TUNNEL ?
		     json_pack("{s:s, s:s, s:b}", "url", j->candidate, "via", j->tunnel->desc->name,
			       "enrolment", j->enrolment) :
		     json_pack("{s:s}", "url", j->candidate));
		j->done(j->ud, SR_OK, j->candidate, source_names[j->source], NULL);
	} else {
		j->source = SRC_NONE;
		emit(j, "endpoint.failed", json_pack("{s:s}", "message", message));
		j->done(j->ud, status, NULL, NULL, message);
	}
	/* The job's own reference is its timer's: released once closed. */
	uv_close((uv_handle_t *)&j->timer, on_timer_closed);
}

static void on_timer(uv_timer_t *t)
{
	step(t->data);
}

static void schedule(sr__endpoint_job *j, uint64_t ms)
{
	if (!j->finished)
		uv_timer_start(&j->timer, on_timer, ms, 0);
}

/* The source failed for good: note why and go on with the next. */
static void skip(sr__endpoint_job *j, const char *why)
{
	snprintf(j->why[j->source], sizeof(j->why[0]), "%s", why);
	emit(j, "endpoint.skipped", json_pack("{s:s}", "reason", why));
	j->source++;
	j->state = ST_BEGIN;
	j->attempt = 0;
	schedule(j, 0);
}

/* A try of the source failed: again after the backoff, or skip it. */
static void retry(sr__endpoint_job *j, int from_state, const char *why)
{
	char buf[512];
	uint64_t delay;

	if (j->attempt >= j->attempts) {
		snprintf(buf, sizeof(buf), "%s (after %u tries)", why, j->attempt);
		skip(j, buf);
		return;
	}
	delay = (uint64_t)j->backoff_ms << (j->attempt - 1 < 16 ? j->attempt - 1 : 16);
	if (delay > 30000)
		delay = 30000; /* each wait bounded, as the tries are */
	emit(j, "endpoint.retry", json_pack("{s:i, s:i, s:I, s:s}", "attempt", j->attempt,
					    "of", j->attempts, "delay_ms", (json_int_t)delay,
					    "reason", why));
	j->attempt++;
	j->state = from_state;
	schedule(j, delay);
}

int sr__endpoint_has_userinfo(const char *url)
{
	const char *h = strstr(url, "://");
	size_t auth;

	if (!h)
		return 0;
	h += 3;
	auth = strcspn(h, "/?#");
	return memchr(h, '@', auth) != NULL;
}

int sr__endpoint_host_public(const char *url, char *why, size_t n)
{
	char host[256];
	unsigned char addr[16];
	size_t len;

	if (!url || (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)) {
		snprintf(why, n, "'%s' is not an http or https URL", url ? url : "");
		return 0;
	}
	if (sr__endpoint_has_userinfo(url)) {
		snprintf(why, n, "the URL carries credentials");
		return 0;
	}
	if (!(len = sr__url_host(url, host, sizeof(host), why, n)))
		return 0;
	if (inet_pton(AF_INET, host, addr) == 1) {
		if (sr__addr_private_v4((uint32_t)addr[0] << 24 | (uint32_t)addr[1] << 16 |
					(uint32_t)addr[2] << 8 | addr[3])) {
			snprintf(why, n, "%s is a private, loopback or link-local address", host);
			return 0;
		}
		return 1;
	}
	if (inet_pton(AF_INET6, host, addr) == 1) {
		if (sr__addr_private_v6(addr)) {
			snprintf(why, n, "%s is a private, loopback or link-local address", host);
			return 0;
		}
		return 1;
	}
	if (strcasecmp(host, "localhost") == 0 ||
	    (len > 10 && strcasecmp(host + len - 10, ".localhost") == 0)) {
		snprintf(why, n, "%s is this machine", host);
		return 0;
	}
	if (len > 6 && strcasecmp(host + len - 6, ".local") == 0) {
		snprintf(why, n, "%s is a link-local (mDNS) name", host);
		return 0;
	}
	if (!strchr(host, '.')) {
		snprintf(why, n, "%s is a name without a domain", host);
		return 0;
	}
	return 1;
}

/* ------------------------------------------------------------ the probe */

static void on_probe(void *ud, const sr_result *res)
{
	sr__endpoint_job *j = ud;
	long code = sr__http_code(res);
	char why[512];

	j->call = NULL;
	if (j->finished)
		return;
	if (res->status == SR_OK && code > 0 && code < 500) {
		finish(j, SR_OK, NULL);
		return;
	}
	if (res->status == SR_OK)
		snprintf(why, sizeof(why), "%s answered HTTP %ld", j->candidate, code);
	else
		snprintf(why, sizeof(why), "no answer from %s: %s", j->candidate,
			 res->message ? res->message : sr__strerror(res->status));
	/* Through a tunnel, ask it again: it may have a new route (a
	 * restarted quick tunnel has a new name). */
	retry(j, j->source == SRC_TUNNEL ? ST_RESOLVE : ST_PROBE, why);
}

static void probe(sr__endpoint_job *j)
{
	sr_http_request req = {
		.size = sizeof(req),
		.method = "GET",
		.url = j->candidate,
		.timeout_ms = j->probe_timeout_ms,
		.max_response = (size_t)64 * 1024,
	};
	struct sr__http *h = sr__ctx_http(j->ctx);

	if (!h) {
		skip(j, "HTTP is unavailable on the runner (libcurl cannot be loaded)");
		return;
	}
	/* A failure to start runs on_probe before this returns. */
	j->call = sr__http_request(h, &req, on_probe, j);
}

/* ------------------------------------------- configured and override */

static void on_lookup(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	sr__endpoint_job *j = req->data;
	char why[512], text[INET6_ADDRSTRLEN] = "";
	int priv;

	j->looking_up = 0;
	if (j->finished) {
		uv_freeaddrinfo(res);
		unref(j);
		return;
	}
	priv = status == 0 && sr__addrs_private(res, text, sizeof(text));
	uv_freeaddrinfo(res);
	if (priv) {
		snprintf(why, sizeof(why),
			 "%s resolves to %s, a private, loopback or link-local address",
			 j->candidate, text);
		skip(j, why);
	} else {
		/* A name the runner cannot resolve may still route (split
		 * DNS, a proxy): the probe decides. */
		j->state = ST_PROBE;
		probe(j);
	}
	unref(j);
}

static void direct(sr__endpoint_job *j)
{
	struct addrinfo hints;
	char host[256], why[512], reason[400];
	unsigned char addr[16];

	switch (j->state) {
	case ST_BEGIN:
		free(j->candidate);
		j->candidate = strdup(j->source == SRC_CONFIGURED ? j->url : j->public_url);
		if (!j->candidate) {
			finish(j, SR_ENOMEM, "out of memory");
			return;
		}
		j->attempt = 1;
		if (j->host_network) {
			j->state = ST_PROBE;
			probe(j);
			return;
		}
		if (!sr__endpoint_host_public(j->candidate, reason, sizeof(reason))) {
			snprintf(why, sizeof(why), "%s: %s, which a remote sandbox cannot reach",
				 j->candidate, reason);
			skip(j, why);
			return;
		}
		sr__url_host(j->candidate, host, sizeof(host), reason, sizeof(reason));
		if (inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1) {
			j->state = ST_PROBE;
			probe(j);
			return;
		}
		j->state = ST_LOOKUP;
		/* fall through */
	case ST_LOOKUP:
		sr__url_host(j->candidate, host, sizeof(host), reason, sizeof(reason));
		memset(&hints, 0, sizeof(hints));
		hints.ai_socktype = SOCK_STREAM;
		j->gai.data = j;
		if (uv_getaddrinfo(j->ctx->loop, &j->gai, on_lookup, host, NULL, &hints) != 0) {
			snprintf(why, sizeof(why), "%s: its host cannot be looked up", j->candidate);
			skip(j, why);
			return;
		}
		j->refs++;
		j->looking_up = 1;
		return;
	case ST_PROBE:
		probe(j);
		return;
	default:
		return;
	}
}

/* ---------------------------------------------------------- the tunnel */

static void on_tunnel_probe(void *ud, const sr_result *res);

static void tunnel_failed(sr__endpoint_job *j, int from_state, const char *op,
			  const sr_result *res)
{
	char why[512];

	snprintf(why, sizeof(why), "tunnel '%s' %s: %s", j->tunnel->desc->name, op,
		 res->message ? res->message : sr__strerror(res->status));
	/* A tunnel that cannot do this at all will not learn it by waiting. */
	if (res->status == SR_EUNSUPPORTED || res->status == SR_EINVAL ||
	    res->status == SR_EPERM) {
		skip(j, why);
		return;
	}
	retry(j, from_state, why);
}

static void on_started(void *ud, const sr_result *res)
{
	sr__endpoint_job *j = ud;

	j->treq = 0;
	if (!j->finished) {
		if (res->status != SR_OK) {
			tunnel_failed(j, ST_START, "did not start", res);
		} else {
			j->state = ST_RESOLVE;
			schedule(j, 0);
		}
	}
	unref(j);
}

/* Whether the tunnel's route carries what the service needs; if not, the
 * source is skipped with the reason. */
static int limits_ok(sr__endpoint_job *j, json_t *limits)
{
	json_t *cap = json_object_get(limits, "max_in_flight");
	char why[512];

	if (j->needs_sse && json_is_false(json_object_get(limits, "sse"))) {
		snprintf(why, sizeof(why), "tunnel '%s' carries no server-sent events, which "
			 "service '%s' needs", j->tunnel->desc->name, j->service);
		skip(j, why);
		return 0;
	}
	if (j->min_in_flight && json_is_integer(cap) &&
	    json_integer_value(cap) < (json_int_t)j->min_in_flight) {
		snprintf(why, sizeof(why), "tunnel '%s' carries at most %lld requests at once; "
			 "service '%s' needs %u", j->tunnel->desc->name,
			 (long long)json_integer_value(cap), j->service, j->min_in_flight);
		skip(j, why);
		return 0;
	}
	return 1;
}

static void on_resolved(void *ud, const sr_result *res)
{
	sr__endpoint_job *j = ud;
	json_t *o = NULL;
	const char *url;

	j->treq = 0;
	if (j->finished) {
		unref(j);
		return;
	}
	if (res->status != SR_OK) {
		tunnel_failed(j, ST_RESOLVE, "could not resolve the service", res);
	} else if (!(o = json_loads(res->json ? res->json : "", 0, NULL)) ||
		   !(url = json_string_value(json_object_get(o, "url"))) ||
		   (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0)) {
		sr_result bad = { .size = sizeof(bad), .status = SR_EPROTO,
				  .message = "answered without an http(s) \"url\"" };
		tunnel_failed(j, ST_RESOLVE, "broke its protocol", &bad);
	} else if (!limits_ok(j, json_object_get(o, "limits"))) {
		/* skipped, with the reason */
	} else if (json_is_true(json_object_get(o, "ends_with_runner")) && j->keep) {
		char why[512];
		snprintf(why, sizeof(why), "tunnel '%s' cannot be kept: its route ends with this "
			 "process (drop --keep, or use a tunnel whose routes outlive it)",
			 j->tunnel->desc->name);
		skip(j, why);
	} else if (json_is_true(json_object_get(o, "enrolment")) && !j->enrolled) {
		char why[512];
		snprintf(why, sizeof(why), "tunnel '%s' routes only for a sandbox enrolled in it, "
			 "and this one cannot be", j->tunnel->desc->name);
		skip(j, why);
	} else {
		j->enrolment = json_is_true(json_object_get(o, "enrolment"));
		free(j->candidate);
		if (!(j->candidate = strdup(url))) {
			finish(j, SR_ENOMEM, "out of memory");
		} else {
			j->state = ST_TUNNEL_PROBE;
			schedule(j, 0);
		}
	}
	json_decref(o);
	unref(j);
}

static void on_tunnel_probe(void *ud, const sr_result *res)
{
	sr__endpoint_job *j = ud;
	json_t *o;
	char why[512];

	j->treq = 0;
	if (j->finished) {
		unref(j);
		return;
	}
	if (res->status == SR_EUNSUPPORTED) {
		/* The tunnel leaves probing to the core. */
		j->state = ST_PROBE;
		probe(j);
	} else if (res->status != SR_OK) {
		tunnel_failed(j, ST_RESOLVE, "could not probe its route", res);
	} else if ((o = json_loads(res->json ? res->json : "", 0, NULL)) &&
		   json_is_true(json_object_get(o, "ok"))) {
		json_decref(o);
		finish(j, SR_OK, NULL);
	} else {
		snprintf(why, sizeof(why), "tunnel '%s' says %s does not answer (HTTP %lld)",
			 j->tunnel->desc->name, j->candidate,
			 (long long)json_integer_value(json_object_get(o, "status")));
		json_decref(o);
		retry(j, ST_RESOLVE, why);
	}
	unref(j);
}

static void via_tunnel(sr__endpoint_job *j)
{
	sr_result res = { .size = sizeof(res) };
	int rc = SR_OK;

	switch (j->state) {
	case ST_BEGIN:
		if (!j->tunnel) {
			skip(j, "no tunnel is configured ([runner] tunnel)");
			return;
		}
		j->attempt = 1;
		j->state = ST_START;
		/* fall through */
	case ST_START:
		j->treq = sr__next_req();
		if ((rc = sr__tunnel_start(j->tunnel, j->treq, on_started, j)) == SR_OK)
			j->refs++;
		break;
	case ST_RESOLVE:
		j->treq = sr__next_req();
		if ((rc = sr__tunnel_resolve(j->tunnel, j->treq, j->url, on_resolved, j)) == SR_OK)
			j->refs++;
		break;
	case ST_TUNNEL_PROBE:
		j->treq = sr__next_req();
		if ((rc = sr__tunnel_probe(j->tunnel, j->treq, j->candidate, on_tunnel_probe,
					   j)) == SR_OK)
			j->refs++;
		break;
	case ST_PROBE:
		probe(j);
		return;
	default:
		return;
	}
	if (rc != SR_OK) {
		j->treq = 0;
		res.status = rc;
		tunnel_failed(j, j->state == ST_TUNNEL_PROBE ? ST_RESOLVE : j->state,
			      j->state == ST_START ? "did not start" : "could not resolve the service",
			      &res);
	}
}

/* ---------------------------------------------------------------- steps */

static void fail_all(sr__endpoint_job *j)
{
	char msg[2048];

	snprintf(msg, sizeof(msg),
		 "no route from the sandbox to service '%s' (%s): configured endpoint: %s; "
		 "public override: %s; tunnel: %s",
		 j->service, j->url, j->why[SRC_CONFIGURED], j->why[SRC_OVERRIDE],
		 j->why[SRC_TUNNEL]);
	finish(j, SR_ENOTFOUND, msg);
}

static void step(sr__endpoint_job *j)
{
	char why[512];

	if (j->finished)
		return;
	switch (j->source) {
	case SRC_CONFIGURED:
		direct(j);
		return;
	case SRC_OVERRIDE:
		if (!j->public_url) {
			if (j->named)
				snprintf(why, sizeof(why), "none is set ([endpoint.%s] public_url)",
					 j->service);
			else
				snprintf(why, sizeof(why), "none is set");
			skip(j, why);
			return;
		}
		direct(j);
		return;
	case SRC_TUNNEL:
		via_tunnel(j);
		return;
	default:
		fail_all(j);
		return;
	}
}

sr__endpoint_job *sr__endpoint_resolve(sr__ctx *ctx, const sr__endpoint_spec *spec,
				       sr__endpoint_event_fn event,
				       sr__endpoint_done_fn done, void *ud)
{
	sr__endpoint_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->service = strdup(spec->service ? spec->service : "service");
	j->url = strdup(spec->url ? spec->url : "");
	j->public_url = spec->public_url && *spec->public_url ? strdup(spec->public_url) : NULL;
	if (!j->service || !j->url || (spec->public_url && *spec->public_url && !j->public_url)) {
		free(j->service);
		free(j->url);
		free(j->public_url);
		free(j);
		return NULL;
	}
	j->ctx = ctx;
	j->named = spec->service != NULL;
	j->needs_sse = spec->needs_sse;
	j->min_in_flight = spec->min_in_flight;
	j->enrolled = spec->enrolled;
	j->keep = spec->keep;
	j->host_network = spec->host_network;
	j->tunnel = spec->tunnel;
	j->attempts = spec->attempts ? spec->attempts : 4;
	j->backoff_ms = spec->backoff_ms ? spec->backoff_ms : 500;
	j->probe_timeout_ms = spec->probe_timeout_ms ? spec->probe_timeout_ms : 5000;
	j->event = event;
	j->done = done;
	j->ud = ud;
	j->refs = 1; /* the job's, held by its timer until it is closed */
	uv_timer_init(ctx->loop, &j->timer);
	j->timer.data = j;
	schedule(j, 0);
	return j;
}

void sr__endpoint_cancel(sr__endpoint_job *j)
{
	if (!j || j->finished)
		return;
	j->finished = 1; /* before the callbacks the cancels run */
	if (j->call)
		sr__http_cancel(j->call);
	uv_timer_stop(&j->timer);
	if (j->treq)
		sr__tunnel_cancel(j->tunnel, j->treq);
	if (j->looking_up)
		uv_cancel((uv_req_t *)&j->gai);
	j->done(j->ud, SR_ECANCELED, NULL, NULL, "cancelled");
	uv_close((uv_handle_t *)&j->timer, on_timer_closed);
}

int sr__endpoint_config(sr__ctx *ctx, const char *name, sr__endpoint_spec *spec,
			char *why, size_t n)
{
	static const char *const keys[] = { "url", "public_url", "sse", "in_flight", NULL };
	char section[64], reason[400];
	const char *url, *pub, *v;

	memset(spec, 0, sizeof(*spec));
	if (strlen(name) > 32 || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-") != strlen(name) ||
	    !*name) {
		snprintf(why, n, "'%s' is not an endpoint name (1 to 32 of [a-z0-9_-])", name);
		return SR_EINVAL;
	}
	snprintf(section, sizeof(section), "endpoint.%s", name);
	sr__config_warn_unknown(ctx->config, section, keys);
	pub = sr__config_get(ctx->config, section, "public_url");
	if (!(url = sr__config_get(ctx->config, section, "url"))) {
		snprintf(why, n, "no endpoint '%s' is configured (a [%s] section with url = ...)",
			 name, section);
		return SR_ENOTFOUND;
	}
	if (sr__endpoint_has_userinfo(url) || (pub && sr__endpoint_has_userinfo(pub))) {
		snprintf(why, n, "[%s] %s: the URL carries credentials (user:password@), which "
			 "would reach logs and events: give the service its credentials another way",
			 section, sr__endpoint_has_userinfo(url) ? "url" : "public_url");
		return SR_EINVAL;
	}
	if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0) {
		snprintf(why, n, "[%s] url: '%s' is not an http or https URL", section, url);
		return SR_EINVAL;
	}
	if (!sr__url_host(url, reason, sizeof(reason), why, n))
		return SR_EINVAL;
	if (pub && *pub && !sr__endpoint_host_public(pub, reason, sizeof(reason))) {
		snprintf(why, n, "[%s] public_url: %s: %s", section, pub, reason);
		return SR_EINVAL;
	}
	if ((v = sr__config_get(ctx->config, section, "sse"))) {
		if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0) {
			snprintf(why, n, "[%s] sse: '%s' is not yes or no", section, v);
			return SR_EINVAL;
		}
		spec->needs_sse = strcmp(v, "yes") == 0;
	}
	if ((v = sr__config_get(ctx->config, section, "in_flight"))) {
		char *end;
		unsigned long k = strtoul(v, &end, 10);
		if (!*v || *end || k < 1 || k > 100000) {
			snprintf(why, n, "[%s] in_flight: '%s' is not a whole number from 1 to 100000",
				 section, v);
			return SR_EINVAL;
		}
		spec->min_in_flight = (unsigned)k;
	}
	spec->service = name;
	spec->url = url;
	spec->public_url = pub && *pub ? pub : NULL;
	return SR_OK;
}
