/* The Daytona provider (plugins/provider/daytona/), loaded through the
 * real loader and driven through the checked provider calls against the
 * emulator (tests/emulators/daytona.mjs) on 127.0.0.1. Its admin API
 * (/_emulator) injects faults, forces states and counts calls per route.
 * Without node the tests skip, saying why; with CI=true they fail. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include <jansson.h>

#include "harness.h"
#include "core/host/kv.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"
#include "plugins/provider/daytona/daytona.h"

static char *dir;
static sr__ctx ctx;
static int ctx_up;
static sr__plugin *p;
static sr__wait w;
static pid_t emu_pid;
static int emu_stdin = -1;
static char api_url[256];
static int emu_port;
static json_t *events;
static sr__event_sink sinks; /* the plugin's events, into events */

/* ------------------------------------------------------------ emulator */

static int have_node(void)
{
	return system("command -v node >/dev/null 2>&1") == 0;
}

static void start_emulator(void)
{
	const char *src = getenv("SANDRUN_SRCDIR");
	char script[4096], line[1024] = "";
	int out[2], in[2];
	json_t *j;
	FILE *f;

	if (!have_node()) {
		const char *ci = getenv("CI");
		if (ci && strcmp(ci, "true") == 0)
			cr_assert_fail("node is not installed: the Daytona emulator cannot run (CI=true)");
		cr_skip_test("node is not installed: the Daytona emulator cannot run");
	}
	cr_assert_not_null(src, "SANDRUN_SRCDIR is not set (run under make check)");
	snprintf(script, sizeof(script), "%s/tests/emulators/daytona.mjs", src);
	cr_assert_eq(pipe(out), 0);
	cr_assert_eq(pipe(in), 0);
	emu_pid = fork();
	cr_assert_neq(emu_pid, -1);
	if (emu_pid == 0) {
		dup2(out[1], 1);
		dup2(in[0], 0);
		close(out[0]);
		close(in[1]);
		execlp("node", "node", script, "--transition-ms", "30", "--api-key", "test-key",
		       (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	close(in[0]);
	emu_stdin = in[1]; /* the emulator quits when this closes */
	f = fdopen(out[0], "r");
	cr_assert(fgets(line, sizeof(line), f), "the Daytona emulator did not start");
	fclose(f);
	j = json_loads(line, 0, NULL);
	cr_assert_not_null(j, "emulator said: %s", line);
	snprintf(api_url, sizeof(api_url), "%s", json_string_value(json_object_get(j, "apiUrl")));
	json_decref(j);
	cr_assert(sscanf(api_url, "http://127.0.0.1:%d/", &emu_port) == 1, "%s", api_url);
}

/* A blocking call to the emulator (the loop is not running meanwhile).
 * Returns the HTTP status; the body into out (NUL-terminated). */
static int admin(const char *method, const char *path, const char *body, char *out,
		 size_t n)
{
	struct sockaddr_in sa = { 0 };
	char req[4096], buf[65536];
	size_t got = 0;
	ssize_t r;
	int fd, status = 0;
	char *b;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)emu_port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
		 "Authorization: Bearer test-key\r\nContent-Type: application/json\r\n"
		 "Content-Length: %zu\r\n\r\n%s", method, path, body ? strlen(body) : 0,
		 body ? body : "");
	cr_assert_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	while ((r = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
		got += (size_t)r;
	close(fd);
	buf[got] = 0;
	sscanf(buf, "HTTP/%*s %d", &status);
	b = strstr(buf, "\r\n\r\n");
	if (out)
		snprintf(out, n, "%s", b ? b + 4 : "");
	return status;
}

static void fault(const char *route, int status, int count, int latency_ms)
{
	char body[512];

	snprintf(body, sizeof(body), "{\"route\":\"%s\",\"status\":%d,\"count\":%d,\"latencyMs\":%d}",
		 route, status, count, latency_ms);
	cr_assert_eq(admin("POST", "/_emulator/faults", body, NULL, 0), 200);
}

/* Calls of a route since the last reset. */
static int calls(const char *route)
{
	char body[65536];
	json_t *j;
	int n;

	cr_assert_eq(admin("GET", "/_emulator/calls", NULL, body, sizeof(body)), 200);
	j = json_loads(body, 0, NULL);
	n = (int)json_integer_value(json_object_get(j, route));
	json_decref(j);
	return n;
}

static void reset_calls(void)
{
	admin("DELETE", "/_emulator/calls", NULL, NULL, 0);
}

/* The emulator's record of a sandbox (its state), or "" when gone. */
static const char *emu_state(const char *id)
{
	static char state[64];
	char path[256], body[65536];
	json_t *j;

	snprintf(path, sizeof(path), "/api/sandbox/%s", id);
	if (admin("GET", path, NULL, body, sizeof(body)) != 200)
		return "";
	j = json_loads(body, 0, NULL);
	snprintf(state, sizeof(state), "%s", json_string_value(json_object_get(j, "state")));
	json_decref(j);
	return state;
}

/* ---------------------------------------------------------------- setup */

static void sink(void *ud, json_t *ev)
{
	(void)ud;
	json_array_append(events, ev);
}

/* A runner context on dir's state with the provider started (the
 * emulator runs). */
static void open_ctx(const char *extra)
{
	char conf[2048];

	snprintf(conf, sizeof(conf), "[runner]\nstate_dir = %s/state\nplugin_dir = %s/none\n"
		 "[provider.daytona]\napi_url = %s\napi_key = test-key\nrequest_timeout = 2\n%s",
		 dir, dir, api_url, extra);
	cr_assert_eq(sr__ctx_init(&ctx, uv_default_loop(), t_write(dir, "sandrun.conf", conf)),
		     SR_OK);
	ctx_up = 1;
	sinks.fn = sink;
	sr__ctx_add_sink(&ctx, &sinks);
	p = sr__registry_find(ctx.reg, SR_PLUGIN_PROVIDER, "daytona");
	cr_assert_not_null(p, "daytona provider not found in %s", getenv("SANDRUN_PLUGIN_PATH"));
	cr_assert_eq(sr__plugin_start(&ctx, p), SR_OK, "%s", t_log_text());
}

static void start(const char *extra)
{
	start_emulator();
	open_ctx(extra);
}

/* The runner "crashes": the plugin is unloaded with its operations in
 * flight (nothing of theirs runs on), and a new runner starts on the same
 * state. */
static void crash_and_restart(const char *extra)
{
	sr__ctx_cleanup(&ctx);
	ctx_up = 0;
	open_ctx(extra);
}

static void setup(void)
{
	cr_assert_not_null(getenv("SANDRUN_PLUGIN_PATH"), "run under make check");
	dir = t_tmpdir();
	events = json_array();
	t_log_capture();
}

static void teardown(void)
{
	if (ctx_up)
		sr__ctx_cleanup(&ctx);
	if (emu_stdin >= 0)
		close(emu_stdin);
	if (emu_pid > 0) {
		kill(emu_pid, SIGTERM);
		waitpid(emu_pid, NULL, 0);
	}
	json_decref(events);
	free(dir);
}

TestSuite(daytona, .init = setup, .fini = teardown, .timeout = 240);

static void reset(void)
{
	sr__wait_clear(&w);
}

/* Run the loop until the operation at w completed, within 60 s (valgrind
 * in CI is slow; a guard timer on the stack would outlive a failed
 * assertion). */
static void d_wait(void)
{
	uint64_t t0 = uv_now(ctx.loop);

	while (!w.done && uv_now(ctx.loop) - t0 < 60000) {
		uv_run(ctx.loop, UV_RUN_NOWAIT);
		usleep(1000);
		uv_update_time(ctx.loop);
	}
	cr_assert(w.done, "an operation never completed; log: %s", t_log_text());
}

static void wait_ok(const char *what)
{
	d_wait();
	cr_assert_eq(w.status, SR_OK, "%s: %d %s", what, w.status, w.message);
}

static const sr_pair session_label[] = { { "sandrun.session", "ses-1" } };

static char *create_with(const sr_sandbox_spec *spec)
{
	static char id[128];
	json_t *j;

	reset();
	cr_assert_eq(sr__provider_create(p, sr__next_req(), spec, sr__wait_done, &w), SR_OK);
	wait_ok("create");
	j = json_loads(w.json, 0, NULL);
	snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(j, "id")));
	json_decref(j);
	return id;
}

static char *create(void)
{
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0, NULL, session_label, 1 };

	return create_with(&spec);
}

/* --------------------------------------------------------------- create */

Test(daytona, create_sends_env_labels_and_network_policy_and_reports_progress)
{
	const char *allow[] = { "10.0.0.0/8", "api.example.com", "192.168.1.1" };
	sr_network_policy np = { sizeof(np), SR_NET_ALLOWLIST, allow, 3 };
	sr_pair env[] = { { "GREETING", "hello" } };
	sr_pair labels[] = { { "sandrun.session", "ses-9" }, { "sandrun.harness", "claude" } };
	sr_sandbox_spec spec = { sizeof(spec), NULL, env, 1, NULL, 0, &np, labels, 2 };
	char path[256], body[65536];
	json_t *j, *rec;
	char *id;

	start("auto_stop_minutes = 7\n");
	id = create_with(&spec);
	j = json_loads(w.json, 0, NULL);
	cr_assert(strstr(json_string_value(json_object_get(j, "workspace")), "/workspace"), "%s",
		  w.json);
	cr_assert_not_null(json_string_value(json_object_get(j, "home")));
	json_decref(j);
	snprintf(path, sizeof(path), "/api/sandbox/%s", id);
	cr_assert_eq(admin("GET", path, NULL, body, sizeof(body)), 200);
	rec = json_loads(body, 0, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(rec, "state")), "started");
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(rec, "env"), "GREETING")),
			 "hello");
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(rec, "labels"),
							   "sandrun.harness")), "claude");
	cr_assert(json_is_false(json_object_get(rec, "networkBlockAll")));
	cr_assert_str_eq(json_string_value(json_object_get(rec, "networkAllowList")),
			 "10.0.0.0/8,192.168.1.1/32", "%s", body);
	cr_assert_str_eq(json_string_value(json_object_get(rec, "domainAllowList")),
			 "api.example.com");
	cr_assert_eq(json_integer_value(json_object_get(rec, "autoStopInterval")), 7);
	json_decref(rec);
	/* Progress: at least the first state and 'started', naming the sandbox. */
	cr_assert_geq(json_array_size(events), 2, "events: %s", json_dumps(events, 0));
	j = json_array_get(events, json_array_size(events) - 1);
	cr_assert_str_eq(json_string_value(json_object_get(j, "type")), "sandbox.progress");
	cr_assert_str_eq(json_string_value(json_object_get(j, "sandbox")), id);
	cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "started");
}

