/* Acquiring the sandbox (create or reconnect, with credential bindings)
 * and preparing it: the relay and tool specs, the harness's environment
 * and files. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/plugins/complete.h"
#include "core/plugins/harness.h"
#include "core/host/fsutil.h"
#include "core/host/log.h"
#include "core/host/node.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"
#include "core/run/creds.h"
#include "core/run/pool.h"
#include "core/run/endpoint.h"
#include "core/run/mount.h"
#include "core/plugins/tunnel.h"
#include "core/run/run_int.h"
#include "core/run/session.h"
#include "core/host/status.h"

json_t *sr__run_json(sr__run *r)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:b, s:o}", "workspace", r->workspace,
			      "home", r->home ? r->home : r->workspace, "session", r->session,
			      "as_root", geteuid() == 0, "user_mcp_servers",
			      r->user_mcp ? json_incref(r->user_mcp) : json_array());

	json_t *names = json_array(), *v;
	size_t i;

	if (r->o.model_url)
		json_object_set_new(j, "model_url", json_string(r->o.model_url));
	/* Which of the harness's credentials this run has (names only): the
	 * process environment is not the run's when sandrund got them in a
	 * request. */
	json_array_foreach(json_object_get(r->desc, "credential_env"), i, v) {
		const char *value = json_string_value(v) ?
			sr__creds_env(r->o.credentials, json_string_value(v)) : NULL;
		if (value && *value)
			json_array_append(names, v);
	}
	json_object_set_new(j, "credentials", names);
	if (r->tools) {
		json_object_set_new(j, "shim", json_string(r->shim_in_box[0] ? r->shim_in_box :
							   r->o.shim_path));
		json_object_set_new(j, "specs", json_string(r->specs));
		json_object_set_new(j, "relay_dir", json_string(r->relay_dir));
	}
	if (r->mcp_http)
		json_object_set_new(j, "mcp_http", json_pack("{s:s, s:s}", "url",
			sr__mcp_http_url(r->mcp_http), "token", sr__mcp_http_token(r->mcp_http)));
	return j;
}

static void write_next_file(sr__run *r);

static void on_file_written(void *ud, const sr_result *res)
{
	sr__run *r = ud;

	if (!sr__run_landed(r))
		return;
	if (res->status != SR_OK && res->status != SR_EEXIST) {
		sr__run_fail(r, "prepare_failed", "cannot write %s in the sandbox: %s",
		     json_string_value(json_object_get(json_array_get(r->files, r->file_index),
						       "path")),
		     res->message ? res->message : sr__strerror(res->status));
		return;
	}
	r->file_index++;
	write_next_file(r);
}

/* Harness files, one after another; "mkdir" entries come first for each
 * missing parent (created by prepare_files). */
static void write_next_file(sr__run *r)
{
	json_t *f = json_array_get(r->files, r->file_index);
	const char *path, *content;
	int rc;

	if (!f) {
		sr__run_timing(r, "prepare_workspace");
		sr__run_start_agent(r);
		return;
	}
	path = json_string_value(json_object_get(f, "path"));
	content = json_string_value(json_object_get(f, "content"));
	if (json_is_true(json_object_get(f, "dir")))
		rc = sr__provider_file_mkdir(r->provider, sr__next_req(), r->sandbox_id, path,
					     0700, on_file_written, r);
	else
		rc = sr__provider_file_put(r->provider, sr__next_req(), r->sandbox_id, path,
					   content ? content : "", content ? strlen(content) : 0,
					   (uint32_t)json_integer_value(json_object_get(f, "mode")),
					   on_file_written, r);
	sr__run_started(r, rc, "prepare_failed", path ? path : "a harness file");
}

/* The length of base when path lies strictly below it, else 0. */
static size_t below(const char *path, const char *base)
{
	size_t n = base ? strlen(base) : 0;

	while (n > 1 && base[n - 1] == '/')
		n--;
	return n && strncmp(path, base, n) == 0 && path[n] == '/' ? n : 0;
}

