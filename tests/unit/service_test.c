/* core/service: what can be checked without a server: the run request,
 * the bearer tokens, the run log and the metrics text. */
#include <sqlite3.h>
#include <unistd.h>

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
		{ "{\"prompt\":\"x\",\"session\":\"ses-0123456789abcdef0123456789abcdef0123\"}",
		  "invalid_request", "'session' must be a session id" },
		{ "{\"prompt\":\"x\",\"session\":\"../../etc\"}", "invalid_request", "'session'" },
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

/* The database log: what one service wrote, the next reads back. */
static sr__runlog *db_log(size_t per_run, size_t kept)
{
	char err[300] = "";
	sr__runlog *l = sr__runlog_db_new(dir, per_run, kept, err, sizeof(err));

	cr_assert(l, "%s", err);
	return l;
}

static const char *summary_state(sr__runlog *l, const char *id, const char *key)
{
	static char buf[200];
	json_t *got = NULL;

	if (l->ops->summary(l, id, &got) != SR_OK)
		return NULL;
	snprintf(buf, sizeof(buf), "%s", json_string_value(json_object_get(got, key)) ?
		 json_string_value(json_object_get(got, key)) : "");
	json_decref(got);
	return buf;
}

Test(service, the_database_run_log_reads_back_runs_and_events_after_a_restart)
{
	sr__runlog *l = db_log(4, 10);
	json_t *sum = json_pack("{s:s}", "state", "running");
	const char *line;
	size_t len;
	uint64_t first = 0, seq;
	int warned = 0;

	cr_assert_eq(l->ops->create(l, "run-a", sum), SR_OK);
	cr_assert_eq(l->ops->create(l, "run-b", sum), SR_OK);
	append(l, "run-a", 6);
	append(l, "run-b", 2);
	json_object_set_new(sum, "state", json_string("succeeded"));
	cr_assert_eq(l->ops->set_summary(l, "run-a", sum), SR_OK);
	cr_assert_eq(l->ops->retire(l, "run-a"), SR_OK);
	l->ops->free(l); /* run-b was going on: the service stopped */

	l = db_log(4, 10);
	cr_assert_eq(l->ops->count(l), 2);
	cr_assert_str_eq(summary_state(l, "run-a", "state"), "succeeded");
	cr_assert_eq(l->ops->line(l, "run-a", 2, &line, &len, &first), SR_ESTATE);
	cr_assert_eq(first, 3, "the 4 newest of 6 are kept, numbered as they were");
	cr_assert_eq(l->ops->line(l, "run-a", 6, &line, &len, &first), SR_OK);
	cr_assert_eq(len, strlen("{\"n\":5}\n"));
	cr_assert_eq(strncmp(line, "{\"n\":5}\n", len), 0);
	cr_assert_eq(l->ops->line(l, "run-a", 7, &line, &len, &first), SR_ENOTFOUND);
	cr_assert_str_eq(summary_state(l, "run-b", "state"), "failed");
	{
		/* As doc/api.yaml has an ended run: an error object, an exit
		 * code, an end, and its last event's number, which is one
		 * run.failed that replay shows. */
		json_t *got = NULL;
		cr_assert_eq(l->ops->summary(l, "run-b", &got), SR_OK);
		cr_assert_str_eq(json_string_value(json_object_get(json_object_get(got, "error"),
								   "code")), "service_restarted");
		cr_assert(json_is_true(json_object_get(json_object_get(got, "error"), "retryable")));
		cr_assert(strstr(json_string_value(json_object_get(json_object_get(got, "error"),
								   "message")), "service stopped"));
		cr_assert_eq(json_integer_value(json_object_get(got, "exit_code")), 75);
		cr_assert(json_is_string(json_object_get(got, "ended_at")));
		cr_assert_eq(json_integer_value(json_object_get(got, "events")), 3);
		json_decref(got);
	}
	cr_assert_eq(l->ops->line(l, "run-b", 1, &line, &len, &first), SR_OK);
	cr_assert_eq(strncmp(line, "{\"n\":0}\n", len), 0);
	cr_assert_eq(l->ops->line(l, "run-b", 3, &line, &len, &first), SR_OK);
	cr_assert(strstr(line, "\"type\":\"run.failed\"") &&
		  strstr(line, "\"code\":\"service_restarted\"") && strstr(line, "\"seq\":3"),
		  "%.*s", (int)len, line);
	cr_assert_eq(l->ops->line(l, "run-b", 4, &line, &len, &first), SR_ENOTFOUND);
	/* A new run's numbering and a loaded run's are their own. */
	cr_assert_eq(l->ops->create(l, "run-c", sum), SR_OK);
	cr_assert_eq(l->ops->append(l, "run-c", "{}\n", 3, &seq), SR_OK);
	cr_assert_eq(seq, 1);
	cr_assert_eq(l->ops->create(l, "run-a", sum), SR_EEXIST);
	l->ops->free(l);

	/* The failed run was recorded as such, and retired. */
	l = db_log(4, 10);
	cr_assert_str_eq(summary_state(l, "run-b", "state"), "failed");
	cr_assert_str_eq(summary_state(l, "run-c", "state"), "failed");
	cr_assert_eq(l->ops->count(l), 3);
	for (const char *p = t_log_text(); (p = strstr(p, "was not over when the service")); p++)
		warned++;
	cr_assert_eq(warned, 2, "run-b once, run-c once: %s", t_log_text());
	json_decref(sum);
	l->ops->free(l);
}

