/* The local provider (plugins/provider/local.c), loaded through the real
 * loader and driven through the checked provider calls. */
#include <signal.h>
#include <sys/stat.h>

#include <jansson.h>

#include "harness.h"
#include "core/plugins/host.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"

static char *dir;
static sr__ctx ctx;
static sr__plugin *p;
static sr__wait w;

static void start(const char *extra_conf)
{
	char conf[1024];

	/* Plugins come from SANDRUN_PLUGIN_PATH (the build tree). */
	snprintf(conf, sizeof(conf), "[runner]\nstate_dir = %s/state\nplugin_dir = %s/none\n%s",
		 dir, dir, extra_conf);
	cr_assert_eq(sr__ctx_init(&ctx, uv_default_loop(),
				  t_write(dir, "sandrun.conf", conf)), SR_OK);
	p = sr__registry_find(ctx.reg, SR_PLUGIN_PROVIDER, "local");
	cr_assert_not_null(p, "local provider not found in %s", getenv("SANDRUN_PLUGIN_PATH"));
	cr_assert_eq(sr__plugin_start(&ctx, p), SR_OK);
}

static void setup(void)
{
	cr_assert_not_null(getenv("SANDRUN_PLUGIN_PATH"), "run under make check");
	dir = t_tmpdir();
	t_log_capture();
}

static void teardown(void)
{
	sr__ctx_cleanup(&ctx);
}

TestSuite(local, .init = setup, .fini = teardown, .timeout = 30);

static void reset(void)
{
	sr__wait_clear(&w);
}

static char *create_with(const sr_sandbox_spec *spec)
{
	static char id[64];
	json_t *j;

	reset();
	sr__provider_create(p, sr__next_req(), spec, sr__wait_done, &w);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_OK, "create: %s", w.message);
	j = json_loads(w.json, 0, NULL);
	snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(j, "id")));
	json_decref(j);
	return id;
}

static char *create(void)
{
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0,
				 &(sr_network_policy){ sizeof(sr_network_policy), SR_NET_OPEN, NULL, 0 }, NULL, 0 };

	return create_with(&spec);
}

/* exec and gather stdout */
typedef struct out {
	char buf[65536];
	size_t len;
	int exited, status, sig;
} out;

static void o_chunk(void *ud, const void *d, size_t n)
{
	out *o = ud;

	if (o->len + n < sizeof(o->buf)) {
		memcpy(o->buf + o->len, d, n);
		o->len += n;
	}
}

static void o_exit(void *ud, int status, int sig)
{
	out *o = ud;

	o->exited = 1;
	o->status = status;
	o->sig = sig;
}

static int run_in(const char *id, const char *const *argv, const sr_pair *env,
		  size_t n_env, out *o)
{
	sr_channel_callbacks cbs = { sizeof(cbs), o_chunk, o_chunk, o_exit, NULL };
	sr_exec_spec spec = { sizeof(spec), argv, env, n_env, NULL, NULL, 0 };
	uint64_t req = sr__next_req();
	int rc;

	memset(o, 0, sizeof(*o));
	rc = sr__provider_exec(p, req, id, &spec, &cbs, o);
	if (rc != SR_OK)
		return rc;
	sr__provider_channel_close_input(p, req);
	while (!o->exited && uv_run(ctx.loop, UV_RUN_ONCE))
		;
	return SR_OK;
}

Test(local, create_makes_a_private_directory_with_a_workspace)
{
	char *id, path[4096];
	struct stat st;
	json_t *j;
	const char *ws;

	start("");
	id = create();
	j = json_loads(w.json, 0, NULL);
	ws = json_string_value(json_object_get(j, "workspace"));

	cr_assert(strncmp(id, "sb-", 3) == 0 && strlen(id) == 19, "id %s", id);
	snprintf(path, sizeof(path), "%s/state/plugins/provider.local/sandboxes/%s", dir, id);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0700);
	cr_assert(S_ISDIR(st.st_mode));
	cr_assert(strstr(ws, path) == ws && strstr(ws, "/workspace"));
	cr_assert_eq(stat(ws, &st), 0);
	json_decref(j);
}

Test(local, two_sandboxes_get_different_ids)
{
	char first[64];

	start("");
	snprintf(first, sizeof(first), "%s", create());
	cr_assert_str_neq(first, create());
}

