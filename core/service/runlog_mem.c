/* The in-memory run log (runlog.h): a list of runs, each with a ring of
 * its last event lines. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/service/runlog.h"
#include "sandrun/plugin.h"

typedef struct mem_run {
	char *id;
	json_t *summary;
	int ended;              /* retired */
	uint64_t ended_order;   /* which was retired first */
	char **lines;           /* ring of cap lines */
	size_t *lens;
	size_t cap;
	uint64_t first, last;   /* seq of the oldest kept and of the newest;
				 * first > last: none */
	struct mem_run *next;
} mem_run;

typedef struct mem_log {
	sr__runlog pub;
	size_t per_run, kept;
	mem_run *runs;
	size_t n, n_ended;
	uint64_t ended_seq;
} mem_log;

static mem_run *find(mem_log *m, const char *id)
{
	for (mem_run *r = m->runs; r; r = r->next)
		if (strcmp(r->id, id) == 0)
			return r;
	return NULL;
}

static void run_free(mem_run *r)
{
	for (size_t i = 0; r->lines && i < r->cap; i++)
		free(r->lines[i]);
	free(r->lines);
	free(r->lens);
	json_decref(r->summary);
	free(r->id);
	free(r);
}

static int m_create(sr__runlog *l, const char *id, json_t *summary)
{
	return sr__runlog_mem_load(l, id, summary, 1);
}

int sr__runlog_mem_load(sr__runlog *l, const char *id, json_t *summary, uint64_t first)
{
	mem_log *m = (mem_log *)l;
	mem_run *r;

	if (find(m, id))
		return SR_EEXIST;
	r = calloc(1, sizeof(*r));
	if (!r)
		return SR_ENOMEM;
	r->cap = m->per_run;
	r->id = strdup(id);
	r->lines = calloc(r->cap, sizeof(*r->lines));
	r->lens = calloc(r->cap, sizeof(*r->lens));
	r->summary = json_deep_copy(summary);
	if (!r->id || !r->lines || !r->lens || !r->summary) {
		run_free(r);
		return SR_ENOMEM;
	}
	r->first = first ? first : 1;
	r->last = r->first - 1;
	r->next = m->runs;
	m->runs = r;
	m->n++;
	return SR_OK;
}

static int m_append(sr__runlog *l, const char *id, const char *line, size_t len,
		    uint64_t *seq)
{
	mem_run *r = find((mem_log *)l, id);
	char *copy;
	size_t slot;

	if (!r)
		return SR_ENOTFOUND;
	if (!(copy = malloc(len + 1)))
		return SR_ENOMEM;
	memcpy(copy, line, len);
	copy[len] = 0;
	r->last++;
	slot = (size_t)(r->last % r->cap);
	free(r->lines[slot]); /* the oldest, when full */
	r->lines[slot] = copy;
	r->lens[slot] = len;
	if (r->last - r->first + 1 > r->cap)
		r->first = r->last - r->cap + 1;
	*seq = r->last;
	return SR_OK;
}

static int m_line(sr__runlog *l, const char *id, uint64_t seq, const char **line,
		  size_t *len, uint64_t *first)
{
	mem_run *r = find((mem_log *)l, id);
	size_t slot;

	if (!r || seq > r->last || seq == 0)
		return SR_ENOTFOUND;
	*first = r->first;
	if (seq < r->first)
		return SR_ESTATE;
	slot = (size_t)(seq % r->cap);
	*line = r->lines[slot];
	*len = r->lens[slot];
	return SR_OK;
}

/* Forget the oldest ended runs beyond the number kept. */
static void prune(mem_log *m)
{
	while (m->n_ended > m->kept) {
		mem_run **oldest = NULL;
		for (mem_run **pp = &m->runs; *pp; pp = &(*pp)->next)
			if ((*pp)->ended && (!oldest || (*pp)->ended_order < (*oldest)->ended_order))
				oldest = pp;
		if (!oldest)
			return;
		mem_run *r = *oldest;
		*oldest = r->next;
		run_free(r);
		m->n--;
		m->n_ended--;
	}
}

static int m_set_summary(sr__runlog *l, const char *id, json_t *summary)
{
	mem_run *r = find((mem_log *)l, id);
	json_t *copy;

	if (!r)
		return SR_ENOTFOUND;
	if (!(copy = json_deep_copy(summary)))
		return SR_ENOMEM;
	json_decref(r->summary);
	r->summary = copy;
	return SR_OK;
}

static int m_retire(sr__runlog *l, const char *id)
{
	mem_log *m = (mem_log *)l;
	mem_run *r = find(m, id);

	if (!r)
		return SR_ENOTFOUND;
	if (!r->ended) {
		r->ended = 1;
		r->ended_order = ++m->ended_seq;
		m->n_ended++;
		prune(m);
	}
	return SR_OK;
}

static int m_summary(sr__runlog *l, const char *id, json_t **out)
{
	mem_run *r = find((mem_log *)l, id);

	*out = NULL;
	if (!r)
		return SR_ENOTFOUND;
	*out = json_incref(r->summary);
	return SR_OK;
}

static size_t m_count(sr__runlog *l)
{
	return ((mem_log *)l)->n;
}

static void m_foreach(sr__runlog *l, void (*fn)(void *ud, json_t *summary), void *ud)
{
	for (mem_run *r = ((mem_log *)l)->runs; r; r = r->next)
		fn(ud, r->summary);
}

static void m_free(sr__runlog *l)
{
	mem_log *m = (mem_log *)l;
	mem_run *r, *next;

	if (!m)
		return;
	for (r = m->runs; r; r = next) {
		next = r->next;
		run_free(r);
	}
	free(m);
}

static const sr__runlog_ops mem_ops = {
	m_create, m_append, m_line, m_set_summary, m_retire, m_summary, m_count, m_foreach,
	m_free
};

sr__runlog *sr__runlog_mem_new(size_t per_run, size_t kept)
{
	mem_log *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->pub.ops = &mem_ops;
	m->per_run = per_run ? per_run : 1;
	m->kept = kept;
	return &m->pub;
}