json_t *sr__run_expand_files(const char *home, const char *workspace,
			     json_t *files)
{
	json_t *out = json_array(), *f;
	size_t i;

	json_array_foreach(files, i, f) {
		const char *path = json_string_value(json_object_get(f, "path"));
		size_t n;
		char buf[4096];
		if (!path || path[0] != '/')
			continue;
		/* Parents are made only below the home or the workspace; a
		 * file elsewhere is put as it is. */
		n = below(path, home);
		if (!n)
			n = below(path, workspace);
		for (const char *p = n ? path + n + 1 : NULL; p && (p = strchr(p, '/')); p++) {
			snprintf(buf, sizeof(buf), "%.*s", (int)(p - path), path);
			json_array_append_new(out, json_pack("{s:s, s:b}", "path", buf, "dir", 1));
		}
		json_array_append(out, f);
	}
	return out;
}

/* Append the runner's values of the env names desc lists under key to
 * env ({name, value} objects); credentials (names not NULL) come from
 * creds when given, each value is held as a secret in holds and its name
 * appended to names. */
static void copy_env(json_t *desc, const char *key, json_t *creds, json_t *env,
		     json_t *names, sr__secret_holds *holds)
{
	json_t *v;
	size_t i;

	json_array_foreach(json_object_get(desc, key), i, v) {
		const char *name = json_string_value(v);
		const char *value = !name ? NULL : names ? sr__creds_env(creds, name) :
							   getenv(name);
		if (!value || !*value)
			continue;
		if (names) {
			sr__secret_hold_in(holds, value);
			json_array_append_new(names, json_string(name));
		}
		if (env)
			json_array_append_new(env, json_pack("{s:s, s:s}", "name", name,
							     "value", value));
	}
}

void sr__run_env_from_runner(json_t *desc, uint32_t caps, json_t *creds,
			     json_t *env, json_t *exposed, sr__secret_holds *holds)
{
	json_t *names = json_array();

	copy_env(desc, "passthrough_env", NULL, env, NULL, holds);
	/* A provider that isolates secrets gets them through
	 * spec.credentials only: never also as plain environment. */
	if (caps & SR_CAP_ISOLATED_SECRETS) {
		copy_env(desc, "credential_env", creds, NULL, names, holds);
	} else {
		copy_env(desc, "credential_env", creds, env, names, holds);
		json_array_extend(exposed, names);
	}
	json_decref(names);
}

static int add_credentials(sr__run *r)
{
	json_t *exposed = json_array();

	/* With isolation, the provider has the credentials as bindings and
	 * the sandbox only placeholders; the values never go into env. */
	sr__run_env_from_runner(r->desc, r->isolate ? SR_CAP_ISOLATED_SECRETS : 0,
				r->o.credentials, r->env, exposed, &r->secrets);
	if (!r->isolate)
		sr__creds_header_names(r->user_mcp, exposed);
	if (json_array_size(exposed))
		sr__run_emit(r, json_pack("{s:s, s:O, s:s}", "type", "credentials.exposed", "names",
				  exposed, "reason",
				  r->ctx->rc.credential_isolation == SR__ISOLATION_NONE ?
				  "[runner] credential_isolation is 'none': the sandbox sees them in plain text" :
				  "this provider cannot hide secrets: the sandbox sees them in plain text"));
	json_decref(exposed);
	return SR_OK;
}

/* The adapters start with "#!/usr/bin/env node": when sandrun's own
 * Node.js runtime is installed on this host, it comes first on their PATH.
 * A remote sandbox's comes with its image, at remote_harness_dir/node (see
 * sandrun image-recipe), before the usual directories. */
static void add_node_runtime(sr__run *r)
{
	const char *base = getenv("PATH");
	char *bin, *path;
	json_t *v;
	size_t i, own = (size_t)-1;

	if (sr__provider_capabilities(r->provider) & SR_CAP_REMOTE) {
		base = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
		bin = malloc(strlen(r->ctx->rc.remote_harness_dir) + 32);
		if (bin)
			sprintf(bin, "%s/node/node_modules/.bin", r->ctx->rc.remote_harness_dir);
	} else {
		bin = sr__node_runtime_bin(r->ctx);
	}
	if (!bin)
		return;
	json_array_foreach(r->env, i, v) {
		const char *name = json_string_value(json_object_get(v, "name"));
		if (name && strcmp(name, "PATH") == 0)
			own = i;
	}
	if (own != (size_t)-1)
		base = json_string_value(json_object_get(json_array_get(r->env, own), "value"));
	path = malloc(strlen(bin) + strlen(base ? base : "") + 2);
	if (path) {
		sprintf(path, "%s%s%s", bin, base ? ":" : "", base ? base : "");
		v = json_pack("{s:s, s:s}", "name", "PATH", "value", path);
		if (own != (size_t)-1)
			json_array_set_new(r->env, own, v);
		else
			json_array_append_new(r->env, v);
	}
	free(path);
	free(bin);
}

