/* Deferred completions and the checked asynchronous calls into plugins. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/plugins/complete.h"
#include "core/host/ctx.h"
#include "core/plugins/host.h"
#include "core/host/log.h"

typedef struct later {
	uv_timer_t t;
	sr_done_fn done;
	void *ud;
	sr_result r; /* the copy: message, json and data below */
} later;

static char *dup_bytes(const void *p, size_t n)
{
	char *d = malloc(n + 1);

	if (d) {
		if (n)
			memcpy(d, p, n);
		d[n] = 0;
	}
	return d;
}

static void later_closed(uv_handle_t *h)
{
	later *l = h->data;

	free((char *)l->r.message);
	free((char *)l->r.json);
	free((void *)l->r.data);
	free(l);
}

static void later_fire(uv_timer_t *t)
{
	later *l = t->data;

	l->done(l->ud, &l->r);
	uv_close((uv_handle_t *)&l->t, later_closed);
}

int sr__complete_later(uv_loop_t *loop, sr_done_fn done, void *ud,
		       const sr_result *result)
{
	size_t n = result->size < sizeof(sr_result) ? result->size : sizeof(sr_result);
	later *l = calloc(1, sizeof(*l));

	if (!l)
		return SR_ENOMEM;
	memcpy(&l->r, result, n);
	l->r.size = sizeof(l->r);
	l->r.message = result->message ? strdup(result->message) : NULL;
	l->r.json = result->json ? strdup(result->json) : NULL;
	l->r.data = result->data ? dup_bytes(result->data, result->len) : NULL;
	if ((result->message && !l->r.message) || (result->json && !l->r.json) ||
	    (result->data && !l->r.data)) {
		free((char *)l->r.message);
		free((char *)l->r.json);
		free((void *)l->r.data);
		free(l);
		return SR_ENOMEM;
	}
	l->done = done;
	l->ud = ud;
	uv_timer_init(loop, &l->t);
	l->t.data = l;
	uv_timer_start(&l->t, later_fire, 0, 0);
	return SR_OK;
}

struct sr__call {
	sr__plugin *p;
	const char *op;
	sr__op_stat *stat;  /* NULL: the table is full */
	int answered;       /* the outcome is counted */
	sr_done_fn done;
	void *ud;
	int in_call;
	int early;     /* called back from inside the call */
	sr_result held;
	char *message, *json, *data;
};

static sr__op_stat *op_stat(sr__plugin *p, const char *op)
{
	for (size_t i = 0; i < p->n_stats; i++)
		if (strcmp(p->stats[i].op, op) == 0)
			return &p->stats[i];
	if (p->n_stats == SR__OP_STATS)
		return NULL;
	p->stats[p->n_stats].op = op;
	return &p->stats[p->n_stats++];
}

/* A call's outcome, counted once. */
static void count_outcome(sr__call *g, int status)
{
	if (g->answered || !g->stat)
		return;
	g->answered = 1;
	if (status != SR_OK)
		g->stat->errors++;
}

sr__call *sr__call_new(sr__plugin *p, const char *op, sr_done_fn done,
			 void *ud)
{
	sr__call *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->p = p;
	g->op = op;
	g->stat = op_stat(p, op);
	if (g->stat)
		g->stat->calls++;
	g->done = done;
	g->ud = ud;
	g->in_call = 1;
	return g;
}

static void call_free(sr__call *g)
{
	free(g->message);
	free(g->json);
	free(g->data);
	free(g);
}

void sr__call_done(void *ud, const sr_result *r)
{
	sr__call *g = ud;

	count_outcome(g, r->status);
	if (!g->in_call) {
		g->done(g->ud, r);
		call_free(g);
		return;
	}
	if (g->early) {
		sr__log(SR_LOG_WARN, g->p->section,
			"operation '%s' called back twice; the second was dropped", g->op);
		return;
	}
	g->early = 1;
	memset(&g->held, 0, sizeof(g->held));
	memcpy(&g->held, r, r->size < sizeof(g->held) ? r->size : sizeof(g->held));
	g->held.size = sizeof(g->held);
	g->held.message = g->message = r->message ? strdup(r->message) : NULL;
	g->held.json = g->json = r->json ? strdup(r->json) : NULL;
	g->held.data = g->data = r->data ? dup_bytes(r->data, r->len) : NULL;
}

int sr__call_end(sr__call *g, int rc)
{
	g->in_call = 0;
	if (rc != SR_OK) {
		/* The error return is the outcome (an early failure counted). */
		if (!g->answered || g->held.status == SR_OK) {
			g->answered = 0;
			count_outcome(g, rc);
		}
		if (g->early)
			sr__log(SR_LOG_WARN, g->p->section,
				"operation '%s' returned an error and also called back; "
				"the callback was dropped", g->op);
		call_free(g);
		return rc;
	}
	if (!g->early)
		return SR_OK; /* the plugin calls back later, as it should */
	sr__log(SR_LOG_DEBUG, g->p->section,
		"operation '%s' called back from inside the call; delivered later", g->op);
	rc = sr__complete_later(g->p->host->ctx->loop, g->done, g->ud, &g->held);
	call_free(g);
	return rc;
}

int sr__plugin_doctor(sr__plugin *p, sr_done_fn done, void *ud)
{
	int (*fn)(void *, sr_done_fn, void *) = SR__DESC(p, doctor);
	sr__call *g;

	if (!fn)
		return SR_EUNSUPPORTED;
	if (!(g = sr__call_new(p, "doctor", done, ud)))
		return SR_ENOMEM;
	return sr__call_end(g, fn(p->self, sr__call_done, g));
}

int sr__complete_unsupported(sr__plugin *p, const char *op, sr_done_fn done,
			     void *ud)
{
	char msg[160];
	sr_result r = { sizeof(r), SR_EUNSUPPORTED, msg, NULL, NULL, 0 };

	sr__unsupported(p, op, msg, sizeof(msg));
	return sr__complete_later(p->host->ctx->loop, done, ud, &r);
}
