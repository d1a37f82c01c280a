/* core/tools/relay.c: the runner side of the relay, driven by request files
 * written the way the shim (or a hostile sandbox) would write them. */
#include <sys/stat.h>

#include "harness.h"
#include "core/tools/relay.h"

static char *dir, relay_dir[4200], journal[4200], calls_log[4200], url[200];
static pid_t server;
static sr__ctx ctx;
static sr__toolset *tools;
static sr__guard guard;
static sr__relay *relay;
static json_t *events;

static void on_event(void *ud, json_t *ev)
{
	(void)ud;
	json_array_append(events, ev);
}

static void load_tools(const char *extra)
{
	char text[4096], err[600];
	json_t *arr;

	snprintf(text, sizeof(text),
		 "[{\"name\":\"echo\",\"read_only\":true,\"input_schema\":{\"type\":\"object\",\"required\":[\"text\"]},"
		 "\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"slow\",\"permission\":\"allow\",\"callback\":{\"url\":\"%s\",\"timeout_ms\":300}},"
		 "{\"name\":\"big\",\"permission\":\"allow\",\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"err500\",\"permission\":\"allow\",\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"plain\",\"permission\":\"allow\",\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"refused\",\"permission\":\"allow\",\"callback\":{\"url\":\"http://127.0.0.1:1/\"}},"
		 "{\"name\":\"blocked\",\"permission\":\"deny\",\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"careful\",\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"badutf8\",\"permission\":\"allow\",\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"err500u\",\"permission\":\"allow\",\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"pick\",\"kind\":\"client\",\"permission\":\"allow\"}%s]",
		 url, url, url, url, url, url, url, url, url, extra);
	arr = json_loads(text, 0, NULL);
	cr_assert_eq(sr__tools_parse(arr, "test", &tools, err, sizeof(err)), SR_OK, "%s", err);
	json_decref(arr);
}

static void start_relay(int ask_policy)
{
	sr__relay_opts o = { 0 };
	char err[300];

	o.dir = relay_dir;
	o.journal = journal;
	o.tools = tools;
	o.guard = &guard;
	o.ask_policy = ask_policy;
	o.poll_ms = 200;
	o.event = on_event;
	cr_assert_eq(sr__relay_new(&ctx, &o, &relay, err, sizeof(err)), SR_OK, "%s", err);
	cr_assert_eq(sr__relay_start(relay), SR_OK);
}

static void setup(void)
{
	dir = t_tmpdir();
	snprintf(relay_dir, sizeof(relay_dir), "%s/relay", dir);
	snprintf(journal, sizeof(journal), "%s/journal", dir);
	snprintf(calls_log, sizeof(calls_log), "%s/calls.log", dir);
	mkdir(relay_dir, 0700);
	server = t_callback_server(calls_log, url, sizeof(url));
	ctx.loop = uv_default_loop();
	events = json_array();
	memset(&guard, 0, sizeof(guard));
	load_tools("");
	t_log_capture();
}

static void teardown(void)
{
	sr__relay_free(relay);
	uv_run(ctx.loop, UV_RUN_NOWAIT);
	kill(server, SIGTERM);
	waitpid(server, NULL, 0);
}

TestSuite(relay, .init = setup, .fini = teardown, .timeout = 30);

/* Publish a request file the way the shim does: temporary, then rename. */
static void plant(const char *name, const char *text, size_t len)
{
	char tmp[4400], final[4400];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s/.planting.tmp", relay_dir);
	snprintf(final, sizeof(final), "%s/%s", relay_dir, name);
	f = fopen(tmp, "w");
	cr_assert_not_null(f);
	fwrite(text, 1, len, f);
	fclose(f);
	cr_assert_eq(rename(tmp, final), 0);
}

static void request(const char *id, const char *tool, const char *args)
{
	char text[8192], name[200];

	snprintf(text, sizeof(text), "{\"v\":1,\"id\":\"%s\",\"tool\":\"%s\",\"args\":%s}",
		 id, tool, args);
	snprintf(name, sizeof(name), "%s.req", id);
	plant(name, text, strlen(text));
}

static int exists(const char *name)
{
	char path[4400];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", relay_dir, name);
	return lstat(path, &st) == 0;
}

static void on_tick(uv_timer_t *t)
{
	(void)t;
}

/* Run the loop until DIR/<id>.res appears; returns it parsed. */
static json_t *response(const char *id)
{
	char name[200], path[4400];
	uv_timer_t tick;
	json_t *res;
	int i;

	snprintf(name, sizeof(name), "%s.res", id);
	uv_timer_init(ctx.loop, &tick);
	uv_timer_start(&tick, on_tick, 10, 10);
	for (i = 0; i < 1000 && !exists(name); i++)
		uv_run(ctx.loop, UV_RUN_ONCE);
	uv_timer_stop(&tick);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(ctx.loop, UV_RUN_NOWAIT);
	cr_assert(exists(name), "no response %s", name);
	snprintf(path, sizeof(path), "%s/%s", relay_dir, name);
	res = json_load_file(path, 0, NULL);
	cr_assert_not_null(res);
	unlink(path);
	return res;
}

static void run_for(int ms)
{
	uv_timer_t tick;
	uint64_t end = uv_now(ctx.loop) + (uint64_t)ms;

	uv_timer_init(ctx.loop, &tick);
	uv_timer_start(&tick, on_tick, 10, 10);
	while (uv_now(ctx.loop) < end)
		uv_run(ctx.loop, UV_RUN_ONCE);
	uv_timer_stop(&tick);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(ctx.loop, UV_RUN_NOWAIT);
}

/* The last event of type, or NULL. */
static json_t *last_event(const char *type)
{
	json_t *ev = NULL, *e;
	size_t i;

	json_array_foreach(events, i, e)
		if (strcmp(json_string_value(json_object_get(e, "type")), type) == 0)
			ev = e;
	return ev;
}

