/* Database jobs in order on the thread pool (dbq.h): the queue is on the
 * loop, and only its head is ever handed to the thread pool. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/store/db.h"
#include "core/store/dbq.h"
#include "sandrun/plugin.h"

typedef struct job {
	int (*fn)(sr__db *db, void *arg);
	void (*done)(void *arg, int rc);
	void *arg;
	int rc;
	struct job *next;
} job;

struct sr__dbq {
	uv_loop_t *loop;
	char *state;
	sr__db *db;      /* the jobs' (one at a time) */
	job *head, **tail;
	uv_work_t work;
	int running;      /* the head is on the thread pool */
	int closing;
};

static void start(sr__dbq *q);

static void on_work(uv_work_t *w)
{
	sr__dbq *q = w->data;
	job *j = q->head;

	if (!q->db)
		q->db = sr__db_open(q->state);
	j->rc = j->fn(q->db, j->arg);
}

static void q_free(sr__dbq *q)
{
	sr__db_close(q->db);
	free(q->state);
	free(q);
}

static void on_done(uv_work_t *w, int status)
{
	sr__dbq *q = w->data;
	job *j = q->head;

	(void)status;
	q->running = 0;
	if (!(q->head = j->next))
		q->tail = &q->head;
	if (j->done)
		j->done(j->arg, j->rc);
	free(j);
	if (q->head)
		start(q);
	else if (q->closing)
		q_free(q);
}

static void start(sr__dbq *q)
{
	if (q->running || !q->head)
		return;
	q->running = 1;
	if (uv_queue_work(q->loop, &q->work, on_work, on_done) != 0) {
		/* Not expected (a closing loop): run it here rather than lose it. */
		on_work(&q->work);
		on_done(&q->work, 0);
	}
}

sr__dbq *sr__dbq_new(uv_loop_t *loop, const char *state)
{
	sr__dbq *q = calloc(1, sizeof(*q));

	if (!q || !(q->state = strdup(state))) {
		free(q);
		return NULL;
	}
	q->loop = loop;
	q->tail = &q->head;
	q->work.data = q;
	return q;
}

int sr__dbq_push(sr__dbq *q, int (*fn)(sr__db *db, void *arg),
		 void (*done)(void *arg, int rc), void *arg)
{
	job *j = calloc(1, sizeof(*j));

	if (!j)
		return SR_ENOMEM;
	j->fn = fn;
	j->done = done;
	j->arg = arg;
	*q->tail = j;
	q->tail = &j->next;
	start(q);
	return SR_OK;
}

void sr__dbq_close(sr__dbq *q)
{
	if (!q)
		return;
	q->closing = 1;
	if (!q->head)
		q_free(q);
}