Test(local, exec_runs_in_the_workspace_with_output_and_status)
{
	const char *argv[] = { "sh", "-c", "pwd; exit 4", NULL };
	out o;
	char *id;

	start("");
	id = create();
	cr_assert_eq(run_in(id, argv, NULL, 0, &o), SR_OK);
	cr_assert_eq(o.status, 4);
	cr_assert(strstr(o.buf, id) && strstr(o.buf, "/workspace\n"), "%s", o.buf);
}

Test(local, environment_is_reduced_to_the_allowlist_plus_what_the_run_sets)
{
	const char *argv[] = { "env", NULL };
	sr_pair sandbox_env[] = { { "FROM_SANDBOX", "s" } };
	sr_pair exec_env[] = { { "FROM_EXEC", "e" } };
	sr_sandbox_spec spec = { sizeof(spec), NULL, sandbox_env, 1, NULL, 0,
				 &(sr_network_policy){ sizeof(sr_network_policy), SR_NET_OPEN, NULL, 0 }, NULL, 0 };
	out o;
	char *id;

	setenv("RUNNER_SECRET", "do-not-leak", 1);
	setenv("ALLOWED_EXTRA", "extra", 1);
	start("[provider.local]\nenv_allow = ALLOWED_EXTRA\n");
	id = create_with(&spec);
	cr_assert_eq(run_in(id, argv, exec_env, 1, &o), SR_OK);
	cr_assert(strstr(o.buf, "RUNNER_SECRET") == NULL, "leaked: %s", o.buf);
	cr_assert(strstr(o.buf, "\nPATH=") || strncmp(o.buf, "PATH=", 5) == 0);
	cr_assert(strstr(o.buf, "ALLOWED_EXTRA=extra"));
	cr_assert(strstr(o.buf, "FROM_SANDBOX=s"));
	cr_assert(strstr(o.buf, "FROM_EXEC=e"));
	cr_assert(strstr(o.buf, "HOME=") && strstr(o.buf, "/home\n"));
}

static void file_op_ok(const char *what)
{
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_OK, "%s: %s", what, w.message);
}

Test(local, file_operations_round_trip)
{
	char *id;
	json_t *list;

	start("");
	id = create();
	reset();
	sr__provider_file_mkdir(p, 1, id, "src", 0755, sr__wait_done, &w);
	file_op_ok("mkdir");
	reset();
	sr__provider_file_put(p, 2, id, "src/a.txt", "alpha", 5, 0600, sr__wait_done, &w);
	file_op_ok("put");
	reset();
	sr__provider_file_rename(p, 3, id, "src/a.txt", "src/b.txt", sr__wait_done, &w);
	file_op_ok("rename");
	reset();
	sr__provider_file_list(p, 4, id, "src", sr__wait_done, &w);
	file_op_ok("list");
	list = json_loads(w.json, 0, NULL);
	cr_assert_eq(json_array_size(list), 1);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(list, 0), "name")), "b.txt");
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(list, 0), "type")), "file");
	json_decref(list);
	reset();
	sr__provider_file_get(p, 5, id, "src/b.txt", 0, sr__wait_done, &w);
	file_op_ok("get");
	cr_assert_eq(w.len, 5);
	cr_assert_str_eq(w.data, "alpha");
	reset();
	sr__provider_file_get(p, 6, id, "src/b.txt", 3, sr__wait_done, &w);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_ETOOBIG);
	reset();
	sr__provider_file_remove(p, 7, id, "src/b.txt", sr__wait_done, &w);
	file_op_ok("remove");
	reset();
	sr__provider_file_get(p, 8, id, "src/b.txt", 0, sr__wait_done, &w);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_ENOTFOUND);
}

Test(local, paths_cannot_escape_the_sandbox)
{
	char *id, link[4200];
	json_t *j;

	start("");
	id = create();
	j = json_loads(w.json, 0, NULL);
	snprintf(link, sizeof(link), "%s/escape",
		 json_string_value(json_object_get(j, "workspace")));
	json_decref(j);
	cr_assert_eq(symlink("/etc", link), 0);

	reset();
	sr__provider_file_get(p, 1, id, "../../../../../../etc/hostname", 0, sr__wait_done, &w);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_EPERM, "dotdot: %d %s", w.status, w.message);
	reset();
	sr__provider_file_get(p, 2, id, "escape/hostname", 0, sr__wait_done, &w);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_EPERM, "symlink: %d %s", w.status, w.message);
	reset();
	sr__provider_file_put(p, 3, id, "escape/planted", "x", 1, 0, sr__wait_done, &w);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_EPERM, "put via symlink: %d %s", w.status, w.message);
	cr_assert_neq(access("/etc/planted", F_OK), 0);
	reset();
	sr__provider_file_get(p, 4, id, "/etc/hostname", 0, sr__wait_done, &w);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_EPERM);
	cr_assert(strstr(w.message, "outside sandbox"), "%s", w.message);
}

