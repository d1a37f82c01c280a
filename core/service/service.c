/* sandrund's start and stop (service.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host/log.h"
#include "core/service/svc_int.h"

/* conf's tokens into *out (NULL: none, on a Unix socket only). */
static int load_tokens(const sr__service_conf *conf, sr__tokens **out, char *err,
		       size_t n)
{
	int is_unix = strncmp(conf->listen, "unix:", 5) == 0;
	sr__tokens *t = NULL;
	int rc;

	*out = NULL;
	if (conf->tokens_file) {
		rc = sr__tokens_load(conf->tokens_file, &t, err, n);
		if (rc != SR_OK)
			return rc == SR_ENOMEM ? rc : SR_EINVAL;
	}
	if (sr__tokens_count(t) > 0) {
		*out = t;
		return SR_OK;
	}
	sr__tokens_free(t);
	/* Fail closed: without a token, only a Unix socket (mode 0600, its
	 * directory's permissions deciding who may connect). */
	if (!is_unix) {
		snprintf(err, n, "%s%s: sandrund does not serve %s without authentication. Put "
			 "tokens in a file (one a line) and set [service] tokens_file, or listen "
			 "on a Unix socket only (listen = unix:/run/sandrund/sandrund.sock)",
			 conf->tokens_file ? conf->tokens_file : "no bearer token configured",
			 conf->tokens_file ? " holds no token" : "", conf->listen);
		return SR_EINVAL;
	}
	sr__log(SR_LOG_WARN, "service", "no bearer token configured: whoever can connect to "
		"%s is served (the socket is mode 0600)", conf->listen);
	return SR_OK;
}

int sr__svc_start(sr__ctx *ctx, const sr__service_conf *conf,
		  const sr__svc_opts *o, sr__svc **out, char *err, size_t n)
{
	sr__httpd_opts ho;
	const char *state;
	sr__svc *s;
	int rc;

	*out = NULL;
	if (!(s = calloc(1, sizeof(*s))))
		return SR_ENOMEM;
	s->ctx = ctx;
	s->conf = *conf;
	s->o = *o;
	uv_timer_init(ctx->loop, &s->drain_check);
	s->drain_check.data = s;
	uv_timer_init(ctx->loop, &s->grace);
	s->grace.data = s;
	if ((rc = load_tokens(conf, &s->tokens, err, n)) != SR_OK)
		goto fail;
	if (!(state = sr__ctx_state_dir(ctx))) {
		snprintf(err, n, "no state directory (see above)");
		rc = SR_EIO;
		goto fail;
	}
	if (!(s->log = sr__runlog_db_new(state, conf->event_buffer, conf->runs_kept, err, n))) {
		rc = SR_EIO;
		goto fail;
	}
	s->deleting = json_object();
	s->leasing = json_object();
	s->pool = sr__pool_new(ctx, conf->warm_live_s, conf->max_warm, conf->warm_ttl_s);
	if (!s->log || !s->deleting || !s->leasing || !s->pool) {
		snprintf(err, n, "out of memory");
		rc = SR_ENOMEM;
		goto fail;
	}
	memset(&ho, 0, sizeof(ho));
	ho.listen = conf->listen;
	ho.handler = sr__api_request;
	ho.completed = sr__api_completed;
	ho.cls = s;
	ho.header_timeout = conf->header_timeout_s;
	ho.per_client_limit = conf->max_client_connections;
	if ((rc = sr__httpd_start(ctx->loop, &ho, &s->httpd, err, n)) != SR_OK)
		goto fail;
	sr__log(SR_LOG_INFO, "service", "connections: at most %u, %u from one address; a "
		"request's headers within %u s", sr__httpd_max_connections(s->httpd),
		conf->max_client_connections, conf->header_timeout_s);
	/* Once nothing else can fail: it takes over other services' records
	 * and starts timers. */
	if (sr__pool_record(s->pool, state) != SR_OK)
		sr__log(SR_LOG_ERROR, "service", "the warm pool is not recorded in the store (see "
			"above): a service killed with sandboxes warm leaves them to the janitor");
	sr__svc_leases_init(s);
	/* At once: the sessions of the sandboxes just adopted are this
	 * service's before another one starting looks. */
	sr__svc_leases_kick(s);
	if (sr__svc_janitor_start(s) != SR_OK)
		sr__log(SR_LOG_ERROR, "service", "the janitor cannot start (out of memory): "
			"run sandrun janitor instead");
	*out = s;
	return SR_OK;
fail:
	s->httpd = NULL;
	sr__svc_free(s);
	return rc;
}

const char *sr__svc_where(const sr__svc *s)
{
	return sr__httpd_where(s->httpd);
}

static void on_drained(uv_timer_t *t)
{
	sr__svc *s = t->data;
	void (*fn)(void *) = s->drained;

	s->drained = NULL;
	if (fn)
		fn(s->drained_ud);
}

static void on_pool_closed(void *ud)
{
	sr__svc *s = ud;

	s->pool_closed = 1;
	sr__svc_check_drained(s);
}