Test(daytona, network_off_blocks_all)
{
	sr_network_policy np = { sizeof(np), SR_NET_OFF, NULL, 0 };
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0, &np, NULL, 0 };
	char path[256], body[65536];
	char *id;

	start("");
	id = create_with(&spec);
	snprintf(path, sizeof(path), "/api/sandbox/%s", id);
	admin("GET", path, NULL, body, sizeof(body));
	cr_assert(strstr(body, "\"networkBlockAll\":true"), "%s", body);
}

/* On the first progress event, the emulator forces the sandbox into error. */
static void sink_forcing_error(void *ud, json_t *ev)
{
	char path[256];
	const char *id = json_string_value(json_object_get(ev, "sandbox"));

	(void)ud;
	json_array_append(events, ev);
	if (json_array_size(events) == 1) {
		snprintf(path, sizeof(path), "/_emulator/sandbox/%s/error", id);
		admin("POST", path, "{\"errorReason\":\"disk quota exceeded\"}", NULL, 0);
	}
}

Test(daytona, create_ending_in_error_deletes_the_sandbox_and_names_the_error)
{
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0, NULL, NULL, 0 };
	const char *id;

	start("");
	admin("POST", "/_emulator/config", "{\"transitionMs\":300}", NULL, 0);
	sinks.fn = sink_forcing_error;
	reset();
	cr_assert_eq(sr__provider_create(p, 1, &spec, sr__wait_done, &w), SR_OK);
	d_wait();
	cr_assert_neq(w.status, SR_OK);
	cr_assert(strstr(w.message, "state 'error'") && strstr(w.message, "disk quota exceeded") &&
		  strstr(w.message, "deleted"), "%s", w.message);
	id = json_string_value(json_object_get(json_array_get(events, 0), "sandbox"));
	cr_assert(strstr(w.message, id), "%s", w.message);
	cr_assert_str_eq(emu_state(id), "", "the errored sandbox was not deleted");
}

Test(daytona, bad_input_is_refused_with_a_clear_message)
{
	const char *allow[] = { "a.com,b.com" };
	sr_network_policy np = { sizeof(np), SR_NET_ALLOWLIST, allow, 1 };
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0, &np, NULL, 0 };

	start("");
	reset();
	cr_assert_eq(sr__provider_create(p, 1, &spec, sr__wait_done, &w), SR_OK);
	cr_assert(!w.done, "the refusal came from inside the call");
	d_wait();
	cr_assert_eq(w.status, SR_EINVAL);
	cr_assert(strstr(w.message, "'a.com,b.com'"), "%s", w.message);
	reset();
	cr_assert_eq(sr__provider_destroy(p, 2, "../etc", sr__wait_done, &w), SR_OK);
	d_wait();
	cr_assert_eq(w.status, SR_EINVAL);
	cr_assert(strstr(w.message, "invalid sandbox id '../etc'"), "%s", w.message);
	cr_assert_eq(calls("POST /api/sandbox"), 0);
}

Test(daytona, a_missing_api_key_stops_the_plugin_and_says_how_to_set_it)
{
	char conf[1024];

	start_emulator();
	snprintf(conf, sizeof(conf), "[runner]\nstate_dir = %s/state\nplugin_dir = %s/none\n"
		 "[provider.daytona]\napi_url = %s\n", dir, dir, api_url);
	unsetenv("SANDRUN_PROVIDER_DAYTONA_API_KEY");
	cr_assert_eq(sr__ctx_init(&ctx, uv_default_loop(), t_write(dir, "sandrun.conf", conf)),
		     SR_OK);
	ctx_up = 1;
	p = sr__registry_find(ctx.reg, SR_PLUGIN_PROVIDER, "daytona");
	cr_assert_neq(sr__plugin_start(&ctx, p), SR_OK);
	cr_assert(strstr(t_log_text(), "SANDRUN_PROVIDER_DAYTONA_API_KEY"), "%s", t_log_text());
}

Test(daytona, the_api_key_never_reaches_the_log)
{
	start("");
	reset();
	sr__provider_reconnect(p, 1, "no-such-sandbox", NULL, sr__wait_done, &w);
	d_wait();
	cr_assert(strstr(t_log_text(), "test-key") == NULL, "%s", t_log_text());
}

/* ------------------------------------------------------------ reconnect */

Test(daytona, reconnect_starts_a_stopped_sandbox)
{
	char *id;

	start("");
	id = create();
	reset();
	sr__provider_park(p, 1, id, SR_PARK_STOPPED, sr__wait_done, &w);
	wait_ok("park");
	cr_assert_str_eq(emu_state(id), "stopped");
	reset_calls();
	reset();
	sr__provider_reconnect(p, 2, id, NULL, sr__wait_done, &w);
	wait_ok("reconnect");
	cr_assert(strstr(w.json, id));
	cr_assert_str_eq(emu_state(id), "started");
	cr_assert_eq(calls("POST /api/sandbox/{id}/start"), 1);
}

Test(daytona, reconnect_of_a_missing_or_errored_sandbox_is_terminal)
{
	char path[256];
	char *id;

	start("");
	reset();
	sr__provider_reconnect(p, 1, "0b6c3d2e-no-such", NULL, sr__wait_done, &w);
	d_wait();
	cr_assert_eq(w.status, SR_ENOTFOUND, "%d %s", w.status, w.message);
	cr_assert(strstr(w.message, "0b6c3d2e-no-such") && strstr(w.message, "404"), "%s",
		  w.message);
	id = create();
	snprintf(path, sizeof(path), "/_emulator/sandbox/%s/error", id);
	admin("POST", path, "{\"errorReason\":\"runner lost\"}", NULL, 0);
	reset();
	sr__provider_reconnect(p, 2, id, NULL, sr__wait_done, &w);
	d_wait();
	cr_assert_eq(w.status, SR_ENOTFOUND);
	cr_assert(strstr(w.message, "state 'error'") && strstr(w.message, "runner lost"), "%s",
		  w.message);
}

Test(daytona, reconnect_after_5xx_or_timeout_is_transient)
{
	char *id;

	start("");
	id = create();
	fault("GET /api/sandbox/{id}", 503, 1, 0);
	reset();
	sr__provider_reconnect(p, 1, id, NULL, sr__wait_done, &w);
	d_wait();
	cr_assert_eq(w.status, SR_EHTTP, "%d %s", w.status, w.message);
	cr_assert(strstr(w.message, "transient"), "%s", w.message);
	fault("GET /api/sandbox/{id}", 0, 1, 3000); /* beyond request_timeout = 2 */
	reset();
	sr__provider_reconnect(p, 2, id, NULL, sr__wait_done, &w);
	d_wait();
	cr_assert_eq(w.status, SR_ETIMEDOUT, "%d %s", w.status, w.message);
	reset();
	sr__provider_reconnect(p, 3, id, NULL, sr__wait_done, &w);
	wait_ok("reconnect once the API answers again");
}

Test(daytona, reconnect_converges_network_settings_only_when_they_differ)
{
	const char *allow[] = { "10.1.0.0/16" };
	sr_network_policy open = { sizeof(open), SR_NET_OPEN, NULL, 0 };
	sr_network_policy off = { sizeof(off), SR_NET_OFF, NULL, 0 };
	sr_network_policy some = { sizeof(some), SR_NET_ALLOWLIST, allow, 1 };
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0, &open, NULL, 0 };
	char path[256], body[65536];
	char *id;

	start("");
	id = create_with(&spec);
	reset_calls();
	reset();
	sr__provider_reconnect(p, 1, id, &open, sr__wait_done, &w);
	wait_ok("reconnect, same policy");
	cr_assert_eq(calls("POST /api/sandbox/{id}/network-settings"), 0);
	reset();
	sr__provider_reconnect(p, 2, id, &off, sr__wait_done, &w);
	wait_ok("reconnect, network off");
	cr_assert_eq(calls("POST /api/sandbox/{id}/network-settings"), 1);
	snprintf(path, sizeof(path), "/api/sandbox/%s", id);
	admin("GET", path, NULL, body, sizeof(body));
	cr_assert(strstr(body, "\"networkBlockAll\":true"), "%s", body);
	reset();
	sr__provider_reconnect(p, 3, id, &off, sr__wait_done, &w);
	wait_ok("reconnect, off again");
	cr_assert_eq(calls("POST /api/sandbox/{id}/network-settings"), 1);
	reset();
	sr__provider_reconnect(p, 4, id, &some, sr__wait_done, &w);
	wait_ok("reconnect, allowlist");
	cr_assert_eq(calls("POST /api/sandbox/{id}/network-settings"), 2);
	admin("GET", path, NULL, body, sizeof(body));
	cr_assert(strstr(body, "\"networkAllowList\":\"10.1.0.0/16\"") &&
		  strstr(body, "\"networkBlockAll\":false"), "%s", body);
	reset();
	sr__provider_reconnect(p, 5, id, NULL, sr__wait_done, &w);
	wait_ok("reconnect, no policy");
	cr_assert_eq(calls("POST /api/sandbox/{id}/network-settings"), 2);
}

/* ---------------------------------------------------- park and destroy */

Test(daytona, park_running_leaves_it_started_and_park_stopped_stops_it)
{
	char *id;

	start("");
	id = create();
	reset();
	sr__provider_park(p, 1, id, SR_PARK_RUNNING, sr__wait_done, &w);
	wait_ok("park running");
	cr_assert(strstr(w.json, "\"running\""), "%s", w.json);
	cr_assert_str_eq(emu_state(id), "started");
	reset();
	sr__provider_park(p, 2, id, SR_PARK_STOPPED, sr__wait_done, &w);
	wait_ok("park stopped");
	cr_assert(strstr(w.json, "\"stopped\""), "%s", w.json);
	cr_assert_str_eq(emu_state(id), "stopped");
}

Test(daytona, a_park_that_fails_deletes_the_sandbox_and_says_it_is_gone)
{
	char *id;

	start("");
	id = create();
	fault("POST /api/sandbox/{id}/stop", 500, 1, 0);
	reset();
	sr__provider_park(p, 1, id, SR_PARK_STOPPED, sr__wait_done, &w);
	d_wait();
	/* SR_ENOTFOUND: the caller must forget the sandbox. */
	cr_assert_eq(w.status, SR_ENOTFOUND, "%d %s", w.status, w.message);
	cr_assert(strstr(w.message, "deleted instead") && strstr(w.message, id), "%s", w.message);
	cr_assert(strstr(w.json, "\"deleted\":true"), "%s", w.json);
	cr_assert_str_eq(emu_state(id), "");
}