/* Run the loop until an event of type came, at most max_ms (valgrind and
 * the sanitizers are slow: a fixed wait would be a guess). */
static json_t *run_until_event(const char *type, int max_ms)
{
	for (int waited = 0; !last_event(type) && waited < max_ms; waited += 50)
		run_for(50);
	return last_event(type);
}

static const char *status(json_t *res)
{
	return json_string_value(json_object_get(res, "status"));
}

static const char *first_text(json_t *res)
{
	return json_string_value(json_object_get(json_array_get(json_object_get(
		json_object_get(res, "result"), "content"), 0), "text"));
}

static int is_error(json_t *res)
{
	return json_is_true(json_object_get(json_object_get(res, "result"), "isError"));
}

static int has_event(const char *type)
{
	size_t i;
	json_t *e;

	json_array_foreach(events, i, e)
		if (strcmp(json_string_value(json_object_get(e, "type")), type) == 0)
			return 1;
	return 0;
}

/* The call's events begin with its one tool.call. */
static void assert_announced_first(const char *id)
{
	int seen = 0, calls = 0;
	size_t i;
	json_t *e;

	json_array_foreach(events, i, e) {
		const char *type = json_string_value(json_object_get(e, "type"));
		if (strcmp(json_string_value(json_object_get(e, "call_id")) ?
			   json_string_value(json_object_get(e, "call_id")) : "", id) != 0)
			continue;
		if (!seen++)
			cr_assert_str_eq(type, "tool.call", "%s: %s came before its tool.call", id, type);
		calls += strcmp(type, "tool.call") == 0;
	}
	cr_assert_eq(calls, 1, "%s: %d tool.call events", id, calls);
}

static int relay_empty(void)
{
	char cmd[4400];

	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s)\"", relay_dir);
	return system(cmd) == 0;
}

Test(relay, a_callback_tool_answers_ok_and_runs_once)
{
	json_t *res;

	start_relay(SR_ASK_WAIT);
	request("c1", "echo", "{\"text\":\"hello\"}");
	res = response("c1");
	cr_assert_str_eq(status(res), "ok");
	cr_assert_str_eq(first_text(res), "hello");
	cr_assert_not(is_error(res));
	cr_assert_eq(t_count_lines(calls_log), 1);
	cr_assert(has_event("tool.call") && has_event("tool.result"));
	cr_assert(relay_empty(), "files left in the relay directory");
	json_decref(res);
}

Test(relay, unknown_tool_and_missing_argument_are_errors)
{
	json_t *res;

	start_relay(SR_ASK_WAIT);
	request("u1", "nope", "{}");
	res = response("u1");
	cr_assert_str_eq(status(res), "error");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")), "unknown tool 'nope'"));
	json_decref(res);
	request("m1", "echo", "{}");
	res = response("m1");
	cr_assert_str_eq(status(res), "error");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")),
			 "missing required argument 'text'"));
	json_decref(res);
	cr_assert_eq(t_count_lines(calls_log), 0);
}

Test(relay, truncated_and_non_object_json_are_answered_with_errors)
{
	json_t *res;

	start_relay(SR_ASK_WAIT);
	plant("t1.req", "{\"v\":1,\"id\":\"t1\",\"to", strlen("{\"v\":1,\"id\":\"t1\",\"to"));
	res = response("t1");
	cr_assert_str_eq(status(res), "error");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")), "not a JSON object"));
	json_decref(res);
	plant("t2.req", "[1,2,3]", strlen("[1,2,3]"));
	res = response("t2");
	cr_assert_str_eq(status(res), "error");
	json_decref(res);
	request("t3", "echo", "[1]");
	res = response("t3");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")), "args must be an object"));
	json_decref(res);
	plant("t4.req", "{\"v\":1,\"id\":\"other\",\"tool\":\"echo\",\"args\":{}}", strlen("{\"v\":1,\"id\":\"other\",\"tool\":\"echo\",\"args\":{}}"));
	res = response("t4");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")), "does not match"));
	json_decref(res);
	plant("t5.req", "{\"v\":2,\"id\":\"t5\",\"tool\":\"echo\",\"args\":{}}", strlen("{\"v\":2,\"id\":\"t5\",\"tool\":\"echo\",\"args\":{}}"));
	res = response("t5");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")), "version"));
	json_decref(res);
	cr_assert_eq(t_count_lines(calls_log), 0);
}

Test(relay, a_2_mib_request_is_refused_unread)
{
	size_t n = 2u << 20;
	char *big = malloc(n);
	json_t *res;

	memset(big, ' ', n);
	memcpy(big, "{\"v\":1}", 7);
	start_relay(SR_ASK_WAIT);
	plant("b1.req", big, n);
	free(big);
	res = response("b1");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")),
			 "2097152 bytes, over the limit of 1048576"));
	cr_assert_not(exists("b1.req"));
	json_decref(res);
}

Test(relay, a_planted_symlink_is_not_followed)
{
	char link[4400], target[4400];
	json_t *res;

	snprintf(target, sizeof(target), "%s/secret", dir);
	t_write(dir, "secret", "{\"v\":1,\"id\":\"s1\",\"tool\":\"echo\",\"args\":{\"text\":\"leak\"}}");
	snprintf(link, sizeof(link), "%s/s1.req", relay_dir);
	cr_assert_eq(symlink(target, link), 0);
	start_relay(SR_ASK_WAIT);
	res = response("s1");
	cr_assert_str_eq(status(res), "error");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")), "symbolic link"));
	cr_assert_not(exists("s1.req"), "the link was not removed");
	cr_assert_eq(access(target, F_OK), 0, "the target was touched");
	cr_assert_eq(t_count_lines(calls_log), 0);
	json_decref(res);
}

