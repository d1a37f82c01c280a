/* The warm pool and the teardown table (core/run/pool.c), with the test
 * provider 'rude' (tests/plugins/rude_plugin.c: its park answers OK, its
 * destroy fails at once). */
#include <string.h>

#include "harness.h"
#include "core/plugins/plugin.h"
#include "core/run/pool.h"

static char *dir;
static sr__ctx ctx;
static sr__plugin *rude;

static void setup(void)
{
	dir = t_tmpdir();
	t_ctx_with_test_plugins(&ctx, dir);
	rude = sr__registry_find(ctx.reg, SR_PLUGIN_PROVIDER, "rude");
	cr_assert_not_null(rude, "test plugin 'rude' not loaded");
	cr_assert_eq(sr__plugin_start(&ctx, rude), SR_OK);
}

static void teardown(void)
{
	for (int i = 0; i < 100 && uv_run(ctx.loop, UV_RUN_NOWAIT); i++)
		;
	sr__ctx_cleanup(&ctx);
}

TestSuite(pool, .init = setup, .fini = teardown, .timeout = 30);

static void counts(sr__pool *p, unsigned running, unsigned stopped)
{
	unsigned r, s;

	sr__pool_counts(p, &r, &s);
	cr_assert_eq(r, running, "running: %u, wanted %u", r, running);
	cr_assert_eq(s, stopped, "stopped: %u, wanted %u", s, stopped);
}

/* It may come in the loop's timers phase: uv_run(UV_RUN_ONCE) would then
 * block in poll until the next timer. */
/* sr__pool_put with a place reserved first, as a run does; 0 when none
 * is free (or put fails). */
static int put(sr__pool *p, const char *session, const char *sandbox, const char *acquired)
{
	if (!sr__pool_reserve(p, rude))
		return 0;
	return sr__pool_put(p, rude, session, sandbox, acquired, SR_NET_OPEN, NULL);
}

static char *take(sr__pool *p, const char *session, const char *sandbox, int network)
{
	struct sr__agent *agent = (struct sr__agent *)&agent;
	char *acquired = sr__pool_take(p, session, sandbox, network, &agent);

	cr_assert_null(agent, "no agent was kept");
	return acquired;
}

static void closed(void *ud)
{
	(*(int *)ud)++;
	uv_stop(ctx.loop);
}

static void tick(uv_timer_t *t)
{
	(void)t;
}

/* Close the pool and run the loop until it says so (bounded). */
static void close_pool(sr__pool *p)
{
	int done = 0;
	uv_timer_t guard;

	uv_timer_init(ctx.loop, &guard);
	uv_timer_start(&guard, t_guard_fired, 10000, 0);
	sr__pool_close(p, closed, &done);
	cr_assert_eq(done, 0, "the close is reported later, not from inside the call");
	while (!done && uv_run(ctx.loop, UV_RUN_ONCE))
		;
	uv_timer_stop(&guard);
	uv_close((uv_handle_t *)&guard, NULL);
	cr_assert_eq(done, 1);
	sr__pool_free(p);
	uv_run(ctx.loop, UV_RUN_NOWAIT);
	cr_assert_eq(done, 1, "reported once");
}

/* Run the loop until the log says what (bounded). */
static void until_logged(const char *what)
{
	uv_timer_t guard, ticks;

	uv_timer_init(ctx.loop, &guard);
	uv_timer_start(&guard, t_guard_fired, 10000, 0);
	/* A line logged in the timers phase: poll wakes up soon anyway. */
	uv_timer_init(ctx.loop, &ticks);
	uv_timer_start(&ticks, tick, 5, 5);
	while (!strstr(t_log_text(), what))
		uv_run(ctx.loop, UV_RUN_ONCE);
	uv_timer_stop(&guard);
	uv_close((uv_handle_t *)&guard, NULL);
	uv_close((uv_handle_t *)&ticks, NULL);
	uv_run(ctx.loop, UV_RUN_NOWAIT); /* the guard is on this stack */
}