Test(daytona, destroy_retries_409_and_waits_for_the_404)
{
	char *id;

	start("");
	id = create();
	reset_calls();
	fault("DELETE /api/sandbox/{id}", 409, 2, 0);
	reset();
	sr__provider_destroy(p, 1, id, sr__wait_done, &w);
	wait_ok("destroy");
	cr_assert_eq(calls("DELETE /api/sandbox/{id}"), 3);
	cr_assert_geq(calls("GET /api/sandbox/{id}"), 1, "no confirmation was asked");
	cr_assert_str_eq(emu_state(id), "");
	/* Destroying what is gone is done at once. */
	reset();
	sr__provider_destroy(p, 2, id, sr__wait_done, &w);
	wait_ok("destroy again");
}

/* ---------------------------------------------------------------- files */

Test(daytona, file_operations_round_trip)
{
	json_t *list;
	char *id;

	start("");
	id = create();
	reset();
	sr__provider_file_mkdir(p, 1, id, "src", 0755, sr__wait_done, &w);
	wait_ok("mkdir");
	reset();
	sr__provider_file_put(p, 2, id, "src/a.txt", "alpha", 5, 0600, sr__wait_done, &w);
	wait_ok("put");
	reset();
	sr__provider_file_rename(p, 3, id, "src/a.txt", "src/b.txt", sr__wait_done, &w);
	wait_ok("rename");
	/* A rename replaces its destination, as rename(2) does, though the
	 * toolbox's move answers 409 for one that exists. */
	reset();
	sr__provider_file_put(p, 31, id, "src/c.txt", "gamma", 5, 0600, sr__wait_done, &w);
	wait_ok("put c");
	reset();
	sr__provider_file_put(p, 32, id, "src/b2.txt", "old", 3, 0600, sr__wait_done, &w);
	wait_ok("put b2");
	reset();
	sr__provider_file_rename(p, 33, id, "src/c.txt", "src/b2.txt", sr__wait_done, &w);
	wait_ok("rename over an existing file");
	reset();
	sr__provider_file_get(p, 34, id, "src/b2.txt", 0, sr__wait_done, &w);
	wait_ok("get the replaced file");
	cr_assert(w.len == 5 && memcmp(w.data, "gamma", 5) == 0, "the destination was not replaced");
	reset();
	sr__provider_file_remove(p, 35, id, "src/b2.txt", sr__wait_done, &w);
	wait_ok("remove b2");
	reset();
	sr__provider_file_list(p, 4, id, "src", sr__wait_done, &w);
	wait_ok("list");
	list = json_loads(w.json, 0, NULL);
	cr_assert_eq(json_array_size(list), 1, "%s", w.json);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(list, 0), "name")), "b.txt");
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(list, 0), "type")), "file");
	cr_assert_eq(json_integer_value(json_object_get(json_array_get(list, 0), "size")), 5);
	json_decref(list);
	reset();
	sr__provider_file_get(p, 5, id, "src/b.txt", 0, sr__wait_done, &w);
	wait_ok("get");
	cr_assert_eq(w.len, 5);
	cr_assert(memcmp(w.data, "alpha", 5) == 0);
	reset();
	sr__provider_file_get(p, 6, id, "src/b.txt", 3, sr__wait_done, &w);
	d_wait();
	cr_assert_eq(w.status, SR_ETOOBIG, "%d %s", w.status, w.message);
	reset();
	sr__provider_file_remove(p, 7, id, "src", sr__wait_done, &w);
	wait_ok("remove");
	reset();
	sr__provider_file_get(p, 8, id, "src/b.txt", 0, sr__wait_done, &w);
	d_wait();
	cr_assert_eq(w.status, SR_ENOTFOUND, "%d %s", w.status, w.message);
	cr_assert(strstr(w.message, id) && strstr(w.message, "404"), "%s", w.message);
}

Test(daytona, files_of_a_stopped_sandbox_say_so)
{
	char *id;

	start("");
	id = create();
	reset();
	sr__provider_park(p, 1, id, SR_PARK_STOPPED, sr__wait_done, &w);
	wait_ok("park");
	reset();
	sr__provider_file_get(p, 2, id, "x", 0, sr__wait_done, &w);
	d_wait();
	cr_assert_eq(w.status, SR_ESTATE, "%d %s", w.status, w.message);
	cr_assert(strstr(w.message, "Is the Sandbox started?"), "%s", w.message);
}

/* ----------------------------------------------------------------- exec */

typedef struct out {
	char buf[65536], err[4096];
	size_t len, elen;
	int exited, status, failed, fstatus;
	char fmsg[600];
} out;

static void o_out(void *ud, const void *d, size_t n)
{
	out *o = ud;

	if (n == 0)
		return; /* the end of stdout */
	if (o->len + n < sizeof(o->buf)) {
		memcpy(o->buf + o->len, d, n);
		o->len += n;
		o->buf[o->len] = 0;
	}
}

static void o_err(void *ud, const void *d, size_t n)
{
	out *o = ud;

	if (n == 0)
		return; /* the end of stderr */
	if (o->elen + n < sizeof(o->err)) {
		memcpy(o->err + o->elen, d, n);
		o->elen += n;
		o->err[o->elen] = 0;
	}
}

static void o_exit(void *ud, int status, int sig)
{
	out *o = ud;

	(void)sig;
	o->exited = 1;
	o->status = status;
}

static void o_failed(void *ud, int status, const char *msg)
{
	out *o = ud;

	o->failed = 1;
	o->fstatus = status;
	snprintf(o->fmsg, sizeof(o->fmsg), "%s", msg ? msg : "");
}

static const sr_channel_callbacks o_cbs = { sizeof(o_cbs), o_out, o_err, o_exit, o_failed };

/* Run the loop until cond holds, within ms (bounded: slow under valgrind). */
#define RUN_UNTIL(cond, ms) do { \
		uint64_t t0_ = uv_now(ctx.loop); \
		while (!(cond) && uv_now(ctx.loop) - t0_ < (ms)) { \
			uv_run(ctx.loop, UV_RUN_NOWAIT); \
			usleep(2000); \
			uv_update_time(ctx.loop); \
		} \
	} while (0)

Test(daytona, exec_is_a_duplex_channel_with_stderr_kept_apart)
{
	const char *argv[] = { "sh", "-c",
			       "echo \"cwd=$(pwd)\"; read line; echo \"got:$line:$V\"; echo oops >&2; exit 3",
			       NULL };
	sr_pair env[] = { { "V", "x y" } };
	sr_exec_spec spec = { sizeof(spec), argv, env, 1, NULL, NULL, 0 };
	out o = { 0 };
	char *id;
	char path[512], body[4096], sid[64] = "", *q;

	start("");
	id = create();
	cr_assert_eq(sr__provider_exec(p, 7, id, &spec, &o_cbs, &o), SR_OK);
	/* A line written in two pieces reaches the process as one: the
	 * daemon appends a newline to any input that lacks one. */
	cr_assert_eq(sr__provider_channel_write(p, 7, "hel", 3), SR_OK);
	RUN_UNTIL(strstr(o.buf, "cwd="), 10000);
	snprintf(path, sizeof(path), "/toolbox/%s/process/session", id);
	cr_assert_eq(admin("GET", path, NULL, body, sizeof(body)), 200);
	if ((q = strstr(body, "\"sessionId\":\"")))
		sscanf(q + 13, "%63[^\"]", sid);
	cr_assert(sid[0], "no session: %s", body);
	cr_assert_eq(sr__provider_channel_write(p, 7, "lo\n", 3), SR_OK);
	RUN_UNTIL(o.exited || o.failed, 15000);
	cr_assert(o.exited, "no exit (failed %d: %s) out=%s", o.failed, o.fmsg, o.buf);
	cr_assert_eq(o.status, 3, "status %d out=%s err=%s log=%s", o.status, o.buf, o.err, t_log_text());
	/* Exactly the process's output: the input is not echoed into it (the
	 * daemon echoes unless the command asks it not to). */
	cr_assert(strncmp(o.buf, "cwd=", 4) == 0 && strstr(o.buf, "/workspace\ngot:hello:x y\n") &&
		  strlen(strstr(o.buf, "/workspace\n")) == strlen("/workspace\ngot:hello:x y\n"),
		  "%s", o.buf);
	/* The pid and stderr files were removed from the sandbox. */
	snprintf(path, sizeof(path), "/tmp/%s.err", sid);
	cr_assert_neq(access(path, F_OK), 0, "%s left", path);
	snprintf(path, sizeof(path), "/tmp/%s.pid", sid);
	cr_assert_neq(access(path, F_OK), 0, "%s left", path);
	cr_assert(strstr(o.buf, "/workspace\n"), "not in the workspace: %s", o.buf);
	cr_assert(strstr(o.buf, "oops") == NULL, "stderr in stdout: %s", o.buf);
	cr_assert_str_eq(o.err, "oops\n");
	cr_assert_eq(sr__provider_channel_close_input(p, 7), SR_ENOTFOUND);
}

/* The daemon answers a plain GET of the log with the log so far (a
 * follow is a WebSocket's): the log is read again, output that arrives in
 * pieces is delivered once, in order. */
Test(daytona, the_log_is_read_again_and_nothing_is_delivered_twice)
{
	const char *argv[] = { "sh", "-c", "echo one; sleep 1; echo two; read x; echo three:$x", NULL };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, NULL, 0 };
	out o = { 0 };
	char *id;

	start("");
	id = create();
	cr_assert_eq(sr__provider_exec(p, 8, id, &spec, &o_cbs, &o), SR_OK);
	RUN_UNTIL(strstr(o.buf, "two\n"), 10000);
	cr_assert_str_eq(o.buf, "one\ntwo\n");
	cr_assert_geq(calls("GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs"), 2);
	cr_assert_eq(sr__provider_channel_write(p, 8, "z\n", 2), SR_OK);
	RUN_UNTIL(o.exited || o.failed, 15000);
	cr_assert(o.exited, "failed %d: %s", o.failed, o.fmsg);
	cr_assert_str_eq(o.buf, "one\ntwo\nthree:z\n");
}

/* A quiet process is not taken for a lost one: reads that bring nothing
 * go on (and slow down) for as long as the command runs. */
Test(daytona, a_process_quiet_for_a_while_is_waited_for)
{
	const char *argv[] = { "sh", "-c", "sleep 4; echo late", NULL };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, NULL, 0 };
	out o = { 0 };
	char *id;
	int reads;

	start("");
	id = create();
	cr_assert_eq(sr__provider_exec(p, 15, id, &spec, &o_cbs, &o), SR_OK);
	RUN_UNTIL(o.exited || o.failed, 20000);
	cr_assert(o.exited, "failed %d: %s", o.failed, o.fmsg);
	cr_assert_str_eq(o.buf, "late\n");
	/* At most one read per POLL_MIN_MS at first, then per 400 ms. */
	reads = calls("GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs");
	cr_assert(reads >= 5 && reads <= 25, "%d reads in 4 s", reads);
}

/* Reads that fail are tried again: what was delivered is not delivered
 * again. */
