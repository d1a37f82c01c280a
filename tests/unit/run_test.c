/* core/run/run.c: the pieces of a run that can be checked without an agent. */
#include <criterion/criterion.h>
#include <jansson.h>

#include "core/host/log.h"
#include "core/run/creds.h"
#include "core/run/run.h"

static json_t *files_of(const char *path)
{
	return json_pack("[{s:s, s:s, s:i}]", "path", path, "content", "x", "mode", 0644);
}

static const char *path_at(json_t *steps, size_t i)
{
	return json_string_value(json_object_get(json_array_get(steps, i), "path"));
}

Test(run, files_below_home_get_their_parents_made_first)
{
	json_t *files = files_of("/h/.config/agent/settings.json");
	json_t *steps = sr__run_expand_files("/h", "/w", files);

	cr_assert_eq(json_array_size(steps), 3);
	cr_assert_str_eq(path_at(steps, 0), "/h/.config");
	cr_assert_str_eq(path_at(steps, 1), "/h/.config/agent");
	cr_assert_str_eq(path_at(steps, 2), "/h/.config/agent/settings.json");
	json_decref(steps);
	json_decref(files);
}

Test(run, a_file_outside_home_and_workspace_gets_no_parents)
{
	/* Shorter than either base: reading past its end was the defect. */
	json_t *files = files_of("/x");
	json_t *steps = sr__run_expand_files("/home/sandbox-user", "/workspace/long-name", files);

	cr_assert_eq(json_array_size(steps), 1);
	cr_assert_str_eq(path_at(steps, 0), "/x");
	json_decref(steps);
	json_decref(files);
	files = files_of("/etc/agent/x.json");
	steps = sr__run_expand_files("/home/u", "/work", files);
	cr_assert_eq(json_array_size(steps), 1, "parents were made outside home and workspace");
	json_decref(steps);
	json_decref(files);
}

Test(run, a_sibling_with_a_common_prefix_is_not_below_home)
{
	json_t *files = files_of("/home/u2/a/b");
	json_t *steps = sr__run_expand_files("/home/u", "/work", files);

	cr_assert_eq(json_array_size(steps), 1);
	json_decref(steps);
	json_decref(files);
}

Test(run, selected_lines_stay_within_the_data)
{
	/* Not NUL-terminated at len: what follows must never be read. */
	const char buf[] = "l1\nl2\nl3\nEXTRA";
	size_t len = 9, off, n;

	sr__run_select_lines(buf, len, 2, 0, &off, &n);
	cr_assert_eq(off, 3);
	cr_assert_eq(n, 6, "took %zu bytes: '%.*s'", n, (int)n, buf + off);
	sr__run_select_lines(buf, len, 1, 2, &off, &n);
	cr_assert_eq(off, 0);
	cr_assert_eq(n, 6);
	sr__run_select_lines(buf, 4, 1, 5, &off, &n);
	cr_assert_eq(n, 4);
	sr__run_select_lines(buf, len, 10, 0, &off, &n);
	cr_assert_eq(n, 0);
	cr_assert_leq(off, len);
}

static int env_has(json_t *env, const char *name)
{
	json_t *v;
	size_t i;

	json_array_foreach(env, i, v)
		if (strcmp(json_string_value(json_object_get(v, "name")), name) == 0)
			return 1;
	return 0;
}

