/* sandrund's start and stop (service.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host/log.h"
#include "core/service/svc_int.h"

static int load_tokens(sr__svc *s, char *err, size_t n)
{
	int is_unix = strncmp(s->conf.listen, "unix:", 5) == 0;
	int rc;

	if (s->conf.tokens_file) {
		rc = sr__tokens_load(s->conf.tokens_file, &s->tokens, err, n);
		if (rc != SR_OK)
			return rc == SR_ENOMEM ? rc : SR_EINVAL;
	}
	if (sr__tokens_count(s->tokens) > 0)
		return SR_OK;
	/* Fail closed: without a token, only a Unix socket (mode 0600, its
	 * directory's permissions deciding who may connect). */
	if (!is_unix) {
		snprintf(err, n, "%s%s: sandrund does not serve %s without authentication. Put "
			 "tokens in a file (one a line) and set [service] tokens_file, or listen "
			 "on a Unix socket only (listen = unix:/run/sandrund/sandrund.sock)",
			 s->conf.tokens_file ? s->conf.tokens_file : "no bearer token configured",
			 s->conf.tokens_file ? " holds no token" : "", s->conf.listen);
		return SR_EINVAL;
	}
	sr__tokens_free(s->tokens);
	s->tokens = NULL;
	sr__log(SR_LOG_WARN, "service", "no bearer token configured: whoever can connect to "
		"%s is served (the socket is mode 0600)", s->conf.listen);
	return SR_OK;
}

int sr__svc_start(sr__ctx *ctx, const sr__service_conf *conf,
		  const sr__svc_opts *o, sr__svc **out, char *err, size_t n)
{
	sr__httpd_opts ho;
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
	if ((rc = load_tokens(s, err, n)) != SR_OK)
		goto fail;
	s->log = sr__runlog_mem_new(conf->event_buffer, conf->runs_kept);
	s->deleting = json_object();
	if (!s->log || !s->deleting) {
		snprintf(err, n, "out of memory");
		rc = SR_ENOMEM;
		goto fail;
	}
	memset(&ho, 0, sizeof(ho));
	ho.listen = conf->listen;
	ho.handler = sr__api_request;
	ho.completed = sr__api_completed;
	ho.cls = s;
	if ((rc = sr__httpd_start(ctx->loop, &ho, &s->httpd, err, n)) != SR_OK)
		goto fail;
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

void sr__svc_check_drained(sr__svc *s)
{
	if (!s->draining || !s->drained || s->active || s->streams ||
	    json_object_size(s->deleting))
		return;
	uv_timer_start(&s->drain_check, on_drained, 0, 0);
}

void sr__svc_shutdown(sr__svc *s, void (*drained)(void *ud), void *ud)
{
	if (s->draining)
		return;
	s->draining = 1;
	s->drained = drained;
	s->drained_ud = ud;
	sr__log(SR_LOG_INFO, "service", "shutting down: no new runs; cancelling %u going on",
		s->active);
	sr__httpd_quiesce(s->httpd);
	sr__svc_runs_cancel_all(s);
	sr__svc_check_drained(s);
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
	sr__tokens_free(s->tokens);
	json_decref(s->deleting);
	uv_timer_stop(&s->drain_check);
	uv_close((uv_handle_t *)&s->drain_check, on_timer_closed);
}