int sr__run_new_relay(sr__run *r, const char *dir, const char *journal)
{
	sr__relay_opts o;
	char err[600];

	memset(&o, 0, sizeof(o));
	o.dir = dir;
	o.journal = journal;
	o.tools = r->tools;
	o.guard = &r->guard;
	o.ask_policy = r->o.ask_policy;
	o.max_per_endpoint = r->ctx->rc.callback_concurrency;
	o.cpu_latency_device = r->ctx->rc.tool_latency_low ? SR__CPU_LATENCY_DEVICE : NULL;
	o.event = sr__run_on_relay_event;
	o.ud = r;
	if (sr__relay_new(r->ctx, &o, &r->relay, err, sizeof(err)) != SR_OK) {
		sr__run_fail(r, "prepare_failed", "%s", err);
		return SR_EIO;
	}
	/* Stale files of an earlier turn go before the prompt is sent. */
	sr__relay_sweep(r->relay);
	return SR_OK;
}

/* Write text to path, in a directory the sandbox writes: through a new
 * file, opened beneath the directory (sr__open_beneath: a link at the
 * temporary name is not followed, it would have the runner write a host
 * file), renamed over path in that directory. It is the directory's
 * owner's (the agent's user, under a root runner). */
static int write_in_sandbox(const char *path, const char *text)
{
	char tmp[300], dir[4300];
	const char *base = strrchr(path, '/');
	size_t len = strlen(text), off = 0;
	unsigned uid, gid;
	int fd, dfd, rc = 0;

	if (!base || !base[1] || strlen(base) > 200)
		return -1;
	snprintf(dir, sizeof(dir), "%.*s", (int)(base - path), path);
	base++;
	snprintf(tmp, sizeof(tmp), ".%s.%ld.tmp", base, (long)getpid());
	dfd = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -1;
	(void)unlinkat(dfd, tmp, 0); /* a link or a leftover: removed, never followed */
	fd = sr__open_beneath(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL, 0644, 0);
	if (fd < 0) {
		close(dfd);
		return -1;
	}
	if (sr__owner_to_give(dfd, &uid, &gid))
		(void)fchown(fd, uid, gid);
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = -1;
			break;
		}
		off += (size_t)n;
	}
	if (close(fd) != 0)
		rc = -1;
	if (rc == 0 && renameat(dfd, tmp, dfd, base) != 0)
		rc = -1;
	if (rc != 0)
		(void)unlinkat(dfd, tmp, 0);
	close(dfd);
	return rc;
}

static int start_relay(sr__run *r)
{
	char err[600], journal[4200], *text;
	json_t *specs;
	const char *state = sr__ctx_state_dir(r->ctx);

	snprintf(r->relay_dir, sizeof(r->relay_dir), "%s/relay", r->root);
	snprintf(r->specs, sizeof(r->specs), "%s/tool-specs.json", r->root);
	snprintf(journal, sizeof(journal), "%s/relay/%s", state ? state : "/nonexistent",
		 r->session);
	specs = sr__tools_specs(r->tools);
	text = specs ? json_dumps(specs, JSON_COMPACT) : NULL;
	json_decref(specs);
	if (!text || write_in_sandbox(r->specs, text) != 0) {
		free(text);
		sr__run_fail(r, "prepare_failed", "cannot write the tool specs at %s", r->specs);
		return SR_EIO;
	}
	free(text);
	if (sr__run_new_relay(r, r->relay_dir, journal) != SR_OK)
		return SR_EIO;
	sr__relay_start(r->relay);
	/* The loopback MCP server, for a harness that takes its tools over
	 * HTTP from an agent on this host (the provider is not remote here). */
	if (json_is_true(json_object_get(r->desc, "wants_mcp_http")) &&
	    sr__mcp_http_start(r->ctx->loop, r->relay, r->tools, &r->mcp_http, err,
			       sizeof(err)) != SR_OK) {
		sr__run_fail(r, "prepare_failed", "%s", err);
		return SR_EIO;
	}
	return SR_OK;
}