Test(run, isolated_secrets_never_reach_the_plain_environment)
{
	json_t *desc = json_pack("{s:[s, s], s:[{s:s, s:s, s:s}], s:[s]}", "credential_env",
				 "T_CRED_KEY", "T_UNSET", "credentials", "env", "T_CRED_KEY", "kind",
				 "bearer", "host", "api.model.example", "passthrough_env", "T_PASS_URL");
	json_t *env = json_array(), *exposed = json_array();
	const sr_credential *const *creds;
	sr__creds *c = NULL;
	char why[400], fp[65], fp2[65];
	sr__secret_holds holds = { 0 };

	setenv("T_CRED_KEY", "sk-isolated-1234", 1);
	setenv("T_PASS_URL", "https://model.example/v1", 1);
	unsetenv("T_UNSET");
	sr__run_env_from_runner(desc, SR_CAP_ISOLATED_SECRETS | SR_CAP_REMOTE, NULL, env, exposed,
				&holds);
	sr__secret_holds_release(&holds);
	cr_assert(env_has(env, "T_PASS_URL"));
	cr_assert_not(env_has(env, "T_CRED_KEY"), "an isolated secret was injected as plain env");
	cr_assert_eq(json_array_size(exposed), 0);
	cr_assert_eq(sr__creds_collect(desc, NULL, NULL, NULL, NULL, &c, why, sizeof(why)), SR_OK, "%s",
		     why);
	cr_assert_eq(sr__creds_count(c), 1);
	creds = sr__creds_spec(c);
	cr_assert_eq(creds[0]->size, sizeof(sr_credential));
	cr_assert_eq(creds[0]->target, SR_CRED_ENV);
	cr_assert_str_eq(creds[0]->name, "T_CRED_KEY");
	cr_assert_str_eq(creds[0]->value, "sk-isolated-1234");
	cr_assert_str_eq(creds[0]->usage, "bearer");
	cr_assert_eq(creds[0]->n_hosts, 1);
	cr_assert_str_eq(creds[0]->hosts[0], "api.model.example", "the declared host");
	cr_assert(creds[0]->isolation_required);
	sr__creds_fingerprint(c, fp);
	cr_assert_eq(strlen(fp), 64);
	cr_assert_null(strstr(fp, "1234"));
	sr__creds_free(c);
	/* The model URL replaces the declared host; a new value, a new
	 * fingerprint. */
	setenv("T_CRED_KEY", "sk-isolated-5678", 1);
	cr_assert_eq(sr__creds_collect(desc, NULL, "https://gw.example.org/v1", NULL, NULL, &c, why,
				       sizeof(why)), SR_OK, "%s", why);
	cr_assert_str_eq(sr__creds_spec(c)[0]->hosts[0], "gw.example.org");
	cr_assert_null(sr__creds_spec(c)[0]->port, "a public https host: any port of it");
	cr_assert_null(sr__creds_port_bound(c));
	sr__creds_fingerprint(c, fp2);
	cr_assert_str_neq(fp, fp2);
	sr__creds_free(c);
	{
		/* Let through by an allow_hosts "host:port" entry: the value
		 * may go to that port only, which the credential carries; by
		 * a host entry: any port. */
		const char *with_port[] = { "api.model.test:18080", NULL };
		const char *host_only[] = { "api.model.test", NULL };
		cr_assert_eq(sr__creds_collect(desc, NULL, "http://api.model.test:18080/v1", NULL,
					       with_port, &c, why, sizeof(why)), SR_OK, "%s", why);
		cr_assert_str_eq(sr__creds_spec(c)[0]->hosts[0], "api.model.test");
		cr_assert_str_eq(sr__creds_spec(c)[0]->port, "18080");
		cr_assert(sr__creds_port_bound(c) == sr__creds_spec(c)[0]);
		sr__creds_fingerprint(c, fp);
		sr__creds_free(c);
		cr_assert_eq(sr__creds_collect(desc, NULL, "http://api.model.test:18080/v1", NULL,
					       host_only, &c, why, sizeof(why)), SR_OK, "%s", why);
		cr_assert_null(sr__creds_spec(c)[0]->port);
		cr_assert_null(sr__creds_port_bound(c));
		sr__creds_fingerprint(c, fp2);
		cr_assert_str_neq(fp, fp2, "the port is in the fingerprint");
		sr__creds_free(c);
	}
	json_decref(env);
	json_decref(exposed);
	json_decref(desc);
}

/* The exact host rule, each way of breaking it refused with its reason,
 * before anything exists. */