Test(local, invalid_ids_are_rejected_not_resolved)
{
	start("");
	reset();
	/* Refused with a message: delivered later, never inside the call. */
	cr_assert_eq(sr__provider_destroy(p, 1, "../../etc", sr__wait_done, &w), SR_OK);
	cr_assert(!w.done);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_EINVAL);
	cr_assert(strstr(w.message, "invalid sandbox id"), "%s", w.message);
	reset();
	sr__provider_reconnect(p, 2, "sb-0000000000000000", NULL, sr__wait_done, &w);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_ENOTFOUND);
}

Test(local, park_reconnect_destroy)
{
	char *id, path[4096];
	const char *argv[] = { "sh", "-c", "echo kept > note", NULL };
	const char *argv2[] = { "cat", "note", NULL };
	out o;

	start("");
	id = create();
	cr_assert_eq(run_in(id, argv, NULL, 0, &o), SR_OK);
	reset();
	sr__provider_park(p, 1, id, SR_PARK_STOPPED, sr__wait_done, &w);
	file_op_ok("park");
	reset();
	sr__provider_reconnect(p, 2, id, NULL, sr__wait_done, &w);
	file_op_ok("reconnect");
	cr_assert(strstr(w.json, id));
	cr_assert_eq(run_in(id, argv2, NULL, 0, &o), SR_OK);
	cr_assert_str_eq(o.buf, "kept\n");
	reset();
	sr__provider_destroy(p, 3, id, sr__wait_done, &w);
	file_op_ok("destroy");
	snprintf(path, sizeof(path), "%s/state/plugins/provider.local/sandboxes/%s", dir, id);
	cr_assert_neq(access(path, F_OK), 0, "%s still exists", path);
	reset();
	sr__provider_reconnect(p, 4, id, NULL, sr__wait_done, &w);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_ENOTFOUND);
}

Test(local, parking_stopped_kills_running_processes)
{
	const char *argv[] = { "sleep", "30", NULL };
	sr_channel_callbacks cbs = { sizeof(cbs), o_chunk, o_chunk, o_exit, NULL };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, NULL, 0 };
	out o;
	char *id;

	start("");
	id = create();
	memset(&o, 0, sizeof(o));
	cr_assert_eq(sr__provider_exec(p, 9, id, &spec, &cbs, &o), SR_OK);
	reset();
	sr__provider_park(p, 10, id, SR_PARK_STOPPED, sr__wait_done, &w);
	file_op_ok("park");
	while (!o.exited && uv_run(ctx.loop, UV_RUN_ONCE))
		;
	cr_assert_eq(o.sig, SIGKILL);
}

Test(local, network_off_has_only_loopback_when_bwrap_is_present)
{
	const char *argv[] = { "cat", "/proc/net/dev", NULL };
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0,
				 &(sr_network_policy){ sizeof(sr_network_policy), SR_NET_OFF, NULL, 0 }, NULL, 0 };
	out o;
	char *id;

	if (access("/usr/bin/bwrap", X_OK) != 0) {
		cr_skip_test("bubblewrap is not installed (apt-get install bubblewrap; .ci/run installs it)");
	}
	start("");
	cr_assert(sr__provider_capabilities(p) & SR_CAP_NETWORK_POLICY);
	id = create_with(&spec);
	cr_assert_eq(run_in(id, argv, NULL, 0, &o), SR_OK);
	cr_assert_eq(o.status, 0, "%s", o.buf);
	cr_assert(strstr(o.buf, "lo:"), "%s", o.buf);
	/* Only the header (2 lines) and lo. */
	{
		int lines = 0;
		for (size_t i = 0; i < o.len; i++)
			lines += o.buf[i] == '\n';
		cr_assert_eq(lines, 3, "interfaces besides lo: %s", o.buf);
	}
}

