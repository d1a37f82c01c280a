/* Session leases, the service's side (the table is core/store/lease.c).
 * A turn on a session starts only once this service holds its lease; the
 * lease is kept while the turn goes on and while the pool keeps the
 * session's sandbox, renewed by a heartbeat every third of
 * [service] lease_ttl, and released by the first heartbeat after neither
 * holds it. A service that dies stops renewing: its leases expire and
 * another service takes its sessions over. Every database call is made on
 * libuv's thread pool, through one connection of the service's, one call
 * at a time (a lock rather than SQLite's busy waits between the pool's
 * threads). */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "core/host/log.h"
#include "core/service/svc_int.h"
#include "core/store/db.h"
#include "core/store/lease.h"

typedef struct lease_op {
	uv_work_t work;
	sr__svc *svc;
	char *state;
	char session[40];
	char *held; /* a heartbeat's JSON list */
	char owner[320];
	int64_t ttl, since; /* since: when the heartbeat's list was made */
	int rc;
	char holder[400];
	void (*done)(void *ud, int rc, const char *holder);
	void *ud;
} lease_op;

static int64_t now_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* The service's connection, opened by the first call that needs it. */
static uv_once_t lock_once = UV_ONCE_INIT;
static uv_mutex_t lock;

static void make_lock(void)
{
	uv_mutex_init(&lock);
}

static sr__db *db_get(lease_op *op)
{
	uv_once(&lock_once, make_lock);
	uv_mutex_lock(&lock);
	if (!op->svc->lease_db)
		op->svc->lease_db = sr__db_open(op->state);
	if (!op->svc->lease_db)
		uv_mutex_unlock(&lock);
	return op->svc->lease_db;
}

static void db_put(void)
{
	uv_mutex_unlock(&lock);
}

static lease_op *op_new(sr__svc *s)
{
	const char *state = sr__ctx_state_dir(s->ctx);
	lease_op *op = calloc(1, sizeof(*op));

	if (!op || !state || !(op->state = strdup(state))) {
		free(op);
		return NULL;
	}
	op->svc = s;
	op->ttl = (int64_t)s->conf.lease_ttl_s * 1000;
	snprintf(op->owner, sizeof(op->owner), "%s", s->owner);
	op->work.data = op;
	return op;
}

static void op_free(lease_op *op)
{
	free(op->state);
	free(op->held);
	free(op);
}

/* ------------------------------------------------------------------ take */

static void take_work(uv_work_t *w)
{
	lease_op *op = w->data;
	sr__db *db = db_get(op);

	op->rc = SR_EIO;
	if (db) {
		op->rc = sr__lease_acquire(db, op->session, op->owner, 1, now_ms(), op->ttl,
					   op->holder, sizeof(op->holder));
		db_put();
	}
}

static void take_done(uv_work_t *w, int status)
{
	lease_op *op = w->data;
	sr__svc *s = op->svc;

	/* The session stays in leasing until its taker settles it
	 * (sr__svc_lease_settled), so that no heartbeat in between drops
	 * the lease before a run holds it. */
	if (status != 0)
		op->rc = SR_ECANCELED;
	s->lease_ops--;
	op->done(op->ud, op->rc, op->holder);
	op_free(op);
	sr__svc_check_drained(s);
}

void sr__svc_lease_settled(sr__svc *s, const char *session)
{
	json_object_del(s->leasing, session);
}

int sr__svc_lease_take(sr__svc *s, const char *session,
		       void (*done)(void *ud, int rc, const char *holder), void *ud)
{
	lease_op *op = s->leases_closing ? NULL : op_new(s);

	if (!op)
		return SR_ENOMEM;
	snprintf(op->session, sizeof(op->session), "%s", session);
	op->done = done;
	op->ud = ud;
	/* In the heartbeat's list from now on, so that it does not release
	 * the lease this takes. */
	json_object_set_new(s->leasing, session, json_true());
	if (uv_queue_work(s->ctx->loop, &op->work, take_work, take_done) != 0) {
		json_object_del(s->leasing, session);
		op_free(op);
		return SR_EIO;
	}
	s->lease_ops++;
	return SR_OK;
}

/* A lease of the service's own work (key: "janitor"), held by OWNER/what
 * so that no heartbeat releases it, for ttl_ms and then left to expire:
 * among replicas on one database, the one that takes it does the work,
 * once per ttl. */