Test(daytona, a_failed_read_of_the_log_is_tried_again_without_repeating_output)
{
	const char *argv[] = { "sh", "-c", "echo one; read x; echo two:$x", NULL };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, NULL, 0 };
	out o = { 0 };
	char *id;

	start("");
	id = create();
	cr_assert_eq(sr__provider_exec(p, 16, id, &spec, &o_cbs, &o), SR_OK);
	RUN_UNTIL(strstr(o.buf, "one\n"), 10000);
	cr_assert(strstr(o.buf, "one\n"), "%s", o.buf);
	reset_calls();
	fault("GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs", 502, 2, 0);
	cr_assert_eq(sr__provider_channel_write(p, 16, "z\n", 2), SR_OK);
	RUN_UNTIL(o.exited || o.failed, 15000);
	cr_assert(o.exited, "failed %d: %s", o.failed, o.fmsg);
	cr_assert_str_eq(o.buf, "one\ntwo:z\n");
	cr_assert_geq(calls("GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs"), 3);
}

Test(daytona, a_stream_that_cannot_come_back_fails_the_channel_loudly)
{
	const char *argv[] = { "sleep", "30", NULL };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, NULL, 0 };
	out o = { 0 };
	char path[256];
	char *id;

	start("");
	id = create();
	cr_assert_eq(sr__provider_exec(p, 9, id, &spec, &o_cbs, &o), SR_OK);
	RUN_UNTIL(calls("GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs") > 0, 10000);
	/* The sandbox dies under the process: the stream drops, the toolbox
	 * no longer answers for it. */
	snprintf(path, sizeof(path), "/_emulator/sandbox/%s/error", id);
	admin("POST", path, "{}", NULL, 0);
	RUN_UNTIL(o.exited || o.failed, 20000);
	cr_assert(o.failed, "the channel did not fail (exited %d)", o.exited);
	cr_assert(strstr(o.fmsg, id), "%s", o.fmsg);
}

Test(daytona, signal_ends_the_process)
{
	const char *argv[] = { "sleep", "30", NULL };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, NULL, 0 };
	out o = { 0 };
	char *id;

	start("");
	id = create();
	cr_assert_eq(sr__provider_exec(p, 10, id, &spec, &o_cbs, &o), SR_OK);
	RUN_UNTIL(calls("GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs") > 0, 10000);
	usleep(200000);
	cr_assert_eq(sr__provider_channel_signal(p, 10, SIGTERM), SR_OK);
	RUN_UNTIL(o.exited || o.failed, 15000);
	cr_assert(o.exited, "failed %d: %s", o.failed, o.fmsg);
	cr_assert_eq(o.status, 128 + SIGTERM);
}

/* ---------------------------------------------------------------- watch */

static void wt_event(void *ud, const char *name)
{
	json_array_append_new(ud, json_string(name));
}

static void wt_lost(void *ud, int status, const char *msg)
{
	(void)status;
	(void)msg;
	json_array_append_new(ud, json_string("LOST"));
}

Test(daytona, watch_reports_new_names)
{
	sr_watch_callbacks cbs = { sizeof(cbs), wt_event, wt_lost };
	json_t *seen = json_array();
	char *id;

	start("");
	cr_assert(sr__provider_capabilities(p) & SR_CAP_WATCH);
	id = create();
	reset();
	sr__provider_file_mkdir(p, 1, id, "relay", 0700, sr__wait_done, &w);
	wait_ok("mkdir");
	cr_assert_eq(sr__provider_watch(p, 2, id, "relay", &cbs, seen, NULL, 0), SR_OK);
	reset();
	sr__provider_file_put(p, 3, id, "relay/a.req", "{}", 2, 0, sr__wait_done, &w);
	wait_ok("put");
	RUN_UNTIL(json_array_size(seen) > 0, 10000);
	cr_assert_str_eq(json_string_value(json_array_get(seen, 0)), "a.req");
	cr_assert_eq(sr__provider_cancel(p, 2), SR_OK);
	json_decref(seen);
}

/* --------------------------------------------------------- list, status */

Test(daytona, list_finds_sandboxes_by_label_and_status_inspects_without_starting)
{
	sr_pair mine[] = { { "sandrun.session", "ses-a" } };
	sr_pair other[] = { { "sandrun.session", "ses-b" } };
	sr_sandbox_spec a = { sizeof(a), NULL, NULL, 0, NULL, 0, NULL, mine, 1 };
	sr_sandbox_spec b = { sizeof(b), NULL, NULL, 0, NULL, 0, NULL, other, 1 };
	char ida[128], idb[128];
	json_t *j;

	start("");
	snprintf(ida, sizeof(ida), "%s", create_with(&a));
	snprintf(idb, sizeof(idb), "%s", create_with(&b));
	reset();
	cr_assert_eq(sr__provider_list(p, 1, mine, 1, sr__wait_done, &w), SR_OK);
	wait_ok("list by label");
	j = json_loads(w.json, 0, NULL);
	cr_assert_eq(json_array_size(j), 1, "%s", w.json);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 0), "id")), ida);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 0), "state")), "running");
	json_decref(j);
	reset();
	cr_assert_eq(sr__provider_list(p, 2, NULL, 0, sr__wait_done, &w), SR_OK);
	wait_ok("list all");
	j = json_loads(w.json, 0, NULL);
	cr_assert_eq(json_array_size(j), 2, "%s", w.json);
	json_decref(j);
	reset();
	sr__provider_park(p, 3, idb, SR_PARK_STOPPED, sr__wait_done, &w);
	wait_ok("park");
	reset();
	cr_assert_eq(sr__provider_status(p, 4, idb, sr__wait_done, &w), SR_OK);
	wait_ok("status");
	j = json_loads(w.json, 0, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "stopped", "%s", w.json);
	cr_assert_str_eq(json_string_value(json_object_get(j, "network")), "open", "%s", w.json);
	json_decref(j);
	cr_assert_str_eq(emu_state(idb), "stopped", "status started it");
	reset();
	cr_assert_eq(sr__provider_status(p, 5, "no-such-sandbox", sr__wait_done, &w), SR_OK);
	d_wait();
	cr_assert_eq(w.status, SR_ENOTFOUND);
}

Test(daytona, cancel_ends_an_operation_with_ecanceled)
{
	char *id;

	start("");
	id = create();
	fault("GET /api/sandbox/{id}", 0, 1, 1500);
	reset();
	cr_assert_eq(sr__provider_status(p, 77, id, sr__wait_done, &w), SR_OK);
	cr_assert_eq(sr__provider_cancel(p, 77), SR_OK);
	d_wait();
	cr_assert_eq(w.status, SR_ECANCELED);
}

/* The round trip the ACP traffic makes: a line to the process's stdin
 * (one input POST), its echo on the followed stdout. Prints the figures
 * (doc/daytona.md quotes them); checks order and completeness. */
Test(daytona, exec_round_trips_keep_order_and_are_timed)
{
	enum { N = 50 };
	const char *argv[] = { "sh", "-c",
			       "i=0; while [ $i -lt 50 ] && read l; do echo \"$l\"; i=$((i+1)); done",
			       NULL };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, NULL, 0 };
	char expect[N * 16] = "", line[32];
	uint64_t t0, total = 0, worst = 0;
	out o = { 0 };
	char *id;

	start("");
	id = create();
	cr_assert_eq(sr__provider_exec(p, 11, id, &spec, &o_cbs, &o), SR_OK);
	for (int i = 0; i < N; i++) {
		size_t before = o.len;
		uint64_t ms;

		snprintf(line, sizeof(line), "line %d\n", i);
		strcat(expect, line);
		uv_update_time(ctx.loop);
		t0 = uv_hrtime();
		cr_assert_eq(sr__provider_channel_write(p, 11, line, strlen(line)), SR_OK);
		RUN_UNTIL(o.len >= before + strlen(line) || o.failed, 20000);
		cr_assert(o.len >= before + strlen(line), "line %d did not come back: %s", i, o.buf);
		ms = (uv_hrtime() - t0) / 1000000;
		total += ms;
		worst = ms > worst ? ms : worst;
	}
	RUN_UNTIL(o.exited || o.failed, 20000);
	cr_assert(o.exited, "failed %d: %s", o.failed, o.fmsg);
	cr_assert_str_eq(o.buf, expect);
	fprintf(stderr, "daytona exec round trip (emulator, toolbox session): %d lines, "
		"mean %.1f ms, worst %llu ms\n", N, (double)total / N, (unsigned long long)worst);
}

Test(daytona, input_to_a_command_not_started_yet_is_tried_again)
{
	const char *argv[] = { "sh", "-c", "read x; echo got:$x", NULL };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, NULL, 0 };
	out o = { 0 };
	char *id;

	start("");
	id = create();
	/* The daemon answers 500 "failed to open input pipe" while the
	 * command waits in its session (older ones 409). */
	fault("POST /toolbox/{id}/process/session/{sid}/command/{cid}/input", 500, 1, 0);
	cr_assert_eq(sr__provider_exec(p, 12, id, &spec, &o_cbs, &o), SR_OK);
	cr_assert_eq(sr__provider_channel_write(p, 12, "y\n", 2), SR_OK);
	RUN_UNTIL(o.exited || o.failed, 15000);
	cr_assert(o.exited, "failed %d: %s", o.failed, o.fmsg);
	cr_assert_str_eq(o.buf, "got:y\n");
	cr_assert_geq(calls("POST /toolbox/{id}/process/session/{sid}/command/{cid}/input"), 2);
}

Test(daytona, a_last_line_without_its_newline_goes_out_when_input_closes)
{
	const char *argv[] = { "sh", "-c", "read a; read b; echo \"[$a][$b]\"", NULL };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, NULL, 0 };
	out o = { 0 };
	char *id;

	start("");
	id = create();
	cr_assert_eq(sr__provider_exec(p, 13, id, &spec, &o_cbs, &o), SR_OK);
	cr_assert_eq(sr__provider_channel_write(p, 13, "one\ntw", 7), SR_OK);
	cr_assert_eq(sr__provider_channel_write(p, 13, "o", 1), SR_OK);
	/* Held: the toolbox would end the line here. */
	cr_assert_eq(sr__provider_channel_close_input(p, 13), SR_EUNSUPPORTED);
	cr_assert_eq(sr__provider_channel_write(p, 13, "x\n", 2), SR_ESTATE);
	RUN_UNTIL(o.exited || o.failed, 15000);
	cr_assert(o.exited, "failed %d: %s", o.failed, o.fmsg);
	cr_assert_str_eq(o.buf, "[one][two]\n");
}