Test(pool, the_teardown_table)
{
	cr_assert_eq(sr__teardown_disposition(SR__TD_COMPLETED, 1), SR__KEEP_RUNNING);
	cr_assert_eq(sr__teardown_disposition(SR__TD_COMPLETED, 0), SR__KEEP_RUNNING);
	cr_assert_eq(sr__teardown_disposition(SR__TD_CAPACITY, 1), SR__PARK_STOPPED);
	/* A failed first turn leaves nothing; a failed later turn keeps the
	 * session's work. */
	cr_assert_eq(sr__teardown_disposition(SR__TD_FAILED, 1), SR__DESTROY);
	cr_assert_eq(sr__teardown_disposition(SR__TD_FAILED, 0), SR__PARK_STOPPED);
	cr_assert_eq(sr__teardown_disposition(SR__TD_CANCELLED, 1), SR__PARK_STOPPED);
	cr_assert_eq(sr__teardown_disposition(SR__TD_SHUTDOWN, 1), SR__DESTROY);
	cr_assert_eq(sr__teardown_disposition(SR__TD_SHUTDOWN, 0), SR__PARK_STOPPED);
	cr_assert_eq(sr__teardown_disposition(SR__TD_EXPIRED, 0), SR__PARK_STOPPED);
	cr_assert_eq(sr__teardown_disposition(SR__TD_TTL, 0), SR__DESTROY);
	cr_assert_eq(sr__teardown_disposition(SR__TD_CREDENTIALS, 0), SR__DESTROY);
	cr_assert_eq(sr__teardown_disposition(SR__TD_DELETED, 0), SR__DESTROY);
	/* A mount left up is never kept running; the work is kept. */
	cr_assert_eq(sr__teardown_disposition(SR__TD_UNMOUNT_FAILED, 1), SR__PARK_STOPPED);
	cr_assert_eq(sr__teardown_disposition(SR__TD_UNMOUNT_FAILED, 0), SR__PARK_STOPPED);
	cr_assert_str_eq(sr__teardown_name(SR__TD_UNMOUNT_FAILED), "unmount_failed");
	for (int i = 0; i < SR__TD_COUNT; i++)
		cr_assert_neq(strcmp(sr__teardown_name(i), "unknown"), 0, "reason %d unnamed", i);
	cr_assert_str_eq(sr__teardown_name(SR__TD_CREDENTIALS), "credential_change");
	cr_assert_str_eq(sr__teardown_name(SR__TD_COUNT), "unknown");
	cr_assert_eq(sr__teardown_disposition(SR__TD_COUNT, 1), SR__PARK_STOPPED);
}

Test(pool, a_warm_sandbox_is_taken_once_with_the_same_answer)
{
	sr__pool *p = sr__pool_new(&ctx, 60, 2, 0);
	char *a;

	cr_assert_eq(put(p, "ses-a", "sb-a", "{\"id\":\"sb-a\"}"), 1);
	counts(p, 1, 0);
	cr_assert_null(take(p, "ses-b", "sb-a", SR_NET_OPEN), "another session's");
	a = take(p, "ses-a", "sb-a", SR_NET_OPEN);
	cr_assert_str_eq(a, "{\"id\":\"sb-a\"}");
	free(a);
	counts(p, 0, 0);
	cr_assert_null(take(p, "ses-a", "sb-a", SR_NET_OPEN), "taken once");
	close_pool(p);
}