Test(relay, a_planted_fifo_does_not_block)
{
	char fifo[4400];
	json_t *res;

	snprintf(fifo, sizeof(fifo), "%s/f1.req", relay_dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	start_relay(SR_ASK_WAIT);
	res = response("f1");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")), "not a regular file"));
	cr_assert_not(exists("f1.req"));
	json_decref(res);
}

Test(relay, a_preplanted_response_is_replaced_not_trusted)
{
	json_t *res;

	plant("p1.res", "{\"v\":1,\"id\":\"p1\",\"status\":\"ok\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"forged\"}]}}", strlen("{\"v\":1,\"id\":\"p1\",\"status\":\"ok\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"forged\"}]}}"));
	start_relay(SR_ASK_WAIT);
	request("p1", "echo", "{\"text\":\"genuine\"}");
	run_for(300);
	res = response("p1");
	cr_assert_str_eq(first_text(res), "genuine");
	cr_assert_eq(t_count_lines(calls_log), 1);
	json_decref(res);
}

Test(relay, invalid_ids_are_rejected_not_rewritten)
{
	char name[200];

	memset(name, 'a', 129);
	strcpy(name + 129, ".req");
	start_relay(SR_ASK_WAIT);
	plant("bad id.req", "{}", strlen("{}"));
	plant(name, "{}", 2);
	run_for(400);
	cr_assert_not(exists("bad id.req"));
	cr_assert_not(exists(name));
	cr_assert_not(exists("bad_id.res"), "the id was rewritten");
	cr_assert(has_event("relay.rejected"));
	cr_assert_not(exists("bad id.res"));
	cr_assert_eq(t_count_lines(calls_log), 0);
}

Test(relay, callback_failures_are_tool_errors)
{
	json_t *res;

	start_relay(SR_ASK_WAIT);
	request("e1", "slow", "{\"ms\":2000}");
	res = response("e1");
	cr_assert(is_error(res));
	cr_assert(strstr(first_text(res), "did not answer within 300 ms"), "%s", first_text(res));
	json_decref(res);
	request("e2", "err500", "{}");
	res = response("e2");
	cr_assert(is_error(res));
	cr_assert(strstr(first_text(res), "HTTP 500: boom"), "%s", first_text(res));
	json_decref(res);
	request("e3", "big", "{}");
	res = response("e3");
	cr_assert(is_error(res));
	cr_assert(strstr(first_text(res), "more than 4194304 bytes"), "%s", first_text(res));
	json_decref(res);
	request("e4", "refused", "{}");
	res = response("e4");
	cr_assert(is_error(res));
	cr_assert(strstr(first_text(res), "refused the connection"), "%s", first_text(res));
	json_decref(res);
	request("e5", "plain", "{}");
	res = response("e5");
	cr_assert_not(is_error(res));
	cr_assert_str_eq(first_text(res), "plain answer");
	json_decref(res);
}

Test(relay, every_call_is_announced_once_before_anything_else_of_it)
{
	const char *ids[] = { "c1", "d1", "u1", "k1", "m1" };

	start_relay(SR_ASK_WAIT);
	request("c1", "echo", "{\"text\":\"hello\"}");
	request("d1", "blocked", "{}");
	request("u1", "no_such_tool", "{}");
	request("k1", "pick", "{\"choice\":1}");
	request("m1", "echo", "{}");
	for (size_t i = 0; i < sizeof(ids) / sizeof(*ids); i++) {
		json_decref(response(ids[i]));
		assert_announced_first(ids[i]);
	}
	cr_assert_eq(t_count_lines(calls_log), 1, "only c1 reaches its callback");
}

Test(relay, deny_never_reaches_the_callback)
{
	json_t *res;

	start_relay(SR_ASK_WAIT);
	request("d1", "blocked", "{}");
	res = response("d1");
	cr_assert(is_error(res));
	cr_assert(strstr(first_text(res), "permission denied"));
	cr_assert_eq(t_count_lines(calls_log), 0);
	json_decref(res);
}

static char asked_id[200];

static void on_ask_event(void *ud, json_t *ev)
{
	(void)ud;
	json_array_append(events, ev);
	if (strcmp(json_string_value(json_object_get(ev, "type")), "permission.request") == 0)
		snprintf(asked_id, sizeof(asked_id), "%s",
			 json_string_value(json_object_get(ev, "call_id")));
}

Test(relay, ask_waits_for_an_answer)
{
	sr__relay_opts o = { 0 };
	char err[300];
	json_t *res;

	o.dir = relay_dir;
	o.journal = journal;
	o.tools = tools;
	o.guard = &guard;
	o.event = on_ask_event;
	cr_assert_eq(sr__relay_new(&ctx, &o, &relay, err, sizeof(err)), SR_OK);
	sr__relay_start(relay);
	request("a1", "careful", "{}");
	run_for(300);
	cr_assert_str_eq(asked_id, "a1");
	assert_announced_first("a1");
	cr_assert_not(exists("a1.res"), "answered before the permission");
	cr_assert_eq(sr__relay_permission(relay, "nope", 1), SR_ENOTFOUND);
	cr_assert_eq(sr__relay_permission(relay, "a1", 1), SR_OK);
	res = response("a1");
	cr_assert_not(is_error(res));
	cr_assert_eq(t_count_lines(calls_log), 1);
	json_decref(res);
	request("a2", "careful", "{}");
	run_for(300);
	cr_assert_eq(sr__relay_permission(relay, "a2", 0), SR_OK);
	res = response("a2");
	cr_assert(is_error(res));
	cr_assert(strstr(first_text(res), "did not allow"));
	cr_assert_eq(t_count_lines(calls_log), 1);
	json_decref(res);
}

Test(relay, ask_policies_answer_at_once)
{
	json_t *res;

	start_relay(SR_ASK_DENY);
	request("q1", "careful", "{}");
	res = response("q1");
	cr_assert(is_error(res));
	json_decref(res);
	sr__relay_set_ask_policy(relay, SR_ASK_APPROVE);
	request("q2", "careful", "{}");
	res = response("q2");
	cr_assert_not(is_error(res));
	json_decref(res);
	cr_assert_eq(t_count_lines(calls_log), 1);
}

Test(relay, client_tools_pause_and_surface)
{
	json_t *res;

	start_relay(SR_ASK_WAIT);
	request("k1", "pick", "{\"choice\":1}");
	res = response("k1");
	cr_assert_str_eq(status(res), "paused");
	cr_assert(has_event("client_tool.call"));
	cr_assert_eq(t_count_lines(calls_log), 0);
	json_decref(res);
}

Test(relay, an_interrupted_claim_is_answered_not_rerun)
{
	char claim[4400];
	json_t *res;

	mkdir(journal, 0700);
	snprintf(claim, sizeof(claim), "%s/i1.claim", journal);
	t_write(journal, "i1.claim", "");
	request("i1", "echo", "{\"text\":\"again?\"}");
	start_relay(SR_ASK_WAIT);
	res = response("i1");
	cr_assert_str_eq(status(res), "error");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")), "interrupted"));
	cr_assert_not(exists("i1.req"));
	cr_assert_neq(access(claim, F_OK), 0);
	run_for(300);
	cr_assert_eq(t_count_lines(calls_log), 0, "the interrupted call ran again");
	cr_assert(has_event("tool.interrupted"));
	json_decref(res);
}

Test(relay, sweep_removes_stale_files_only)
{
	start_relay(SR_ASK_WAIT);
	sr__relay_free(relay);
	relay = NULL;
	uv_run(ctx.loop, UV_RUN_NOWAIT);
	plant("old.res", "{}", strlen("{}"));
	plant(".x.req.tmp", "{}", strlen("{}"));
	t_write(relay_dir, "keep.txt", "not ours");
	start_relay(SR_ASK_WAIT);
	cr_assert_eq(sr__relay_sweep(relay), SR_OK);
	cr_assert_not(exists("old.res"));
	cr_assert_not(exists(".x.req.tmp"));
	cr_assert(exists("keep.txt"));
}

static json_t *inproc;

static void on_inproc(void *ud, json_t *response)
{
	(void)ud;
	inproc = json_incref(response);
}

Test(relay, in_process_calls_take_the_same_path)
{
	json_t *args = json_pack("{s:s}", "text", "direct");

	start_relay(SR_ASK_WAIT);
	cr_assert_eq(sr__relay_call(relay, "echo", args, on_inproc, NULL), SR_OK);
	while (!inproc)
		uv_run(ctx.loop, UV_RUN_ONCE);
	cr_assert_str_eq(status(inproc), "ok");
	cr_assert_str_eq(first_text(inproc), "direct");
	cr_assert(relay_empty());
	json_decref(inproc);
	json_decref(args);
}

static int count_files(const char *d, const char *suffix)
{
	char cmd[4400];
	FILE *p;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "ls -A %s | grep -c '%s$'", d, suffix);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	cr_assert_eq(fscanf(p, "%d", &n), 1);
	pclose(p);
	return n;
}

