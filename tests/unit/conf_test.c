/* core/host/conf.c: INI parsing, environment overrides, validation. */
#include <sys/stat.h>

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

/* A NUL would cut a value short (provider = lo\0cal read as "lo"); control
 * bytes mean a binary file: each is an error naming the file and line. */
Test(conf, a_nul_or_a_control_byte_is_an_error_naming_the_line)
{
	sr__config *c = sr__config_new();
	const char *p = t_write(dir, "a.conf", "x");
	char expect[512];
	FILE *f = fopen(p, "w");

	cr_assert_not_null(f);
	fwrite("[runner]\n# ok\nprovider = lo\0cal\n", 1, 32, f);
	fclose(f);
	cr_assert_eq(sr__config_load(c, p), SR_EINVAL);
	snprintf(expect, sizeof(expect), "%s:3: a NUL or another control byte", p);
	cr_assert(strstr(t_log_text(), expect), "got: %s", t_log_text());
	cr_assert_null(sr__config_get(c, "runner", "provider"));
	sr__config_free(c);
	c = sr__config_new();
	p = t_write(dir, "b.conf", "[runner]\nprovider = local\n\x01\x02\x7f\xff binary\n");
	cr_assert_eq(sr__config_load(c, p), SR_EINVAL);
	snprintf(expect, sizeof(expect), "%s:3: a NUL or another control byte", p);
	cr_assert(strstr(t_log_text(), expect), "got: %s", t_log_text());
	sr__config_free(c);
}

/* A directory, a device or a FIFO is refused at once (a FIFO would have
 * hung the open, /dev/zero the read). */
Test(conf, only_a_regular_file_is_read)
{
	sr__config *c = sr__config_new();
	char fifo[512];

	cr_assert_eq(sr__config_load(c, dir), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "not a configuration file (a directory)"), "%s", t_log_text());
	cr_assert_eq(sr__config_load(c, "/dev/zero"), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "/dev/zero: not a configuration file (a device)"), "%s",
		  t_log_text());
	snprintf(fifo, sizeof(fifo), "%s/fifo.conf", dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(sr__config_load(c, fifo), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "not a configuration file (a FIFO)"), "%s", t_log_text());
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

Test(conf, tool_latency_is_normal_or_low)
{
	sr__config *c = sr__config_new();
	sr__runner_conf rc;
	const char *p = t_write(dir, "l.conf", "[runner]\n");

	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_OK);
	cr_assert_eq(rc.tool_latency_low, 0, "the default is normal");
	sr__config_free(c);
	c = sr__config_new();
	p = t_write(dir, "m.conf", "[runner]\ntool_latency = low\n");
	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_OK, "%s", t_log_text());
	cr_assert_eq(rc.tool_latency_low, 1);
	cr_assert_null(strstr(t_log_text(), "unknown"), "%s", t_log_text());
	sr__config_free(c);
	c = sr__config_new();
	p = t_write(dir, "n.conf", "[runner]\ntool_latency = fast\n");
	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "n.conf:2: [runner] key 'tool_latency': invalid value 'fast'"),
		  "%s", t_log_text());
	sr__config_free(c);
}

Test(conf, store_url_takes_postgresql_and_never_echoes_a_bad_one)
{
	sr__config *c = sr__config_new();
	sr__runner_conf rc;
	const char *p = t_write(dir, "s.conf", "[runner]\n");

	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_OK);
	cr_assert_str_eq(rc.store_url, "", "the default is SQLite in the state directory");
	sr__config_free(c);
	c = sr__config_new();
	p = t_write(dir, "t.conf", "[store]\nurl = postgresql://sandrun@db.internal/sandrun\n");
	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_OK);
	cr_assert_str_eq(rc.store_url, "postgresql://sandrun@db.internal/sandrun");
	cr_assert_null(strstr(t_log_text(), "unknown"), "%s", t_log_text());
	sr__config_free(c);
	c = sr__config_new();
	p = t_write(dir, "u.conf", "[store]\nurl = host=/run/postgresql dbname=sandrun\n");
	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_OK, "libpq's key=value form");
	sr__config_free(c);
	c = sr__config_new();
	p = t_write(dir, "v.conf", "[store]\nurl = mysql://root:s3cr3tpw@db/sandrun\n");
	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_runner(c, &rc), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "v.conf:2: [store] key 'url': invalid value: a PostgreSQL "
			 "URI"), "%s", t_log_text());
	cr_assert_null(strstr(t_log_text(), "s3cr3tpw"), "the password is shown: %s",
		       t_log_text());
	sr__config_free(c);
}

