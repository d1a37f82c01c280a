/* The warm pool and the teardown table (pool.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/time.h>

#include "core/host/log.h"
#include "core/host/status.h"
#include "core/plugins/loader.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"
#include "core/run/pool.h"
#include "core/run/session.h"
#include "core/store/db.h"
#include "core/store/dbq.h"
#include "core/store/warm.h"

/* ------------------------------------------------------------ the table */

static const struct {
	const char *name;
	enum sr__disposition fresh; /* the sandbox of a turn that made it */
	enum sr__disposition kept;  /* one a session already had */
} teardowns[SR__TD_COUNT] = {
	[SR__TD_COMPLETED] = { "completed", SR__KEEP_RUNNING, SR__KEEP_RUNNING },
	[SR__TD_CAPACITY] = { "capacity", SR__PARK_STOPPED, SR__PARK_STOPPED },
	/* A failed first turn leaves nothing worth keeping; a failed later
	 * turn leaves the session's work, which the next turn may want. */
	[SR__TD_FAILED] = { "failed", SR__DESTROY, SR__PARK_STOPPED },
	[SR__TD_CANCELLED] = { "cancelled", SR__PARK_STOPPED, SR__PARK_STOPPED },
	/* A run the service cancelled as it stopped: its fresh sandbox no
	 * caller ever learnt of goes. */
	[SR__TD_SHUTDOWN] = { "shutdown", SR__DESTROY, SR__PARK_STOPPED },
	[SR__TD_EXPIRED] = { "expired", SR__PARK_STOPPED, SR__PARK_STOPPED },
	[SR__TD_TTL] = { "ttl", SR__DESTROY, SR__DESTROY },
	[SR__TD_CREDENTIALS] = { "credential_change", SR__DESTROY, SR__DESTROY },
	[SR__TD_DELETED] = { "session_deleted", SR__DESTROY, SR__DESTROY },
	/* Stopping it ends whatever the mount left running in it; the next
	 * turn mounts over what is left of the mount. */
	[SR__TD_UNMOUNT_FAILED] = { "unmount_failed", SR__PARK_STOPPED, SR__PARK_STOPPED },
};

enum sr__disposition sr__teardown_disposition(enum sr__teardown why, int created)
{
	if ((unsigned)why >= SR__TD_COUNT)
		return SR__PARK_STOPPED;
	return created ? teardowns[why].fresh : teardowns[why].kept;
}

const char *sr__teardown_name(enum sr__teardown why)
{
	return (unsigned)why < SR__TD_COUNT ? teardowns[why].name : "unknown";
}

/* ------------------------------------------------------------- the pool */

enum { E_RUNNING, E_STOPPED, E_BUSY };

typedef struct entry entry;
struct entry {
	sr__pool *pool;
	sr__plugin *provider;
	char session[40];
	char *sandbox;
	char *acquired;   /* the provider's answer that gave it */
	int network;
	int state;
	int orphan;       /* out of the list: freed when its call answers */
	int keep_record;  /* parked stopped at a stop: its TTL outlives it */
	int64_t ttl_at;   /* parked stopped: when its TTL ends (Unix ms) */
	struct sr__agent *agent; /* kept alive with it, or NULL */
	void (*settled)(void *ud); /* a turn waits for its provider call */
	void *settled_ud;
	uv_timer_t timer;
	entry *next;
};

/* Places reserved for turns that are ending, by provider (max_warm is
 * per provider). */
typedef struct reservation {
	sr__plugin *provider;
	unsigned n;
	struct reservation *next;
} reservation;

struct sr__pool {
	sr__ctx *ctx;
	unsigned live_s, max_warm, ttl_s;
	entry *list;
	unsigned running, stopped;
	unsigned reserved; /* places taken for turns that are ending */
	reservation *reservations;
	sr__dbq *q;        /* the record in the database, or NULL */
	char owner[320];
	unsigned pending;  /* provider calls in flight, timers closing */
	int closing;
	void (*done)(void *ud);
	void *done_ud;
	uv_timer_t later;  /* reports the close outside the caller's call */
};

