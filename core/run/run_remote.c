/* Platform tools in a sandbox the runner reaches only through its provider
 * (a remote one, or any with [runner] relay_transport = provider): the
 * sandbox's machine checked against the shim's, the shim and the tool
 * specs uploaded under $HOME/.sandrun, and the relay directory there
 * served through the relay bridge (core/tools/relay_bridge.c) into a
 * runner-side mirror that the relay loop serves. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/host/fsutil.h"
#include "core/host/log.h"
#include "core/host/status.h"
#include "core/plugins/provider.h"
#include "core/run/run_int.h"
#include "core/tools/relay_bridge.h"

#define MACHINE_OUT_MAX 256

/* ------------------------------------------------------------ steps */

static void remote_step(sr__run *r);

#define STEP_ATTEMPTS 4
#define STEP_BACKOFF_MS 200

static void free_timer(uv_handle_t *h)
{
	free(h);
}

static void on_retry_step(uv_timer_t *t)
{
	sr__run *r = t->data;

	uv_close((uv_handle_t *)t, free_timer);
	if (sr__run_landed(r))
		remote_step(r);
}

/* A provider that timed out or answered 5xx: the same step again later,
 * a few times. 1 when it was scheduled. */
static int retry_step(sr__run *r, int status)
{
	uv_timer_t *t;

	if ((status != SR_ETIMEDOUT && status != SR_ENETWORK && status != SR_ECONNREFUSED &&
	     status != SR_EHTTP) || ++r->remote_attempts >= STEP_ATTEMPTS ||
	    !(t = malloc(sizeof(*t))))
		return 0;
	uv_timer_init(r->ctx->loop, t);
	t->data = r;
	uv_timer_start(t, on_retry_step, (uint64_t)STEP_BACKOFF_MS << (r->remote_attempts - 1), 0);
	r->inflight++;
	return 1;
}

static void on_step(void *ud, const sr_result *res)
{
	sr__run *r = ud;
	const char *what = r->remote_what;

	if (!sr__run_landed(r))
		return;
	if (res->status != SR_OK && !(res->status == SR_EEXIST && r->remote_mkdir) &&
	    retry_step(r, res->status))
		return;
	if (res->status != SR_OK && !(res->status == SR_EEXIST && r->remote_mkdir)) {
		sr__run_fail(r, "prepare_failed", "cannot %s in sandbox %s: %s", what,
			     r->sandbox_id, res->message ? res->message : sr__strerror(res->status));
		return;
	}
	r->remote_index++;
	r->remote_attempts = 0;
	remote_step(r);
}

/* uname -m in the sandbox: its output, then its end. */
static void on_machine_out(void *ud, const void *data, size_t len)
{
	sr__run *r = ud;
	size_t room = MACHINE_OUT_MAX - r->machine_len;

	if (!data || !len)
		return;
	if (len > room)
		len = room;
	memcpy(r->machine + r->machine_len, data, len);
	r->machine_len += len;
}

static void on_machine_err(void *ud, const void *data, size_t len)
{
	(void)ud;
	(void)data;
	(void)len;
}

static void machine_checked(sr__run *r, int status, int code, const char *message)
{
	const char *want = sr__elf_machine(r->o.shim_path, &(int){ 0 });
	size_t n = r->machine_len;

	if (!sr__run_landed(r))
		return;
	while (n && (r->machine[n - 1] == '\n' || r->machine[n - 1] == '\r' ||
		     r->machine[n - 1] == ' '))
		n--;
	r->machine[n] = 0;
	if (status != SR_OK && retry_step(r, status))
		return;
	if (status != SR_OK || code != 0 || !n) {
		sr__run_fail(r, "prepare_failed", "cannot tell the machine of sandbox %s "
			     "('uname -m' %s): %s", r->sandbox_id,
			     status != SR_OK ? "did not run" : "failed",
			     message ? message : status != SR_OK ? sr__strerror(status) :
				     "no output");
		return;
	}
	if (!want || strcmp(want, r->machine) != 0) {
		sr__run_fail(r, "shim_machine_mismatch", "sandbox %s runs on %s, and the shim "
			     "%s is built for %s: platform tools cannot reach it (build sandrun "
			     "for %s, or give [runner] shim for it)", r->sandbox_id, r->machine,
			     r->o.shim_path, want ? want : "an unknown machine", r->machine);
		return;
	}
	r->remote_index++;
	r->remote_attempts = 0;
	remote_step(r);
}

static void on_machine_exit(void *ud, int status, int sig)
{
	machine_checked(ud, SR_OK, sig ? 128 + sig : status, NULL);
}

static void on_machine_failed(void *ud, int status, const char *message)
{
	machine_checked(ud, status, 1, message);
}

static char *read_all(const char *path, size_t *len)
{
	struct stat st;
	char *buf = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size > (64 << 20) ||
	    !(buf = malloc((size_t)st.st_size)) ||
	    read(fd, buf, (size_t)st.st_size) != st.st_size) {
		free(buf);
		buf = NULL;
	}
	if (fd >= 0)
		close(fd);
	*len = buf ? (size_t)st.st_size : 0;
	return buf;
}