Test(local, without_bwrap_the_policy_is_not_enforced_and_off_is_refused)
{
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0,
				 &(sr_network_policy){ sizeof(sr_network_policy), SR_NET_OFF, NULL, 0 }, NULL, 0 };

	start("[provider.local]\nbwrap = off\n");
	cr_assert_eq(sr__provider_capabilities(p) & SR_CAP_NETWORK_POLICY, 0);
	cr_assert_eq(sr__provider_capabilities(p) & SR_CAP_ISOLATED_SECRETS, 0);
	reset();
	cr_assert_eq(sr__provider_create(p, 1, &spec, sr__wait_done, &w), SR_OK);
	cr_assert(!w.done, "the refusal came from inside the call");
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_EUNSUPPORTED);
	cr_assert(strstr(w.message, "bubblewrap"), "%s", w.message);
}

Test(local, allowlist_policy_is_refused)
{
	const char *allow[] = { "10.0.0.0/8" };
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0,
				 &(sr_network_policy){ sizeof(sr_network_policy), SR_NET_ALLOWLIST, allow, 1 }, NULL, 0 };

	start("");
	reset();
	cr_assert_eq(sr__provider_create(p, 1, &spec, sr__wait_done, &w), SR_OK);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_EUNSUPPORTED);
	cr_assert(strstr(w.message, "allowlist"));
}

Test(local, bad_config_value_names_the_key)
{
	char conf[1024];

	snprintf(conf, sizeof(conf), "[runner]\nstate_dir = %s/state\nplugin_dir = %s/none\n"
		 "[provider.local]\nroot = relative/path\n", dir, dir);
	cr_assert_eq(sr__ctx_init(&ctx, uv_default_loop(),
				  t_write(dir, "sandrun.conf", conf)), SR_OK);
	p = sr__registry_find(ctx.reg, SR_PLUGIN_PROVIDER, "local");
	cr_assert_neq(sr__plugin_start(&ctx, p), SR_OK);
	cr_assert(strstr(t_log_text(), ":5: [provider.local] key 'root': invalid value 'relative/path'"),
		  "got: %s", t_log_text());
}

Test(local, watch_is_a_typed_unsupported_error)
{
	char err[160];

	start("");
	cr_assert_eq(sr__provider_watch(p, 1, "sb-0000000000000000", "relay", NULL, NULL,
					err, sizeof(err)), SR_EUNSUPPORTED);
	cr_assert_str_eq(err, "provider 'local': operation 'watch' is not supported");
}

Test(local, list_finds_sandboxes_by_label_and_status_inspects_without_starting)
{
	sr_pair mine[] = { { "sandrun.session", "ses-a" } };
	sr_pair other[] = { { "sandrun.session", "ses-b" } };
	sr_sandbox_spec a = { sizeof(a), NULL, NULL, 0, NULL, 0, NULL, mine, 1 };
	sr_sandbox_spec b = { sizeof(b), NULL, NULL, 0, NULL, 0, NULL, other, 1 };
	char ida[64], idb[64];
	json_t *j;

	start("");
	snprintf(ida, sizeof(ida), "%s", create_with(&a));
	snprintf(idb, sizeof(idb), "%s", create_with(&b));
	reset();
	cr_assert_eq(sr__provider_list(p, 1, mine, 1, sr__wait_done, &w), SR_OK);
	file_op_ok("list by label");
	j = json_loads(w.json, 0, NULL);
	cr_assert_eq(json_array_size(j), 1, "%s", w.json);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 0), "id")), ida);
	json_decref(j);
	reset();
	cr_assert_eq(sr__provider_list(p, 2, NULL, 0, sr__wait_done, &w), SR_OK);
	file_op_ok("list all");
	j = json_loads(w.json, 0, NULL);
	cr_assert_eq(json_array_size(j), 2, "%s", w.json);
	json_decref(j);

	reset();
	sr__wait_for(&ctx, &w, sr__provider_park(p, 3, idb, SR_PARK_STOPPED, sr__wait_done, &w));
	cr_assert_eq(w.status, SR_OK);
	reset();
	cr_assert_eq(sr__provider_status(p, 4, idb, sr__wait_done, &w), SR_OK);
	file_op_ok("status");
	j = json_loads(w.json, 0, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "stopped", "%s", w.json);
	cr_assert(json_is_true(json_object_get(j, "parked")));
	json_decref(j);
	reset();
	cr_assert_eq(sr__provider_status(p, 5, idb, sr__wait_done, &w), SR_OK);
	file_op_ok("status again");
	cr_assert(strstr(w.json, "\"stopped\""), "status started it: %s", w.json);
	reset();
	cr_assert_eq(sr__provider_status(p, 6, "sb-0000000000000000", sr__wait_done, &w), SR_OK);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_ENOTFOUND);
}

/* ABI 2.4: what a plugin holds is redacted until it releases it; what it
 * registers stays. */