Test(pool, capacity_is_strict)
{
	sr__pool *p = sr__pool_new(&ctx, 60, 1, 0);

	cr_assert_eq(put(p, "ses-a", "sb-a", "{}"), 1);
	cr_assert_eq(put(p, "ses-b", "sb-b", "{}"), 0);
	cr_assert(strstr(t_log_text(), "the warm pool is full for provider rude (max_warm 1)"), "%s",
		  t_log_text());
	counts(p, 1, 0);
	/* A place freed is a place again. */
	cr_assert_eq(sr__pool_drop(p, "ses-a"), 1);
	cr_assert_eq(sr__pool_drop(p, "ses-a"), 0);
	cr_assert_eq(put(p, "ses-b", "sb-b", "{}"), 1);
	/* Nothing is kept running with no live window, or without an answer
	 * to give back. */
	sr__pool_configure(p, 0, 1, 0);
	cr_assert_eq(put(p, "ses-c", "sb-c", "{}"), 0);
	sr__pool_configure(p, 60, 5, 0);
	cr_assert_eq(put(p, "ses-c", "sb-c", NULL), 0);
	counts(p, 1, 0);
	/* A reserved place counts (a turn ending with its agent kept), until
	 * it is used or given back. */
	sr__pool_configure(p, 60, 2, 0);
	cr_assert_eq(sr__pool_reserve(p, rude), 1);
	counts(p, 2, 0);
	cr_assert_eq(sr__pool_reserve(p, rude), 0);
	sr__pool_unreserve(p, rude);
	counts(p, 1, 0);
	close_pool(p);
}

Test(pool, max_warm_is_per_provider)
{
	sr__pool *p = sr__pool_new(&ctx, 60, 1, 0);
	sr__plugin other = *rude; /* another provider, as the pool tells them apart */

	cr_assert_eq(put(p, "ses-a", "sb-a", "{}"), 1);
	cr_assert_eq(put(p, "ses-b", "sb-b", "{}"), 0, "rude's one place is taken");
	cr_assert_eq(sr__pool_reserve(p, &other), 1, "the other provider has its own");
	cr_assert_eq(sr__pool_put(p, &other, "ses-c", "sb-c", "{}", SR_NET_OPEN, NULL), 1);
	cr_assert_eq(sr__pool_reserve(p, &other), 0);
	counts(p, 2, 0);
	/* Giving back a place of a provider that has none reserved is nothing. */
	sr__pool_unreserve(p, &other);
	counts(p, 2, 0);
	cr_assert_eq(sr__pool_drop(p, "ses-c"), 1);
	cr_assert_eq(sr__pool_drop(p, "ses-a"), 1);
	counts(p, 0, 0);
	close_pool(p);
}

Test(pool, another_policy_or_sandbox_is_not_taken_warm)
{
	sr__pool *p = sr__pool_new(&ctx, 60, 4, 0);

	cr_assert_eq(put(p, "ses-a", "sb-a", "{}"), 1);
	/* The turn wants no network: the provider's reconnect converges it. */
	cr_assert_null(take(p, "ses-a", "sb-a", SR_NET_OFF));
	counts(p, 0, 0);
	cr_assert_eq(put(p, "ses-b", "sb-b", "{}"), 1);
	/* The session names another sandbox: the warm one is parked stopped. */
	cr_assert_null(take(p, "ses-b", "sb-other", SR_NET_OPEN));
	counts(p, 0, 0);
	until_logged("session ses-b: sandbox sb-b parked stopped");
	close_pool(p);
}

Test(pool, the_live_window_ends_parked_stopped_then_the_ttl_destroys)
{
	sr__pool *p = sr__pool_new(&ctx, 1, 4, 1);

	cr_assert_eq(put(p, "ses-a", "sb-a", "{}"), 1);
	until_logged("session ses-a: sandbox sb-a parked stopped (expired)");
	/* rude's park answers later: then it waits for its TTL. */
	for (int i = 0; i < 500; i++) {
		unsigned r, s;
		sr__pool_counts(p, &r, &s);
		if (s == 1)
			break;
		uv_run(ctx.loop, UV_RUN_NOWAIT);
		uv_sleep(1);
	}
	counts(p, 0, 1);
	until_logged("session ses-a: sandbox sb-a destroyed (ttl)");
	/* rude's destroy fails: it is left to the janitor, and said so. */
	cr_assert(strstr(t_log_text(), "sandrun janitor"), "%s", t_log_text());
	counts(p, 0, 0);
	close_pool(p);
}