Test(conf, service_defaults)
{
	sr__config *c = sr__config_new();
	sr__service_conf sc;

	cr_assert_eq(sr__config_service(c, &sc), SR_OK);
	cr_assert_str_eq(sc.listen, "127.0.0.1:8470");
	cr_assert_null(sc.tokens_file);
	cr_assert_eq(sc.max_body, 1024 * 1024);
	cr_assert_eq(sc.max_runs, 8);
	cr_assert_eq(sc.event_buffer, 10000);
	cr_assert_eq(sc.runs_kept, 1000);
	cr_assert_eq(sc.drain_timeout_s, 60);
	cr_assert_eq(sc.warm_live_s, 120);
	cr_assert_eq(sc.max_warm, 20);
	cr_assert_eq(sc.warm_ttl_s, 0);
	cr_assert_eq(sc.lease_ttl_s, 30);
	cr_assert_eq(sc.max_client_connections, 256);
	cr_assert_eq(sc.header_timeout_s, 10);
	sr__config_free(c);
}

Test(conf, service_values_are_read_and_checked)
{
	sr__config *c = sr__config_new();
	const char *p = t_write(dir, "s.conf",
		"[service]\nlisten = unix:/run/sandrund.sock\ntokens_file = /etc/sandrun/tokens\n"
		"max_body = 64K\nmax_runs = 3\nevent_buffer = 100\nruns_kept = 0\n"
		"drain_timeout = 0\nwarm_live = 0\nmax_warm = 0\nwarm_ttl = 86400\nlease_ttl = 2\n"
		"max_client_connections = 1\nheader_timeout = 600\n");
	sr__service_conf sc;

	cr_assert_eq(sr__config_load(c, p), SR_OK);
	cr_assert_eq(sr__config_service(c, &sc), SR_OK, "%s", t_log_text());
	cr_assert_str_eq(sc.listen, "unix:/run/sandrund.sock");
	cr_assert_str_eq(sc.tokens_file, "/etc/sandrun/tokens");
	cr_assert_eq(sc.max_body, 64 * 1024);
	cr_assert_eq(sc.max_runs, 3);
	cr_assert_eq(sc.event_buffer, 100);
	cr_assert_eq(sc.runs_kept, 0);
	cr_assert_eq(sc.drain_timeout_s, 0);
	cr_assert_eq(sc.warm_live_s, 0);
	cr_assert_eq(sc.max_warm, 0);
	cr_assert_eq(sc.warm_ttl_s, 86400);
	cr_assert_eq(sc.lease_ttl_s, 2);
	cr_assert_eq(sc.max_client_connections, 1);
	cr_assert_eq(sc.header_timeout_s, 600);
	sr__config_free(c);
}

