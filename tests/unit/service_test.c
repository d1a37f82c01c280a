/* core/service: what can be checked without a server: the run request,
 * the bearer tokens, the run log and the metrics text. */
#include "harness.h"
#include "core/service/auth.h"
#include "core/service/metrics.h"
#include "core/service/request.h"
#include "core/service/runlog.h"
#include "core/tools/relay.h"

static char *dir;

static void setup(void)
{
	dir = t_tmpdir();
	t_log_capture();
}

TestSuite(service, .init = setup);

/* ------------------------------------------------------------ request */

static int parse(const char *body, sr__svc_request *q, const char **code, char *msg)
{
	return sr__svc_request_parse(body, strlen(body), q, code, msg, 400);
}

Test(service, a_full_run_request_is_read)
{
	sr__svc_request q;
	const char *code;
	char msg[400];

	cr_assert_eq(parse("{\"harness\":\"claude\",\"prompt\":\"fix it\",\"session\":\"ses-0123456789abcdef\","
			   "\"tools\":[{\"name\":\"echo\"}],\"mcp_servers\":[{\"name\":\"docs\"}],"
			   "\"model\":{\"url\":\"https://llm.example.com\",\"credentials\":"
			   "{\"ANTHROPIC_API_KEY\":\"sk-request-secret-1\"}},"
			   "\"network\":{\"mode\":\"off\",\"enforcement\":\"best_effort\"},"
			   "\"permission_mode\":\"deny_all\"}", &q, &code, msg), SR_OK, "%s", msg);
	cr_assert_str_eq(q.harness, "claude");
	cr_assert_str_eq(q.prompt, "fix it");
	cr_assert_str_eq(q.session, "ses-0123456789abcdef");
	cr_assert_eq(json_array_size(q.tools), 1);
	cr_assert_eq(json_array_size(q.mcp_servers), 1);
	cr_assert_str_eq(q.model_url, "https://llm.example.com");
	cr_assert_str_eq(json_string_value(json_object_get(q.credentials, "ANTHROPIC_API_KEY")),
			 "sk-request-secret-1");
	cr_assert_eq(q.network, SR_NET_OFF);
	cr_assert_eq(q.enforcement_strict, 0);
	cr_assert_eq(q.ask_policy, SR_ASK_DENY);
	/* The credential is redacted from then on. */
	char *red = sr__redact("got sk-request-secret-1");
	cr_assert_str_eq(red, "got [REDACTED]");
	free(red);
	sr__svc_request_clear(&q);
	cr_assert_null(q.root);
}

Test(service, only_the_prompt_is_required_and_null_is_absent)
{
	sr__svc_request q;
	const char *code;
	char msg[400];

	cr_assert_eq(parse("{\"prompt\":\"\",\"harness\":null,\"tools\":null}", &q, &code, msg), SR_OK,
		     "%s", msg);
	cr_assert_str_eq(q.prompt, "");
	cr_assert_null(q.harness);
	cr_assert_null(q.tools);
	cr_assert_null(q.credentials, "no credentials: the service's own environment");
	cr_assert_eq(q.network, SR_NET_OPEN);
	cr_assert_eq(q.enforcement_strict, 1);
	cr_assert_eq(q.ask_policy, SR_ASK_WAIT);
	sr__svc_request_clear(&q);
}