sr__pool *sr__pool_new(sr__ctx *ctx, unsigned live_s, unsigned max_warm, unsigned ttl_s)
{
	sr__pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->ctx = ctx;
	sr__pool_configure(p, live_s, max_warm, ttl_s);
	uv_timer_init(ctx->loop, &p->later);
	p->later.data = p;
	return p;
}

void sr__pool_configure(sr__pool *p, unsigned live_s, unsigned max_warm, unsigned ttl_s)
{
	p->live_s = live_s;
	p->max_warm = max_warm;
	p->ttl_s = ttl_s;
}

static void on_report(uv_timer_t *t)
{
	sr__pool *p = t->data;
	void (*fn)(void *) = p->done;

	p->done = NULL;
	if (fn)
		fn(p->done_ud);
}

static void check_closed(sr__pool *p)
{
	if (p->closing && p->done && !p->pending && !p->list)
		uv_timer_start(&p->later, on_report, 0, 0);
}

static void on_entry_closed(uv_handle_t *h)
{
	entry *e = h->data;
	sr__pool *p = e->pool;

	free(e->sandbox);
	free(e->acquired);
	free(e);
	p->pending--;
	check_closed(p);
}

/* ----------------------------------------------------------- the record */

typedef struct record_job {
	sr__pool *p;
	char session[40], provider[64];
	char *sandbox;
	int running, forget;
	int64_t ttl_at;
} record_job;

static int64_t now_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static const char *provider_name(const sr__plugin *provider);
static void check_closed(sr__pool *p);

static int record_run(sr__db *db, void *arg)
{
	record_job *j = arg;

	if (j->forget)
		return sr__warm_forget(db, j->session, j->sandbox);
	return sr__warm_record(db, j->session, j->sandbox, j->provider, j->running, j->ttl_at,
			       j->p->owner);
}

static void record_done(void *arg, int rc)
{
	record_job *j = arg;
	sr__pool *p = j->p;

	(void)rc; /* logged by the job */
	free(j->sandbox);
	free(j);
	p->pending--;
	check_closed(p);
}

enum { REC_HOLD, REC_PARKED, REC_FORGET };

/* Write what the pool holds for e (REC_HOLD as it is, REC_PARKED parked
 * stopped with its TTL) or that it holds it no more, in the order the
 * changes were made; the pool closes after the last write. */
static void push_record(sr__pool *p, const char *session, const char *sandbox,
			const char *provider, int what, int running, int64_t ttl_at)
{
	record_job *j;

	if (!(j = calloc(1, sizeof(*j))) || !(j->sandbox = strdup(sandbox))) {
		free(j);
		return;
	}
	j->p = p;
	snprintf(j->session, sizeof(j->session), "%s", session);
	snprintf(j->provider, sizeof(j->provider), "%s", provider);
	j->forget = what == REC_FORGET;
	j->running = running && what != REC_PARKED;
	if (!j->running && p->ttl_s)
		j->ttl_at = what == REC_PARKED || !ttl_at ? now_ms() + (int64_t)p->ttl_s * 1000 :
							    ttl_at;
	if (sr__dbq_push(p->q, record_run, record_done, j) != SR_OK) {
		free(j->sandbox);
		free(j);
		return;
	}
	p->pending++;
}

static void record(sr__pool *p, const entry *e, int what)
{
	if (!p->q || (what == REC_FORGET && e->keep_record))
		return;
	push_record(p, e->session, e->sandbox, provider_name(e->provider), what,
		    e->state != E_STOPPED, e->ttl_at);
}

static void unlink_entry(sr__pool *p, entry *e)
{
	for (entry **pp = &p->list; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			record(p, e, REC_FORGET);
			break;
		}
	}
	e->next = NULL;
}

/* Counted neither running nor stopped any more: busy, or on its way out. */
static void count_out(sr__pool *p, entry *e)
{
	if (e->state == E_RUNNING)
		p->running--;
	else if (e->state == E_STOPPED)
		p->stopped--;
	e->state = E_BUSY;
}