Test(conf, a_bad_service_value_names_file_line_and_key)
{
	static const char *const bad[][2] = {
		{ "listen", "localhost" }, { "listen", "unix:relative.sock" },
		{ "listen", "[::1:80" }, { "listen", "host:99999" }, { "listen", "a b:80" },
		{ "tokens_file", "tokens.txt" }, { "max_body", "12" }, { "max_body", "1G" },
		{ "max_body", "-5" }, { "max_runs", "0" }, { "max_runs", "many" },
		{ "event_buffer", "15" }, { "runs_kept", "100001" },
		{ "drain_timeout", "86401" }, { "drain_timeout", "1m" },
		{ "warm_live", "86401" }, { "warm_live", "-1" }, { "max_warm", "10001" },
		{ "max_warm", "lots" }, { "warm_ttl", "31536001" }, { "warm_ttl", "1h" },
		{ "lease_ttl", "1" }, { "lease_ttl", "3601" },
		{ "max_client_connections", "0" }, { "max_client_connections", "100001" },
		{ "header_timeout", "0" }, { "header_timeout", "601" }, { "header_timeout", "5s" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		sr__config *c = sr__config_new();
		char text[200], want[200];
		sr__service_conf sc;
		snprintf(text, sizeof(text), "[service]\n\n%s = %s\n", bad[i][0], bad[i][1]);
		cr_assert_eq(sr__config_load(c, t_write(dir, "bad.conf", text)), SR_OK);
		cr_assert_eq(sr__config_service(c, &sc), SR_EINVAL, "%s = %s accepted", bad[i][0],
			     bad[i][1]);
		snprintf(want, sizeof(want), "bad.conf:3: [service] key '%s': invalid value '%s'",
			 bad[i][0], bad[i][1]);
		cr_assert(strstr(t_log_text(), want), "no '%s' in %s", want, t_log_text());
		sr__config_free(c);
	}
}

Test(conf, service_keys_from_the_environment_and_unknown_ones)
{
	sr__config *c = sr__config_new();
	const char *p = t_write(dir, "e.conf", "[service]\nlisten = 127.0.0.1:1\nmax_run = 3\n");
	sr__service_conf sc;

	cr_assert_eq(sr__config_load(c, p), SR_OK);
	setenv("SANDRUN_SERVICE_LISTEN", "[::1]:0", 1);
	setenv("SANDRUN_SERVICE_MAX_RUNS", "none", 1);
	cr_assert_eq(sr__config_service(c, &sc), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "environment SANDRUN_SERVICE_MAX_RUNS: [service] key 'max_runs'"),
		  "%s", t_log_text());
	cr_assert(strstr(t_log_text(), "e.conf:3: [service] unknown key 'max_run' ignored"), "%s",
		  t_log_text());
	unsetenv("SANDRUN_SERVICE_MAX_RUNS");
	cr_assert_eq(sr__config_service(c, &sc), SR_OK);
	cr_assert_str_eq(sc.listen, "[::1]:0");
	unsetenv("SANDRUN_SERVICE_LISTEN");
	sr__config_free(c);
}

Test(conf, same_section_compares_the_files_keys_and_values)
{
	sr__config *a = sr__config_new(), *b = sr__config_new(), *c = sr__config_new();

	cr_assert_eq(sr__config_load(a, t_write(dir, "a.conf",
		"[provider.local]\nroot = /r\nroot = /s\n[runner]\nprovider = local\n")), SR_OK);
	cr_assert_eq(sr__config_load(b, t_write(dir, "b.conf",
		"[runner]\nprovider = x\n[provider.local]\nroot = /s\n")), SR_OK);
	cr_assert_eq(sr__config_load(c, t_write(dir, "c.conf",
		"[provider.local]\nroot = /s\nbwrap = off\n")), SR_OK);
	/* The last value set is the one that counts; other sections differ. */
	cr_assert(sr__config_same_section(a, b, "provider.local"));
	cr_assert(!sr__config_same_section(a, b, "runner"));
	/* A key added or gone is a change, either way round. */
	cr_assert(!sr__config_same_section(a, c, "provider.local"));
	cr_assert(!sr__config_same_section(c, a, "provider.local"));
	cr_assert(sr__config_same_section(a, c, "harness.claude"));
	sr__config_free(a);
	sr__config_free(b);
	sr__config_free(c);
}