Test(service, the_database_run_log_keeps_only_the_newest_retired_runs)
{
	sr__runlog *l = db_log(8, 2);
	json_t *sum = json_object();
	char id[16], path[4200];
	sqlite3 *db;
	sqlite3_stmt *st;

	for (int i = 0; i < 5; i++) {
		snprintf(id, sizeof(id), "run-%d", i);
		cr_assert_eq(l->ops->create(l, id, sum), SR_OK);
		append(l, id, 3);
		cr_assert_eq(l->ops->retire(l, id), SR_OK);
	}
	l->ops->free(l);
	snprintf(path, sizeof(path), "%s/sandrun.db", dir);
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT group_concat(id, ' '), (SELECT count(*) "
					"FROM run_events) FROM (SELECT id FROM runs ORDER BY id)",
					-1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "run-3 run-4");
	cr_assert_eq(sqlite3_column_int(st, 1), 6, "the events of the runs forgotten went too");
	sqlite3_finalize(st);
	sqlite3_close(db);
	l = db_log(8, 2);
	cr_assert_eq(l->ops->count(l), 2);
	cr_assert_null(summary_state(l, "run-2", "state"));
	json_decref(sum);
	l->ops->free(l);
}

Test(service, a_run_another_running_service_owns_is_left_to_it)
{
	char host[256] = "localhost", sql[600], path[4200], err[300];
	sqlite3 *db;
	sr__runlog *l = db_log(8, 2);

	l->ops->free(l); /* the tables */
	gethostname(host, sizeof(host) - 1);
	snprintf(path, sizeof(path), "%s/sandrun.db", dir);
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	snprintf(sql, sizeof(sql), "INSERT INTO runs (id, summary, owner) VALUES "
		 "('run-theirs', '{\"state\":\"running\"}', '%s:%ld'), "
		 "('run-gone', '{\"state\":\"running\"}', '%s:999999999'), "
		 "('run-elsewhere', '{\"state\":\"running\"}', 'another-%s:1:1')", host,
		 (long)getppid(), host, host);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	l = db_log(8, 2);
	cr_assert_null(summary_state(l, "run-theirs", "state"), "loaded as if its own");
	cr_assert_str_eq(summary_state(l, "run-gone", "state"), "failed");
	/* Another host's service cannot be asked: its run is left to it
	 * (a store that replicas share). */
	cr_assert_null(summary_state(l, "run-elsewhere", "state"), "loaded as if its own");
	l->ops->free(l);

	/* A state directory whose database is not one: refused, said why. */
	t_write(dir, "sandrun.db", "not a database, but someone's file");
	cr_assert_null(sr__runlog_db_new(dir, 8, 2, err, sizeof(err)));
	cr_assert(strstr(err, "cannot use the runner's database"), "%s", err);
	cr_assert(strstr(t_log_text(), "is not a SQLite database"), "%s", t_log_text());
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