Test(daytona, input_that_is_not_text_is_refused_and_nothing_of_it_is_sent)
{
	const char *argv[] = { "sh", "-c", "read a; echo \"[$a]\"", NULL };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, NULL, 0 };
	out o = { 0 };
	char *id;

	start("");
	id = create();
	cr_assert_eq(sr__provider_exec(p, 14, id, &spec, &o_cbs, &o), SR_OK);
	cr_assert_eq(sr__provider_channel_write(p, 14, "ok", 2), SR_OK);
	cr_assert_eq(sr__provider_channel_write(p, 14, "\xff\n", 2), SR_EINVAL);
	cr_assert(strstr(t_log_text(), "text only"), "%s", t_log_text());
	cr_assert_eq(sr__provider_channel_write(p, 14, "!\n", 2), SR_OK);
	RUN_UNTIL(o.exited || o.failed, 15000);
	cr_assert(o.exited, "failed %d: %s", o.failed, o.fmsg);
	cr_assert_str_eq(o.buf, "[ok!]\n");
}

/* ------------------------------------------------- secrets: pure parts */

Test(daytona_pure, the_secret_prefix_follows_daytonas_name_rule)
{
	cr_assert(dy__prefix_valid("sandrun"));
	cr_assert(dy__prefix_valid("_team-a_1"));
	cr_assert_not(dy__prefix_valid(""));
	cr_assert_not(dy__prefix_valid("9lives"));
	cr_assert_not(dy__prefix_valid("-x"));
	cr_assert_not(dy__prefix_valid("a.b"));
	cr_assert_not(dy__prefix_valid("a b"));
	cr_assert_not(dy__prefix_valid(NULL));
}

Test(daytona_pure, a_secret_is_named_prefix_lease_and_number)
{
	char buf[64];

	cr_assert_eq(dy__secret_name(buf, sizeof(buf), "sandrun", "0a1b2c3d4e5f6071", 0), 0);
	cr_assert_str_eq(buf, "sandrun_0a1b2c3d4e5f6071_1");
	cr_assert_eq(dy__secret_name(buf, sizeof(buf), "p", "ab", 11), 0);
	cr_assert_str_eq(buf, "p_ab_12");
	cr_assert_eq(dy__secret_name(buf, 8, "sandrun", "0a1b2c3d4e5f6071", 0), -1);
}

static int cred_refused(const char *name, int target, const char *value, const char *const *hosts,
			size_t n_hosts, char *why, size_t n)
{
	sr_credential c = { sizeof(c), target, name, value, hosts, n_hosts, "api_key", 1, NULL };

	return dy__cred_check(&c, 0, why, n) != SR_OK;
}

Test(daytona_pure, a_binding_needs_exactly_one_exact_host)
{
	const char *one[] = { "api.anthropic.com" }, *two[] = { "a.example.com", "b.example.com" };
	const char *wild[] = { "*.anthropic.com" }, *port[] = { "api.anthropic.com:443" };
	const char *upper[] = { "API.anthropic.com" }, *empty_label[] = { "api..com" };
	const char *dash[] = { "api-.example.com" }, *slash[] = { "api.example.com/v1" };
	char why[512];

	cr_assert_not(cred_refused("K", SR_CRED_ENV, "v", one, 1, why, sizeof(why)), "%s", why);
	cr_assert(cred_refused("K", SR_CRED_ENV, "v", two, 2, why, sizeof(why)));
	cr_assert(strstr(why, "'K': 2 hosts given") && strstr(why, "exactly one host"), "%s", why);
	cr_assert(cred_refused("K", SR_CRED_ENV, "v", NULL, 0, why, sizeof(why)));
	cr_assert(strstr(why, "0 hosts given"), "%s", why);
	cr_assert(cred_refused("K", SR_CRED_ENV, "v", wild, 1, why, sizeof(why)));
	cr_assert(strstr(why, "'*.anthropic.com' is a wildcard"), "%s", why);
	cr_assert(cred_refused("K", SR_CRED_ENV, "v", port, 1, why, sizeof(why)));
	cr_assert(strstr(why, "has a port"), "%s", why);
	cr_assert(cred_refused("K", SR_CRED_ENV, "v", upper, 1, why, sizeof(why)));
	cr_assert(strstr(why, "not lower case"), "%s", why);
	cr_assert(cred_refused("K", SR_CRED_ENV, "v", empty_label, 1, why, sizeof(why)));
	cr_assert(cred_refused("K", SR_CRED_ENV, "v", dash, 1, why, sizeof(why)));
	cr_assert(cred_refused("K", SR_CRED_ENV, "v", slash, 1, why, sizeof(why)));
}

Test(daytona_pure, a_binding_needs_a_valid_name_and_a_value)
{
	const char *one[] = { "api.example.com" };
	char why[512];

	cr_assert(cred_refused("1KEY", SR_CRED_ENV, "v", one, 1, why, sizeof(why)));
	cr_assert(strstr(why, "'1KEY': not an environment variable name"), "%s", why);
	cr_assert(cred_refused("K", SR_CRED_ENV, "", one, 1, why, sizeof(why)));
	cr_assert(strstr(why, "'K': no value"), "%s", why);
	cr_assert(cred_refused("Authorization", SR_CRED_HEADER, "v", one, 1, why, sizeof(why)));
	cr_assert(strstr(why, "<mcp server>/<header name>"), "%s", why);
	cr_assert_not(cred_refused("docs/X-Api-Key", SR_CRED_HEADER, "v", one, 1, why, sizeof(why)),
		      "%s", why);
	cr_assert(cred_refused("K", 7, "v", one, 1, why, sizeof(why)));
	cr_assert(strstr(why, "unknown target"), "%s", why);
	cr_assert_neq(dy__cred_check(NULL, 3, why, sizeof(why)), SR_OK);
	cr_assert(strstr(why, "binding 3"), "%s", why);
}

static int record_refused(const char *json, char *why, size_t n)
{
	json_t *rec = json_loads(json, 0, NULL);
	int rc = dy__secret_check(rec, "sandrun_ab_1", "api.example.com", "dtn_secret_", why, n);

	json_decref(rec);
	return rc != SR_OK;
}

Test(daytona_pure, the_secret_daytona_returns_is_checked)
{
	char why[512];

	cr_assert_not(record_refused("{\"id\":\"s-1\",\"name\":\"sandrun_ab_1\",\"hosts\":"
				     "[\"api.example.com\"],\"placeholder\":\"dtn_secret_00ff\"}",
				     why, sizeof(why)), "%s", why);
	cr_assert(record_refused("{\"id\":\"s-1\",\"name\":\"sandrun_ab_1\",\"hosts\":"
				 "[\"api.example.com\",\"evil.example\"],\"placeholder\":"
				 "\"dtn_secret_00ff\"}", why, sizeof(why)));
	cr_assert(strstr(why, "not exactly [\"api.example.com\"]"), "%s", why);
	cr_assert(record_refused("{\"id\":\"s-1\",\"name\":\"sandrun_ab_1\",\"hosts\":[],"
				 "\"placeholder\":\"dtn_secret_00ff\"}", why, sizeof(why)));
	cr_assert(record_refused("{\"id\":\"s-1\",\"name\":\"sandrun_ab_1\",\"hosts\":"
				 "[\"*.example.com\"],\"placeholder\":\"dtn_secret_00ff\"}",
				 why, sizeof(why)));
	cr_assert(record_refused("{\"id\":\"s-1\",\"name\":\"sandrun_ab_1\",\"hosts\":"
				 "[\"api.example.com\"],\"placeholder\":\"sk-real-value\"}",
				 why, sizeof(why)));
	cr_assert(strstr(why, "placeholder does not start with 'dtn_secret_'"), "%s", why);
	cr_assert(record_refused("{\"id\":\"s-1\",\"name\":\"sandrun_ab_1\",\"hosts\":"
				 "[\"api.example.com\"],\"placeholder\":\"dtn_secret_\"}",
				 why, sizeof(why)));
	cr_assert(record_refused("{\"id\":\"s-1\",\"name\":\"other\",\"hosts\":"
				 "[\"api.example.com\"],\"placeholder\":\"dtn_secret_1\"}",
				 why, sizeof(why)));
	cr_assert(strstr(why, "names secret 'other'"), "%s", why);
	cr_assert(record_refused("{\"id\":\"../x\",\"name\":\"sandrun_ab_1\",\"hosts\":"
				 "[\"api.example.com\"],\"placeholder\":\"dtn_secret_1\"}",
				 why, sizeof(why)));
	cr_assert(strstr(why, "no valid secret id"), "%s", why);
}

Test(daytona_pure, a_lease_names_its_planned_secrets_and_gives_the_created_placeholders)
{
	json_t *lease = dy__lease_new("0a1b", "sandrun", "runner-1", NULL, 1700000000), *ph, *back;
	char *text, why[256];

	cr_assert_not_null(lease);
	cr_assert_eq(dy__lease_plan(lease, "sandrun_0a1b_1", "ANTHROPIC_API_KEY", 0,
				    "ANTHROPIC_API_KEY", "api.anthropic.com"), SR_OK);
	cr_assert_eq(dy__lease_plan(lease, "sandrun_0a1b_2", "docs/Authorization", 1,
				    "SANDRUN_SECRET_2", "mcp.docs.example"), SR_OK);
	cr_assert_str_eq(dy__lease_str(lease, "state"), "creating");
	cr_assert(json_is_null(json_object_get(lease, "sandbox")));
	cr_assert_str_eq(dy__lease_str(dy__lease_secret(lease, "sandrun_0a1b_2"), "target"),
			 "header");
	cr_assert_str_eq(dy__lease_str(dy__lease_secret(lease, "sandrun_0a1b_1"), "state"),
			 "planned");
	cr_assert_null(dy__lease_secret(lease, "sandrun_0a1b_3"));
	/* Only created secrets have placeholders to give. */
	ph = dy__lease_placeholders(lease);
	cr_assert_eq(json_object_size(ph), 0);
	json_decref(ph);
	json_object_set_new(dy__lease_secret(lease, "sandrun_0a1b_2"), "state",
			    json_string("created"));
	json_object_set_new(dy__lease_secret(lease, "sandrun_0a1b_2"), "placeholder",
			    json_string("dtn_secret_42"));
	ph = dy__lease_placeholders(lease);
	cr_assert_str_eq(json_string_value(json_object_get(ph, "docs/Authorization")),
			 "dtn_secret_42");
	cr_assert_eq(json_object_size(ph), 1);
	json_decref(ph);
	/* It round-trips through its text. */
	text = json_dumps(lease, JSON_COMPACT);
	cr_assert_eq(dy__lease_parse(text, strlen(text), &back, why, sizeof(why)), SR_OK, "%s", why);
	cr_assert(json_equal(back, lease));
	json_decref(back);
	free(text);
	json_decref(lease);
}