static void on_prepared(void *ud, const sr_result *result)
{
	sr__run *r = ud;
	json_t *res, *v;
	size_t i;

	if (!sr__run_landed(r))
		return;
	if (result->status != SR_OK) {
		sr__run_fail(r, "prepare_failed", "harness '%s' could not prepare the sandbox: %s",
		     r->harness->desc->name,
		     result->message ? result->message : sr__strerror(result->status));
		return;
	}
	res = result->json ? json_loads(result->json, 0, NULL) : NULL;
	if (!res)
		res = json_object();
	r->env = json_array();
	json_array_foreach(json_object_get(r->desc, "env"), i, v)
		json_array_append(r->env, v);
	json_array_foreach(json_object_get(res, "env"), i, v)
		json_array_append(r->env, v);
	json_array_foreach(r->ep_env, i, v)
		json_array_append(r->env, v);
	add_node_runtime(r);
	add_credentials(r);
	r->files = sr__run_expand_files(r->home, r->workspace, json_object_get(res, "files"));
	json_decref(res);
	r->file_index = 0;
	write_next_file(r);
}

static void prepare_harness(sr__run *r)
{
	json_t *rj;
	int rc;

	rj = sr__run_json(r);
	rc = sr__harness_prepare(r->harness, sr__next_req(), rj, on_prepared, r);
	json_decref(rj);
	sr__run_started(r, rc, "prepare_failed", "the harness could not prepare the sandbox");
}

static void prepare(sr__run *r)
{
	sr__run_enter(r, SR__RUN_PREPARING);
	/* A sandbox with no runner-side path (a remote one), or any with
	 * [runner] relay_transport = provider: tools through the provider. */
	if (r->tools && (!r->root || r->ctx->rc.relay_via_provider)) {
		sr__run_prepare_remote_tools(r, prepare_harness);
		return;
	}
	if (r->tools && start_relay(r) != SR_OK)
		return;
	prepare_harness(r);
}

static void resolve_next_endpoint(sr__run *r);
static void start_mounts(sr__run *r);

static void on_forgotten(void *ud, int rc)
{
	sr__run *r = ud;

	if (rc != SR_OK && rc != SR_ENOTFOUND)
		sr__log(SR_LOG_WARN, "run", "session %s: its pointer to a sandbox that is gone "
			"could not be removed: %s", r->session, sr__strerror(rc));
	sr__run_landed(r);
}