Test(relay, freeing_with_several_calls_in_flight_abandons_them_all)
{
	start_relay(SR_ASK_WAIT);
	request("f1", "slow", "{\"ms\":600}");
	request("f2", "slow", "{\"ms\":600}");
	request("f3", "slow", "{\"ms\":600}");
	/* Until all three are taken (at once, unless the machine is slow:
	 * valgrind on a loaded one needed more than 150 ms), within the
	 * calls' 300 ms timeout. */
	for (int i = 0; i < 25 && sr__relay_in_flight(relay) < 3; i++)
		run_for(5);
	cr_assert_eq(sr__relay_in_flight(relay), 3);
	sr__relay_free(relay);
	relay = NULL;
	/* Past the tools' 300 ms timeout: nothing may answer now. */
	run_for(600);
	cr_assert_eq(count_files(relay_dir, ".res"), 0, "a call answered after the free");
	cr_assert_eq(count_files(journal, ".claim"), 3, "the claims must stay for a restart");
}

Test(relay, a_callback_that_fails_at_once_is_answered)
{
	json_t *res;

	sr__tools_free(tools);
	load_tools(",{\"name\":\"badurl\",\"permission\":\"allow\",\"callback\":{\"url\":\"http://127.0.0.1:1/a b\"}}");
	start_relay(SR_ASK_WAIT);
	request("n1", "badurl", "{}");
	res = response("n1");
	cr_assert(is_error(res));
	cr_assert_eq(sr__relay_in_flight(relay), 0);
	json_decref(res);
}

Test(relay, answers_that_are_not_utf8_are_still_answered)
{
	json_t *res;

	start_relay(SR_ASK_WAIT);
	request("u8a", "badutf8", "{}");
	res = response("u8a");
	cr_assert_str_eq(status(res), "ok");
	cr_assert_str_eq(first_text(res), "ok \xef\xbf\xbd\xef\xbf\xbd end");
	json_decref(res);
	request("u8b", "err500u", "{}");
	res = response("u8b");
	cr_assert(is_error(res));
	cr_assert(strstr(first_text(res), "HTTP 500: xxx"), "%s", first_text(res));
	json_decref(res);
}

Test(relay, a_long_non_ascii_tool_name_is_answered)
{
	char name[400] = "a", id[] = "u8c";
	json_t *res;

	/* 'a' and 150 two-byte characters: a 100-byte quote cuts one. */
	for (int i = 0; i < 150; i++)
		strcat(name, "\xc3\xa9");
	start_relay(SR_ASK_WAIT);
	request(id, name, "{}");
	res = response(id);
	cr_assert_str_eq(status(res), "error");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")), "unknown tool"));
	json_decref(res);
}