static void on_swept(void *ud, int status, const char *message)
{
	sr__run *r = ud;
	char err[600];

	if (!sr__run_landed(r))
		return;
	if (status != SR_OK) {
		sr__run_fail(r, "prepare_failed", "cannot clear the relay directory of sandbox "
			     "%s: %s", r->sandbox_id, message ? message : sr__strerror(status));
		return;
	}
	sr__relay_start(r->relay);
	sr__bridge_start(r->bridge);
	/* The loopback MCP server, for a harness that asks, when its agent is
	 * on this host (relay_transport = provider on a local provider). */
	if (r->root && json_is_true(json_object_get(r->desc, "wants_mcp_http")) &&
	    sr__mcp_http_start(r->ctx->loop, r->relay, r->tools, &r->mcp_http, err,
			       sizeof(err)) != SR_OK) {
		sr__run_fail(r, "prepare_failed", "%s", err);
		return;
	}
	r->remote_done(r);
}

/* The runner-side relay on a mirror of the sandbox's directory, and the
 * bridge between them; both swept of an earlier turn's leftovers. */
static void start_bridge(sr__run *r)
{
	const char *state = sr__ctx_state_dir(r->ctx);
	char mirror[4200], journal[4200], err[600];
	sr__bridge_opts bo;
	int rc;

	snprintf(mirror, sizeof(mirror), "%s/relay-mirror/%s", state ? state : "/nonexistent",
		 r->session);
	snprintf(journal, sizeof(journal), "%s/relay/%s", state ? state : "/nonexistent",
		 r->session);
	if (!state || sr__mkdirs(mirror, 0700) != SR_OK || sr__mkdirs(journal, 0700) != SR_OK) {
		sr__run_fail(r, "prepare_failed", "cannot make the relay's mirror %s", mirror);
		return;
	}
	if (sr__run_new_relay(r, mirror, journal) != SR_OK)
		return;
	memset(&bo, 0, sizeof(bo));
	bo.provider = r->provider;
	bo.sandbox = r->sandbox_id;
	bo.remote_dir = r->relay_dir;
	bo.local_dir = mirror;
	bo.journal = journal;
	bo.shim = r->shim_in_box;
	bo.event = sr__run_on_relay_event;
	bo.ud = r;
	if (sr__bridge_new(r->ctx, &bo, &r->bridge, err, sizeof(err)) != SR_OK) {
		sr__run_fail(r, "prepare_failed", "%s", err);
		return;
	}
	rc = sr__bridge_sweep(r->bridge, on_swept, r);
	sr__run_started(r, rc, "prepare_failed", "cannot clear the sandbox's relay directory");
}

#define STEP_SHIM_CHECK 100 /* the shim already there? */
#define STEP_SPECS 6

/* Whether the session's last turn put this very shim (same SHA-256) into
 * this sandbox: then a listing of its directory, one call, replaces the
 * machine check, the directories and the upload. */
static int shim_recorded(sr__run *r)
{
	const char *sb = json_string_value(json_object_get(r->stored_shim, "sandbox"));
	const char *sha = json_string_value(json_object_get(r->stored_shim, "sha256"));
	const char *path = json_string_value(json_object_get(r->stored_shim, "path"));

	return r->resumed && sb && sha && path && r->sandbox_id && r->shim_sha[0] &&
	       strcmp(sb, r->sandbox_id) == 0 && strcmp(sha, r->shim_sha) == 0 &&
	       strlen(path) < sizeof(r->shim_in_box);
}

static void on_shim_listed(void *ud, const sr_result *res)
{
	sr__run *r = ud;
	json_t *list, *e;
	size_t i;
	int there = 0;

	if (!sr__run_landed(r))
		return;
	list = res->status == SR_OK ? json_loads(res->json ? res->json : "", 0, NULL) : NULL;
	json_array_foreach(list, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *type = json_string_value(json_object_get(e, "type"));
		if (name && type && strcmp(name, "sandrun-shim") == 0 && strcmp(type, "file") == 0 &&
		    json_integer_value(json_object_get(e, "size")) == r->shim_size)
			there = 1;
	}
	json_decref(list);
	if (there) {
		snprintf(r->shim_in_box, sizeof(r->shim_in_box), "%s",
			 json_string_value(json_object_get(r->stored_shim, "path")));
		r->remote_index = STEP_SPECS;
	} else {
		/* Gone, or another one: the whole way. */
		sr__log(SR_LOG_DEBUG, "run", "sandbox %s: the recorded shim is not in place; "
			"uploading it", r->sandbox_id);
		r->remote_index = 0;
	}
	r->remote_attempts = 0;
	remote_step(r);
}

/* One step after another; each comes back to on_step (or the machine
 * check) and moves remote_index on. */