Test(run, the_exact_host_rule)
{
	static const struct { const char *dest, *why; } bad[] = {
		{ "https://*.example.com", "wildcard" },
		{ "*.example.com", "wildcard" },
		{ "https://1.2.3.4/v1", "IP address" },
		{ "https://[::1]/v1", "IP address" },
		{ "https://localhost/v1", "local name" },
		{ "https://api.localhost", "local name" },
		{ "https://printer.local", "local name" },
		{ "https://db.corp.internal", "local name" },
		{ "http://api.example.com", "not https" },
		{ "https://api.example.com:8443/", "port 8443" },
		{ "https://API.example.com", "not lower case" },
		{ "https://intranet/", "single label" },
		{ "https://user:pw@api.example.com/", "credentials in the URL" },
		{ "https://api..example.com", "empty label" },
		{ "https://api_x.example.com", "not a valid host name" },
		{ "", "no destination" },
	};
	const char *exceptions[] = { "api.model.test:18080", "gateway.internal", "10.0.0.7",
				     "*.example.com", NULL };
	char host[256], why[400];

	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		cr_assert_eq(sr__creds_host_rule(bad[i].dest, NULL, host, sizeof(host), why,
						 sizeof(why)), SR_EPERM, "%s passed", bad[i].dest);
		cr_assert(strstr(why, bad[i].why), "%s: '%s' does not say '%s'", bad[i].dest, why,
			  bad[i].why);
	}
	cr_assert_eq(sr__creds_host_rule("https://api.anthropic.com/v1", NULL, host, sizeof(host),
					 why, sizeof(why)), SR_OK, "%s", why);
	cr_assert_str_eq(host, "api.anthropic.com");
	cr_assert_eq(sr__creds_host_rule("api.openai.com", NULL, host, sizeof(host), why,
					 sizeof(why)), SR_OK, "%s", why);
	cr_assert_eq(sr__creds_host_rule("https://api.openai.com:443", NULL, host, sizeof(host),
					 why, sizeof(why)), SR_OK, "%s", why);
	/* Exceptions lift every check but the wildcard one, and only for
	 * the exact host (and port, when listed with one). */
	cr_assert_eq(sr__creds_host_rule("http://api.model.test:18080/v1", exceptions, host,
					 sizeof(host), why, sizeof(why)), SR_OK, "%s", why);
	cr_assert_str_eq(host, "api.model.test");
	cr_assert_eq(sr__creds_host_rule("http://api.model.test:18081/v1", exceptions, host,
					 sizeof(host), why, sizeof(why)), SR_EPERM);
	cr_assert_eq(sr__creds_host_rule("http://sub.api.model.test:18080/", exceptions, host,
					 sizeof(host), why, sizeof(why)), SR_EPERM);
	cr_assert_eq(sr__creds_host_rule("https://gateway.internal/", exceptions, host,
					 sizeof(host), why, sizeof(why)), SR_OK, "%s", why);
	cr_assert_eq(sr__creds_host_rule("http://10.0.0.7:8080/", exceptions, host, sizeof(host),
					 why, sizeof(why)), SR_OK, "%s", why);
	cr_assert_eq(sr__creds_host_rule("https://*.example.com", exceptions, host, sizeof(host),
					 why, sizeof(why)), SR_EPERM, "a wildcard is never excepted");
}

/* Bindings that break the rule are refused naming the binding; secret
 * headers of user MCP servers are bindings to the server's host, and get
 * the provider's placeholders (never their values when one is missing). */
Test(run, bindings_name_what_breaks_the_rule_and_headers_get_placeholders)
{
	json_t *desc = json_pack("{s:[s]}", "credential_env", "T_BARE_KEY");
	json_t *mcp = json_pack("[{s:s, s:s, s:s, s:[{s:s, s:s}, {s:s, s:s}]}]", "name", "docs",
				"type", "http", "url", "https://mcp.docs.example/mcp", "headers",
				"name", "Authorization", "value", "Bearer tok-secret-99", "name",
				"X-Tenant", "value", "acme");
	json_t *ph, *names = json_array();
	sr__creds *c = NULL;
	char why[400];

	setenv("T_BARE_KEY", "sk-bare-1", 1);
	cr_assert_eq(sr__creds_collect(desc, NULL, NULL, NULL, NULL, &c, why, sizeof(why)), SR_EPERM);
	cr_assert(strstr(why, "T_BARE_KEY") && strstr(why, "no destination host"), "%s", why);
	cr_assert_eq(sr__creds_collect(desc, NULL, "http://127.0.0.1:9/v1", NULL, NULL, &c, why,
				       sizeof(why)), SR_EPERM);
	cr_assert(strstr(why, "credential T_BARE_KEY: "), "%s", why);
	cr_assert_eq(sr__creds_collect(desc, NULL, "https://model.example.com", mcp, NULL, &c, why,
				       sizeof(why)), SR_OK, "%s", why);
	cr_assert_eq(sr__creds_count(c), 2, "the key and the Authorization header, not X-Tenant");
	cr_assert_str_eq(sr__creds_spec(c)[0]->name, "T_BARE_KEY");
	cr_assert_str_eq(sr__creds_spec(c)[1]->name, "docs/Authorization");
	cr_assert_eq(sr__creds_spec(c)[1]->target, SR_CRED_HEADER);
	cr_assert_str_eq(sr__creds_spec(c)[1]->hosts[0], "mcp.docs.example");
	cr_assert_str_eq(sr__creds_spec(c)[1]->usage, "bearer");
	ph = json_pack("{s:s}", "T_BARE_KEY", "dtn_secret_aa");
	cr_assert_eq(sr__creds_apply_placeholders(c, ph, mcp, why, sizeof(why)), SR_ENOTFOUND);
	cr_assert(strstr(why, "docs") && strstr(why, "Authorization"), "%s", why);
	cr_assert_str_eq(json_string_value(json_object_get(
		json_array_get(json_object_get(json_array_get(mcp, 0), "headers"), 0), "value")),
		"Bearer tok-secret-99", "nothing changed before every placeholder is known");
	json_object_set_new(ph, "docs/Authorization", json_string("dtn_secret_bb"));
	cr_assert_eq(sr__creds_apply_placeholders(c, ph, mcp, why, sizeof(why)), SR_OK);
	cr_assert_str_eq(json_string_value(json_object_get(
		json_array_get(json_object_get(json_array_get(mcp, 0), "headers"), 0), "value")),
		"dtn_secret_bb");
	sr__creds_free(c);
	sr__creds_header_names(mcp, names);
	cr_assert_eq(json_array_size(names), 1);
	cr_assert_str_eq(json_string_value(json_array_get(names, 0)),
			 "MCP server 'docs' header 'Authorization'");
	json_decref(ph);
	json_decref(names);
	json_decref(mcp);
	json_decref(desc);
}

