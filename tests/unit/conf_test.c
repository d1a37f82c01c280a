/* core/host/conf.c: INI parsing, environment overrides, validation. */
#include "harness.h"

static char *dir;

static void setup(void)
{
	dir = t_tmpdir();
	t_log_capture();
}

TestSuite(conf, .init = setup);

Test(conf, reads_values_by_section_and_key)
{
	sr__config *c = sr__config_new();
	const char *p = t_write(dir, "a.conf",
		"# comment\n[runner]\nprovider = local\n\n[provider.local]\nroot = /srv/x\n");

	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_str_eq(sr__config_get(c, "runner", "provider"), "local");
	cr_assert_str_eq(sr__config_get(c, "provider.local", "root"), "/srv/x");
	cr_assert_null(sr__config_get(c, "provider.local", "nope"));
	sr__config_free(c);
}

Test(conf, environment_overrides_the_file)
{
	sr__config *c = sr__config_new();
	const char *p = t_write(dir, "a.conf", "[provider.local]\nroot = /from/file\n");
	char origin[256];

	cr_assert_eq(sr__config_load(c, p), SR_OK);
	setenv("SANDRUN_PROVIDER_LOCAL_ROOT", "/from/env", 1);
	cr_assert_str_eq(sr__config_get(c, "provider.local", "root"), "/from/env");
	sr__config_origin(c, "provider.local", "root", origin, sizeof(origin));
	cr_assert_str_eq(origin, "environment SANDRUN_PROVIDER_LOCAL_ROOT");
	unsetenv("SANDRUN_PROVIDER_LOCAL_ROOT");
	cr_assert_str_eq(sr__config_get(c, "provider.local", "root"), "/from/file");
	sr__config_free(c);
}

Test(conf, environment_sets_keys_absent_from_the_file)
{
	sr__config *c = sr__config_new();

	setenv("SANDRUN_HARNESS_CLAUDE_CODE_COMMAND", "x", 1);
	cr_assert_str_eq(sr__config_get(c, "harness.claude-code", "command"), "x");
	sr__config_free(c);
}

Test(conf, env_names_use_underscores_and_upper_case)
{
	char *n = sr__config_env_name("tunnel.cloud-flared", "metrics_port");

	cr_assert_str_eq(n, "SANDRUN_TUNNEL_CLOUD_FLARED_METRICS_PORT");
	free(n);
}

Test(conf, invalid_value_names_file_line_key_and_value)
{
	sr__config *c = sr__config_new();
	sr__runner_conf rc;
	const char *p = t_write(dir, "bad.conf",
		"[runner]\n\nlog_level = loud\n");
	char expect[512];

	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_EINVAL);
	snprintf(expect, sizeof(expect),
		 "%s:3: [runner] key 'log_level': invalid value 'loud'", p);
	cr_assert(strstr(t_log_text(), expect), "got: %s", t_log_text());
	sr__config_free(c);
}

Test(conf, invalid_value_from_the_environment_names_the_variable)
{
	sr__config *c = sr__config_new();
	sr__runner_conf rc;

	setenv("SANDRUN_RUNNER_STATE_DIR", "relative/dir", 1);
	cr_assert_eq(sr__config_runner(c, &rc), SR_EINVAL);
	cr_assert(strstr(t_log_text(),
			 "environment SANDRUN_RUNNER_STATE_DIR: [runner] key 'state_dir': invalid value 'relative/dir'"),
		  "got: %s", t_log_text());
	unsetenv("SANDRUN_RUNNER_STATE_DIR");
	sr__config_free(c);
}

Test(conf, rejects_a_bad_provider_name_and_plugin_dir)
{
	sr__config *c = sr__config_new();
	sr__runner_conf rc;
	const char *p = t_write(dir, "a.conf", "[runner]\nprovider = ../evil\n");

	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "key 'provider': invalid value '../evil'"));
	sr__config_free(c);

	c = sr__config_new();
	p = t_write(dir, "b.conf", "[runner]\nplugin_dir = /ok:relative\n");
	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "key 'plugin_dir'"));
	sr__config_free(c);
}

