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

static int redacted(const char *value)
{
	char *s = sr__redact(value);
	int r = strcmp(s, "[REDACTED]") == 0;

	free(s);
	return r;
}

Test(log, a_held_secret_is_forgotten_when_its_last_hold_goes)
{
	size_t base = sr__secrets_count();

	cr_assert_eq(sr__secret_hold("held-value-1"), 0);
	cr_assert_eq(sr__secret_hold("held-value-1"), 0);
	cr_assert_eq(sr__secrets_count(), base + 1, "one entry per value");
	sr__secret_release("held-value-1");
	cr_assert(redacted("held-value-1"), "forgotten while still held once");
	sr__secret_release("held-value-1");
	cr_assert_not(redacted("held-value-1"));
	cr_assert_eq(sr__secrets_count(), base);
	sr__secret_release("held-value-1"); /* one release too many: nothing */
	sr__secret_release("never-held-value");
	cr_assert_eq(sr__secrets_count(), base);
}

Test(log, a_secret_registered_for_good_outlives_its_holds)
{
	sr__secret_hold("both-ways-value");
	sr__secret_register("both-ways-value");
	sr__secret_release("both-ways-value");
	cr_assert(redacted("both-ways-value"));
	sr__secret_register("good-first-value");
	sr__secret_hold("good-first-value");
	sr__secret_release("good-first-value");
	cr_assert(redacted("good-first-value"));
}

Test(log, holds_of_an_owner_are_released_together_and_the_table_does_not_grow)
{
	size_t base = sr__secrets_count();
	char value[64];

	/* A service's thousand turns, each with its own credential. */
	for (int turn = 0; turn < 1000; turn++) {
		sr__secret_holds h = { 0 };
		snprintf(value, sizeof(value), "sk-turn-%04d-value", turn);
		sr__secret_hold_in(&h, value);
		sr__secret_hold_in(&h, "sk-shared-by-all-turns");
		sr__secret_hold_in(&h, "abc"); /* too short: not held */
		cr_assert_eq(h.n, 2);
		cr_assert(redacted(value));
		sr__secret_holds_release(&h);
		cr_assert_eq(h.n, 0);
		cr_assert_null(h.values);
		cr_assert_not(redacted(value));
	}
	cr_assert_eq(sr__secrets_count(), base, "the table grew with the turns");
	cr_assert_not(redacted("sk-shared-by-all-turns"));
}

Test(log, the_order_of_overlapping_secrets_is_kept_when_one_goes)
{
	char *s;

	sr__secret_hold("first-secret-gone");
	sr__secret_hold("abcd-overlap-1234");
	sr__secret_hold("overlap-1234-wxyz");
	sr__secret_release("first-secret-gone");
	/* The older one still goes first: its whole text is redacted. */
	s = sr__redact("abcd-overlap-1234-wxyz");
	cr_assert_str_eq(s, "[REDACTED]-wxyz");
	free(s);
	sr__secret_release("abcd-overlap-1234");
	sr__secret_release("overlap-1234-wxyz");
}

static char *field_of(json_t *ev, uint64_t scope)
{
	json_t *clean = sr__redact_json_in(ev, scope);
	char *s = strdup(json_string_value(json_object_get(clean, "session")));

	json_decref(clean);
	return s;
}

/* What one run holds is hidden from its own output and from the log, not
 * from another run's: a run given "ses-" as a secret garbles nobody
 * else's session ids. Values held in no scope, or registered, are hidden
 * everywhere. */
Test(log, a_scoped_secret_is_hidden_from_its_scope_and_the_log_only)
{
	uint64_t a = sr__secret_scope_new(), b = sr__secret_scope_new();
	sr__secret_holds ha = { .scope = a }, hb = { .scope = b }, open = { 0 };
	json_t *ev = json_pack("{s:s}", "session", "ses-cd85 sk-open-value-1 sk-b-value-22");
	char *s;

	cr_assert_neq(a, 0);
	cr_assert_neq(a, b);
	sr__secret_hold_in(&ha, "ses-");
	sr__secret_hold_in(&hb, "sk-b-value-22");
	sr__secret_hold_in(&open, "sk-open-value-1");
	s = field_of(ev, a);
	cr_assert_str_eq(s, "[REDACTED]cd85 [REDACTED] sk-b-value-22");
	free(s);
	s = field_of(ev, b);
	cr_assert_str_eq(s, "ses-cd85 [REDACTED] [REDACTED]");
	free(s);
	s = sr__redact("ses-cd85 sk-open-value-1 sk-b-value-22");
	cr_assert_str_eq(s, "[REDACTED]cd85 [REDACTED] [REDACTED]", "the log hides them all");
	free(s);
	/* The same value held by two scopes: hidden from both until the
	 * last goes. */
	sr__secret_hold_in(&hb, "ses-");
	sr__secret_holds_release(&ha);
	s = field_of(ev, b);
	cr_assert_str_eq(s, "[REDACTED]cd85 [REDACTED] [REDACTED]");
	free(s);
	s = field_of(ev, a);
	cr_assert_str_eq(s, "ses-cd85 [REDACTED] sk-b-value-22");
	free(s);
	sr__secret_holds_release(&hb);
	sr__secret_holds_release(&open);
	s = field_of(ev, a);
	cr_assert_str_eq(s, "ses-cd85 sk-open-value-1 sk-b-value-22");
	free(s);
	json_decref(ev);
}

/* Holds made while a scope is entered take it. */
Test(log, holds_take_the_scope_entered_at_their_first_value)
{
	uint64_t a = sr__secret_scope_new(), was = sr__secret_scope_enter(a);
	sr__secret_holds h = { 0 };
	json_t *ev = json_pack("{s:s}", "session", "tok-scoped-9999");
	char *s;

	sr__secret_hold_in(&h, "tok-scoped-9999");
	cr_assert_eq(sr__secret_scope_enter(was), a);
	cr_assert_eq(h.scope, a);
	s = field_of(ev, sr__secret_scope_new());
	cr_assert_str_eq(s, "tok-scoped-9999");
	free(s);
	s = field_of(ev, a);
	cr_assert_str_eq(s, "[REDACTED]");
	free(s);
	sr__secret_holds_release(&h);
	json_decref(ev);
}