Test(relay, a_failing_callback_is_named_by_its_tool_not_its_url)
{
	char extra[600];
	const char *port = strrchr(url, ':') + 1;
	json_t *res;

	/* The callback server closes the connection: "Empty reply". */
	snprintf(extra, sizeof(extra),
		 ",{\"name\":\"hangup\",\"permission\":\"allow\",\"callback\":"
		 "{\"url\":\"http://user:pa55word@127.0.0.1:%.*s/x?key=s3cr3tq\"}}",
		 (int)strcspn(port, "/"), port);
	sr__tools_free(tools);
	load_tools(extra);
	start_relay(SR_ASK_WAIT);
	request("h1", "hangup", "{}");
	res = response("h1");
	cr_assert(is_error(res));
	cr_assert_eq(t_count_lines(calls_log), 1, "the callback was not reached");
	cr_assert(strstr(first_text(res), "tool 'hangup'"), "%s", first_text(res));
	cr_assert(strstr(first_text(res), "pa55word") == NULL, "%s", first_text(res));
	cr_assert(strstr(first_text(res), "s3cr3tq") == NULL, "%s", first_text(res));
	cr_assert(strstr(first_text(res), "127.0.0.1") == NULL, "%s", first_text(res));
	cr_assert(strstr(t_log_text(), "pa55word") == NULL, "log: %s", t_log_text());
	cr_assert(strstr(t_log_text(), "s3cr3tq") == NULL, "log: %s", t_log_text());
	json_decref(res);
}

static int count_events(const char *type)
{
	size_t i;
	json_t *e;
	int n = 0;

	json_array_foreach(events, i, e)
		n += strcmp(json_string_value(json_object_get(e, "type")), type) == 0;
	return n;
}

Test(relay, a_request_withdrawn_before_it_is_taken_is_neither_run_nor_answered)
{
	char path[4400];

	start_relay(SR_ASK_WAIT);
	/* The watch saw w1.req appear, but the shim withdrew it (unlink)
	 * before the runner took it. */
	request("w1", "echo", "{\"text\":\"late\"}");
	snprintf(path, sizeof(path), "%s/w1.req", relay_dir);
	cr_assert_eq(unlink(path), 0);
	cr_assert_eq(sr__relay_take(relay, "w1.req"), SR_OK);
	run_for(300);
	cr_assert_not(exists("w1.res"), "a withdrawn request was answered");
	cr_assert_eq(t_count_lines(calls_log), 0);
	cr_assert_eq(count_files(journal, ".claim"), 0, "its claim was left behind");
	cr_assert_eq(sr__relay_in_flight(relay), 0);
}

Test(relay, a_taken_request_can_no_longer_be_withdrawn)
{
	char path[4400];

	start_relay(SR_ASK_WAIT);
	request("w2", "slow", "{\"ms\":250}");
	for (int waited = 0; sr__relay_in_flight(relay) < 1 && waited < 10000; waited += 10)
		run_for(10);
	cr_assert_eq(sr__relay_in_flight(relay), 1);
	/* What the shim does at its timeout: this unlink must fail, so it
	 * reports "no answer in time", not "withdrawn". */
	snprintf(path, sizeof(path), "%s/w2.req", relay_dir);
	cr_assert_neq(unlink(path), 0);
	json_decref(response("w2"));
}

Test(relay, a_non_empty_directory_is_answered_once)
{
	char sub[4400];
	json_t *res;

	snprintf(sub, sizeof(sub), "%s/d1.req", relay_dir);
	cr_assert_eq(mkdir(sub, 0700), 0);
	t_write(sub, "inside", "x");
	snprintf(sub, sizeof(sub), "%s/bad id.req", relay_dir);
	cr_assert_eq(mkdir(sub, 0700), 0);
	t_write(sub, "inside", "x");
	start_relay(SR_ASK_WAIT);
	res = response("d1");
	cr_assert(strstr(json_string_value(json_object_get(res, "error")), "not a regular file"));
	json_decref(res);
	/* Several safety scans (every 200 ms here) later: */
	run_for(700);
	cr_assert_not(exists("d1.res"), "answered again");
	cr_assert_not(exists("d1.req"));
	cr_assert_eq(count_events("tool.result"), 1);
	cr_assert_eq(count_events("relay.rejected"), 2, "d1 once, 'bad id' once");
	cr_assert_eq(count_files(journal, ".claim"), 0,
		     "the directory was left as a claim, to be answered again at the next start");
}

#include <sys/resource.h>

static void file_size_limit(rlim_t bytes)
{
	struct rlimit rl;

	cr_assert_eq(getrlimit(RLIMIT_FSIZE, &rl), 0);
	rl.rlim_cur = bytes;
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
}

static int claimed(const char *id)
{
	char path[4400];

	snprintf(path, sizeof(path), "%s/%s.claim", journal, id);
	return access(path, F_OK) == 0;
}

/* A full disk, made by a file size limit of 10 bytes for this process:
 * writing the response fails with EFBIG until the limit is lifted. */
Test(relay, a_response_that_cannot_be_written_is_retried_with_its_claim_kept)
{
	json_t *res;

	signal(SIGXFSZ, SIG_IGN);
	start_relay(SR_ASK_WAIT);
	request("df1", "echo", "{\"text\":\"kept\"}");
	file_size_limit(10);
	run_for(400);
	cr_assert_eq(t_count_lines(calls_log), 1);
	cr_assert_not(exists("df1.res"));
	cr_assert(claimed("df1"), "the claim went before the answer was published");
	cr_assert_eq(count_events("tool.result"), 0, "a result was reported before it was published");
	cr_assert_eq(sr__relay_in_flight(relay), 1);
	file_size_limit(RLIM_INFINITY);
	res = response("df1");
	cr_assert_str_eq(first_text(res), "kept");
	cr_assert_not(claimed("df1"));
	cr_assert_eq(count_events("tool.result"), 1);
	cr_assert_eq(t_count_lines(calls_log), 1, "the tool ran again");
	json_decref(res);
}