Test(conf, runner_id_is_checked)
{
	sr__config *c = sr__config_new();
	sr__runner_conf rc;
	const char *p = t_write(dir, "a.conf", "[runner]\nid = web-1_a\n");

	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_OK);
	cr_assert_str_eq(rc.id, "web-1_a");
	sr__config_free(c);
	c = sr__config_new();
	p = t_write(dir, "b.conf", "[runner]\nid = Web 1\n");
	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "key 'id': invalid value 'Web 1'"), "%s", t_log_text());
	sr__config_free(c);
	cr_assert(sr__runner_id_valid("r0123456789abcdef"));
	cr_assert_not(sr__runner_id_valid(""));
	cr_assert_not(sr__runner_id_valid("a/b"));
	cr_assert_not(sr__runner_id_valid("x0123456789012345678901234567890123456789"));
	cr_assert(sr__runner_id_valid("x012345678901234567890123456789012345678"));
}

Test(conf, unknown_key_is_a_warning_with_its_line)
{
	sr__config *c = sr__config_new();
	sr__runner_conf rc;
	const char *p = t_write(dir, "a.conf", "[runner]\nprovider = local\nprovder = x\n");
	char expect[512];

	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_OK);
	snprintf(expect, sizeof(expect), "warn: %s:3: [runner] unknown key 'provder' ignored", p);
	cr_assert(strstr(t_log_text(), expect), "got: %s", t_log_text());
	sr__config_free(c);
}

Test(conf, syntax_error_names_the_line)
{
	sr__config *c = sr__config_new();
	const char *p = t_write(dir, "a.conf", "[runner]\nprovider = local\nthis is not ini\n");
	char expect[512];

	cr_assert_eq(sr__config_load(c, p), SR_EINVAL);
	snprintf(expect, sizeof(expect), "%s:3: syntax error", p);
	cr_assert(strstr(t_log_text(), expect), "got: %s", t_log_text());
	sr__config_free(c);
}

Test(conf, missing_file_is_not_found)
{
	sr__config *c = sr__config_new();

	cr_assert_eq(sr__config_load(c, "/nonexistent/sandrun.conf"), SR_ENOTFOUND);
	sr__config_free(c);
}

Test(conf, defaults_apply_without_a_file)
{
	sr__config *c = sr__config_new();
	sr__runner_conf rc;

	cr_assert_eq(sr__config_runner(c, &rc), SR_OK);
	cr_assert_str_eq(rc.provider, "local");
	cr_assert_null(rc.tunnel);
	cr_assert_str_eq(rc.plugin_dir, SR_PLUGINDIR);
	cr_assert_eq(rc.log_level, SR_LOG_INFO);
	sr__config_free(c);
}

Test(conf, explicit_config_that_does_not_exist_fails_context_init)
{
	sr__ctx ctx;

	cr_assert_eq(sr__ctx_init(&ctx, uv_default_loop(), "/nonexistent/x.conf"),
		     SR_ENOTFOUND);
	cr_assert(strstr(t_log_text(), "/nonexistent/x.conf: cannot read"));
	sr__ctx_cleanup(&ctx);
}

Test(conf, unknown_section_is_a_warning)
{
	sr__ctx ctx;
	char text[512];
	const char *p;

	snprintf(text, sizeof(text), "[runner]\nstate_dir = %s/state\n[provider.nosuch]\nx = 1\n", dir);
	p = t_write(dir, "a.conf", text);
	unsetenv("SANDRUN_PLUGIN_PATH");
	setenv("SANDRUN_RUNNER_PLUGIN_DIR", dir, 1);
	cr_assert_eq(sr__ctx_init(&ctx, uv_default_loop(), p), SR_OK);
	cr_assert(strstr(t_log_text(), ":4: unknown section [provider.nosuch] ignored"),
		  "got: %s", t_log_text());
	sr__ctx_cleanup(&ctx);
}

