/* Starting a run: its options and session record, the plan gates (core/
 * plan.c) and the one that needs the loop, the user MCP host lookups. */
#include "config.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plugins/harness.h"
#include "core/host/log.h"
#include "core/run/creds.h"
#include "core/run/endpoint.h"
#include "core/run/mount.h"
#include "core/run/plan.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"
#include "core/run/run_int.h"
#include "core/run/session.h"

#define DEFAULT_ACP_TIMEOUT_MS 120000

/* The lookups of user MCP hosts, shared by their requests: the run may
 * be gone (cancelled, freed) while a lookup still runs on the pool. */
struct sr__mcp_lookups {
	struct sr__run *r;      /* NULL once the run is freed */
	int pending;
	char why[600];          /* the first refusal */
};

typedef struct mcp_lookup {
	uv_getaddrinfo_t req;
	sr__mcp_lookups *all;
	char *name, *url;
} mcp_lookup;

static void on_mcp_lookup(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	mcp_lookup *l = req->data;
	sr__mcp_lookups *all = l->all;
	char why[600];
	sr__run *r;

	if (all->r && !all->why[0] &&
	    !sr__plan_mcp_addrs_ok(l->url, status == 0 ? res : NULL, why, sizeof(why)))
		snprintf(all->why, sizeof(all->why), "MCP server '%s': %s", l->name, why);
	uv_freeaddrinfo(res);
	free(l->name);
	free(l->url);
	free(l);
	if (--all->pending > 0)
		return;
	r = all->r;
	snprintf(why, sizeof(why), "%s", all->why);
	free(all);
	if (!r)
		return;
	r->lookups = NULL;
	if (r->phase >= SR__RUN_STOPPING)
		return;
	if (why[0])
		sr__run_refuse_late(r, "mcp_url_refused", why);
	else
		sr__run_acquire(r);
}

void sr__run_forget_lookups(sr__run *r)
{
	if (r->lookups)
		r->lookups->r = NULL;
}

/* The SSRF gate on what user MCP host names resolve to, on the thread
 * pool (uv_getaddrinfo), then acquire. */
void sr__run_check_mcp_hosts(sr__run *r)
{
	sr__mcp_lookups *all = calloc(1, sizeof(*all));
	struct addrinfo hints;
	json_t *s;
	size_t i;

	if (!all) {
		sr__run_refuse_late(r, "mcp_url_refused", "out of memory checking the MCP servers");
		return;
	}
	all->r = r;
	all->pending = 1; /* until every lookup is started */
	r->lookups = all;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	json_array_foreach(r->user_mcp, i, s) {
		const char *url = json_string_value(json_object_get(s, "url"));
		char host[256];
		mcp_lookup *l;
		if (!url || !sr__plan_mcp_host_to_resolve(url, r->allow, host, sizeof(host)))
			continue;
		l = calloc(1, sizeof(*l));
		if (!l || !(l->url = strdup(url)) ||
		    !(l->name = strdup(json_string_value(json_object_get(s, "name"))))) {
			if (l)
				free(l->url);
			free(l);
			snprintf(all->why, sizeof(all->why), "out of memory checking the MCP servers");
			break;
		}
		l->all = all;
		l->req.data = l;
		all->pending++;
		if (uv_getaddrinfo(r->ctx->loop, &l->req, on_mcp_lookup, host, NULL, &hints) != 0) {
			all->pending--;
			snprintf(all->why, sizeof(all->why), "MCP server '%s': '%s' cannot be resolved",
				 l->name, url);
			free(l->name);
			free(l->url);
			free(l);
			break;
		}
	}
	/* The last reference: answer now if no lookup is running. */
	if (--all->pending > 0)
		return;
	r->lookups = NULL;
	if (all->why[0]) {
		char why[600];
		snprintf(why, sizeof(why), "%s", all->why);
		free(all);
		sr__run_refuse_late(r, "mcp_url_refused", why);
		return;
	}
	free(all);
	sr__run_acquire(r);
}

/* Split a comma-separated list into *buf (a copy, split in place) and
 * *out (its items, NULL-terminated). */
