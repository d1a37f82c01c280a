/* The completion rule (include/sandrun/plugin.h), as the core keeps it
 * for its callers: core/plugins/complete.c, the checked provider and plugin calls,
 * with plugins that break the rule (tests/plugins/rude_plugin.c) or leave
 * operations out (null_ops, short_desc). */
#include "harness.h"
#include "core/plugins/complete.h"
#include "core/plugins/host.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"

static char *dir;
static sr__ctx ctx;

typedef struct seen {
	int calls;
	int status;
	char message[256];
	char json[256];
} seen;

static void record(void *ud, const sr_result *r)
{
	seen *s = ud;

	s->calls++;
	s->status = r->status;
	snprintf(s->message, sizeof(s->message), "%s", r->message ? r->message : "");
	snprintf(s->json, sizeof(s->json), "%s", r->json ? r->json : "");
}

/* Run the loop until nothing is due (bounded). */
static void drain(void)
{
	for (int i = 0; i < 100 && uv_run(ctx.loop, UV_RUN_NOWAIT); i++)
		;
}

static sr__plugin *started(int kind, const char *name)
{
	sr__plugin *p = sr__registry_find(ctx.reg, kind, name);

	cr_assert_not_null(p, "test plugin '%s' not loaded", name);
	cr_assert_eq(sr__plugin_start(&ctx, p), SR_OK);
	return p;
}

static void setup(void)
{
	dir = t_tmpdir();
	t_ctx_with_test_plugins(&ctx, dir);
}

static void teardown(void)
{
	drain();
	sr__ctx_cleanup(&ctx);
}

TestSuite(complete, .init = setup, .fini = teardown, .timeout = 20);

Test(complete, later_delivers_a_copy_on_the_next_iteration)
{
	char msg[] = "gone soon", json[] = "{\"a\":1}";
	sr_result r = { sizeof(r), SR_EIO, msg, json, "xyz", 3 };
	seen s = { 0 };

	cr_assert_eq(sr__complete_later(ctx.loop, record, &s, &r), SR_OK);
	cr_assert_eq(s.calls, 0, "delivered inside the call");
	strcpy(msg, "XXXXXXXX");
	strcpy(json, "XXXXXX");
	drain();
	cr_assert_eq(s.calls, 1);
	cr_assert_eq(s.status, SR_EIO);
	cr_assert_str_eq(s.message, "gone soon");
	cr_assert_str_eq(s.json, "{\"a\":1}");
}

Test(complete, a_callback_from_inside_the_call_arrives_once_later)
{
	sr__plugin *p = started(SR_PLUGIN_PROVIDER, "rude");
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0, NULL, NULL, 0 };
	seen s = { 0 };

	cr_assert_eq(sr__provider_create(p, 1, &spec, record, &s), SR_OK);
	cr_assert_eq(s.calls, 0, "the caller saw the callback inside its own call");
	drain();
	cr_assert_eq(s.calls, 1);
	cr_assert_eq(s.status, SR_OK);
	cr_assert_str_eq(s.json, "{\"id\":\"rude-1\",\"workspace\":\"/\"}");
}

Test(complete, an_error_return_means_no_callback_even_if_the_plugin_called)
{
	sr__plugin *p = started(SR_PLUGIN_PROVIDER, "rude");
	seen s = { 0 };

	cr_assert_eq(sr__provider_destroy(p, 1, "rude-1", record, &s), SR_EIO);
	drain();
	cr_assert_eq(s.calls, 0, "a callback after an error return");
	cr_assert(strstr(t_log_text(), "operation 'destroy' returned an error and also called back"),
		  "%s", t_log_text());
}

Test(complete, a_second_callback_is_dropped)
{
	sr__plugin *p = started(SR_PLUGIN_PROVIDER, "rude");
	seen s = { 0 };

	cr_assert_eq(sr__provider_park(p, 1, "rude-1", SR_PARK_RUNNING, record, &s), SR_OK);
	drain();
	cr_assert_eq(s.calls, 1);
	cr_assert_str_eq(s.json, "{\"n\":1}");
	cr_assert(strstr(t_log_text(), "operation 'park' called back twice"), "%s", t_log_text());
}

Test(complete, an_honest_error_return_passes_through)
{
	sr__plugin *p = started(SR_PLUGIN_PROVIDER, "rude");
	seen s = { 0 };

	cr_assert_eq(sr__provider_reconnect(p, 1, "rude-1", NULL, record, &s), SR_EINVAL);
	drain();
	cr_assert_eq(s.calls, 0);
}

Test(complete, unsupported_operations_answer_later_naming_plugin_and_operation)
{
	sr__plugin *p = started(SR_PLUGIN_PROVIDER, "hollow");
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0, NULL, NULL, 0 };
	seen s = { 0 };

	/* create is inside the declared table but NULL. */
	cr_assert_eq(sr__provider_create(p, 1, &spec, record, &s), SR_OK);
	cr_assert_eq(s.calls, 0);
	drain();
	cr_assert_eq(s.calls, 1);
	cr_assert_eq(s.status, SR_EUNSUPPORTED);
	cr_assert_str_eq(s.message, "provider 'hollow': operation 'create' is not supported");
	/* destroy and status lie beyond the declared table size. */
	memset(&s, 0, sizeof(s));
	cr_assert_eq(sr__provider_destroy(p, 2, "x", record, &s), SR_OK);
	cr_assert_eq(sr__provider_status(p, 3, "x", record, &s), SR_OK);
	drain();
	cr_assert_eq(s.calls, 2);
	cr_assert_str_eq(s.message, "provider 'hollow': operation 'status' is not supported");
}

