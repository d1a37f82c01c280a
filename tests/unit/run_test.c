/* core/run/run.c: the pieces of a run that can be checked without an agent. */
#include <criterion/criterion.h>
#include <jansson.h>

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
	json_t *desc = json_pack("{s:[s, s], s:[s]}", "credential_env", "T_CRED_KEY", "T_UNSET",
				 "passthrough_env", "T_PASS_URL");
	json_t *env = json_array(), *exposed = json_array();
	const char *hosts[] = { "model.example" };
	const sr_credential **creds;
	size_t n;

	setenv("T_CRED_KEY", "sk-isolated-1234", 1);
	setenv("T_PASS_URL", "https://model.example/v1", 1);
	unsetenv("T_UNSET");
	sr__run_env_from_runner(desc, SR_CAP_ISOLATED_SECRETS | SR_CAP_REMOTE, env, exposed);
	cr_assert(env_has(env, "T_PASS_URL"));
	cr_assert_not(env_has(env, "T_CRED_KEY"), "an isolated secret was injected as plain env");
	cr_assert_eq(json_array_size(exposed), 0);
	creds = sr__run_credentials(desc, hosts, 1, &n);
	cr_assert_eq(n, 1);
	cr_assert_eq(creds[0]->size, sizeof(sr_credential));
	cr_assert_eq(creds[0]->target, SR_CRED_ENV);
	cr_assert_str_eq(creds[0]->name, "T_CRED_KEY");
	cr_assert_str_eq(creds[0]->value, "sk-isolated-1234");
	cr_assert_eq(creds[0]->n_hosts, 1);
	cr_assert_str_eq(creds[0]->hosts[0], "model.example");
	cr_assert(creds[0]->isolation_required);
	free(creds);
	json_decref(env);
	json_decref(exposed);
	json_decref(desc);
}

Test(run, without_isolation_secrets_are_plain_env_and_reported_exposed)
{
	json_t *desc = json_pack("{s:[s]}", "credential_env", "T_CRED_KEY");
	json_t *env = json_array(), *exposed = json_array();

	setenv("T_CRED_KEY", "sk-plain-1234", 1);
	sr__run_env_from_runner(desc, 0, env, exposed);
	cr_assert(env_has(env, "T_CRED_KEY"));
	cr_assert_eq(json_array_size(exposed), 1);
	cr_assert_str_eq(json_string_value(json_array_get(exposed, 0)), "T_CRED_KEY");
	json_decref(env);
	json_decref(exposed);
	json_decref(desc);
}