/* Debian's libinih reads lines of at most 200 bytes. */
Test(conf, a_300_character_value_is_read_whole)
{
	sr__config *c = sr__config_new();
	char text[1200], value[301], comment[400];
	const char *p;

	memset(value, 'v', 300);
	value[300] = 0;
	memset(comment, 'c', 299);
	comment[299] = 0;
	snprintf(text, sizeof(text),
		 "[provider.x]\n; %s\nlong = %s   ; a comment\nafter = 1\nspaced = %s  \n", comment,
		 value, value);
	p = t_write(dir, "long.conf", text);
	cr_assert_eq(sr__config_load(c, p), SR_OK, "log: %s", t_log_text());
	cr_assert_str_eq(sr__config_get(c, "provider.x", "long"), value);
	cr_assert_str_eq(sr__config_get(c, "provider.x", "spaced"), value);
	cr_assert_str_eq(sr__config_get(c, "provider.x", "after"), "1");
	sr__config_free(c);
}

Test(conf, a_long_line_keeps_the_line_numbers_right)
{
	sr__config *c = sr__config_new();
	char text[1200], value[301], expect[512];
	const char *p;
	sr__runner_conf rc;

	memset(value, 'v', 300);
	value[300] = 0;
	snprintf(text, sizeof(text), "[runner]\nstate_dir = /%s\nprovder = x\n", value);
	p = t_write(dir, "long2.conf", text);
	cr_assert_eq(sr__config_load(c, p), SR_OK, "log: %s", t_log_text());
	sr__config_runner(c, &rc);
	snprintf(expect, sizeof(expect), "%s:3: [runner] unknown key 'provder'", p);
	cr_assert(strstr(t_log_text(), expect), "got: %s", t_log_text());
	sr__config_free(c);
	c = sr__config_new();
	snprintf(text, sizeof(text), "[runner]\nprovider = local\nnot ini but long %s\n", value);
	p = t_write(dir, "long3.conf", text);
	cr_assert_eq(sr__config_load(c, p), SR_EINVAL);
	snprintf(expect, sizeof(expect), "%s:3: syntax error", p);
	cr_assert(strstr(t_log_text(), expect), "got: %s", t_log_text());
	sr__config_free(c);
}

Test(conf, credential_isolation_and_secrets_allow_hosts_are_checked)
{
	sr__config *c = sr__config_new();
	sr__runner_conf rc;
	const char *p = t_write(dir, "a.conf", "[runner]\ncredential_isolation = required\n"
				"[secrets]\nallow_hosts = api.model.test:18080, gateway.internal\n");

	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_OK, "%s", t_log_text());
	cr_assert_eq(rc.credential_isolation, 1);
	cr_assert_str_eq(rc.secrets_allow_hosts, "api.model.test:18080, gateway.internal");
	cr_assert_null(strstr(t_log_text(), "unknown"), "%s", t_log_text());
	sr__config_free(c);
	c = sr__config_new();
	p = t_write(dir, "b.conf", "[runner]\n");
	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_OK);
	cr_assert_eq(rc.credential_isolation, 0, "the default is preferred");
	cr_assert_str_eq(rc.secrets_allow_hosts, "");
	sr__config_free(c);
	c = sr__config_new();
	p = t_write(dir, "c.conf", "[runner]\ncredential_isolation = sometimes\n");
	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "c.conf:2: [runner] key 'credential_isolation': invalid "
			 "value 'sometimes'"), "%s", t_log_text());
	sr__config_free(c);
	c = sr__config_new();
	p = t_write(dir, "d.conf", "[secrets]\nallow_hosts = *.example.com\n");
	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "key 'allow_hosts': invalid value '*.example.com'"), "%s",
		  t_log_text());
	sr__config_free(c);
}