Test(complete, no_descriptor_slot_is_read_past_its_declared_size)
{
	sr__plugin *p = started(SR_PLUGIN_TUNNEL, "short");
	seen s = { 0 };

	/* Its doctor lies past the size it declared: not there for the core. */
	cr_assert_eq(sr__plugin_doctor(p, record, &s), SR_EUNSUPPORTED);
	drain();
	cr_assert_eq(s.calls, 0);
}

Test(complete, host_complete_delivers_later)
{
	sr__plugin *p = started(SR_PLUGIN_TUNNEL, "twin");
	const sr_host *h = &p->host->pub;
	sr_result r = { sizeof(r), SR_OK, NULL, "{}", NULL, 0 };
	seen s = { 0 };

	cr_assert_eq(h->complete(h, record, &s, &r), SR_OK);
	cr_assert_eq(s.calls, 0);
	drain();
	cr_assert_eq(s.calls, 1);
}

static json_t *last_event;

static void sink(void *ud, json_t *ev)
{
	(void)ud;
	json_decref(last_event);
	last_event = json_incref(ev);
}

Test(complete, plugin_events_carry_type_plugin_and_fields)
{
	sr__plugin *p = started(SR_PLUGIN_TUNNEL, "twin");
	const sr_host *h = &p->host->pub;
	sr__event_sink s = { sink, NULL, { NULL }, NULL };

	sr__ctx_add_sink(&ctx, &s);
	h->event(h, "tunnel.failed", "{\"reason\":\"agent exited\"}");
	cr_assert_not_null(last_event);
	cr_assert_str_eq(json_string_value(json_object_get(last_event, "type")), "tunnel.failed");
	cr_assert_str_eq(json_string_value(json_object_get(last_event, "plugin")), "tunnel.twin");
	cr_assert_str_eq(json_string_value(json_object_get(last_event, "reason")), "agent exited");
	json_decref(last_event);
	last_event = NULL;
	h->event(h, "cleanup_pending", "[not an object]");
	cr_assert_null(last_event, "a malformed event reached the run");
	cr_assert(strstr(t_log_text(), "event 'cleanup_pending' dropped"), "%s", t_log_text());
	sr__ctx_remove_sink(&ctx, &s);
}

static int events_a, events_b;

static void count_a(void *ud, json_t *ev)
{
	(void)ud;
	(void)ev;
	events_a++;
}

static void count_b(void *ud, json_t *ev)
{
	(void)ud;
	(void)ev;
	events_b++;
}

Test(complete, plugin_events_reach_only_the_runs_that_use_the_plugin)
{
	sr__plugin *twin = started(SR_PLUGIN_TUNNEL, "twin");
	sr__plugin *rude = started(SR_PLUGIN_PROVIDER, "rude");
	const sr_host *ht = &twin->host->pub, *hr = &rude->host->pub;
	sr__event_sink a = { count_a, NULL, { twin }, NULL };
	sr__event_sink b = { count_b, NULL, { rude }, NULL };

	sr__ctx_add_sink(&ctx, &a);
	sr__ctx_add_sink(&ctx, &b);
	ht->event(ht, "tunnel.failed", NULL);
	cr_assert_eq(events_a, 1);
	cr_assert_eq(events_b, 0, "a run got the event of a plugin it does not use");
	hr->event(hr, "sandbox.progress", "{}");
	cr_assert_eq(events_a, 1);
	cr_assert_eq(events_b, 1);
	sr__ctx_remove_sink(&ctx, &a);
	ht->event(ht, "tunnel.failed", NULL);
	cr_assert_eq(events_a, 1, "a removed sink still got events");
	cr_assert(strstr(t_log_text(), "no run to take it"), "%s", t_log_text());
	sr__ctx_remove_sink(&ctx, &b);
}

Test(complete, checked_calls_are_counted_by_operation_with_their_failures)
{
	sr__plugin *p = started(SR_PLUGIN_PROVIDER, "rude");
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0, NULL, NULL, 0 };
	seen s = { 0 };
	const sr__op_stat *create = NULL, *destroy = NULL;

	cr_assert_eq(sr__provider_create(p, 1, &spec, record, &s), SR_OK);
	cr_assert_eq(sr__provider_destroy(p, 2, "rude-1", record, &s), SR_EIO);
	drain();
	for (size_t i = 0; i < p->n_stats; i++) {
		if (strcmp(p->stats[i].op, "create") == 0)
			create = &p->stats[i];
		if (strcmp(p->stats[i].op, "destroy") == 0)
			destroy = &p->stats[i];
	}
	cr_assert_not_null(create);
	cr_assert_not_null(destroy);
	cr_assert_eq(create->calls, 1);
	cr_assert_eq(create->errors, 0);
	cr_assert_eq(destroy->calls, 1);
	cr_assert_eq(destroy->errors, 1, "an error return is a failed call, counted once");
}
