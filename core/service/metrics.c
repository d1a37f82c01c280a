/* Prometheus text exposition (metrics.h). */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host/log.h"
#include "core/service/metrics.h"

/* Seconds: from a tool call's few milliseconds to a long turn. */
static const double bounds[SR__HIST_N] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
					   2.5, 5, 10, 30, 60, 120, 300, 600 };

static void observe(sr__hist *h, double seconds)
{
	for (int i = 0; i < SR__HIST_N; i++)
		if (seconds <= bounds[i])
			h->le[i]++;
	h->count++;
	h->sum += seconds;
}

/* The entry for name (added when missing; NULL when the map is full). */
static sr__labelled *label(sr__labelled *map, const char *name)
{
	for (int i = 0; i < SR__LABELS_MAX; i++) {
		if (strcmp(map[i].name, name) == 0)
			return &map[i];
		if (!map[i].name[0]) {
			snprintf(map[i].name, sizeof(map[i].name), "%s", name);
			return &map[i];
		}
	}
	return NULL;
}

static const char *str(json_t *ev, const char *key)
{
	const char *s = json_string_value(json_object_get(ev, key));

	return s ? s : "";
}

void sr__metrics_event(sr__svc_metrics *m, json_t *ev)
{
	const char *type = str(ev, "type");
	double secs = (double)json_integer_value(json_object_get(ev, "ms")) / 1000.0;
	sr__labelled *l;

	m->events++;
	if (strcmp(type, "run.started") == 0) {
		m->runs_started++;
	} else if (strcmp(type, "timing") == 0 && *str(ev, "stage")) {
		if ((l = label(m->stages, str(ev, "stage"))))
			observe(&l->h, secs);
	} else if (strcmp(type, "run.finished") == 0) {
		observe(&m->run_duration, secs);
	} else if (strcmp(type, "tool.result") == 0) {
		if ((l = label(m->relay, *str(ev, "status") ? str(ev, "status") : "error"))) {
			l->n++;
			observe(&l->h, secs);
		}
	}
}

void sr__metrics_run_ended(sr__svc_metrics *m, const char *state)
{
	sr__labelled *l = label(m->runs_ended, state);

	if (l)
		l->n++;
}

void sr__metrics_http(sr__svc_metrics *m, unsigned status)
{
	char code[8];
	sr__labelled *l;

	snprintf(code, sizeof(code), "%u", status);
	if ((l = label(m->http, code)))
		l->n++;
	if (status == 429)
		m->rejected_busy++;
}

/* ------------------------------------------------------------ output */

typedef struct buf {
	char *s;
	size_t len, cap;
	int failed;
} buf;

static void put(buf *b, const char *fmt, ...) SR_PRINTF(2, 3);

static void put(buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->failed)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->failed = 1;
			return;
		}
		if (b->s && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
		char *g = realloc(b->s, cap);
		if (!g) {
			b->failed = 1;
			return;
		}
		b->s = g;
		b->cap = cap;
	}
}

/* A label value with \, " and newlines escaped. */
static const char *esc(const char *s, char *out, size_t n)
{
	size_t o = 0;

	for (; *s && o + 3 < n; s++) {
		if (*s == '\\' || *s == '"') {
			out[o++] = '\\';
			out[o++] = *s;
		} else if (*s == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = *s;
		}
	}
	out[o] = 0;
	return out;
}