static void on_agent_stopped(void *ud)
{
	sr__pool *p = ud;

	p->pending--;
	check_closed(p);
}

/* Its agent exited between turns: the sandbox stays warm without it. */
static void on_agent_gone(void *ud)
{
	entry *e = ud;

	e->agent = NULL;
	sr__log(SR_LOG_INFO, "pool", "session %s: the warm agent exited; the next turn starts "
		"it again", e->session);
}

static void stop_agent(sr__pool *p, entry *e)
{
	if (!e->agent)
		return;
	p->pending++;
	sr__agent_stop(e->agent, on_agent_stopped, p);
	e->agent = NULL;
}

/* Out of the list and freed (its timer closed first, its agent stopped). */
static void drop_entry(sr__pool *p, entry *e)
{
	stop_agent(p, e);
	count_out(p, e);
	unlink_entry(p, e);
	uv_timer_stop(&e->timer);
	p->pending++;
	uv_close((uv_handle_t *)&e->timer, on_entry_closed);
}

/* Out of the pool: a busy one (a provider call due) when its call
 * answers, any other now. */
static void let_go(sr__pool *p, entry *e)
{
	if (e->state == E_BUSY) {
		unlink_entry(p, e);
		e->orphan = 1;
	} else {
		drop_entry(p, e);
	}
}

/* A teardown is over (or could not start): the entry goes. */
static void torn_down(sr__pool *p, entry *e)
{
	if (e->orphan) {
		/* Already out of the list: close its timer and free it. */
		p->pending++;
		uv_close((uv_handle_t *)&e->timer, on_entry_closed);
	} else {
		drop_entry(p, e);
	}
	check_closed(p);
}

static void left_to_janitor(const entry *e, const char *why)
{
	sr__log(SR_LOG_WARN, "pool", "session %s: sandbox %s: %s (`sandrun janitor` finds what "
		"is left)", e->session, e->sandbox, why);
}

static entry *find(sr__pool *p, const char *session)
{
	for (entry *e = p->list; e; e = e->next)
		if (strcmp(e->session, session) == 0)
			return e;
	return NULL;
}

static void on_timer(uv_timer_t *t);

static void answered(entry *e, const sr_result *res, int destroyed);

/* A gone sandbox's session pointer removed, off the loop. */
static void on_forgotten(void *ud, int rc)
{
	sr__pool *p = ud;

	(void)rc; /* none: it names another sandbox now, or there is none */
	p->pending--;
	check_closed(p);
}

/* A park or destroy answered; then the turn that waited for it goes on. */
static void on_answered(entry *e, const sr_result *res, int destroyed)
{
	void (*settled)(void *ud) = e->settled;
	void *ud = e->settled_ud;

	e->settled = NULL;
	answered(e, res, destroyed);
	if (settled)
		settled(ud);
}

static void answered(entry *e, const sr_result *res, int destroyed)
{
	sr__pool *p = e->pool;

	p->pending--;
	/* The session forgets a sandbox that no longer exists. */
	if ((res->status == SR_ENOTFOUND || (destroyed && res->status == SR_OK)) &&
	    sr__ctx_state_dir(p->ctx) &&
	    sr__session_remove_async(p->ctx->loop, sr__ctx_state_dir(p->ctx), e->session,
				     e->sandbox, on_forgotten, p) == SR_OK)
		p->pending++;
	if (res->status != SR_OK && res->status != SR_ENOTFOUND)
		left_to_janitor(e, res->message ? res->message : sr__strerror(res->status));
	if (p->closing && !e->orphan && !destroyed && res->status == SR_OK && p->ttl_s) {
		/* Parked at a stop: the next start destroys it when its TTL
		 * ends. */
		record(p, e, REC_PARKED);
		e->keep_record = 1;
	}
	if (e->orphan || destroyed || res->status != SR_OK || p->closing || !p->ttl_s) {
		torn_down(p, e);
		return;
	}
	/* Parked stopped: destroyed after the TTL unless a turn takes it. */
	e->state = E_STOPPED;
	e->ttl_at = now_ms() + (int64_t)p->ttl_s * 1000;
	p->stopped++;
	record(p, e, REC_HOLD);
	uv_timer_start(&e->timer, on_timer, (uint64_t)p->ttl_s * 1000, 0);
}