Test(daytona_pure, a_lease_naming_a_secret_it_did_not_make_is_refused)
{
	const char *foreign = "{\"v\":1,\"id\":\"0a1b\",\"prefix\":\"sandrun\",\"state\":"
			      "\"active\",\"created\":1,\"secrets\":[{\"name\":\"team_secret\","
			      "\"state\":\"created\",\"id\":\"x\"}]}";
	const char *other_lease = "{\"v\":1,\"id\":\"0a1b\",\"prefix\":\"sandrun\",\"state\":"
				  "\"active\",\"created\":1,\"secrets\":[{\"name\":"
				  "\"sandrun_ffff_1\",\"state\":\"created\"}]}";
	const char *v2 = "{\"v\":2,\"id\":\"0a1b\",\"prefix\":\"sandrun\",\"state\":\"active\","
			 "\"created\":1,\"secrets\":[]}";
	json_t *l;
	char why[256];

	cr_assert_eq(dy__lease_parse(foreign, strlen(foreign), &l, why, sizeof(why)), SR_EPROTO);
	cr_assert_null(l);
	cr_assert(strstr(why, "sandrun_0a1b_"), "%s", why);
	cr_assert_eq(dy__lease_parse(other_lease, strlen(other_lease), &l, why, sizeof(why)),
		     SR_EPROTO);
	cr_assert_eq(dy__lease_parse(v2, strlen(v2), &l, why, sizeof(why)), SR_EPROTO);
	cr_assert_eq(dy__lease_parse("[]", 2, &l, why, sizeof(why)), SR_EPROTO);
}

/* ------------------------------------------- secrets: on the emulator */

static const char *const key_host[] = { "api.anthropic.test" };
static const char *const docs_host[] = { "mcp.docs.test" };
static const sr_credential cred_key = { sizeof(sr_credential), SR_CRED_ENV, "ANTHROPIC_API_KEY",
					"sk-ant-value-one", key_host, 1, "api_key", 1, NULL };
static const sr_credential cred_hdr = { sizeof(sr_credential), SR_CRED_HEADER,
					"docs/Authorization", "Bearer docs-value-two", docs_host,
					1, "bearer", 1, NULL };
static const sr_credential *const two_creds[] = { &cred_key, &cred_hdr };
static const sr_pair runner_label[] = { { "sandrun.runner", "runner-1" } };

static void create_secrets_async(uint64_t req)
{
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, two_creds, 2, NULL, runner_label, 1 };

	reset();
	cr_assert_eq(sr__provider_create(p, req, &spec, sr__wait_done, &w), SR_OK);
}

static char *create_secrets(void)
{
	static char id[128];
	json_t *j;

	create_secrets_async(sr__next_req());
	wait_ok("create with secrets");
	j = json_loads(w.json, 0, NULL);
	snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(j, "id")));
	json_decref(j);
	return id;
}

/* The organization's secrets as the emulator lists them (new array). */
static json_t *emu_secrets(void)
{
	static char body[1 << 18];
	json_t *j;

	cr_assert_eq(admin("GET", "/api/secret", NULL, body, sizeof(body)), 200);
	j = json_loads(body, 0, NULL);
	cr_assert(json_is_array(j), "%s", body);
	return j;
}

/* How many secrets are named with this prefix ("" for all). */
static size_t secrets_named(const char *prefix)
{
	json_t *all = emu_secrets(), *s;
	size_t i, n = 0;

	json_array_foreach(all, i, s)
		n += strncmp(json_string_value(json_object_get(s, "name")), prefix,
			     strlen(prefix)) == 0;
	json_decref(all);
	return n;
}

static void seed_secret(const char *name)
{
	char body[256];

	snprintf(body, sizeof(body), "{\"name\":\"%s\",\"value\":\"theirs\",\"hosts\":"
		 "[\"api.other.test\"]}", name);
	cr_assert_eq(admin("POST", "/api/secret", body, NULL, 0), 201);
}

/* The plugin's lease records (new object: key -> record), read from its
 * key-value area in the store as the plugin wrote them. */
static int add_lease(void *ud, const char *key)
{
	char state[4096], *v = NULL;

	snprintf(state, sizeof(state), "%s/state", dir);
	if (strncmp(key, "lease.", 6) == 0 &&
	    sr__kv_get(state, "provider.daytona", key, &v, NULL) == SR_OK)
		json_object_set_new(ud, key, json_loads(v, 0, NULL));
	free(v);
	return 0;
}

static json_t *leases(void)
{
	char state[4096];
	json_t *all = json_object();

	snprintf(state, sizeof(state), "%s/state", dir);
	cr_assert_eq(sr__kv_list(state, "provider.daytona", add_lease, all), SR_OK);
	return all;
}

static json_t *only_lease(void)
{
	json_t *all = leases(), *l = NULL, *v;
	const char *k;

	cr_assert_eq(json_object_size(all), 1, "%s", json_dumps(all, 0));
	json_object_foreach(all, k, v)
		l = json_incref(v);
	json_decref(all);
	return l;
}

static size_t n_leases(void)
{
	json_t *all = leases();
	size_t n = json_object_size(all);

	json_decref(all);
	return n;
}

static json_t *maintain(const char *params)
{
	json_t *j;

	reset();
	cr_assert_eq(sr__provider_maintain(p, sr__next_req(), params, sr__wait_done, &w), SR_OK);
	wait_ok("maintain");
	j = json_loads(w.json, 0, NULL);
	cr_assert(json_is_array(json_object_get(j, "items")), "%s", w.json);
	return j;
}

/* How many items of the report have this kind and action. */
static size_t items(json_t *report, const char *kind, const char *action)
{
	json_t *it;
	size_t i, n = 0;

	json_array_foreach(json_object_get(report, "items"), i, it)
		n += strcmp(json_string_value(json_object_get(it, "kind")), kind) == 0 &&
		     strcmp(json_string_value(json_object_get(it, "action")), action) == 0;
	return n;
}

static int item_named(json_t *report, const char *name, const char *action)
{
	json_t *it;
	size_t i;

	json_array_foreach(json_object_get(report, "items"), i, it)
		if (strcmp(json_string_value(json_object_get(it, "name")), name) == 0 &&
		    strcmp(json_string_value(json_object_get(it, "action")), action) == 0)
			return 1;
	return 0;
}

static void wait_box_gone(const char *id)
{
	for (int i = 0; i < 200 && *emu_state(id); i++)
		usleep(20000);
	cr_assert_str_eq(emu_state(id), "", "sandbox %s is still there", id);
}

Test(daytona, create_with_bindings_makes_one_secret_each_linked_and_never_in_env)
{
	const char *argv[] = { "sh", "-c", "echo \"k=$ANTHROPIC_API_KEY h=$SANDRUN_SECRET_2\"",
			       NULL };
	sr_exec_spec xs = { sizeof(xs), argv, NULL, 0, NULL, NULL, 0 };
	json_t *res, *ph, *all, *lease, *rec, *links, *s;
	char path[256], body[65536], expect[512];
	const char *lease_id, *ph_key, *ph_hdr;
	out o = { 0 };
	char *id;
	size_t i;

	start("");
	cr_assert(sr__provider_capabilities(p) & SR_CAP_ISOLATED_SECRETS);
	id = create_secrets();
	res = json_loads(w.json, 0, NULL);
	ph = json_object_get(res, "placeholders");
	ph_key = json_string_value(json_object_get(ph, "ANTHROPIC_API_KEY"));
	ph_hdr = json_string_value(json_object_get(ph, "docs/Authorization"));
	cr_assert(ph_key && ph_hdr && strncmp(ph_key, "dtn_secret_", 11) == 0 &&
		  strncmp(ph_hdr, "dtn_secret_", 11) == 0, "%s", w.json);
	/* One secret per binding, each with exactly its one host. */
	lease = only_lease();
	lease_id = json_string_value(json_object_get(lease, "id"));
	cr_assert_str_eq(json_string_value(json_object_get(lease, "state")), "active");
	cr_assert_str_eq(json_string_value(json_object_get(lease, "sandbox")), id);
	cr_assert(json_is_null(json_object_get(lease, "owner")), "the finished create still owns it");
	all = emu_secrets();
	cr_assert_eq(json_array_size(all), 2, "%s", json_dumps(all, 0));
	json_array_foreach(all, i, s) {
		char name[96];
		json_t *l = dy__lease_secret(lease, json_string_value(json_object_get(s, "name")));
		snprintf(name, sizeof(name), "sandrun_%s_%zu", lease_id, i + 1);
		cr_assert_str_eq(json_string_value(json_object_get(s, "name")), name);
		cr_assert_eq(json_array_size(json_object_get(s, "hosts")), 1);
		cr_assert_str_eq(json_string_value(json_array_get(json_object_get(s, "hosts"), 0)),
				 i == 0 ? "api.anthropic.test" : "mcp.docs.test");
		cr_assert(strstr(json_string_value(json_object_get(s, "description")), lease_id));
		cr_assert_str_eq(json_string_value(json_object_get(l, "state")), "created");
		cr_assert_str_eq(json_string_value(json_object_get(l, "id")),
				 json_string_value(json_object_get(s, "id")));
		cr_assert_str_eq(json_string_value(json_object_get(s, "placeholder")),
				 i == 0 ? ph_key : ph_hdr);
	}
	json_decref(all);
	/* Linked through the sandbox's secrets, never its env; labelled. */
	snprintf(path, sizeof(path), "/_emulator/sandbox/%s", id);
	cr_assert_eq(admin("GET", path, NULL, body, sizeof(body)), 200);
	rec = json_loads(body, 0, NULL);
	links = json_object_get(rec, "secrets");
	cr_assert_eq(json_array_size(links), 2, "%s", body);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(links, 0), "env")),
			 "ANTHROPIC_API_KEY");
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(links, 1), "env")),
			 "SANDRUN_SECRET_2");
	cr_assert(strstr(json_string_value(json_object_get(json_array_get(links, 1),
							    "secretName")), lease_id));
	cr_assert_null(json_object_get(json_object_get(rec, "env"), "ANTHROPIC_API_KEY"), "%s", body);
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(rec, "labels"),
							   "sandrun.lease")), lease_id);
	cr_assert(!strstr(body, "sk-ant-value-one") && !strstr(body, "docs-value-two"), "%s", body);
	json_decref(rec);
	/* The sandbox's processes see the placeholders. */
	cr_assert_eq(sr__provider_exec(p, 31, id, &xs, &o_cbs, &o), SR_OK);
	RUN_UNTIL(o.exited || o.failed, 15000);
	snprintf(expect, sizeof(expect), "k=%s h=%s\n", ph_key, ph_hdr);
	cr_assert_str_eq(o.buf, expect);
	/* The values never reach the log. */
	cr_assert(!strstr(t_log_text(), "sk-ant-value-one") &&
		  !strstr(t_log_text(), "docs-value-two"), "%s", t_log_text());
	/* reconnect gives the same placeholders, from the lease. */
	reset();
	sr__provider_reconnect(p, 32, id, NULL, sr__wait_done, &w);
	wait_ok("reconnect");
	rec = json_loads(w.json, 0, NULL);
	cr_assert(json_equal(json_object_get(rec, "placeholders"), ph), "%s", w.json);
	json_decref(rec);
	json_decref(lease);
	json_decref(res);
}