int sr__svc_lease_take_work(sr__svc *s, const char *key, const char *what, int64_t ttl_ms,
			    void (*done)(void *ud, int rc, const char *holder), void *ud)
{
	lease_op *op = s->leases_closing ? NULL : op_new(s);

	if (!op)
		return SR_ENOMEM;
	snprintf(op->session, sizeof(op->session), "%s", key);
	snprintf(op->owner, sizeof(op->owner), "%s/%s", s->owner, what);
	op->ttl = ttl_ms;
	op->done = done;
	op->ud = ud;
	if (uv_queue_work(s->ctx->loop, &op->work, take_work, take_done) != 0) {
		op_free(op);
		return SR_EIO;
	}
	s->lease_ops++;
	return SR_OK;
}

/* ------------------------------------------------------------- heartbeat */

static void add(json_t *list, const char *session, int busy, int pending)
{
	json_array_append_new(list, json_pack("{s:s, s:b, s:b}", "session", session,
					      "busy", busy, "pending", pending));
}

static void add_warm(void *ud, const char *session)
{
	add(ud, session, 0, 0);
}

static void beat_work(uv_work_t *w)
{
	lease_op *op = w->data;
	sr__db *db = db_get(op);

	op->rc = SR_EIO;
	if (db) {
		op->rc = sr__lease_beat(db, op->owner, op->held, now_ms(), op->since, op->ttl);
		db_put();
	}
}

static void beat(sr__svc *s);

static void beat_done(uv_work_t *w, int status)
{
	lease_op *op = w->data;
	sr__svc *s = op->svc;

	(void)status;
	op_free(op);
	s->beating = 0;
	s->lease_ops--;
	if (s->beat_again) {
		s->beat_again = 0;
		beat(s);
	}
	sr__svc_check_drained(s);
}

/* What this service holds now, written: the sessions of its turns, of its
 * pool, and of the leases being taken. */
static void beat(sr__svc *s)
{
	json_t *list;
	const char *session;
	json_t *v;
	lease_op *op;

	if (s->leases_closing)
		return;
	if (s->beating) {
		s->beat_again = 1;
		return;
	}
	if (!(list = json_array()) || !(op = op_new(s))) {
		json_decref(list);
		return;
	}
	for (sr__svc_run *sr = s->runs; sr; sr = sr->next)
		if (!sr->done && sr->session[0])
			add(list, sr->session, 1, 0);
	if (s->pool)
		sr__pool_foreach(s->pool, add_warm, list);
	json_object_foreach(s->deleting, session, v)
		add(list, session, 1, 0);
	json_object_foreach(s->leasing, session, v)
		add(list, session, 0, 1);
	op->held = json_dumps(list, JSON_COMPACT);
	op->since = now_ms();
	json_decref(list);
	if (!op->held || uv_queue_work(s->ctx->loop, &op->work, beat_work, beat_done) != 0) {
		op_free(op);
		return;
	}
	s->beating = 1;
	s->lease_ops++;
}

static void on_beat(uv_timer_t *t)
{
	beat(t->data);
}

void sr__svc_leases_kick(sr__svc *s)
{
	beat(s);
}

void sr__svc_leases_init(sr__svc *s)
{
	uint64_t every = (uint64_t)s->conf.lease_ttl_s * 1000 / 3;

	sr__db_owner(s->owner, sizeof(s->owner));
	uv_timer_init(s->ctx->loop, &s->beat);
	s->beat.data = s;
	uv_timer_start(&s->beat, on_beat, every, every);
	uv_unref((uv_handle_t *)&s->beat);
}

void sr__svc_leases_quiesce(sr__svc *s)
{
	s->leases_closing = 1;
	if (s->owner[0])
		uv_timer_stop(&s->beat);
}

void sr__svc_leases_close(sr__svc *s)
{
	const char *state = sr__ctx_state_dir(s->ctx);
	sr__db *db;

	if (!s->owner[0])
		return;
	uv_timer_stop(&s->beat);
	uv_close((uv_handle_t *)&s->beat, NULL);
	/* A call started before the quiesce (a failed start, a forced
	 * stop): let it end first, it uses s. */
	while (s->lease_ops)
		uv_run(s->ctx->loop, UV_RUN_ONCE);
	/* At the very end (the drain waited for the calls on the thread
	 * pool; none starts now): waited for. */
	uv_once(&lock_once, make_lock);
	uv_mutex_lock(&lock);
	db = s->lease_db ? s->lease_db : state ? sr__db_open(state) : NULL;
	if (db) {
		sr__lease_release_all(db, s->owner);
		sr__db_close(db);
	}
	s->lease_db = NULL;
	uv_mutex_unlock(&lock);
	s->owner[0] = 0;
}