static void on_parked(void *ud, const sr_result *res)
{
	on_answered(ud, res, 0);
}

static void on_destroyed(void *ud, const sr_result *res)
{
	on_answered(ud, res, 1);
}

/* A provider call for e (park stopped or destroy), for why. */
static void tear_down(sr__pool *p, entry *e, enum sr__teardown why)
{
	enum sr__disposition d = sr__teardown_disposition(why, 0);
	int rc;

	count_out(p, e);
	uv_timer_stop(&e->timer);
	stop_agent(p, e);
	sr__log(SR_LOG_INFO, "pool", "session %s: sandbox %s %s (%s)", e->session, e->sandbox,
		d == SR__DESTROY ? "destroyed" : "parked stopped", sr__teardown_name(why));
	if (d == SR__DESTROY)
		rc = sr__provider_destroy(e->provider, sr__next_req(), e->sandbox, on_destroyed, e);
	else
		rc = sr__provider_park(e->provider, sr__next_req(), e->sandbox, SR_PARK_STOPPED,
				       on_parked, e);
	if (rc == SR_OK) {
		p->pending++;
		return;
	}
	left_to_janitor(e, sr__strerror(rc));
	torn_down(p, e);
}

static void on_timer(uv_timer_t *t)
{
	entry *e = t->data;

	tear_down(e->pool, e, e->state == E_RUNNING ? SR__TD_EXPIRED : SR__TD_TTL);
}

static entry *add(sr__pool *p, sr__plugin *provider, const char *session, const char *sandbox,
		  const char *acquired, int network, int state, int64_t ttl_at)
{
	entry *e = calloc(1, sizeof(*e));

	if (!e || strlen(session) >= sizeof(e->session) || !(e->sandbox = strdup(sandbox)) ||
	    (acquired && !(e->acquired = strdup(acquired)))) {
		if (e)
			free(e->sandbox);
		free(e);
		return NULL;
	}
	e->pool = p;
	e->provider = provider;
	snprintf(e->session, sizeof(e->session), "%s", session);
	e->network = network;
	e->state = state;
	if (state == E_STOPPED)
		e->ttl_at = ttl_at ? ttl_at : now_ms() + (int64_t)p->ttl_s * 1000;
	uv_timer_init(p->ctx->loop, &e->timer);
	e->timer.data = e;
	e->next = p->list;
	p->list = e;
	if (state == E_RUNNING)
		p->running++;
	else
		p->stopped++;
	record(p, e, REC_HOLD);
	return e;
}

/* Whatever the pool held for session goes out of it; a sandbox other than
 * keep (one the session no longer names) is parked stopped. */
static void release_session(sr__pool *p, const char *session, const char *keep)
{
	entry *e = find(p, session);

	if (!e)
		return;
	if (e->state == E_RUNNING && (!keep || strcmp(e->sandbox, keep) != 0)) {
		unlink_entry(p, e);
		e->orphan = 1;
		tear_down(p, e, SR__TD_EXPIRED);
	} else {
		let_go(p, e);
	}
}

static reservation *reservation_of(sr__pool *p, sr__plugin *provider, int make)
{
	reservation *r;

	for (r = p->reservations; r; r = r->next)
		if (r->provider == provider)
			return r;
	if (!make || !(r = calloc(1, sizeof(*r))))
		return NULL;
	r->provider = provider;
	r->next = p->reservations;
	p->reservations = r;
	return r;
}

/* provider's places in use: kept running, and reserved. */
static unsigned places(sr__pool *p, sr__plugin *provider)
{
	reservation *r = reservation_of(p, provider, 0);
	unsigned n = r ? r->n : 0;

	for (const entry *e = p->list; e; e = e->next)
		if (e->provider == provider && e->state == E_RUNNING)
			n++;
	return n;
}