static int split_list(const char *list, char **buf, const char ***out)
{
	size_t n = 2;
	char *tok, *save;

	for (const char *p = list; *p; p++)
		n += *p == ',';
	*buf = strdup(list);
	*out = calloc(n, sizeof(**out));
	if (!*buf || !*out)
		return SR_ENOMEM;
	n = 0;
	for (tok = strtok_r(*buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
		(*out)[n++] = tok;
	return SR_OK;
}

static int harness_enabled(const sr__ctx *ctx, const char *name)
{
	char *list = strdup(ctx->rc.harnesses), *tok, *save;
	int found = 0;

	for (tok = strtok_r(list, ", ", &save); tok && !found; tok = strtok_r(NULL, ", ", &save))
		found = strcmp(tok, name) == 0;
	free(list);
	return found;
}

static const char *first_harness(const sr__ctx *ctx, char *buf, size_t n)
{
	size_t len = strcspn(ctx->rc.harnesses, ", ");

	if (len == 0 || len >= n)
		return NULL;
	memcpy(buf, ctx->rc.harnesses, len);
	buf[len] = 0;
	return buf;
}

/* Whether creds (the caller's model.credentials) names a variable the
 * harness (desc, name) does not take; msg then says which and what it
 * takes. */
static int unknown_credential(json_t *desc, const char *harness, json_t *creds, char *msg,
			      size_t n)
{
	json_t *takes = json_object_get(desc, "credential_env"), *v, *t;
	const char *name;
	size_t i, len;

	json_object_foreach(creds, name, v) {
		int found = 0;
		json_array_foreach(takes, i, t)
			if (json_is_string(t) && strcmp(json_string_value(t), name) == 0)
				found = 1;
		if (found)
			continue;
		len = (size_t)snprintf(msg, n, "model.credentials: harness '%s' takes no "
				       "'%.100s'; it takes", harness, name);
		json_array_foreach(takes, i, t)
			if (len < n && json_is_string(t))
				len += (size_t)snprintf(msg + len, n - len, "%s %s", i ? "," : "",
							json_string_value(t));
		if (!json_array_size(takes) && len < n)
			snprintf(msg + len, n - len, " none");
		return 1;
	}
	return 0;
}

static int refuse(sr__run *r, const char *code, const char *msg, int *exit_code)
{
	sr__run_emit(r, json_pack("{s:s, s:s, s:s, s:s}", "type", "run.failed", "code", code,
			  "message", msg, "phase", "plan"));
	*exit_code = SR_RUN_EXIT_REFUSED;
	return SR_EPERM;
}

/* The plan's gates for --mount: a network, [mount] usable, each mount
 * well formed, at a path of its own, and the store's endpoint
 * configured. The parsed mounts go to r->mt. The run is freed when one
 * refuses. */
static int plan_mounts(sr__run *r, sr__ctx *ctx, const sr__run_opts *o, int *exit_code)
{
	sr__endpoint_spec spec;
	char msg[1400];
	const char *code = "mount_invalid";

	if (o->network == SR_NET_OFF) {
		snprintf(msg, sizeof(msg), "--mount needs a network: the sandbox of a run with "
			 "network off reaches no store");
		code = "mount_without_network";
		goto refused;
	}
	if (sr__mount_config(ctx, &r->mount_ep, msg, sizeof(msg)) != SR_OK)
		goto refused;
	if (!(r->mt = calloc(o->n_mounts, sizeof(*r->mt)))) {
		sr__run_free(r);
		return SR_ENOMEM;
	}
	for (size_t i = 0; i < o->n_mounts; i++) {
		if (sr__mount_parse(o->mounts[i], &r->mt[i], msg, sizeof(msg)) != SR_OK)
			goto refused;
		for (size_t k = 0; k < i; k++)
			if (strcmp(r->mt[k].path, r->mt[i].path) == 0) {
				snprintf(msg, sizeof(msg), "--mount '%s': %s is already a mount point "
					 "of this run", o->mounts[i], r->mt[i].path);
				goto refused;
			}
	}
	r->n_mt = o->n_mounts;
	if (sr__endpoint_config(ctx, r->mount_ep, &spec, msg, sizeof(msg)) != SR_OK)
		goto refused;
	return SR_OK;
refused:
	refuse(r, code, msg, exit_code);
	sr__run_free(r);
	return SR_EINVAL;
}

static int start(sr__ctx *ctx, const sr__run_opts *o, sr__run **out, int *exit_code);

int sr__run_start(sr__ctx *ctx, const sr__run_opts *o, sr__run **out,
		  int *exit_code)
{
	/* What the plan holds (the tools' secret headers, the credential
	 * bindings) is the run's: hidden from its output, not from others'. */
	uint64_t was = sr__secret_scope_enter(o->secret_scope);
	int rc = start(ctx, o, out, exit_code);

	sr__secret_scope_enter(was);
	return rc;
}

static int start(sr__ctx *ctx, const sr__run_opts *o, sr__run **out, int *exit_code)
{
	sr__run *r = calloc(1, sizeof(*r));
	sr__plan plan;
	const char *code, *state;
	char msg[1024], hbuf[64] = "", err[600], unbound[1024];
	const sr_credential *pc = NULL;
	int rc, retryable, why, port_unbound = 0;

	*out = NULL;
	*exit_code = SR_RUN_EXIT_FAILED;
	if (!r) {
		fprintf(stderr, "sandrun: out of memory\n");
		return SR_ENOMEM;
	}
	r->ctx = ctx;
	r->o = *o;
	r->secrets.scope = o->secret_scope;
	/* Plugins' events: those of this run's provider and harness (set
	 * below, before either starts). Runs at once each have their own. */
	r->sink.fn = sr__run_plugin_event;
	r->sink.ud = r;
	sr__ctx_add_sink(ctx, &r->sink);
	if (!r->o.acp_timeout_ms)
		r->o.acp_timeout_ms = DEFAULT_ACP_TIMEOUT_MS;
	r->t0 = r->t_phase = uv_now(ctx->loop);
	/* Resuming: the session's own harness, unless one is named. */
	if (!r->o.harness && o->session && sr__ctx_state_dir(ctx)) {
		json_t *rec = NULL;
		if (sr__session_load(sr__ctx_state_dir(ctx), o->session, &rec) == SR_OK &&
		    json_string_value(json_object_get(rec, "harness")))
			snprintf(hbuf, sizeof(hbuf), "%s",
				 json_string_value(json_object_get(rec, "harness")));
		json_decref(rec);
		if (hbuf[0])
			r->o.harness = hbuf;
	}
	if (!r->o.harness)
		r->o.harness = first_harness(ctx, hbuf, sizeof(hbuf));
	if (!r->o.harness)
		r->o.harness = "claude";
	memset(&plan, 0, sizeof(plan));
	plan.prompt = o->prompt;
	plan.provider_name = ctx->rc.provider;
	plan.harness_name = r->o.harness;
	plan.network = o->network;
	plan.enforcement_strict = o->enforcement_strict;
	r->provider = sr__registry_find(ctx->reg, SR_PLUGIN_PROVIDER, ctx->rc.provider);
	r->harness = sr__registry_find(ctx->reg, SR_PLUGIN_HARNESS, r->o.harness);
	r->sink.only[0] = r->provider;
	r->sink.only[r->provider ? 1 : 0] = r->harness;
	plan.provider_loaded = r->provider && sr__plugin_start(ctx, r->provider) == SR_OK;
	plan.harness_enabled = harness_enabled(ctx, r->o.harness);
	plan.harness_loaded = r->harness && sr__plugin_start(ctx, r->harness) == SR_OK;
	if (plan.provider_loaded)
		plan.provider_caps = sr__provider_capabilities(r->provider);
	r->desc = plan.harness_loaded ? sr__harness_describe(r->harness) : json_object();
	plan.harness_tools = json_object_get(r->desc, "tools");
	if (o->tools_path || o->tools) {
		if ((o->tools ? sr__tools_parse(o->tools, "tools", &r->tools, err, sizeof(err)) :
				sr__tools_load(o->tools_path, &r->tools, err, sizeof(err))) != SR_OK) {
			refuse(r, "tools_invalid", err, exit_code);
			sr__run_free(r);
			return SR_EINVAL;
		}
		plan.has_tools = r->tools->n > 0;
	}
	if (o->mcp_path || o->mcp_servers) {
		json_error_t jerr = { .text = "" };
		/* A copy: the run writes placeholders into its headers. */
		r->user_mcp = o->mcp_servers ? json_deep_copy(o->mcp_servers) :
					       json_load_file(o->mcp_path, 0, &jerr);
		if (!json_is_array(r->user_mcp)) {
			snprintf(msg, sizeof(msg), "%s: expected a JSON array of MCP server entries%s%s",
				 o->mcp_servers ? "mcp_servers" : o->mcp_path,
				 r->user_mcp || !jerr.text[0] ? "" : ": ",
				 r->user_mcp ? "" : jerr.text);
			refuse(r, "mcp_server_invalid", msg, exit_code);
			sr__run_free(r);
			return SR_EINVAL;
		}
	}
	plan.user_mcp = r->user_mcp;
	if (split_list(ctx->rc.mcp_allow_hosts ? ctx->rc.mcp_allow_hosts : "", &r->allow_buf,
		       &r->allow) != SR_OK ||
	    split_list(ctx->rc.secrets_allow_hosts ? ctx->rc.secrets_allow_hosts : "",
		       &r->secrets_allow_buf, &r->secrets_allow) != SR_OK) {
		sr__run_free(r);
		return SR_ENOMEM;
	}
	plan.mcp_allow_hosts = r->allow;
	if (r->tools && (rc = sr__plan_callbacks_ok(r->tools, ctx->rc.callback_allow_hosts, msg,
						    sizeof(msg))) != SR_OK) {
		refuse(r, "tool_callback_refused", rc == SR_ENOMEM ? "out of memory" : msg, exit_code);
		sr__run_free(r);
		return rc == SR_ENOMEM ? SR_ENOMEM : SR_EPERM;
	}
	plan.credential_isolation = ctx->rc.credential_isolation;
	if (sr__plan_check(&plan, &code, msg, sizeof(msg)) != SR_OK) {
		refuse(r, code, msg, exit_code);
		sr__run_free(r);
		return SR_EPERM;
	}
	/* Each endpoint is configured (its route is resolved once the
	 * sandbox exists), and the sandbox has a network to reach it by. */
	if (o->n_endpoints && o->network == SR_NET_OFF) {
		refuse(r, "endpoint_without_network", "--endpoint needs a network: the sandbox "
		       "of a run with network off reaches no service", exit_code);
		sr__run_free(r);
		return SR_EPERM;
	}
	for (size_t i = 0; i < o->n_endpoints; i++) {
		sr__endpoint_spec spec;
		if (sr__endpoint_config(ctx, o->endpoints[i], &spec, msg, sizeof(msg)) != SR_OK) {
			refuse(r, "endpoint_invalid", msg, exit_code);
			sr__run_free(r);
			return SR_EINVAL;
		}
	}
	if (o->n_mounts && plan_mounts(r, ctx, o, exit_code) != SR_OK)
		return SR_EINVAL;
	/* A credential the harness does not take would be dropped: the
	 * caller meant something else (a typo, another harness's name). */
	if (unknown_credential(r->desc, r->o.harness, o->credentials, msg, sizeof(msg))) {
		refuse(r, "credential_unknown", msg, exit_code);
		sr__run_free(r);
		return SR_EINVAL;
	}
	/* Asks asked for, of an agent that never asks before its own tools
	 * run: refused, not silently allowed. */
	if (o->ask_required && json_is_false(json_object_get(r->desc, "asks_permission"))) {
		snprintf(msg, sizeof(msg), "harness '%s' never asks for permission before its "
			 "own tools run, so permission_mode 'ask' cannot be kept: give "
			 "'approve_all' or 'deny_all' (platform tools with permission 'ask' "
			 "are still asked), or use another harness", r->o.harness);
		refuse(r, "permission_mode_unsupported", msg, exit_code);
		sr__run_free(r);
		return SR_EINVAL;
	}
	/* Credentials the provider keeps out of the sandbox: each binding's
	 * host passes the exact host rule before anything is created. */
	r->isolate = ctx->rc.credential_isolation != SR__ISOLATION_NONE &&
		     (plan.provider_caps & SR_CAP_ISOLATED_SECRETS);
	if (r->isolate) {
		rc = sr__creds_collect(r->desc, o->credentials, o->model_url, r->user_mcp,
				       r->secrets_allow, &r->creds, msg, sizeof(msg));
		if (rc != SR_OK) {
			refuse(r, rc == SR_EPERM ? "credential_host_refused" : "out_of_memory", msg,
			       exit_code);
			sr__run_free(r);
			return rc;
		}
		sr__creds_fingerprint(r->creds, r->creds_fp);
		if ((pc = sr__creds_port_bound(r->creds)) &&
		    !(plan.provider_caps & SR_CAP_SECRET_PORTS)) {
			snprintf(msg, sizeof(msg), "credential %s may go to %s:%s only ([secrets] "
				 "allow_hosts), and provider '%s' binds a secret to a host on every "
				 "port: a request from the sandbox to another port of %s would carry "
				 "it", pc->name, pc->hosts[0], pc->port, r->provider->desc->name,
				 pc->hosts[0]);
			if (ctx->rc.credential_isolation == SR__ISOLATION_REQUIRED) {
				strncat(msg, " ([runner] credential_isolation is 'required'; allow "
					"the host without a port to accept that)",
					sizeof(msg) - strlen(msg) - 1);
				refuse(r, "credential_port_unbound", msg, exit_code);
				sr__run_free(r);
				return SR_EPERM;
			}
			port_unbound = 1;
			snprintf(unbound, sizeof(unbound), "%s", msg);
		}
	}
	if (!r->provider || !r->harness) { /* the plan made sure of both */
		sr__run_free(r);
		return SR_EINVAL;
	}
	r->guard.default_mode = SR_PERM_ALLOW_READS;
	state = sr__ctx_state_dir(ctx);
	if (o->session) {
		json_t *rec = NULL;
		rc = state ? sr__session_load(state, o->session, &rec) : SR_EIO;
		if (rc != SR_OK) {
			snprintf(msg, sizeof(msg), rc == SR_EINVAL ?
				 "'%s' is not a session id (ses- and 16 hex digits)" :
				 "no session '%s' (it ended, or was never recorded here)", o->session);
			refuse(r, "unknown_session", msg, exit_code);
			json_decref(rec);
			sr__run_free(r);
			return SR_ENOTFOUND;
		}
		if (strcmp(json_string_value(json_object_get(rec, "harness")) ?
			   json_string_value(json_object_get(rec, "harness")) : "",
			   r->harness->desc->name) != 0) {
			snprintf(msg, sizeof(msg), "session '%s' belongs to harness '%s'", o->session,
				 json_string_value(json_object_get(rec, "harness")));
			refuse(r, "session_incompatible", msg, exit_code);
			json_decref(rec);
			sr__run_free(r);
			return SR_EINVAL;
		}
		if ((why = sr__session_elsewhere_here(ctx, r->provider, rec, msg, sizeof(msg),
						      &retryable))) {
			/* Not reconnected, so not declared gone: the session
			 * stays for the runner that reaches its sandbox. */
			sr__run_emit(r, json_pack("{s:s, s:s, s:s, s:s, s:s, s:b}", "type",
						  "run.failed", "code",
						  sr__session_elsewhere_code(why),
						  "message", msg, "phase", "plan", "session",
						  o->session, "retryable", retryable));
			*exit_code = retryable ? SR_RUN_EXIT_RETRY : SR_RUN_EXIT_REFUSED;
			json_decref(rec);
			sr__run_free(r);
			return SR_EPERM;
		}
		snprintf(r->session, sizeof(r->session), "%s", o->session);
		r->sandbox_id = sr__run_json_str(rec, "sandbox");
		r->acp_session = sr__run_json_str(rec, "acp_session");
		r->turn = (int)json_integer_value(json_object_get(rec, "turn"));
		r->stored_shim = json_incref(json_object_get(rec, "shim"));
		snprintf(r->stored_fp, sizeof(r->stored_fp), "%s",
			 json_string_value(json_object_get(rec, "credentials_fp")) ?
			 json_string_value(json_object_get(rec, "credentials_fp")) : "");
		r->resumed = 1;
		json_decref(rec);
	} else {
		sr__session_new_id(r->session, sizeof(r->session));
	}
	sr__run_emit(r, json_pack("{s:s, s:s, s:s, s:s, s:i}", "type", "run.started", "session",
			  r->session, "harness", r->harness->desc->name, "provider",
			  r->provider->desc->name, "turn", r->turn + 1));
	if (port_unbound)
		sr__run_emit(r, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type",
					  "credentials.port_unbound", "binding", pc->name, "host",
					  pc->hosts[0], "port", pc->port, "message", unbound));
	*out = r;
	sr__run_check_mcp_hosts(r);
	return SR_OK;
}