Test(service, a_bad_request_names_its_field)
{
	static const char *const bad[][3] = {
		{ "not json", "invalid_json", "not JSON" },
		{ "{\"prompt\":\"a\",\"prompt\":\"b\"}", "invalid_json", "duplicate" },
		{ "[1]", "invalid_request", "a JSON object" },
		{ "{}", "invalid_request", "'prompt' is required" },
		{ "{\"prompt\":7}", "invalid_request", "'prompt' must be a string" },
		{ "{\"prompt\":\"x\",\"promt\":1}", "invalid_request", "unknown field 'promt'" },
		{ "{\"prompt\":\"x\",\"harness\":\"Claude!\"}", "invalid_request", "'harness'" },
		{ "{\"prompt\":\"x\",\"tools\":{}}", "invalid_request", "'tools' must be an array" },
		{ "{\"prompt\":\"x\",\"tools\":[1]}", "invalid_request", "'tools[0]'" },
		{ "{\"prompt\":\"x\",\"mcp_servers\":[\"a\"]}", "invalid_request", "'mcp_servers[0]'" },
		{ "{\"prompt\":\"x\",\"model\":{\"url\":\"ftp://x\"}}", "invalid_request", "'model.url'" },
		{ "{\"prompt\":\"x\",\"model\":{\"key\":1}}", "invalid_request", "unknown field 'model.key'" },
		{ "{\"prompt\":\"x\",\"model\":{\"credentials\":{\"A-B\":\"v\"}}}", "invalid_request",
		  "'A-B' is not an environment variable name" },
		{ "{\"prompt\":\"x\",\"model\":{\"credentials\":{\"K\":\"\"}}}", "invalid_request",
		  "'model.credentials.K'" },
		{ "{\"prompt\":\"x\",\"model\":{\"credentials\":{\"K\":5}}}", "invalid_request",
		  "'model.credentials.K'" },
		{ "{\"prompt\":\"x\",\"network\":{\"mode\":\"closed\"}}", "invalid_request", "'network.mode'" },
		{ "{\"prompt\":\"x\",\"network\":{\"enforcement\":\"loose\"}}", "invalid_request",
		  "'network.enforcement'" },
		{ "{\"prompt\":\"x\",\"network\":{\"allow\":[]}}", "invalid_request",
		  "unknown field 'network.allow'" },
		{ "{\"prompt\":\"x\",\"permission_mode\":\"yes\"}", "invalid_request", "'permission_mode'" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		sr__svc_request q;
		const char *code = NULL;
		char msg[400] = "";
		cr_assert_eq(parse(bad[i][0], &q, &code, msg), SR_EINVAL, "accepted: %s", bad[i][0]);
		cr_assert_str_eq(code, bad[i][1], "%s: code %s", bad[i][0], code);
		cr_assert(strstr(msg, bad[i][2]), "%s: no '%s' in '%s'", bad[i][0], bad[i][2], msg);
		cr_assert_null(q.root);
	}
}

/* ------------------------------------------------------------- tokens */

Test(service, tokens_skip_blanks_and_comments_and_match_in_any_case_of_bearer)
{
	const char *path = t_write(dir, "tokens", "# the platform\n\n  tok-aaaaaaaaaaaaaaaa  \n"
				   "\t# old\ntok-bbbbbbbbbbbbbbbb==\n");
	sr__tokens *t = NULL;
	char err[300];

	cr_assert_eq(sr__tokens_load(path, &t, err, sizeof(err)), SR_OK, "%s", err);
	cr_assert_eq(sr__tokens_count(t), 2);
	cr_assert(sr__tokens_check(t, "Bearer tok-aaaaaaaaaaaaaaaa"));
	cr_assert(sr__tokens_check(t, "bearer   tok-bbbbbbbbbbbbbbbb=="));
	cr_assert_not(sr__tokens_check(t, "Bearer tok-aaaaaaaaaaaaaaa"), "a prefix matched");
	cr_assert_not(sr__tokens_check(t, "Bearer tok-aaaaaaaaaaaaaaaaX"), "a longer token matched");
	cr_assert_not(sr__tokens_check(t, "Basic tok-aaaaaaaaaaaaaaaa"));
	cr_assert_not(sr__tokens_check(t, "tok-aaaaaaaaaaaaaaaa"));
	cr_assert_not(sr__tokens_check(t, NULL));
	cr_assert_not(sr__tokens_check(NULL, "Bearer tok-aaaaaaaaaaaaaaaa"));
	/* The file is readable by others here: said. */
	cr_assert(strstr(t_log_text(), "readable by others"), "%s", t_log_text());
	sr__tokens_free(t);
}

Test(service, a_bad_token_line_is_named)
{
	sr__tokens *t = NULL;
	char err[300];

	cr_assert_eq(sr__tokens_load(t_write(dir, "short", "# x\nshort\n"), &t, err, sizeof(err)),
		     SR_EINVAL);
	cr_assert(strstr(err, "short:2: not a token"), "%s", err);
	cr_assert_eq(sr__tokens_load(t_write(dir, "space", "tok-aaaa aaaaaaaaaaaa\n"), &t, err,
				     sizeof(err)), SR_EINVAL);
	cr_assert(strstr(err, "space:1:"), "%s", err);
	cr_assert_eq(sr__tokens_load("/nonexistent/tokens", &t, err, sizeof(err)), SR_EIO);
	cr_assert(strstr(err, "/nonexistent/tokens: cannot read"), "%s", err);
	cr_assert_null(t);
}

Test(service, an_empty_tokens_file_holds_no_token)
{
	sr__tokens *t = NULL;
	char err[300];

	cr_assert_eq(sr__tokens_load(t_write(dir, "empty", "# none yet\n\n"), &t, err, sizeof(err)),
		     SR_OK);
	cr_assert_eq(sr__tokens_count(t), 0);
	cr_assert_not(sr__tokens_check(t, "Bearer "));
	sr__tokens_free(t);
}

/* ------------------------------------------------------------ run log */

static void append(sr__runlog *l, const char *id, int n)
{
	for (int i = 0; i < n; i++) {
		char line[32];
		uint64_t seq;
		snprintf(line, sizeof(line), "{\"n\":%d}\n", i);
		cr_assert_eq(l->ops->append(l, id, line, strlen(line), &seq), SR_OK);
	}
}

Test(service, the_run_log_numbers_events_and_keeps_the_last_ones)
{
	sr__runlog *l = sr__runlog_mem_new(4, 10);
	json_t *sum = json_pack("{s:s}", "state", "running"), *got;
	const char *line;
	size_t len;
	uint64_t first = 0, seq;

	cr_assert_eq(l->ops->create(l, "run-a", sum), SR_OK);
	cr_assert_eq(l->ops->create(l, "run-a", sum), SR_EEXIST);
	cr_assert_eq(l->ops->line(l, "run-a", 1, &line, &len, &first), SR_ENOTFOUND, "nothing yet");
	append(l, "run-a", 6);
	cr_assert_eq(l->ops->line(l, "run-a", 2, &line, &len, &first), SR_ESTATE);
	cr_assert_eq(first, 3, "the oldest kept of 6 with room for 4");
	cr_assert_eq(l->ops->line(l, "run-a", 3, &line, &len, &first), SR_OK);
	cr_assert_eq(strncmp(line, "{\"n\":2}\n", len), 0);
	cr_assert_eq(l->ops->line(l, "run-a", 6, &line, &len, &first), SR_OK);
	cr_assert_eq(strncmp(line, "{\"n\":5}\n", len), 0);
	cr_assert_eq(l->ops->line(l, "run-a", 7, &line, &len, &first), SR_ENOTFOUND);
	cr_assert_eq(l->ops->append(l, "run-x", "x\n", 2, &seq), SR_ENOTFOUND);
	json_object_set_new(sum, "state", json_string("finished"));
	cr_assert_eq(l->ops->set_summary(l, "run-a", sum), SR_OK);
	cr_assert_eq(l->ops->summary(l, "run-a", &got), SR_OK);
	cr_assert_str_eq(json_string_value(json_object_get(got, "state")), "finished");
	json_decref(got);
	json_decref(sum);
	l->ops->free(l);
}

Test(service, the_run_log_forgets_the_oldest_retired_runs_only)
{
	sr__runlog *l = sr__runlog_mem_new(8, 2);
	json_t *sum = json_object(), *got = NULL;
	char id[16];

	for (int i = 0; i < 5; i++) {
		snprintf(id, sizeof(id), "run-%d", i);
		cr_assert_eq(l->ops->create(l, id, sum), SR_OK);
	}
	/* run-0 goes on; the others are retired in the order 1, 2, 3, 4. */
	for (int i = 1; i < 5; i++) {
		snprintf(id, sizeof(id), "run-%d", i);
		cr_assert_eq(l->ops->retire(l, id), SR_OK);
	}
	cr_assert_eq(l->ops->count(l), 3);
	cr_assert_eq(l->ops->summary(l, "run-0", &got), SR_OK, "a run going on was forgotten");
	json_decref(got);
	cr_assert_eq(l->ops->summary(l, "run-1", &got), SR_ENOTFOUND);
	cr_assert_eq(l->ops->summary(l, "run-2", &got), SR_ENOTFOUND);
	cr_assert_eq(l->ops->summary(l, "run-3", &got), SR_OK);
	json_decref(got);
	cr_assert_eq(l->ops->summary(l, "run-4", &got), SR_OK);
	json_decref(got);
	json_decref(sum);
	l->ops->free(l);
}

/* ------------------------------------------------------------ metrics */

Test(service, metrics_count_events_into_histograms_and_escape_labels)
{
	sr__svc_metrics m;
	json_t *by_state = json_pack("{s:i}", "finished", 2);
	json_t *by_phase = json_pack("{s:i}", "prompting", 1);
	json_t *ev;
	char *text;

	memset(&m, 0, sizeof(m));
	ev = json_pack("{s:s, s:s, s:i}", "type", "timing", "stage", "turn", "ms", 1500);
	sr__metrics_event(&m, ev);
	json_decref(ev);
	ev = json_pack("{s:s, s:s, s:i}", "type", "timing", "stage", "we\"ird\n", "ms", 3);
	sr__metrics_event(&m, ev);
	json_decref(ev);
	ev = json_pack("{s:s, s:s, s:i}", "type", "tool.result", "status", "ok", "ms", 20);
	sr__metrics_event(&m, ev);
	json_decref(ev);
	sr__metrics_run_ended(&m, "finished");
	sr__metrics_http(&m, 429);
	m.warm_running = 3;
	text = sr__metrics_text(&m, by_state, by_phase, NULL);
	cr_assert_not_null(text);
	cr_assert(strstr(text, "sandrun_runs{state=\"finished\"} 2\n"), "%s", text);
	cr_assert(strstr(text, "sandrun_runs_active{phase=\"prompting\"} 1\n"), "%s", text);
	cr_assert(strstr(text, "sandrun_warm_sandboxes{state=\"running\"} 3\n"), "%s", text);
	cr_assert(strstr(text, "sandrun_warm_sandboxes{state=\"stopped\"} 0\n"), "%s", text);
	cr_assert(strstr(text, "sandrun_stage_duration_seconds_bucket{stage=\"turn\",le=\"1\"} 0\n"),
		  "%s", text);
	cr_assert(strstr(text, "sandrun_stage_duration_seconds_bucket{stage=\"turn\",le=\"2.5\"} 1\n"),
		  "%s", text);
	cr_assert(strstr(text, "sandrun_stage_duration_seconds_count{stage=\"turn\"} 1\n"), "%s", text);
	cr_assert(strstr(text, "stage=\"we\\\"ird\\n\""), "label not escaped: %s", text);
	cr_assert(strstr(text, "sandrun_relay_calls_total{status=\"ok\"} 1\n"), "%s", text);
	cr_assert(strstr(text, "sandrun_runs_ended_total{state=\"finished\"} 1\n"), "%s", text);
	cr_assert(strstr(text, "sandrun_http_responses_total{code=\"429\"} 1\n"), "%s", text);
	cr_assert(strstr(text, "# TYPE sandrun_run_duration_seconds histogram\n"), "%s", text);
	free(text);
	json_decref(by_state);
	json_decref(by_phase);
}