static const char *provider_name(const sr__plugin *provider)
{
	return provider && provider->desc && provider->desc->name ? provider->desc->name : "?";
}

int sr__pool_reserve(sr__pool *p, sr__plugin *provider)
{
	reservation *r;

	if (p->closing || !p->live_s)
		return 0;
	if (places(p, provider) >= p->max_warm) {
		sr__log(SR_LOG_INFO, "pool", "the warm pool is full for provider %s (max_warm %u): "
			"a sandbox is parked stopped", provider_name(provider), p->max_warm);
		return 0;
	}
	if (!(r = reservation_of(p, provider, 1)))
		return 0;
	r->n++;
	p->reserved++;
	return 1;
}

void sr__pool_unreserve(sr__pool *p, sr__plugin *provider)
{
	reservation *r = reservation_of(p, provider, 0);

	if (r && r->n) {
		r->n--;
		p->reserved--;
	}
}

int sr__pool_put(sr__pool *p, sr__plugin *provider, const char *session, const char *sandbox,
		 const char *acquired, int network, struct sr__agent *agent)
{
	entry *e;

	sr__pool_unreserve(p, provider);
	if (p->closing || !acquired)
		return 0;
	release_session(p, session, NULL);
	if (!(e = add(p, provider, session, sandbox, acquired, network, E_RUNNING, 0)))
		return 0;
	if ((e->agent = agent))
		sr__agent_watch(agent, on_agent_gone, e);
	uv_timer_start(&e->timer, on_timer, (uint64_t)p->live_s * 1000, 0);
	sr__log(SR_LOG_INFO, "pool", "session %s: sandbox %s%s kept running for %u s (%u of %s's "
		"%u places)", session, sandbox, agent ? " and its agent" : "", p->live_s,
		places(p, provider), provider_name(provider), p->max_warm);
	return 1;
}

void sr__pool_parked(sr__pool *p, sr__plugin *provider, const char *session, const char *sandbox)
{
	entry *e;

	if (p->closing)
		return;
	release_session(p, session, NULL);
	if (!p->ttl_s || !(e = add(p, provider, session, sandbox, NULL, 0, E_STOPPED, 0)))
		return;
	uv_timer_start(&e->timer, on_timer, (uint64_t)p->ttl_s * 1000, 0);
}

int sr__pool_settle(sr__pool *p, const char *session, void (*done)(void *ud), void *ud)
{
	entry *e = find(p, session);

	if (!e || e->state != E_BUSY || e->settled || !done)
		return 0;
	e->settled = done;
	e->settled_ud = ud;
	return 1;
}

char *sr__pool_take(sr__pool *p, const char *session, const char *sandbox, int network,
		    struct sr__agent **agent)
{
	entry *e = find(p, session);
	char *acquired;

	*agent = NULL;
	if (!e)
		return NULL;
	if (e->state != E_RUNNING || strcmp(e->sandbox, sandbox) != 0 || e->network != network) {
		/* Stopped, busy, another policy: the turn reconnects it
		 * through the provider (which starts it, converges its
		 * network). */
		release_session(p, session, sandbox);
		return NULL;
	}
	acquired = e->acquired;
	e->acquired = NULL;
	if ((*agent = e->agent))
		sr__agent_watch(e->agent, NULL, NULL);
	e->agent = NULL;
	drop_entry(p, e);
	return acquired;
}

int sr__pool_drop(sr__pool *p, const char *session)
{
	entry *e = find(p, session);

	if (!e)
		return 0;
	let_go(p, e);
	return 1;
}

/* Whether this service reaches the sandbox a dead service kept warm for
 * session (its pointer rec): not one of another runner's local sandboxes,
 * which that runner adopts when it is back. */
static int reaches(void *ud, const json_t *rec, const char *name)
{
	sr__pool *p = ud;
	sr__plugin *provider = name ? sr__registry_find(p->ctx->reg, SR_PLUGIN_PROVIDER, name) :
				      NULL;
	char msg[1024];
	int retryable;

	if (!rec || !provider || sr__plugin_start(p->ctx, provider) != SR_OK)
		return 1; /* decided below, as before */
	if (!sr__session_elsewhere_here(p->ctx, provider, rec, msg, sizeof(msg), &retryable))
		return 1;
	sr__log(SR_LOG_INFO, "pool", "a stopped service kept a sandbox warm that this one does "
		"not reach, left for its runner: %s", msg);
	return 0;
}