Test(daytona, destroy_deletes_the_sandbox_first_then_its_secrets_and_lease)
{
	json_t *res;
	char *id;

	start("destroy_timeout = 1\n");
	id = create_secrets();
	/* The sandbox's deletion fails: its secrets and lease stay. */
	fault("DELETE /api/sandbox/{id}", 500, -1, 0);
	reset();
	sr__provider_destroy(p, 40, id, sr__wait_done, &w);
	d_wait();
	cr_assert_neq(w.status, SR_OK);
	cr_assert_eq(secrets_named("sandrun_"), 2, "secrets went before their sandbox");
	cr_assert_eq(n_leases(), 1);
	cr_assert_eq(calls("DELETE /api/secret/{id}"), 0);
	admin("DELETE", "/_emulator/faults", NULL, NULL, 0);
	reset();
	sr__provider_destroy(p, 41, id, sr__wait_done, &w);
	wait_ok("destroy");
	res = json_loads(w.json, 0, NULL);
	cr_assert_null(json_object_get(res, "cleanup_pending"), "%s", w.json);
	json_decref(res);
	cr_assert_str_eq(emu_state(id), "");
	cr_assert_eq(secrets_named(""), 0);
	cr_assert_eq(calls("DELETE /api/secret/{id}"), 2);
	cr_assert_eq(n_leases(), 0);
}

Test(daytona, a_failed_second_secret_deletes_the_first_and_leaves_no_lease)
{
	start("");
	/* The first secret creation passes, the second fails. */
	cr_assert_eq(admin("POST", "/_emulator/faults", "{\"route\":\"POST /api/secret\","
			   "\"status\":500,\"count\":1,\"after\":1}", NULL, 0), 200);
	create_secrets_async(50);
	d_wait();
	cr_assert_eq(w.status, SR_EHTTP, "%d %s", w.status, w.message);
	cr_assert(strstr(w.message, "credential binding 'docs/Authorization'") &&
		  strstr(w.message, "HTTP 500") && strstr(w.message, "1 secret(s) created for it "
							   "were deleted"), "%s", w.message);
	cr_assert_eq(calls("POST /api/secret"), 2);
	cr_assert_eq(secrets_named(""), 0, "the first secret is left");
	cr_assert_eq(calls("POST /api/sandbox"), 0);
	cr_assert_eq(n_leases(), 0);
}

Test(daytona, a_failed_sandbox_create_deletes_the_secrets_newest_first)
{
	start("");
	fault("POST /api/sandbox", 400, 1, 0);
	create_secrets_async(51);
	d_wait();
	cr_assert_eq(w.status, SR_EINVAL, "%d %s", w.status, w.message);
	cr_assert(strstr(w.message, "POST /api/sandbox: HTTP 400") &&
		  strstr(w.message, "2 secret(s)"), "%s", w.message);
	cr_assert_eq(secrets_named(""), 0);
	cr_assert_eq(n_leases(), 0);
	/* A 503: the sandbox may exist; looked up by its lease label, none. */
	reset_calls();
	fault("POST /api/sandbox", 503, 1, 0);
	create_secrets_async(52);
	d_wait();
	cr_assert_eq(w.status, SR_EHTTP, "%d %s", w.status, w.message);
	cr_assert_eq(calls("GET /api/sandbox"), 1, "no lookup by label");
	cr_assert_eq(secrets_named(""), 0);
	cr_assert_eq(n_leases(), 0);
}

Test(daytona, a_secret_not_as_asked_is_deleted_and_the_create_fails)
{
	/* The emulator's placeholders start with dtn_secret_, not with this. */
	start("placeholder_prefix = pfx_\n");
	create_secrets_async(53);
	d_wait();
	cr_assert_eq(w.status, SR_EPROTO, "%d %s", w.status, w.message);
	cr_assert(strstr(w.message, "placeholder does not start with 'pfx_'") &&
		  strstr(w.message, "deleted"), "%s", w.message);
	cr_assert_eq(calls("POST /api/secret"), 1);
	cr_assert_eq(secrets_named(""), 0);
	cr_assert_eq(n_leases(), 0);
}

Test(daytona, a_binding_breaking_the_host_rule_is_refused_before_anything_exists)
{
	const char *wild[] = { "*.anthropic.test" };
	sr_credential bad = { sizeof(bad), SR_CRED_ENV, "ANTHROPIC_API_KEY", "sk-ant-value-three",
			      wild, 1, "api_key", 1, NULL };
	const sr_credential *creds[] = { &cred_key, &bad };
	sr_pair env[] = { { "ANTHROPIC_API_KEY", "plain" } };
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, creds, 2, NULL, NULL, 0 };

	start("");
	reset();
	cr_assert_eq(sr__provider_create(p, 54, &spec, sr__wait_done, &w), SR_OK);
	d_wait();
	cr_assert_eq(w.status, SR_EINVAL);
	cr_assert(strstr(w.message, "'*.anthropic.test' is a wildcard"), "%s", w.message);
	/* A binding's variable given as plain env too. */
	spec.credentials = creds;
	spec.n_credentials = 1;
	spec.env = env;
	spec.n_env = 1;
	reset();
	cr_assert_eq(sr__provider_create(p, 55, &spec, sr__wait_done, &w), SR_OK);
	d_wait();
	cr_assert_eq(w.status, SR_EINVAL);
	cr_assert(strstr(w.message, "'ANTHROPIC_API_KEY' is also a credential binding"), "%s",
		  w.message);
	cr_assert_eq(calls("POST /api/secret"), 0);
	cr_assert_eq(calls("POST /api/sandbox"), 0);
	cr_assert_eq(n_leases(), 0);
	cr_assert(!strstr(t_log_text(), "sk-ant-value-three"), "%s", t_log_text());
}

Test(daytona, secrets_off_means_no_isolation_and_bindings_are_refused)
{
	start("secrets = off\n");
	cr_assert_not(sr__provider_capabilities(p) & SR_CAP_ISOLATED_SECRETS);
	create_secrets_async(56);
	d_wait();
	cr_assert_eq(w.status, SR_EUNSUPPORTED);
	cr_assert(strstr(w.message, "secrets = off"), "%s", w.message);
	cr_assert_eq(calls("POST /api/secret"), 0);
	/* Nothing to maintain: the secret API is not even asked. */
	json_decref(maintain("{\"grace_s\":0}"));
	cr_assert_eq(calls("GET /api/secret/paginated") + calls("GET /api/secret"), 0);
}

Test(daytona, a_bad_secret_prefix_is_a_configuration_error)
{
	char conf[1024];

	start_emulator();
	snprintf(conf, sizeof(conf), "[runner]\nstate_dir = %s/state\nplugin_dir = %s/none\n"
		 "[provider.daytona]\napi_url = %s\napi_key = test-key\nsecret_prefix = 9lives\n",
		 dir, dir, api_url);
	cr_assert_eq(sr__ctx_init(&ctx, uv_default_loop(), t_write(dir, "sandrun.conf", conf)),
		     SR_OK);
	ctx_up = 1;
	p = sr__registry_find(ctx.reg, SR_PLUGIN_PROVIDER, "daytona");
	cr_assert_neq(sr__plugin_start(&ctx, p), SR_OK);
	cr_assert(strstr(t_log_text(), "secret_prefix") && strstr(t_log_text(), "9lives"), "%s",
		  t_log_text());
}

Test(daytona, maintain_after_a_crash_before_the_sandbox_cleans_up_and_spares_foreign_secrets)
{
	json_t *r;

	start("");
	seed_secret("sandrun_someone_else_1");
	seed_secret("team_secret");
	/* POST /sandbox hangs, then fails; the runner dies meanwhile. */
	fault("POST /api/sandbox", 500, 1, 1500);
	create_secrets_async(60);
	RUN_UNTIL(calls("POST /api/sandbox") >= 1, 5000);
	cr_assert_eq(secrets_named("sandrun_"), 3);
	crash_and_restart("");
	usleep(1600 * 1000);
	cr_assert_eq(n_leases(), 1);
	/* A dry run says what it would do and changes nothing. */
	r = maintain("{\"dry_run\":true,\"grace_s\":0}");
	cr_assert_eq(items(r, "secret", "would_delete"), 2, "%s", w.json);
	cr_assert_eq(items(r, "lease", "would_delete"), 1, "%s", w.json);
	cr_assert(item_named(r, "sandrun_someone_else_1", "foreign"), "%s", w.json);
	cr_assert(!strstr(w.json, "team_secret"), "a secret without the prefix is reported: %s",
		  w.json);
	json_decref(r);
	cr_assert_eq(secrets_named("sandrun_"), 3);
	cr_assert_eq(n_leases(), 1);
	/* Younger than the grace period: kept. */
	r = maintain("{\"grace_s\":3600}");
	cr_assert_eq(items(r, "lease", "kept"), 1, "%s", w.json);
	cr_assert(strstr(w.json, "younger than the grace period"), "%s", w.json);
	json_decref(r);
	cr_assert_eq(secrets_named("sandrun_"), 3);
	/* Past it: the secrets and the lease go, the foreign ones stay. */
	r = maintain("{\"grace_s\":0}");
	cr_assert_eq(items(r, "secret", "deleted"), 2, "%s", w.json);
	cr_assert_eq(items(r, "lease", "deleted"), 1, "%s", w.json);
	cr_assert_eq(items(r, "secret", "foreign"), 1, "%s", w.json);
	json_decref(r);
	cr_assert_eq(n_leases(), 0);
	cr_assert_eq(secrets_named("sandrun_"), 1);
	cr_assert_eq(secrets_named("sandrun_someone_else_1"), 1);
	cr_assert_eq(secrets_named("team_secret"), 1);
	/* Again: nothing left of ours; the foreign one still untouched. */
	reset_calls();
	r = maintain("{\"grace_s\":0}");
	cr_assert_eq(json_array_size(json_object_get(r, "items")), 1, "%s", w.json);
	json_decref(r);
	cr_assert_eq(calls("DELETE /api/secret/{id}"), 0);
}