static void on_sandbox(void *ud, const sr_result *res)
{
	sr__run *r = ud;
	json_t *j;

	/* Recorded first: a run that ended meanwhile releases it (landed). */
	if (res->status == SR_OK) {
		j = json_loads(res->json ? res->json : "{}", 0, NULL);
		free(r->sandbox_id);
		r->sandbox_id = sr__run_json_str(j, "id");
		free(r->acquired);
		r->acquired = strdup(res->json ? res->json : "{}");
		r->workspace = sr__run_json_str(j, "workspace");
		r->home = sr__run_json_str(j, "home");
		if (!(sr__provider_capabilities(r->provider) & SR_CAP_REMOTE))
			r->root = sr__run_json_str(j, "root");
	} else {
		j = NULL;
	}
	if (!sr__run_landed(r)) {
		json_decref(j);
		return;
	}
	if (res->status == SR_OK && r->isolate) {
		char why[400];
		if (sr__creds_apply_placeholders(r->creds, json_object_get(j, "placeholders"),
						 r->user_mcp, why, sizeof(why)) != SR_OK) {
			json_decref(j);
			sr__run_fail(r, "credential_placeholder_missing", "%s", why);
			return;
		}
	}
	json_decref(j);
	if (res->status != SR_OK) {
		/* The provider that owns the sandbox (the session's home was
		 * checked at plan time) says it is gone: the pointer goes, only
		 * while it still names that sandbox (off the loop). */
		if (r->resumed && res->status == SR_ENOTFOUND) {
			const char *state = sr__ctx_state_dir(r->ctx);
			if (state && r->sandbox_id &&
			    sr__session_remove_async(r->ctx->loop, state, r->session,
						     r->sandbox_id, on_forgotten, r) == SR_OK)
				r->inflight++;
		}
		/* A provider that timed out or answered 5xx: the session keeps
		 * its sandbox, and the same turn may be tried again. */
		r->retryable = r->resumed && (res->status == SR_ETIMEDOUT ||
					      res->status == SR_ENETWORK ||
					      res->status == SR_ECONNREFUSED ||
					      res->status == SR_EHTTP);
		sr__run_fail(r, r->resumed ? "sandbox_unavailable" : "sandbox_failed", "%s: %s",
		     r->resumed ? "cannot reconnect the session's sandbox" : "cannot create a sandbox",
		     res->message ? res->message : sr__strerror(res->status));
		return;
	}
	if (!r->sandbox_id || !r->workspace) {
		sr__run_fail(r, "sandbox_failed", "provider '%s' answered without an id and a workspace",
		     r->provider->desc->name);
		return;
	}
	sr__run_emit(r, json_pack("{s:s, s:s, s:s, s:s}", "type", "sandbox.acquired", "how",
			  r->warm ? "warm" : r->resumed ? "reconnected" : "created", "sandbox",
			  r->sandbox_id,
			  "workspace", r->workspace));
	sr__run_timing(r, "sandbox_start");
	r->ep_index = 0;
	resolve_next_endpoint(r);
}

/* ------------------------------------------------------------ endpoints */

/* The service being resolved: a --endpoint, or the mounts' store. */
static const char *current_service(const sr__run *r)
{
	return r->ep_index < r->o.n_endpoints ? r->o.endpoints[r->ep_index] : r->mount_ep;
}

static void on_endpoint_event(void *ud, json_t *ev)
{
	sr__run *r = ud;
	const char *type = json_string_value(json_object_get(ev, "type"));

	if (type && strcmp(type, "endpoint.resolved") == 0 &&
	    json_is_true(json_object_get(ev, "enrolment")))
		sr__run_note_enrolment(r, r->ep_url);
	sr__run_emit(r, json_incref(ev));
}

static void on_endpoint(void *ud, int status, const char *url, const char *source,
			const char *message)
{
	sr__run *r = ud;
	char name[80];
	size_t i;

	r->ep_job = NULL;
	if (status == SR_ECANCELED && r->phase >= SR__RUN_STOPPING) {
		r->inflight--; /* advance, which cancelled it, goes on */
		return;
	}
	if (!sr__run_landed(r))
		return;
	if (status != SR_OK) {
		sr__run_fail(r, "endpoint_unreachable", "%s", message ? message : sr__strerror(status));
		return;
	}
	/* Each route, to tell which endpoint a tunnel's failure takes. */
	if (r->ep_routes || (r->ep_routes = json_array()))
		json_array_append_new(r->ep_routes,
				      json_pack("{s:s, s:s, s:s, s:s}", "service", current_service(r),
						"local", r->ep_url, "url", url, "source",
						source ? source : ""));
	if (r->ep_index >= r->o.n_endpoints) {
		/* The store the mounts reach. */
		free(r->s3_url);
		if (!(r->s3_url = strdup(url))) {
			sr__run_fail(r, "out_of_memory", "out of memory");
			return;
		}
		r->ep_index++;
		resolve_next_endpoint(r);
		return;
	}
	snprintf(name, sizeof(name), "SANDRUN_ENDPOINT_%s", r->o.endpoints[r->ep_index]);
	for (i = 17; name[i]; i++)
		name[i] = name[i] == '-' ? '_' : (char)toupper((unsigned char)name[i]);
	if (!r->ep_env)
		r->ep_env = json_array();
	json_array_append_new(r->ep_env, json_pack("{s:s, s:s}", "name", name, "value", url));
	r->ep_index++;
	resolve_next_endpoint(r);
}

/* ------------------------------------------------------------- mounts */