static void remote_step(sr__run *r)
{
	static const sr_channel_callbacks machine_cbs = {
		sizeof(machine_cbs), on_machine_out, on_machine_err, on_machine_exit,
		on_machine_failed
	};
	static const char *const uname_argv[] = { "uname", "-m", NULL };
	char dir[4200];
	char *data;
	size_t len;
	json_t *specs;
	int rc;

	r->remote_mkdir = 0;
	snprintf(dir, sizeof(dir), "%s/.sandrun", r->home ? r->home : r->workspace);
	switch (r->remote_index) {
	case STEP_SHIM_CHECK: {
		char bin[4300];
		snprintf(bin, sizeof(bin), "%s/bin", dir);
		rc = sr__provider_file_list(r->provider, sr__next_req(), r->sandbox_id, bin,
					    on_shim_listed, r);
		sr__run_started(r, rc, "prepare_failed", "cannot list the sandbox's shim directory");
		return;
	}
	case 0: {
		sr_exec_spec spec = { sizeof(spec), uname_argv, NULL, 0, NULL, NULL, 0 };
		uint64_t req = sr__next_req();
		r->machine_len = 0;
		rc = sr__provider_exec(r->provider, req, r->sandbox_id, &spec, &machine_cbs, r);
		if (sr__run_started(r, rc, "prepare_failed",
				    "cannot run 'uname -m' in the sandbox") == SR_OK)
			(void)sr__provider_channel_close_input(r->provider, req);
		return;
	}
	case 1:
	case 2:
	case 3:
		if (r->remote_index > 1)
			snprintf(dir + strlen(dir), sizeof(dir) - strlen(dir), "%s",
				 r->remote_index == 2 ? "/bin" : "/relay");
		r->remote_mkdir = 1;
		snprintf(r->remote_what, sizeof(r->remote_what), "make %s", dir);
		rc = sr__provider_file_mkdir(r->provider, sr__next_req(), r->sandbox_id, dir, 0700,
					     on_step, r);
		sr__run_started(r, rc, "prepare_failed", r->remote_what);
		return;
	case 4:
		/* Beside it, then renamed over it: a shim an earlier agent still
		 * runs cannot be written (ETXTBSY), but can be replaced. */
		snprintf(r->shim_in_box, sizeof(r->shim_in_box), "%s/bin/sandrun-shim", dir);
		snprintf(r->remote_what, sizeof(r->remote_what), "upload the shim to %s.new",
			 r->shim_in_box);
		if (!(data = read_all(r->o.shim_path, &len))) {
			sr__run_fail(r, "prepare_failed", "cannot read the shim %s: %s",
				     r->o.shim_path, strerror(errno ? errno : EIO));
			return;
		}
		snprintf(r->remote_tmp, sizeof(r->remote_tmp), "%s.new", r->shim_in_box);
		rc = sr__provider_file_put(r->provider, sr__next_req(), r->sandbox_id,
					   r->remote_tmp, data, len, 0755, on_step, r);
		free(data);
		sr__run_started(r, rc, "prepare_failed", r->remote_what);
		return;
	case 5:
		snprintf(r->remote_what, sizeof(r->remote_what), "put the shim in place at %s",
			 r->shim_in_box);
		rc = sr__provider_file_rename(r->provider, sr__next_req(), r->sandbox_id,
					      r->remote_tmp, r->shim_in_box, on_step, r);
		sr__run_started(r, rc, "prepare_failed", r->remote_what);
		return;
	case STEP_SPECS:
		snprintf(r->specs, sizeof(r->specs), "%s/tool-specs.json", dir);
		snprintf(r->relay_dir, sizeof(r->relay_dir), "%s/relay", dir);
		snprintf(r->remote_what, sizeof(r->remote_what), "upload the tool specs to %s",
			 r->specs);
		specs = sr__tools_specs(r->tools);
		data = specs ? json_dumps(specs, JSON_COMPACT) : NULL;
		json_decref(specs);
		if (!data) {
			sr__run_fail(r, "prepare_failed", "cannot write the tool specs: out of memory");
			return;
		}
		rc = sr__provider_file_put(r->provider, sr__next_req(), r->sandbox_id, r->specs,
					   data, strlen(data), 0600, on_step, r);
		free(data);
		sr__run_started(r, rc, "prepare_failed", r->remote_what);
		return;
	default:
		start_bridge(r);
		return;
	}
}

void sr__run_prepare_remote_tools(sr__run *r, void (*next)(sr__run *r))
{
	if (!r->root && json_is_true(json_object_get(r->desc, "wants_mcp_http"))) {
		sr__run_fail(r, "tools_on_remote_provider",
			     "harness '%s' is set to take its tools over HTTP from this host "
			     "(tools = http), which a sandbox of provider '%s' cannot reach; "
			     "use tools = stdio", r->harness->desc->name, r->provider->desc->name);
		return;
	}
	r->remote_done = next;
	if (sr__sha256_file(r->o.shim_path, r->shim_sha, &r->shim_size) != SR_OK)
		r->shim_sha[0] = 0; /* the upload says what is wrong with it */
	r->remote_index = shim_recorded(r) ? STEP_SHIM_CHECK : 0;
	r->remote_attempts = 0;
	remote_step(r);
}