Test(local, the_host_holds_a_plugins_secret_until_it_is_released)
{
	const sr_host *h;
	char *s;

	start("");
	h = &p->host->pub;
	cr_assert_geq(h->size, SR_TABLE_HAS(sr_host, secret_release));
	cr_assert_eq(h->abi_minor, SR_ABI_MINOR);
	h->secret_hold(h, "nb-setup-key-0123");
	s = sr__redact("key nb-setup-key-0123");
	cr_assert_str_eq(s, "key [REDACTED]");
	free(s);
	h->secret_release(h, "nb-setup-key-0123");
	s = sr__redact("key nb-setup-key-0123");
	cr_assert_str_eq(s, "key nb-setup-key-0123");
	free(s);
	h->secret_register(h, "api-key-for-good-0123");
	h->secret_hold(h, "api-key-for-good-0123");
	h->secret_release(h, "api-key-for-good-0123");
	s = sr__redact("api-key-for-good-0123");
	cr_assert_str_eq(s, "[REDACTED]");
	free(s);
}

/* A mounter that never returns (a store that does not answer) is killed
 * by cancel: the mount ends at once with SR_ECANCELED. */
Test(local, a_mount_whose_mounter_hangs_is_cancelled_and_its_mounter_killed)
{
	char script[4400], pidfile[4200], mnt[4200];
	const char *argv[] = { "/bin/sh", "-c", script, NULL };
	FILE *f;
	sr_mount_spec ms = { sizeof(ms), argv, mnt, NULL, 0 };
	uint64_t req = sr__next_req();
	long pid = 0;
	json_t *j;
	char *id;

	start("");
	id = create();
	j = json_loads(w.json, 0, NULL);
	snprintf(mnt, sizeof(mnt), "%s/mnt", json_string_value(json_object_get(j, "workspace")));
	json_decref(j);
	snprintf(pidfile, sizeof(pidfile), "%s/mounter.pid", dir);
	snprintf(script, sizeof(script), "echo $$ > %s; exec sleep 30", pidfile);
	reset();
	cr_assert_eq(sr__provider_mount(p, req, id, &ms, sr__wait_done, &w), SR_OK);
	for (int waited = 0; !pid && waited < 10000; waited += 20) {
		uv_run(ctx.loop, UV_RUN_NOWAIT);
		usleep(20000);
		if ((f = fopen(pidfile, "r"))) {
			if (fscanf(f, "%ld", &pid) != 1)
				pid = 0;
			fclose(f);
		}
	}
	cr_assert_gt(pid, 0, "the mounter never started");
	cr_assert_not(w.done, "the mount ended while its mounter ran");
	cr_assert_eq(sr__provider_cancel(p, req), SR_OK);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_ECANCELED, "%s", w.message);
	cr_assert(kill((pid_t)pid, 0) != 0 && errno == ESRCH, "the mounter %ld still runs", pid);
	cr_assert_eq(sr__provider_cancel(p, req), SR_ENOTFOUND, "cancelled twice");
}

/* A mount in a sandbox that does not exist (its record read off the
 * loop) ends with SR_ENOTFOUND and says so; no mounter runs. */
Test(local, a_mount_in_a_sandbox_that_does_not_exist_is_not_found)
{
	char script[4400], marker[4200], mnt[4200];
	const char *argv[] = { "/bin/sh", "-c", script, NULL };
	sr_mount_spec ms = { sizeof(ms), argv, mnt, NULL, 0 };
	char id[64];
	int rc;

	start("");
	/* Another id than the one a sandbox has. */
	snprintf(id, sizeof(id), "%s", create());
	id[strlen(id) - 1] = id[strlen(id) - 1] == '0' ? '1' : '0';
	snprintf(mnt, sizeof(mnt), "%s/state/plugins/provider.local/sandboxes/%s/workspace/mnt",
		 dir, id);
	snprintf(marker, sizeof(marker), "%s/mounter-ran", dir);
	snprintf(script, sizeof(script), "touch %s", marker);
	reset();
	rc = sr__provider_mount(p, sr__next_req(), id, &ms, sr__wait_done, &w);
	if (rc == SR_OK) {
		t_wait(&ctx, &w);
		rc = w.status;
		cr_assert(strstr(w.message, "not found"), "%s", w.message);
	}
	cr_assert_eq(rc, SR_ENOTFOUND, "%d: %s", rc, w.message);
	cr_assert(access(marker, F_OK) != 0, "a mounter ran");
}
