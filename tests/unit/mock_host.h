/* A host table without the core, for testing plugins on their own
 * (collectd's plugin_mock.c is the pattern): configuration from a table,
 * log lines and config_invalid calls recorded, results of host->complete
 * queued and delivered by mock_deliver(). */
#ifndef SR_TEST_MOCK_HOST_H
#define SR_TEST_MOCK_HOST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandrun/plugin.h"

typedef struct mock_done {
	sr_done_fn done;
	void *ud;
	int status;
	char *message, *json;
} mock_done;

typedef struct mock_host {
	sr_host pub;
	const char *const *config;     /* "key", "value", ..., NULL */
	const char *state;
	char log[8192];
	char invalid_key[64];
	mock_done queue[16];
	int queued;
} mock_host;

static mock_host *mock_of(const sr_host *h)
{
	return (mock_host *)h; /* pub is the first member */
}

static void mock_log(const sr_host *h, int level, const char *fmt, ...)
{
	mock_host *m = mock_of(h);
	size_t n = strlen(m->log);
	va_list ap;

	(void)level;
	va_start(ap, fmt);
	vsnprintf(m->log + n, sizeof(m->log) - n, fmt, ap);
	va_end(ap);
	n = strlen(m->log);
	if (n + 1 < sizeof(m->log))
		strcpy(m->log + n, "\n");
}

static const char *mock_config_get(const sr_host *h, const char *key)
{
	for (const char *const *c = mock_of(h)->config; c && *c; c += 2)
		if (strcmp(c[0], key) == 0)
			return c[1];
	return NULL;
}

static int mock_config_invalid(const sr_host *h, const char *key, const char *why)
{
	mock_host *m = mock_of(h);

	snprintf(m->invalid_key, sizeof(m->invalid_key), "%s", key);
	mock_log(h, SR_LOG_ERROR, "[%s] %s: invalid value: %s", h->plugin, key, why);
	return SR_EINVAL;
}

static const char *mock_state_dir(const sr_host *h)
{
	return mock_of(h)->state;
}

static const char *mock_strerror(int status)
{
	return status == SR_OK ? "ok" : "failed";
}

static int mock_complete(const sr_host *h, sr_done_fn done, void *ud,
			 const sr_result *r)
{
	mock_host *m = mock_of(h);
	mock_done *q;

	if (m->queued == (int)(sizeof(m->queue) / sizeof(*m->queue)))
		return SR_ENOMEM;
	q = &m->queue[m->queued++];
	q->done = done;
	q->ud = ud;
	q->status = r->status;
	q->message = r->message ? strdup(r->message) : NULL;
	q->json = r->json ? strdup(r->json) : NULL;
	return SR_OK;
}

static void mock_secret_register(const sr_host *h, const char *value)
{
	(void)h;
	(void)value;
}

/* Deliver what was queued, as the core's loop would on its next turn. */
static void mock_deliver(mock_host *m)
{
	for (int i = 0; i < m->queued; i++) {
		mock_done *q = &m->queue[i];
		sr_result r = { sizeof(r), q->status, q->message, q->json, NULL, 0 };

		q->done(q->ud, &r);
		free(q->message);
		free(q->json);
	}
	m->queued = 0;
}

static void mock_init(mock_host *m, const char *plugin, const char *const *config,
		      const char *state)
{
	memset(m, 0, sizeof(*m));
	m->pub.size = sizeof(sr_host);
	m->pub.abi_minor = SR_ABI_MINOR;
	m->pub.plugin = plugin;
	m->pub.log = mock_log;
	m->pub.secret_register = mock_secret_register;
	m->pub.strerror = mock_strerror;
	m->pub.config_get = mock_config_get;
	m->pub.config_invalid = mock_config_invalid;
	m->pub.state_dir = mock_state_dir;
	m->pub.free = free;
	m->pub.complete = mock_complete;
	m->config = config;
	m->state = state;
}

#endif