Test(daytona, maintain_finds_a_secret_created_just_before_a_crash_by_its_name)
{
	json_t *r, *lease;

	start("");
	/* The first POST /secret is slow; Daytona makes the secret, and the
	 * runner dies before it reads the answer (the loop does not run). */
	fault("POST /api/secret", 0, 1, 300);
	create_secrets_async(61);
	RUN_UNTIL(calls("POST /api/secret") >= 1, 5000);
	for (int i = 0; i < 100 && secrets_named("sandrun_") < 1; i++)
		usleep(20000);
	cr_assert_eq(secrets_named("sandrun_"), 1);
	crash_and_restart("");
	lease = only_lease();
	cr_assert_str_eq(json_string_value(json_object_get(
		json_array_get(json_object_get(lease, "secrets"), 0), "state")), "planned");
	json_decref(lease);
	r = maintain("{\"grace_s\":0}");
	cr_assert_eq(items(r, "secret", "deleted"), 1, "%s", w.json);
	cr_assert_eq(items(r, "secret", "foreign"), 0, "%s", w.json);
	json_decref(r);
	cr_assert_eq(secrets_named(""), 0);
	cr_assert_eq(n_leases(), 0);
}

Test(daytona, a_cancelled_create_leaves_its_lease_to_maintain)
{
	json_t *r, *lease;

	start("");
	fault("POST /api/sandbox", 0, 1, 1500);
	create_secrets_async(66);
	RUN_UNTIL(calls("POST /api/sandbox") >= 1, 5000);
	cr_assert_eq(sr__provider_cancel(p, 66), SR_OK);
	d_wait();
	cr_assert_eq(w.status, SR_ECANCELED);
	lease = only_lease();
	cr_assert(json_is_null(json_object_get(lease, "owner")), "the cancelled create still owns "
		  "its lease: %s", json_dumps(lease, 0));
	json_decref(lease);
	usleep(1600 * 1000); /* the abandoned POST /sandbox ends (no sandbox) */
	cr_assert_eq(secrets_named("sandrun_"), 2);
	r = maintain("{\"grace_s\":0}");
	cr_assert_eq(items(r, "secret", "deleted"), 2, "%s", w.json);
	cr_assert_eq(items(r, "lease", "deleted"), 1, "%s", w.json);
	json_decref(r);
	cr_assert_eq(secrets_named(""), 0);
	cr_assert_eq(n_leases(), 0);
}

Test(daytona, maintain_keeps_a_lease_while_its_sandbox_exists_even_stopped)
{
	char path[256];
	json_t *r;
	char *id;

	start("");
	id = create_secrets();
	reset();
	sr__provider_park(p, 62, id, SR_PARK_STOPPED, sr__wait_done, &w);
	wait_ok("park");
	r = maintain("{\"grace_s\":0}");
	cr_assert_eq(items(r, "lease", "kept"), 1, "%s", w.json);
	cr_assert_eq(items(r, "secret", "kept"), 2, "%s", w.json);
	cr_assert(strstr(w.json, "state 'stopped'"), "%s", w.json);
	json_decref(r);
	cr_assert_eq(secrets_named("sandrun_"), 2);
	/* Deleted behind the runner's back: the next maintain cleans up. */
	snprintf(path, sizeof(path), "/api/sandbox/%s", id);
	cr_assert_eq(admin("DELETE", path, NULL, NULL, 0), 200);
	wait_box_gone(id);
	r = maintain("{\"grace_s\":0}");
	cr_assert_eq(items(r, "secret", "deleted"), 2, "%s", w.json);
	json_decref(r);
	cr_assert_eq(secrets_named(""), 0);
	cr_assert_eq(n_leases(), 0);
}

/* Whether a sandbox labelled sandrun.lease exists (asked without the loop). */
static int box_labelled_with_a_lease(void)
{
	char body[65536];

	return admin("GET", "/api/sandbox", NULL, body, sizeof(body)) == 200 &&
	       strstr(body, "\"sandrun.lease\"") != NULL;
}

Test(daytona, a_crash_after_the_sandbox_exists_leaves_a_lease_its_label_names)
{
	json_t *r, *lease, *list;
	const char *box;

	start("");
	/* POST /sandbox is slow and succeeds; the runner dies meanwhile, so
	 * the lease never learns the sandbox's id. */
	fault("POST /api/sandbox", 0, 1, 300);
	create_secrets_async(63);
	RUN_UNTIL(calls("POST /api/sandbox") >= 1, 5000);
	for (int i = 0; i < 100 && !box_labelled_with_a_lease(); i++)
		usleep(20000);
	cr_assert(box_labelled_with_a_lease(), "the emulator made no sandbox");
	crash_and_restart("");
	lease = only_lease();
	cr_assert(json_is_null(json_object_get(lease, "sandbox")));
	json_decref(lease);
	r = maintain("{\"grace_s\":0}");
	cr_assert_eq(items(r, "lease", "kept"), 1, "the sandbox was not found by its label: %s",
		     w.json);
	json_decref(r);
	lease = only_lease();
	box = json_string_value(json_object_get(lease, "sandbox"));
	cr_assert_not_null(box, "maintain did not record the sandbox it found");
	/* Destroying it (as the janitor does) releases its secrets. */
	reset();
	sr__provider_destroy(p, 64, box, sr__wait_done, &w);
	wait_ok("destroy");
	json_decref(lease);
	cr_assert_eq(secrets_named(""), 0);
	cr_assert_eq(n_leases(), 0);
	reset();
	cr_assert_eq(sr__provider_list(p, 65, NULL, 0, sr__wait_done, &w), SR_OK);
	wait_ok("list");
	list = json_loads(w.json, 0, NULL);
	cr_assert_eq(json_array_size(list), 0, "%s", w.json);
	json_decref(list);
}

static int has_event(const char *type)
{
	json_t *ev;
	size_t i;

	json_array_foreach(events, i, ev)
		if (strcmp(json_string_value(json_object_get(ev, "type")), type) == 0)
			return 1;
	return 0;
}

Test(daytona, a_failed_secret_deletion_is_reported_and_retried_on_the_loop)
{
	json_t *res, *lease;
	char *id;

	start("");
	id = create_secrets();
	fault("DELETE /api/secret/{id}", 500, 2, 0);
	reset();
	sr__provider_destroy(p, 70, id, sr__wait_done, &w);
	wait_ok("destroy");
	res = json_loads(w.json, 0, NULL);
	cr_assert_eq(json_array_size(json_object_get(res, "cleanup_pending")), 2, "%s", w.json);
	json_decref(res);
	cr_assert(has_event("cleanup_pending"), "%s", json_dumps(events, 0));
	lease = only_lease();
	cr_assert_str_eq(json_string_value(json_object_get(lease, "state")), "cleanup_pending");
	cr_assert(strstr(json_string_value(json_object_get(lease, "error")), "HTTP 500"));
	json_decref(lease);
	cr_assert_eq(secrets_named("sandrun_"), 2);
	/* The retry, on the loop, a backoff later. */
	RUN_UNTIL(n_leases() == 0, 10000);
	cr_assert_eq(n_leases(), 0, "not retried");
	cr_assert_eq(secrets_named(""), 0);
	cr_assert_eq(calls("DELETE /api/secret/{id}"), 4);
}

Test(daytona, maintain_retries_a_pending_cleanup_until_it_is_done)
{
	json_t *r;
	char *id;

	start("");
	id = create_secrets();
	fault("DELETE /api/secret/{id}", 500, -1, 0);
	reset();
	sr__provider_destroy(p, 71, id, sr__wait_done, &w);
	wait_ok("destroy");
	r = maintain("{\"grace_s\":3600,\"dry_run\":true}");
	cr_assert_eq(items(r, "lease", "pending"), 1, "%s", w.json);
	json_decref(r);
	r = maintain("{\"grace_s\":3600}");
	cr_assert_eq(items(r, "secret", "pending"), 2, "%s", w.json);
	cr_assert_eq(items(r, "lease", "pending"), 1, "%s", w.json);
	json_decref(r);
	cr_assert_eq(secrets_named("sandrun_"), 2);
	admin("DELETE", "/_emulator/faults", NULL, NULL, 0);
	r = maintain("{\"grace_s\":3600}");
	cr_assert_eq(items(r, "secret", "deleted"), 2, "%s", w.json);
	cr_assert_eq(items(r, "lease", "deleted"), 1, "%s", w.json);
	json_decref(r);
	cr_assert_eq(secrets_named(""), 0);
	cr_assert_eq(n_leases(), 0);
}

Test(daytona, two_maintains_at_once_delete_each_secret_once)
{
	sr__wait w2 = { 0 };
	char path[256];
	char *id;

	start("");
	id = create_secrets();
	snprintf(path, sizeof(path), "/api/sandbox/%s", id);
	cr_assert_eq(admin("DELETE", path, NULL, NULL, 0), 200);
	wait_box_gone(id);
	reset_calls();
	reset();
	cr_assert_eq(sr__provider_maintain(p, 80, "{\"grace_s\":0}", sr__wait_done, &w), SR_OK);
	cr_assert_eq(sr__provider_maintain(p, 81, "{\"grace_s\":0}", sr__wait_done, &w2), SR_OK);
	RUN_UNTIL(w.done && w2.done, 20000);
	cr_assert(w.done && w2.done);
	cr_assert_eq(w.status, SR_OK, "%s", w.message);
	cr_assert_eq(w2.status, SR_OK, "%s", w2.message);
	cr_assert(!strstr(w.json, "\"failed\"") && !strstr(w2.json, "\"failed\""), "%s / %s",
		  w.json, w2.json);
	cr_assert_eq(calls("DELETE /api/secret/{id}"), 2);
	cr_assert_eq(secrets_named(""), 0);
	cr_assert_eq(n_leases(), 0);
	sr__wait_clear(&w2);
}

Test(daytona, maintain_reads_every_page_of_the_organizations_secrets)
{
	char path[256], name[64];
	json_t *r;
	char *id;

	start("");
	for (int i = 0; i < 150; i++) {
		snprintf(name, sizeof(name), "sandrun_other_%d", i);
		seed_secret(name);
	}
	id = create_secrets();
	snprintf(path, sizeof(path), "/api/sandbox/%s", id);
	cr_assert_eq(admin("DELETE", path, NULL, NULL, 0), 200);
	wait_box_gone(id);
	reset_calls();
	r = maintain("{\"grace_s\":0}");
	cr_assert_eq(items(r, "secret", "foreign"), 150, "%s", w.json);
	cr_assert_eq(items(r, "secret", "deleted"), 2, "%s", w.json);
	json_decref(r);
	cr_assert_eq(calls("GET /api/secret/paginated"), 2);
	cr_assert_eq(secrets_named("sandrun_other_"), 150);
	cr_assert_eq(n_leases(), 0);
}

Test(daytona, maintain_refuses_bad_params_clearly)
{
	start("");
	reset();
	cr_assert_eq(sr__provider_maintain(p, 90, "{\"grace_s\":-1}", sr__wait_done, &w), SR_OK);
	d_wait();
	cr_assert_eq(w.status, SR_EINVAL);
	cr_assert(strstr(w.message, "grace_s") && strstr(w.message, "-1"), "%s", w.message);
}