void sr__run_on_mount_event(void *ud, json_t *ev)
{
	sr__run *r = ud;
	const char *type = json_string_value(json_object_get(ev, "type"));
	json_t *path = json_object_get(ev, "path"), *v;
	size_t i;

	if (type && strcmp(type, "mount.mounting") == 0 && json_is_string(path)) {
		json_array_foreach(r->mounted, i, v)
			if (json_equal(v, path))
				path = NULL;
		if (path)
			json_array_append(r->mounted, path);
	}
	sr__run_emit(r, json_incref(ev));
}

static void on_mounted(void *ud, int status, const char *message)
{
	sr__run *r = ud;

	r->mount_job = NULL;
	if (!sr__run_landed(r))
		return;
	if (status != SR_OK) {
		sr__run_fail(r, "mount_failed", "%s", message ? message : sr__strerror(status));
		return;
	}
	prepare(r);
}

static void on_warm_stopped(void *ud)
{
	sr__run *r = ud;

	if (!sr__run_landed(r))
		return;
	start_mounts(r);
}

/* The turn's storage mounts (core/run/mount.h), then the preparation. */
static void start_mounts(sr__run *r)
{
	sr__mount_box box = { r->provider, r->sandbox_id, r->workspace, r->home, &r->secrets };

	if (!r->n_mt) {
		prepare(r);
		return;
	}
	/* No process of the sandbox runs while its mount points are made and
	 * mounted on (an agent kept warm could swap a directory on the way
	 * for a link; nor would it see a mount made after it started). */
	if (r->warm_agent) {
		sr__agent *w = r->warm_agent;
		r->warm_agent = NULL;
		r->inflight++;
		sr__agent_stop(w, on_warm_stopped, r);
		return;
	}
	if ((!r->mounted && !(r->mounted = json_array())) ||
	    !(r->mount_job = sr__mounts_up(r->ctx, &box, r->mt, r->n_mt, r->s3_url,
					   sr__run_on_mount_event, on_mounted, r))) {
		sr__run_fail(r, "out_of_memory", "out of memory mounting");
		return;
	}
	r->inflight++;
}

/* Each endpoint the run names, and the store its mounts reach, as a
 * sandbox of its provider reaches them (core/run/endpoint.h); then the
 * mounts. */
static void resolve_next_endpoint(sr__run *r)
{
	sr__endpoint_spec spec;
	sr__plugin *tunnel = NULL;
	char why[600];

	if (r->ep_index >= r->o.n_endpoints + (r->n_mt ? 1 : 0)) {
		sr__run_enrol(r, r->tunnel, start_mounts);
		return;
	}
	if (sr__endpoint_config(r->ctx, current_service(r), &spec, why,
				sizeof(why)) != SR_OK) {
		sr__run_fail(r, "endpoint_invalid", "%s", why);
		return;
	}
	if (r->ctx->rc.tunnel &&
	    (!(tunnel = sr__registry_find(r->ctx->reg, SR_PLUGIN_TUNNEL, r->ctx->rc.tunnel)) ||
	     sr__plugin_start(r->ctx, tunnel) != SR_OK)) {
		sr__run_fail(r, "tunnel_unavailable", "tunnel '%s' is configured but %s",
			     r->ctx->rc.tunnel, tunnel ? "did not start" : "no such plugin is loaded");
		return;
	}
	spec.host_network = !(sr__provider_capabilities(r->provider) & SR_CAP_REMOTE);
	spec.tunnel = tunnel;
	r->ep_url = spec.url;
	/* A route that only an enrolled sandbox has is taken: the sandbox is
	 * enrolled once every endpoint is resolved (run_enrol.c). */
	spec.enrolled = tunnel && sr__tunnel_can_enrol(tunnel);
	r->tunnel = tunnel;
	/* Its events (tunnel.failed) are the run's too. */
	if (tunnel && r->sink.only[0] && !r->sink.only[2])
		r->sink.only[2] = tunnel;
	if (!(r->ep_job = sr__endpoint_resolve(r->ctx, &spec, on_endpoint_event, on_endpoint, r))) {
		sr__run_fail(r, "out_of_memory", "out of memory resolving the endpoints");
		return;
	}
	r->inflight++;
}