Test(run, a_credentials_map_replaces_the_runner_environment)
{
	json_t *desc = json_pack("{s:[s, s], s:[s]}", "credential_env", "T_CRED_KEY",
				 "T_CRED_OTHER", "passthrough_env", "T_PASS_URL");
	json_t *creds = json_pack("{s:s}", "T_CRED_KEY", "sk-from-request-1234");
	json_t *env = json_array(), *exposed = json_array(), *v;
	sr__creds *c = NULL;
	char why[400], *red;
	sr__secret_holds holds = { 0 };
	size_t i;

	setenv("T_CRED_KEY", "sk-from-runner-1234", 1);
	setenv("T_CRED_OTHER", "sk-runner-other-1234", 1);
	setenv("T_PASS_URL", "https://model.example/v1", 1);
	sr__run_env_from_runner(desc, 0, creds, env, exposed, &holds);
	json_array_foreach(env, i, v)
		if (strcmp(json_string_value(json_object_get(v, "name")), "T_CRED_KEY") == 0)
			cr_assert_str_eq(json_string_value(json_object_get(v, "value")),
					 "sk-from-request-1234");
	cr_assert(env_has(env, "T_CRED_KEY"));
	cr_assert_not(env_has(env, "T_CRED_OTHER"), "the runner's own credential was mixed in");
	cr_assert(env_has(env, "T_PASS_URL"), "passthrough still comes from the runner");
	cr_assert_eq(json_array_size(exposed), 1);
	/* The value is held for redaction, and only while it is held. */
	red = sr__redact("key sk-from-request-1234 here");
	cr_assert_str_eq(red, "key [REDACTED] here");
	free(red);
	sr__secret_holds_release(&holds);
	red = sr__redact("key sk-from-request-1234 here");
	cr_assert_str_eq(red, "key sk-from-request-1234 here", "kept after its run let it go");
	free(red);
	cr_assert_eq(sr__creds_collect(desc, creds, "https://gw.example.org", NULL, NULL, &c, why,
				       sizeof(why)), SR_OK, "%s", why);
	cr_assert_eq(sr__creds_count(c), 1);
	cr_assert_str_eq(sr__creds_spec(c)[0]->value, "sk-from-request-1234");
	red = sr__redact("key sk-from-request-1234 here");
	cr_assert_str_eq(red, "key [REDACTED] here", "the bindings hold it too");
	free(red);
	sr__creds_free(c);
	red = sr__redact("key sk-from-request-1234 here");
	cr_assert_str_eq(red, "key sk-from-request-1234 here");
	free(red);
	json_decref(env);
	json_decref(exposed);
	json_decref(creds);
	json_decref(desc);
}

Test(run, without_isolation_secrets_are_plain_env_and_reported_exposed)
{
	json_t *desc = json_pack("{s:[s]}", "credential_env", "T_CRED_KEY");
	json_t *env = json_array(), *exposed = json_array();

	sr__secret_holds holds = { 0 };

	setenv("T_CRED_KEY", "sk-plain-1234", 1);
	sr__run_env_from_runner(desc, 0, NULL, env, exposed, &holds);
	sr__secret_holds_release(&holds);
	cr_assert(env_has(env, "T_CRED_KEY"));
	cr_assert_eq(json_array_size(exposed), 1);
	cr_assert_str_eq(json_string_value(json_array_get(exposed, 0)), "T_CRED_KEY");
	json_decref(env);
	json_decref(exposed);
	json_decref(desc);
}