static void settled(void *ud)
{
	(*(int *)ud)++;
}

/* A turn that comes while the live window's park is on its way waits for
 * its answer before it reconnects the sandbox (not both at once). */
Test(pool, a_turn_waits_for_a_park_on_its_way)
{
	sr__plugin *lazy = sr__registry_find(ctx.reg, SR_PLUGIN_PROVIDER, "lazy");
	sr__pool *p = sr__pool_new(&ctx, 1, 4, 60);
	int n = 0;

	cr_assert_not_null(lazy, "test plugin 'lazy' not loaded");
	cr_assert_eq(sr__plugin_start(&ctx, lazy), SR_OK);
	cr_assert_eq(sr__pool_settle(p, "ses-a", settled, &n), 0, "nothing to wait for");
	cr_assert(sr__pool_reserve(p, lazy));
	cr_assert(sr__pool_put(p, lazy, "ses-a", "sb-a", "{}", SR_NET_OPEN, NULL));
	cr_assert_eq(sr__pool_settle(p, "ses-a", settled, &n), 0, "running: taken at once");
	until_logged("session ses-a: sandbox sb-a parked stopped (expired)");
	/* lazy's park answers 200 ms later. */
	cr_assert_eq(sr__pool_settle(p, "ses-a", settled, &n), 1);
	cr_assert_eq(sr__pool_settle(p, "ses-a", settled, &n), 0, "one waiter");
	cr_assert_eq(n, 0);
	for (int i = 0; i < 500 && !n; i++) {
		uv_run(ctx.loop, UV_RUN_NOWAIT);
		uv_sleep(1);
	}
	cr_assert_eq(n, 1, "the waiter is told once the park answered");
	counts(p, 0, 1);
	cr_assert_eq(sr__pool_settle(p, "ses-a", settled, &n), 0, "parked: nothing to wait for");
	cr_assert_null(take(p, "ses-a", "sb-a", SR_NET_OPEN), "stopped: reconnected by the turn");
	close_pool(p);
	cr_assert_eq(n, 1);
}

Test(pool, a_turn_takes_a_stopped_sandbox_out_of_its_ttl)
{
	sr__pool *p = sr__pool_new(&ctx, 60, 4, 3600);

	sr__pool_parked(p, rude, "ses-a", "sb-a");
	counts(p, 0, 1);
	/* Stopped: the turn reconnects it through the provider. */
	cr_assert_null(take(p, "ses-a", "sb-a", SR_NET_OPEN));
	counts(p, 0, 0);
	sr__pool_configure(p, 60, 4, 0);
	sr__pool_parked(p, rude, "ses-b", "sb-b");
	counts(p, 0, 0); /* no TTL: nothing to wait for */
	close_pool(p);
}

Test(pool, closing_parks_the_warm_sandboxes_stopped)
{
	sr__pool *p = sr__pool_new(&ctx, 60, 4, 3600);

	cr_assert_eq(put(p, "ses-a", "sb-a", "{}"), 1);
	cr_assert_eq(put(p, "ses-b", "sb-b", "{}"), 1);
	sr__pool_parked(p, rude, "ses-c", "sb-c");
	counts(p, 2, 1);
	close_pool(p);
	cr_assert(strstr(t_log_text(), "session ses-a: sandbox sb-a parked stopped (shutdown)"),
		  "%s", t_log_text());
	cr_assert(strstr(t_log_text(), "session ses-b: sandbox sb-b parked stopped (shutdown)"),
		  "%s", t_log_text());
	/* A stopped one stays as it is, for the janitor or a later turn. */
	cr_assert_null(strstr(t_log_text(), "sb-c"), "%s", t_log_text());
}

Test(pool, an_empty_pool_closes_later)
{
	close_pool(sr__pool_new(&ctx, 60, 4, 0));
}
