/* core/host/log.c: levels and secret redaction. */
#include "harness.h"

Test(log, redacts_a_registered_secret_everywhere_in_a_line)
{
	t_log_capture();
	sr__secret_register("hunter2-token");
	sr__log(SR_LOG_ERROR, "test", "key=%s again %s", "hunter2-token",
		"xhunter2-tokenx");
	cr_assert(strstr(t_log_text(), "hunter2") == NULL, "leaked: %s", t_log_text());
	cr_assert(strstr(t_log_text(), "key=[REDACTED] again x[REDACTED]x"),
		  "got: %s", t_log_text());
}

Test(log, ignores_secrets_too_short_to_redact_safely)
{
	t_log_capture();
	sr__secret_register("ab");
	sr__log(SR_LOG_ERROR, NULL, "abacus");
	cr_assert(strstr(t_log_text(), "abacus"));
}

Test(log, drops_lines_above_the_level)
{
	t_log_capture();
	sr__log_set_level(SR_LOG_WARN);
	sr__log(SR_LOG_INFO, "x", "quiet line");
	sr__log(SR_LOG_WARN, "x", "loud line");
	cr_assert(strstr(t_log_text(), "quiet line") == NULL);
	cr_assert(strstr(t_log_text(), "sandrun: x: warn: loud line"));
}

Test(log, parses_level_names)
{
	cr_assert_eq(sr__log_parse_level("debug"), SR_LOG_DEBUG);
	cr_assert_eq(sr__log_parse_level("error"), SR_LOG_ERROR);
	cr_assert_eq(sr__log_parse_level("loud"), -1);
	cr_assert_eq(sr__log_parse_level(NULL), -1);
}

Test(log, clear_forgets_secrets)
{
	char *s;

	sr__secret_register("s3cr3t-value");
	sr__secrets_clear();
	s = sr__redact("s3cr3t-value");
	cr_assert_str_eq(s, "s3cr3t-value");
	free(s);
}

Test(log, json_is_redacted_in_its_strings_not_its_text)
{
	json_t *ev = json_pack("{s:s, s:b, s:s, s:[s]}", "type", "tool.result", "is_error", 1,
			       "text", "the word true and xtruex", "list", "true");
	json_t *clean;
	char *text;

	sr__secret_register("true");
	clean = sr__redact_json(ev);
	text = json_dumps(clean, JSON_COMPACT | JSON_SORT_KEYS);
	cr_assert_str_eq(text, "{\"is_error\":true,\"list\":[\"[REDACTED]\"],"
			 "\"text\":\"the word [REDACTED] and x[REDACTED]x\",\"type\":\"tool.result\"}");
	cr_assert(json_is_true(json_object_get(ev, "is_error")));
	cr_assert_str_eq(json_string_value(json_object_get(ev, "text")), "the word true and xtruex",
			 "the original was changed");
	free(text);
	json_decref(clean);
	json_decref(ev);
}