/* The session's old sandbox is gone (or could not be removed: the
 * janitor's then): the turn goes on in a fresh one, in a new ACP session. */
static void on_replaced(void *ud, const sr_result *res)
{
	sr__run *r = ud;

	if (res->status != SR_OK && res->status != SR_ENOTFOUND)
		sr__log(SR_LOG_WARN, "run", "sandbox %s: cannot remove it (%s); `sandrun janitor` "
			"will", r->sandbox_id, res->message ? res->message : sr__strerror(res->status));
	if (!sr__run_landed(r))
		return;
	free(r->sandbox_id);
	r->sandbox_id = NULL;
	free(r->acp_session);
	r->acp_session = NULL;
	r->resumed = 0;
	sr__run_acquire(r);
}

/* The pool's park or destroy of the session's sandbox answered. */
static void on_pool_settled(void *ud)
{
	sr__run *r = ud;

	if (sr__run_landed(r))
		sr__run_acquire(r);
}

void sr__run_acquire(sr__run *r)
{
	sr_network_policy np = { sizeof(np), r->o.network, NULL, 0 };
	sr_sandbox_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, 0, &np, NULL, 0 };
	sr_pair labels[3] = { { "sandrun.session", r->session },
			      { "sandrun.harness", r->harness->desc->name },
			      { "sandrun.runner", NULL } };
	char *warm;
	int rc;

	/* The pool is parking (or destroying) the session's sandbox, its
	 * live window just over: reconnected once that has answered, not
	 * while it goes on. */
	if (r->resumed && r->o.pool && sr__pool_settle(r->o.pool, r->session, on_pool_settled, r)) {
		r->inflight++;
		return;
	}

	sr__run_enter(r, SR__RUN_ACQUIRING);
	spec.labels = labels;
	spec.n_labels = 3;
	if (r->resumed && r->isolate && strcmp(r->stored_fp, r->creds_fp) != 0) {
		/* No rotation in place: a changed credential (or one bound
		 * elsewhere) means a fresh sandbox, with fresh secrets. */
		sr__run_emit(r, json_pack("{s:s, s:s, s:s}", "type", "sandbox.replaced", "sandbox",
				  r->sandbox_id, "reason",
				  "the credentials changed since the last turn: a fresh sandbox gets them"));
		if (r->o.pool)
			sr__pool_drop(r->o.pool, r->session); /* stops its agent */
		rc = sr__provider_destroy(r->provider, sr__next_req(), r->sandbox_id,
					  on_replaced, r);
		sr__run_started(r, rc, "sandbox_failed", "cannot remove the session's sandbox");
		return;
	}
	if (r->resumed && r->o.pool &&
	    (warm = sr__pool_take(r->o.pool, r->session, r->sandbox_id, r->o.network,
				  &r->warm_agent))) {
		/* Still running from the last turn: no provider call. */
		sr_result res = { sizeof(res), SR_OK, NULL, warm, NULL, 0 };
		r->warm = 1;
		sr__run_watch_warm_agent(r);
		rc = sr__complete_later(r->ctx->loop, on_sandbox, r, &res);
		free(warm);
		sr__run_started(r, rc, "sandbox_unavailable", "cannot take the warm sandbox");
		return;
	}
	if (r->resumed) {
		rc = sr__provider_reconnect(r->provider, sr__next_req(), r->sandbox_id, &np,
					    on_sandbox, r);
		sr__run_started(r, rc, "sandbox_unavailable", "cannot reconnect the session's sandbox");
		return;
	}
	/* Isolated credentials travel only here, as bindings to exact hosts
	 * (checked at plan time). */
	if (r->isolate) {
		spec.credentials = sr__creds_spec(r->creds);
		spec.n_credentials = sr__creds_count(r->creds);
	}
	if (!(labels[2].value = sr__ctx_runner_id(r->ctx))) {
		sr__run_fail(r, "sandbox_failed", "cannot create a sandbox: no runner id "
			     "(see the log)");
		return;
	}
	r->created = 1;
	rc = sr__provider_create(r->provider, sr__next_req(), &spec, on_sandbox, r);
	sr__run_started(r, rc, "sandbox_failed", "cannot create a sandbox");
}