static void head(buf *b, const char *name, const char *type, const char *help)
{
	put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A histogram's series; labels is "" or `key="value",`. */
static void hist(buf *b, const char *name, const char *labels, const sr__hist *h)
{
	char lb[200];

	snprintf(lb, sizeof(lb), "%s", labels);
	if (*lb)
		lb[strlen(lb) - 1] = 0; /* no trailing comma alone */
	for (int i = 0; i < SR__HIST_N; i++)
		put(b, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, bounds[i],
		    (unsigned long long)h->le[i]);
	put(b, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, (unsigned long long)h->count);
	put(b, "%s_sum%s%s%s %.6f\n", name, *lb ? "{" : "", lb, *lb ? "}" : "", h->sum);
	put(b, "%s_count%s%s%s %llu\n", name, *lb ? "{" : "", lb, *lb ? "}" : "",
	    (unsigned long long)h->count);
}

static void gauges(buf *b, const char *name, const char *key, json_t *counts)
{
	const char *k;
	json_t *v;
	char e[128];

	json_object_foreach(counts, k, v)
		put(b, "%s{%s=\"%s\"} %lld\n", name, key, esc(k, e, sizeof(e)),
		    (long long)json_integer_value(v));
}

static void plugins(buf *b, const sr__registry *reg)
{
	char sec[128], op[64];

	head(b, "sandrun_plugin_calls_total", "counter",
	     "Calls into plugins (provider, harness), by plugin and operation.");
	for (size_t i = 0; reg && i < reg->n; i++)
		for (size_t j = 0; j < reg->plugins[i]->n_stats; j++)
			put(b, "sandrun_plugin_calls_total{plugin=\"%s\",op=\"%s\"} %llu\n",
			    esc(reg->plugins[i]->section, sec, sizeof(sec)),
			    esc(reg->plugins[i]->stats[j].op, op, sizeof(op)),
			    (unsigned long long)reg->plugins[i]->stats[j].calls);
	head(b, "sandrun_plugin_call_errors_total", "counter",
	     "Calls into plugins that failed, by plugin and operation.");
	for (size_t i = 0; reg && i < reg->n; i++)
		for (size_t j = 0; j < reg->plugins[i]->n_stats; j++)
			put(b, "sandrun_plugin_call_errors_total{plugin=\"%s\",op=\"%s\"} %llu\n",
			    esc(reg->plugins[i]->section, sec, sizeof(sec)),
			    esc(reg->plugins[i]->stats[j].op, op, sizeof(op)),
			    (unsigned long long)reg->plugins[i]->stats[j].errors);
}

char *sr__metrics_text(const sr__svc_metrics *m, json_t *runs_by_state,
		       json_t *active_by_phase, const sr__registry *reg)
{
	buf b = { 0 };
	char e[64], lb[128];

	head(&b, "sandrun_runs", "gauge", "Runs the service holds, by state.");
	gauges(&b, "sandrun_runs", "state", runs_by_state);
	head(&b, "sandrun_runs_active", "gauge", "Runs going on, by phase.");
	gauges(&b, "sandrun_runs_active", "phase", active_by_phase);
	head(&b, "sandrun_warm_sandboxes", "gauge",
	     "Sandboxes of the warm pool: kept running for the next turn, and parked stopped "
	     "until their TTL.");
	put(&b, "sandrun_warm_sandboxes{state=\"running\"} %u\n", m->warm_running);
	put(&b, "sandrun_warm_sandboxes{state=\"stopped\"} %u\n", m->warm_stopped);
	head(&b, "sandrun_secrets_held", "gauge",
	     "Secret values redacted from logs and events: the service's own, and those "
	     "of the runs and sessions it holds now.");
	put(&b, "sandrun_secrets_held %zu\n", sr__secrets_count());
	head(&b, "sandrun_runs_started_total", "counter", "Runs started.");
	put(&b, "sandrun_runs_started_total %llu\n", (unsigned long long)m->runs_started);
	head(&b, "sandrun_runs_ended_total", "counter", "Runs ended, by state.");
	for (int i = 0; i < SR__LABELS_MAX && m->runs_ended[i].name[0]; i++)
		put(&b, "sandrun_runs_ended_total{state=\"%s\"} %llu\n",
		    esc(m->runs_ended[i].name, e, sizeof(e)),
		    (unsigned long long)m->runs_ended[i].n);
	head(&b, "sandrun_run_duration_seconds", "histogram",
	     "Runs from the request to the end of the turn (run.finished).");
	hist(&b, "sandrun_run_duration_seconds", "", &m->run_duration);
	head(&b, "sandrun_stage_duration_seconds", "histogram",
	     "The stages of a run (timing events): sandbox_start, prepare_workspace, "
	     "probe_capabilities, create_session, turn.");
	for (int i = 0; i < SR__LABELS_MAX && m->stages[i].name[0]; i++) {
		snprintf(lb, sizeof(lb), "stage=\"%s\",", esc(m->stages[i].name, e, sizeof(e)));
		hist(&b, "sandrun_stage_duration_seconds", lb, &m->stages[i].h);
	}
	head(&b, "sandrun_relay_calls_total", "counter",
	     "Platform tool calls through the relay, by status.");
	for (int i = 0; i < SR__LABELS_MAX && m->relay[i].name[0]; i++)
		put(&b, "sandrun_relay_calls_total{status=\"%s\"} %llu\n",
		    esc(m->relay[i].name, e, sizeof(e)), (unsigned long long)m->relay[i].n);
	head(&b, "sandrun_relay_call_duration_seconds", "histogram",
	     "Platform tool calls through the relay, by status.");
	for (int i = 0; i < SR__LABELS_MAX && m->relay[i].name[0]; i++) {
		snprintf(lb, sizeof(lb), "status=\"%s\",", esc(m->relay[i].name, e, sizeof(e)));
		hist(&b, "sandrun_relay_call_duration_seconds", lb, &m->relay[i].h);
	}
	plugins(&b, reg);
	head(&b, "sandrun_http_responses_total", "counter", "HTTP answers, by status code.");
	for (int i = 0; i < SR__LABELS_MAX && m->http[i].name[0]; i++)
		put(&b, "sandrun_http_responses_total{code=\"%s\"} %llu\n",
		    esc(m->http[i].name, e, sizeof(e)), (unsigned long long)m->http[i].n);
	head(&b, "sandrun_events_total", "counter", "Events the runs emitted.");
	put(&b, "sandrun_events_total %llu\n", (unsigned long long)m->events);
	head(&b, "sandrun_janitor_sweeps_total", "counter",
	     "Sweeps of the janitor ([janitor] interval) this service ran.");
	put(&b, "sandrun_janitor_sweeps_total %llu\n", (unsigned long long)m->janitor_sweeps);
	head(&b, "sandrun_janitor_removed_total", "counter",
	     "What its sweeps removed (sandboxes, secrets, leases, enrolments).");
	put(&b, "sandrun_janitor_removed_total %llu\n", (unsigned long long)m->janitor_removed);
	head(&b, "sandrun_janitor_failed_total", "counter",
	     "What its sweeps could not remove (each tried again at the next).");
	put(&b, "sandrun_janitor_failed_total %llu\n", (unsigned long long)m->janitor_failed);
	if (b.failed) {
		free(b.s);
		return NULL;
	}
	return b.s;
}