Test(relay, a_response_that_is_never_written_is_reported_not_dropped)
{
	sr__relay_opts o = { 0 };
	char err[300];
	json_t *ev;

	signal(SIGXFSZ, SIG_IGN);
	o.dir = relay_dir;
	o.journal = journal;
	o.tools = tools;
	o.guard = &guard;
	o.poll_ms = 200;
	o.publish_attempts = 3;
	o.event = on_event;
	cr_assert_eq(sr__relay_new(&ctx, &o, &relay, err, sizeof(err)), SR_OK, "%s", err);
	cr_assert_eq(sr__relay_start(relay), SR_OK);
	request("df2", "echo", "{\"text\":\"lost\"}");
	file_size_limit(10);
	ev = run_until_event("tool.result", 20000);
	file_size_limit(RLIM_INFINITY);
	cr_assert_not_null(ev, "no tool.result");
	cr_assert_str_eq(json_string_value(json_object_get(ev, "status")), "error");
	cr_assert(json_is_true(json_object_get(ev, "is_error")));
	cr_assert(strstr(json_string_value(json_object_get(ev, "error")), "could not be published"));
	cr_assert(strstr(t_log_text(), "could not be published"), "not logged");
	cr_assert(claimed("df2"), "the claim must stay for a restart");
	cr_assert_eq(sr__relay_in_flight(relay), 0);
}

/* A relay with a cap of callbacks per endpoint (0: the default) and a CPU
 * latency device (NULL: none). */
static void start_relay_with(unsigned cap, const char *cpu_device)
{
	sr__relay_opts o = { 0 };
	char err[300];

	o.dir = relay_dir;
	o.journal = journal;
	o.tools = tools;
	o.guard = &guard;
	o.poll_ms = 200;
	o.max_per_endpoint = cap;
	o.cpu_latency_device = cpu_device;
	o.event = on_event;
	cr_assert_eq(sr__relay_new(&ctx, &o, &relay, err, sizeof(err)), SR_OK, "%s", err);
	cr_assert_eq(sr__relay_start(relay), SR_OK);
}

Test(relay, calls_beyond_the_endpoint_cap_wait_for_a_free_slot)
{
	char extra[600];
	json_t *res;

	/* q1 holds the one slot for 3 s: long enough, however slow this runs
	 * (valgrind), to see q2 picked up and waiting. */
	snprintf(extra, sizeof(extra),
		 ",{\"name\":\"slower\",\"permission\":\"allow\","
		 "\"callback\":{\"url\":\"%s\"}}", url);
	sr__tools_free(tools);
	load_tools(extra);
	start_relay_with(1, NULL);
	request("q1", "slower", "{\"ms\":3000}");
	for (int waited = 0; t_count_lines(calls_log) < 1 && waited < 10000; waited += 10)
		run_for(10);
	cr_assert_eq(t_count_lines(calls_log), 1, "q1 never reached its endpoint");
	request("q2", "echo", "{\"text\":\"second\"}");
	for (int waited = 0; sr__relay_in_flight(relay) < 2 && waited < 10000; waited += 10)
		run_for(10);
	cr_assert_eq(sr__relay_in_flight(relay), 2);
	cr_assert_eq(t_count_lines(calls_log), 1, "the cap of 1 was exceeded");
	assert_announced_first("q2"); /* waiting for its slot */
	res = response("q2");
	cr_assert_str_eq(first_text(res), "second");
	cr_assert(exists("q1.res"), "the queued call ran before the first ended");
	json_decref(res);
	json_decref(response("q1"));
	cr_assert_eq(t_count_lines(calls_log), 2);
}

Test(relay, a_waiting_call_keeps_its_own_timeout)
{
	char extra[600];
	uint64_t t0;
	json_t *res;

	/* A tool with 3 s to answer; the margins below hold under valgrind
	 * on a busy machine. */
	snprintf(extra, sizeof(extra),
		 ",{\"name\":\"slowq\",\"permission\":\"allow\","
		 "\"callback\":{\"url\":\"%s\",\"timeout_ms\":3000}}", url);
	sr__tools_free(tools);
	load_tools(extra);
	start_relay_with(1, NULL);
	request("q3", "slowq", "{\"ms\":4000}");
	/* q3 holds the one slot before q4 comes (however slow this runs). */
	for (int waited = 0; t_count_lines(calls_log) < 1 && waited < 10000; waited += 10)
		run_for(10);
	cr_assert_eq(t_count_lines(calls_log), 1, "q3 never reached its endpoint");
	t0 = uv_now(ctx.loop);
	/* It gets the slot when q3 times out, 3 s after q3 started and so
	 * well into q4's own 3 s: too little left for 2.5 s of work. Had the
	 * wait not counted, it would have had 3 s and answered. */
	request("q4", "slowq", "{\"ms\":2500}");
	res = response("q4");
	cr_assert(is_error(res), "%s", first_text(res));
	cr_assert(strstr(first_text(res), "did not answer within 3000 ms"), "%s", first_text(res));
	cr_assert_lt(uv_now(ctx.loop) - t0, 5400, "the wait in the queue did not count");
	json_decref(res);
}

