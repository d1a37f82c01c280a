/* sandrund's metrics, in the Prometheus text format: counters and
 * histograms fed by the runs' events and the HTTP answers, gauges taken
 * when scraped. */
#ifndef SR_CORE_SERVICE_METRICS_H
#define SR_CORE_SERVICE_METRICS_H

#include <jansson.h>
#include <stdint.h>

#include "core/plugins/loader.h"

#define SR__HIST_N 16
#define SR__LABELS_MAX 24

typedef struct sr__hist {
	uint64_t le[SR__HIST_N]; /* observations at or below each bound */
	uint64_t count;
	double sum;              /* seconds */
} sr__hist;

/* A small map of label value to counter and histogram. */
typedef struct sr__labelled {
	char name[32];
	uint64_t n;
	sr__hist h;
} sr__labelled;

typedef struct sr__svc_metrics {
	uint64_t runs_started;
	sr__labelled runs_ended[SR__LABELS_MAX];   /* by state */
	sr__hist run_duration;                     /* run.finished's ms */
	sr__labelled stages[SR__LABELS_MAX];       /* timing events, by stage */
	sr__labelled relay[SR__LABELS_MAX];        /* tool.result, by status */
	sr__labelled http[SR__LABELS_MAX];         /* answers, by status code */
	uint64_t events;
	uint64_t rejected_busy;                    /* 429s */
	unsigned warm_running, warm_stopped;       /* the pool, when scraped */
	uint64_t janitor_sweeps, janitor_removed, janitor_failed; /* janitor.c */
} sr__svc_metrics;

/* Count one event of a run (borrowed). */
void sr__metrics_event(sr__svc_metrics *m, json_t *ev);
void sr__metrics_run_ended(sr__svc_metrics *m, const char *state);
void sr__metrics_http(sr__svc_metrics *m, unsigned status);

/* The exposition: m, runs_by_state ({state: count}, borrowed),
 * active_by_phase ({phase: count}, borrowed) and the plugins' call counts
 * from reg. A malloc'd string. */
char *sr__metrics_text(const sr__svc_metrics *m, json_t *runs_by_state,
		       json_t *active_by_phase, const sr__registry *reg);

#endif