void sr__svc_check_drained(sr__svc *s)
{
	unsigned running, stopped;

	if (!s->draining || !s->drained || s->active || s->streams ||
	    json_object_size(s->deleting) || s->lease_ops || sr__svc_janitor_busy(s))
		return;
	/* No run left: the warm sandboxes are parked stopped. */
	if (!s->pool_closing) {
		s->pool_closing = 1;
		sr__pool_counts(s->pool, &running, &stopped);
		if (running)
			sr__log(SR_LOG_INFO, "service", "stopping: parking the %u warm sandboxes "
				"stopped", running);
		sr__pool_close(s->pool, on_pool_closed, s);
		return;
	}
	if (!s->pool_closed)
		return;
	/* No lease call is on the thread pool: none starts from now on. */
	sr__svc_leases_quiesce(s);
	uv_timer_start(&s->drain_check, on_drained, 0, 0);
}

static void on_grace_over(uv_timer_t *t)
{
	sr__svc_cancel_now(t->data);
}

void sr__svc_shutdown(sr__svc *s, void (*cancelling)(void *ud),
		      void (*drained)(void *ud), void *ud)
{
	if (s->draining)
		return;
	s->draining = 1;
	s->cancelling = cancelling;
	s->drained = drained;
	s->drained_ud = ud;
	sr__svc_janitor_stop(s);
	sr__httpd_quiesce(s->httpd);
	if (s->active && s->conf.drain_timeout_s) {
		sr__log(SR_LOG_INFO, "service", "stopping: no new runs; %u going on may finish "
			"within %u s ([service] drain_timeout), then they are cancelled",
			s->active, s->conf.drain_timeout_s);
		uv_timer_start(&s->grace, on_grace_over,
			       (uint64_t)s->conf.drain_timeout_s * 1000, 0);
	} else {
		sr__svc_cancel_now(s);
	}
	sr__svc_check_drained(s);
}

void sr__svc_cancel_now(sr__svc *s)
{
	if (!s->draining || s->cancelled_all)
		return;
	s->cancelled_all = 1;
	uv_timer_stop(&s->grace);
	if (s->active)
		sr__log(SR_LOG_INFO, "service", "stopping: cancelling the %u runs going on",
			s->active);
	sr__svc_runs_cancel_all(s);
	if (s->cancelling)
		s->cancelling(s->drained_ud);
}

int sr__svc_reload(sr__svc *s, const sr__service_conf *conf, char *err, size_t n)
{
	sr__service_conf next = *conf;
	sr__tokens *tokens;
	int rc;

	/* What the socket and the run log were made with stays. */
	if (strcmp(next.listen, s->conf.listen) != 0)
		sr__log(SR_LOG_WARN, "service", "[service] listen changed: it takes effect at "
			"the next start; still listening on %s", s->conf.listen);
	if (next.event_buffer != s->conf.event_buffer || next.runs_kept != s->conf.runs_kept ||
	    next.lease_ttl_s != s->conf.lease_ttl_s)
		sr__log(SR_LOG_WARN, "service", "[service] event_buffer, runs_kept and lease_ttl "
			"take effect at the next start");
	next.listen = s->conf.listen;
	next.event_buffer = s->conf.event_buffer;
	next.runs_kept = s->conf.runs_kept;
	next.lease_ttl_s = s->conf.lease_ttl_s;
	if ((rc = load_tokens(&next, &tokens, err, n)) != SR_OK) {
		/* Fail closed: a tokens file emptied, removed or broken means its
		 * old tokens are no longer to be taken (sandrund(8)); none is,
		 * until a SIGHUP finds tokens again. */
		size_t len = strlen(err);
		sr__tokens *none = sr__tokens_none();

		if (none) { /* (out of memory: the old ones stay, as nothing better can) */
			sr__tokens_free(s->tokens);
			s->tokens = none;
			snprintf(err + len, n > len ? n - len : 0, "; every request but /health is "
				 "refused until the tokens file holds a token again and sandrund gets "
				 "SIGHUP");
		}
		return rc;
	}
	sr__tokens_free(s->tokens);
	s->tokens = tokens;
	s->conf = next;
	sr__pool_configure(s->pool, next.warm_live_s, next.max_warm, next.warm_ttl_s);
	sr__log(SR_LOG_INFO, "service", "[service] reloaded: %zu bearer tokens, max_runs %u, "
		"max_body %zu, drain_timeout %u s, warm_live %u s, max_warm %u, warm_ttl %u s",
		sr__tokens_count(tokens), next.max_runs, next.max_body, next.drain_timeout_s,
		next.warm_live_s, next.max_warm, next.warm_ttl_s);
	return SR_OK;
}

static void on_timer_closed(uv_handle_t *h)
{
	free(h->data);
}

void sr__svc_free(sr__svc *s)
{
	if (!s)
		return;
	s->drained = NULL; /* nothing more is reported */
	sr__svc_leases_quiesce(s);
	sr__api_resume_all(s);
	if (s->httpd) {
		/* Closes the connections: their streams end here. */
		sr__httpd_stop(s->httpd);
		s->httpd = NULL;
	}
	if (s->log)
		sr__svc_runs_free(s);
	if (s->log)
		s->log->ops->free(s->log);
	sr__svc_janitor_free(s);
	sr__svc_leases_close(s);
	sr__tokens_free(s->tokens);
	json_decref(s->deleting);
	json_decref(s->leasing);
	/* Closed (its sandboxes parked) when drained; otherwise (a failed
	 * start) it never held one. */
	sr__pool_free(s->pool);
	uv_timer_stop(&s->drain_check);
	uv_timer_stop(&s->grace);
	uv_close((uv_handle_t *)&s->grace, NULL);
	uv_close((uv_handle_t *)&s->drain_check, on_timer_closed);
}