Test(relay, claims_still_work_when_the_journal_anchor_is_gone)
{
	char anchor[4400];
	json_t *res;

	start_relay(SR_ASK_WAIT);
	snprintf(anchor, sizeof(anchor), "%s/.anchor", journal);
	cr_assert_eq(access(anchor, F_OK), 0, "no anchor for claims in the journal");
	cr_assert_eq(unlink(anchor), 0);
	request("na1", "echo", "{\"text\":\"still\"}");
	res = response("na1");
	cr_assert_str_eq(first_text(res), "still");
	cr_assert_eq(t_count_lines(calls_log), 1);
	cr_assert_eq(count_files(journal, ".claim"), 0, "its claim was left behind");
	json_decref(res);
}

/* Claiming and taking are one rename into the journal: while the call
 * runs, its claim holds the request, and the relay directory (which the
 * shim watches) has no entry of the runner's. */
Test(relay, a_running_call_is_claimed_by_moving_its_request_into_the_journal)
{
	char path[4400];
	json_t *res;
	char *text;

	start_relay(SR_ASK_WAIT);
	request("m1", "slow", "{\"ms\":400}");
	for (int waited = 0; sr__relay_in_flight(relay) < 1 && waited < 10000; waited += 10)
		run_for(10);
	cr_assert_eq(sr__relay_in_flight(relay), 1);
	cr_assert(relay_empty(), "the runner left an entry in the relay directory");
	snprintf(path, sizeof(path), "%s/m1.claim", journal);
	{
		FILE *f = fopen(path, "r");
		cr_assert_not_null(f, "no claim in the journal");
		text = calloc(1, 4096);
		cr_assert_not_null(text);
		(void)!fread(text, 1, 4095, f);
		fclose(f);
	}
	cr_assert(strstr(text, "\"id\":\"m1\""), "the claim is not the request: %s", text);
	free(text);
	res = response("m1");
	cr_assert_str_eq(status(res), "ok");
	cr_assert_eq(count_files(journal, ".claim"), 0, "its claim was left behind");
	json_decref(res);
}

/* A journal on another file system than the relay directory (here
 * /dev/shm): the request cannot be moved into it, so the claim and the
 * take are made apart, with the same result. */
Test(relay, a_journal_on_another_file_system_claims_and_takes_apart)
{
	struct stat a, b;
	json_t *res;

	if (stat("/dev/shm", &a) != 0 || stat(relay_dir, &b) != 0 || a.st_dev == b.st_dev ||
	    access("/dev/shm", W_OK) != 0)
		cr_skip_test("/dev/shm is not a separate writable file system here");
	snprintf(journal, sizeof(journal), "/dev/shm/sandrun-relay-test-%d", (int)getpid());
	start_relay(SR_ASK_WAIT);
	for (int i = 0; i < 3; i++) {
		char id[20];
		snprintf(id, sizeof(id), "x%d", i);
		request(id, "echo", "{\"text\":\"apart\"}");
		res = response(id);
		cr_assert_str_eq(first_text(res), "apart");
		json_decref(res);
	}
	cr_assert_eq(t_count_lines(calls_log), 3);
	run_for(50);
	cr_assert_eq(count_files(journal, ".claim"), 0, "a claim was left behind");
	cr_assert(relay_empty(), "files left in the relay directory");
	sr__relay_free(relay);
	relay = NULL;
	char cmd[4400];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", journal);
	cr_assert_eq(system(cmd), 0);
}

static ino_t inode_of(const char *dir_, const char *name)
{
	char path[4400];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir_, name);
	return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* The response is written into the claim, which holds the request, and
 * renamed into place: published and unclaimed in one step, with no new
 * file made for it. */
Test(relay, the_response_reuses_the_claimed_request_file)
{
	char path[4400];
	json_t *res;
	ino_t req;

	start_relay(SR_ASK_WAIT);
	request("r1", "echo", "{\"text\":\"in place\"}");
	req = inode_of(relay_dir, "r1.req");
	cr_assert_neq(req, 0);
	snprintf(path, sizeof(path), "%s/r1.res", relay_dir);
	for (int waited = 0; access(path, F_OK) != 0 && waited < 10000; waited += 10)
		run_for(10);
	cr_assert_eq(inode_of(relay_dir, "r1.res"), req, "the response is another file");
	res = response("r1");
	cr_assert_str_eq(first_text(res), "in place", "the request's bytes were left in it");
	cr_assert_eq(count_files(journal, ".claim"), 0);
	json_decref(res);
}

/* A request file with another link (planted by the sandbox, pointing at
 * a file of its choosing) is never written: the response is a new file,
 * and the other name keeps its content. */
Test(relay, a_request_with_another_link_is_never_overwritten)
{
	char path[4400], other[4400], buf[200] = "";
	json_t *res;
	FILE *f;

	start_relay(SR_ASK_WAIT);
	request("r2", "echo", "{\"text\":\"linked\"}");
	snprintf(path, sizeof(path), "%s/r2.req", relay_dir);
	snprintf(other, sizeof(other), "%s/elsewhere", dir);
	cr_assert_eq(link(path, other), 0);
	res = response("r2");
	cr_assert_str_eq(first_text(res), "linked");
	json_decref(res);
	f = fopen(other, "r");
	cr_assert_not_null(f);
	(void)!fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	cr_assert(strstr(buf, "\"id\":\"r2\"") && strstr(buf, "\"tool\":\"echo\""),
		  "the other link was written: %s", buf);
	cr_assert_eq(count_files(journal, ".claim"), 0, "its claim was left behind");
}

/* Whether this process has path open (the CPU latency request is held as
 * long as its device stays open). */
static int is_open(const char *path)
{
	char link[64], target[4400];
	int found = 0;

	for (int fd = 0; fd < 1024 && !found; fd++) {
		ssize_t n;

		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = 0;
			found = strcmp(target, path) == 0;
		}
	}
	return found;
}