int sr__pool_record(sr__pool *p, const char *state)
{
	sr__db *db = sr__db_open(state);
	json_t *rows, *row;
	size_t i;
	unsigned parked = 0, kept = 0;

	if (!db || !(p->q = sr__dbq_new(p->ctx->loop, state))) {
		sr__db_close(db);
		return SR_EIO;
	}
	sr__db_owner(p->owner, sizeof(p->owner));
	rows = sr__warm_adopt(db, p->owner, reaches, p);
	sr__db_close(db);
	if (!rows)
		return SR_EIO;
	json_array_foreach(rows, i, row) {
		const char *session = json_string_value(json_object_get(row, "session"));
		const char *sandbox = json_string_value(json_object_get(row, "sandbox"));
		const char *name = json_string_value(json_object_get(row, "provider"));
		int running = json_is_true(json_object_get(row, "running"));
		int64_t left = json_integer_value(json_object_get(row, "ttl_at")) - now_ms();
		sr__plugin *provider = sr__registry_find(p->ctx->reg, SR_PLUGIN_PROVIDER, name);
		entry *e;
		if (!provider || sr__plugin_start(p->ctx, provider) != SR_OK) {
			sr__log(SR_LOG_WARN, "pool", "session %s: sandbox %s was kept warm by a "
				"service that stopped, on provider %s, which is not loaded here "
				"(`sandrun janitor` finds it)", session, sandbox, name);
			continue;
		}
		if (!running && !p->ttl_s) {
			/* No TTL here: parked stopped is where it stays. */
			push_record(p, session, sandbox, name, REC_FORGET, 0, 0);
			continue;
		}
		/* Running: parked stopped at once (its agent died with the
		 * service); stopped: destroyed when its TTL ends. */
		if (!(e = add(p, provider, session, sandbox, NULL, 0, running ? E_RUNNING : E_STOPPED,
			      running ? 0 : now_ms() + (left > 0 ? left : 0))))
			continue;
		uv_timer_start(&e->timer, on_timer, running || left < 0 ? 0 : (uint64_t)left, 0);
		if (running)
			parked++;
		else
			kept++;
	}
	if (parked || kept)
		sr__log(SR_LOG_INFO, "pool", "found %u sandboxes a stopped service kept running "
			"(parking them stopped) and %u parked with a TTL", parked, kept);
	json_decref(rows);
	return SR_OK;
}

void sr__pool_foreach(const sr__pool *p, void (*fn)(void *ud, const char *session), void *ud)
{
	for (const entry *e = p->list; e; e = e->next)
		fn(ud, e->session);
}

void sr__pool_counts(const sr__pool *p, unsigned *running, unsigned *stopped)
{
	*running = p->running + p->reserved;
	*stopped = p->stopped;
}

void sr__pool_close(sr__pool *p, void (*done)(void *ud), void *ud)
{
	entry *e, *next;

	p->closing = 1;
	p->done = done;
	p->done_ud = ud;
	for (e = p->list; e; e = next) {
		next = e->next;
		if (e->state == E_RUNNING) {
			tear_down(p, e, SR__TD_SHUTDOWN);
		} else if (e->state == E_STOPPED) {
			e->keep_record = 1; /* its TTL goes on at the next start */
			drop_entry(p, e);
		}
	}
	check_closed(p);
}

static void on_pool_closed(uv_handle_t *h)
{
	sr__pool *p = h->data;

	sr__dbq_close(p->q);
	while (p->reservations) {
		reservation *r = p->reservations;
		p->reservations = r->next;
		free(r);
	}
	free(p);
}

void sr__pool_free(sr__pool *p)
{
	if (!p)
		return;
	uv_close((uv_handle_t *)&p->later, on_pool_closed);
}