/* tool_latency = low: a request for zero CPU wakeup latency (a binary 0
 * written to the device) is held while calls run, kept while any is in
 * flight, let go once the linger after the last has passed, and taken
 * again by a later call. */
static void wait_callbacks(int n)
{
	for (int waited = 0; t_count_lines(calls_log) < n && waited < 10000; waited += 10)
		run_for(10);
	cr_assert_eq(t_count_lines(calls_log), n, "callback %d never reached its endpoint", n);
}

Test(relay, a_low_latency_relay_holds_its_cpu_request_while_calls_run)
{
	char device[4400], extra[600];
	int32_t v = -1;
	FILE *f;
	json_t *res;

	snprintf(device, sizeof(device), "%s/cpu_dma_latency", dir);
	f = fopen(device, "w");
	cr_assert(f && fclose(f) == 0);
	snprintf(extra, sizeof(extra),
		 ",{\"name\":\"slower\",\"permission\":\"allow\","
		 "\"callback\":{\"url\":\"%s\"}}", url);
	sr__tools_free(tools);
	load_tools(extra);
	start_relay_with(0, device);
	cr_assert_not(is_open(device), "held before any call");
	/* l1 runs for 3 s: however slow this runs (valgrind), l2 comes and
	 * goes meanwhile. */
	request("l1", "slower", "{\"ms\":3000}");
	wait_callbacks(1);
	cr_assert(is_open(device), "not held while a call runs");
	f = fopen(device, "r");
	cr_assert(f && fread(&v, sizeof(v), 1, f) == 1 && v == 0, "no binary 0 written");
	fclose(f);
	request("l2", "echo", "{\"text\":\"meanwhile\"}");
	res = response("l2");
	cr_assert_str_eq(first_text(res), "meanwhile");
	json_decref(res);
	cr_assert_not(exists("l1.res"), "l1 ended before l2: this proves nothing");
	cr_assert(is_open(device), "let go while l1 is still in flight");
	res = response("l1");
	cr_assert_str_eq(status(res), "ok");
	json_decref(res);
	run_for(SR__RELAY_CPU_LINGER_MS + 300);
	cr_assert_not(is_open(device), "still held after the linger");
	request("l3", "slower", "{\"ms\":1000}");
	wait_callbacks(3);
	cr_assert(is_open(device), "not taken again by a later call");
	json_decref(response("l3"));
}

/* A device that cannot be opened (not root) is said once; calls go on. */
Test(relay, a_cpu_request_that_cannot_be_made_does_not_stop_calls)
{
	char device[4400];
	json_t *res;

	snprintf(device, sizeof(device), "%s/no-such-dir/cpu_dma_latency", dir);
	start_relay_with(0, device);
	request("m1", "echo", "{\"text\":\"one\"}");
	res = response("m1");
	cr_assert_str_eq(first_text(res), "one");
	json_decref(res);
	request("m2", "echo", "{\"text\":\"two\"}");
	res = response("m2");
	cr_assert_str_eq(first_text(res), "two");
	json_decref(res);
	{
		const char *log = t_log_text(), *first = strstr(log, "cannot request low CPU latency");

		cr_assert(first, "the failure is not said: %s", log);
		cr_assert_null(strstr(first + 1, "cannot request low CPU latency"),
			       "the failure is said more than once");
	}
}

/* The sandbox swaps its relay directory for a link to a host directory
 * mid-turn: the relay keeps serving the directory it opened, and reads,
 * writes, renames and removes nothing in the host directory, not even in
 * a sweep. */
Test(relay, a_relay_directory_swapped_mid_turn_is_not_followed)
{
	char orig[4400], host[4400], path[4600];
	json_t *res;
	int calls;

	start_relay(SR_ASK_WAIT);
	request("w1", "echo", "{\"text\":\"before\"}");
	res = response("w1");
	cr_assert_str_eq(status(res), "ok");
	json_decref(res);
	calls = t_count_lines(calls_log);
	snprintf(orig, sizeof(orig), "%s.orig", relay_dir);
	snprintf(host, sizeof(host), "%s/host", dir);
	cr_assert_eq(mkdir(host, 0755), 0);
	t_write(host, "h1.req", "{\"v\":1,\"id\":\"h1\",\"tool\":\"echo\",\"args\":{\"text\":\"host\"}}");
	t_write(host, "keep.res", "host file");
	cr_assert_eq(rename(relay_dir, orig), 0);
	cr_assert_eq(symlink(host, relay_dir), 0);
	run_for(700);
	sr__relay_sweep(relay);
	snprintf(path, sizeof(path), "%s/h1.req", host);
	cr_assert_eq(access(path, F_OK), 0, "a request in the host directory was taken");
	snprintf(path, sizeof(path), "%s/h1.res", host);
	cr_assert_neq(access(path, F_OK), 0, "a response was written into the host directory");
	snprintf(path, sizeof(path), "%s/keep.res", host);
	cr_assert_eq(access(path, F_OK), 0, "a sweep removed a host file");
	cr_assert_eq(t_count_lines(calls_log), calls, "a host request was run");
	/* The directory the relay opened still works. */
	t_write(orig, ".w2.tmp", "{\"v\":1,\"id\":\"w2\",\"tool\":\"echo\",\"args\":{\"text\":\"after\"}}");
	{
		char from[4600], to[4600];
		snprintf(from, sizeof(from), "%s/.w2.tmp", orig);
		snprintf(to, sizeof(to), "%s/w2.req", orig);
		cr_assert_eq(rename(from, to), 0);
	}
	snprintf(path, sizeof(path), "%s/w2.res", orig);
	for (int i = 0; i < 300 && access(path, F_OK) != 0; i++)
		run_for(10);
	cr_assert_eq(access(path, F_OK), 0, "the opened directory is no longer served");
	cr_assert_eq(t_count_lines(calls_log), calls + 1);
}
