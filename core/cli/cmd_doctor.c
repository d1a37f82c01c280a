/* sandrun doctor: one line per check, non-zero exit when one fails. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli/cli.h"
#include "core/plugins/complete.h"
#include "core/plugins/harness.h"
#include "core/host/log.h"
#include "core/store/db.h"
#include "core/host/node.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"
#include "core/run/creds.h"
#include "core/host/status.h"
#include "core/tools/relay.h"

static int failures;

static void line(const char *status, const char *what, const char *detail)
{
	printf("[%-4s] %-20s %s\n", status, what, detail);
	fflush(stdout);
	if (strcmp(status, "FAIL") == 0)
		failures++;
}

/* Does the node the harness's adapter will run with satisfy its
 * requirement? detail says which node; when not, why and what to run. */
static int node_ok(sr__ctx *ctx, sr__plugin *p, char *detail, size_t n)
{
	json_t *desc = sr__harness_describe(p);
	const char *need = json_string_value(json_object_get(desc, "node"));
	char why[800];
	int ok = 1;

	detail[0] = 0;
	if (need && (ok = sr__node_check(ctx, need, why, sizeof(why))))
		snprintf(detail, n, "; %s", why);
	else if (need)
		snprintf(detail, n, "not ready: %s; run 'sandrun install-harness %s'",
			 why, p->desc->name);
	json_decref(desc);
	return ok;
}

/* The credentials a harness hands its adapter (the names it declares),
 * and which of them are set here. */
static void check_harness_credentials(sr__plugin *p)
{
	json_t *desc = sr__harness_describe(p), *v;
	char what[64], detail[1024];
	size_t i, n = 0, set = 0;
	int off = 0;

	snprintf(what, sizeof(what), "harness %s keys", p->desc->name);
	json_array_foreach(json_object_get(desc, "credential_env"), i, v) {
		const char *name = json_string_value(v), *value = name ? getenv(name) : NULL;
		int is_set = value && *value;
		if (!name)
			continue;
		n++;
		set += is_set;
		if (off < (int)sizeof(detail))
			off += snprintf(detail + off, sizeof(detail) - off, "%s%s (%s)", n > 1 ? ", " : "",
					name, is_set ? "set" : "not set");
	}
	json_decref(desc);
	if (!n)
		return;
	if (set) {
		line("ok", what, detail);
		return;
	}
	if (off < (int)sizeof(detail))
		snprintf(detail + off, sizeof(detail) - off,
			 ": none set, so the agent's model calls carry no key (sandrund takes them "
			 "per request)");
	line("warn", what, detail);
}

/* Start a plugin and run its doctor op, if any. */
static void check_plugin(sr__ctx *ctx, int kind, const char *name)
{
	sr__plugin *p = sr__registry_find(ctx->reg, kind, name);
	char what[64], detail[1024];
	sr__wait w = { 0 };
	json_t *j;
	int rc;

	snprintf(what, sizeof(what), "%s %s", sr__kind_name(kind), name);
	if (!p) {
		snprintf(detail, sizeof(detail),
			 "configured, but no %s plugin '%s' was found (see 'sandrun plugins')",
			 sr__kind_name(kind), name);
		line("FAIL", what, detail);
		return;
	}
	if (sr__plugin_start(ctx, p) != SR_OK) {
		snprintf(detail, sizeof(detail), "%s: init failed (see the error above)",
			 p->path);
		line("FAIL", what, detail);
		return;
	}
	rc = sr__plugin_doctor(p, sr__wait_done, &w);
	if (rc == SR_EUNSUPPORTED) {
		snprintf(detail, sizeof(detail), "loaded from %s (it offers no checks)",
			 p->path);
		line("ok", what, detail);
		return;
	}
	if (rc != SR_OK) {
		snprintf(detail, sizeof(detail), "its check could not start: %s",
			 sr__strerror(rc));
		line("FAIL", what, detail);
		return;
	}
	sr__wait_for(ctx, &w, SR_OK);
	j = w.json ? json_loads(w.json, 0, NULL) : NULL;
	if (w.status != SR_OK || !json_is_object(j)) {
		snprintf(detail, sizeof(detail), "check failed: %s",
			 w.message ? w.message : "no answer");
		line("FAIL", what, detail);
	} else if (!json_is_true(json_object_get(j, "ok"))) {
		const char *d = json_string_value(json_object_get(j, "detail"));
		line("FAIL", what, d ? d : "");
	} else if (kind == SR_PLUGIN_HARNESS && !node_ok(ctx, p, detail, sizeof(detail))) {
		line("FAIL", what, detail);
	} else {
		const char *d = json_string_value(json_object_get(j, "detail"));
		char full[2048];

		snprintf(full, sizeof(full), "%s%s", d ? d : "",
			 kind == SR_PLUGIN_HARNESS ? detail : "");
		/* Usable, with a caveat the plugin names ("warn": true). */
		line(json_is_true(json_object_get(j, "warn")) ? "warn" : "ok", what, full);
	}
	if (kind == SR_PLUGIN_HARNESS)
		check_harness_credentials(p);
	json_decref(j);
	sr__wait_clear(&w);
}

/* Credential isolation: the policy, whether the provider can keep to it,
 * the operator's exceptions to the exact host rule, and the provider's
 * cleanups still pending (a secret whose deletion failed). */
static void check_credentials(sr__ctx *ctx)
{
	static const char *const policy[] = { "preferred", "required", "none" };
	sr__plugin *p = sr__registry_find(ctx->reg, SR_PLUGIN_PROVIDER, ctx->rc.provider);
	const char *pol = policy[ctx->rc.credential_isolation % 3];
	char detail[1024];
	json_t *items = NULL, *it;
	size_t i, pending = 0;
	int isolates;

	if (!p || sr__plugin_start(ctx, p) != SR_OK)
		return; /* the provider's own line said why */
	isolates = (sr__provider_capabilities(p) & SR_CAP_ISOLATED_SECRETS) != 0;

	if (ctx->rc.credential_isolation == SR__ISOLATION_REQUIRED && !isolates) {
		snprintf(detail, sizeof(detail), "required, but provider '%s' cannot keep "
			 "credentials out of its sandboxes: every run will be refused",
			 ctx->rc.provider);
		line("FAIL", "credentials", detail);
	} else {
		snprintf(detail, sizeof(detail), "%s; provider '%s' %s", pol, ctx->rc.provider,
			 !isolates ? "cannot isolate them: sandboxes see them in plain text" :
			 ctx->rc.credential_isolation == SR__ISOLATION_NONE ?
			 "could isolate them, but is told not to" :
			 "keeps them out of its sandboxes (placeholders, exact hosts)");
		line(isolates || ctx->rc.credential_isolation == SR__ISOLATION_NONE ? "ok" : "warn",
		     "credentials", detail);
	}
	if (ctx->rc.secrets_allow_hosts && *ctx->rc.secrets_allow_hosts) {
		snprintf(detail, sizeof(detail), "%s (exceptions to the exact host rule)",
			 ctx->rc.secrets_allow_hosts);
		line("warn", "secrets allow_hosts", detail);
	}
	if (!isolates || sr__cli_maintain(ctx, p, 1, 0, &items) != SR_OK)
		return;
	json_array_foreach(items, i, it) {
		const char *action = json_string_value(json_object_get(it, "action"));
		if (!action || strcmp(action, "pending") != 0)
			continue;
		pending++;
		snprintf(detail, sizeof(detail), "%s %s: %s",
			 json_string_value(json_object_get(it, "kind")) ?
			 json_string_value(json_object_get(it, "kind")) : "?",
			 json_string_value(json_object_get(it, "name")) ?
			 json_string_value(json_object_get(it, "name")) : "?",
			 json_string_value(json_object_get(it, "reason")) ?
			 json_string_value(json_object_get(it, "reason")) : "");
		line("warn", "cleanup pending", detail);
	}
	if (!pending)
		line("ok", "cleanups", "none pending");
	else
		line("warn", "cleanups", "run 'sandrun janitor' to retry them");
	json_decref(items);
}

/* The store: opened (connected, migrated) and named. */
static void check_store(const char *state)
{
	sr__db *db = state ? sr__db_open(state) : NULL;

	if (db)
		line("ok", "store", sr__db_name(db));
	else
		line("FAIL", "store", "cannot be used (see above)");
	sr__db_close(db);
}

/* Which replicas continue this one's sessions: any with the provider's
 * configuration, or (a provider whose sandboxes live on this host) only
 * those sharing the runner id and the sandbox root. */
static void check_sessions(sr__ctx *ctx)
{
	sr__plugin *p = sr__registry_find(ctx->reg, SR_PLUGIN_PROVIDER, ctx->rc.provider);
	const char *shared = ctx->rc.store_url && *ctx->rc.store_url ?
			     "a shared store ([store] url)" : "this state directory's store";
	const char *runner = sr__ctx_runner_id(ctx), *place;
	char detail[1400];

	if (!p || sr__plugin_start(ctx, p) != SR_OK)
		return; /* the provider's own line failed */
	place = sr__provider_locality(p);
	if (!place && (sr__provider_capabilities(p) & SR_CAP_REMOTE))
		snprintf(detail, sizeof(detail), "on %s: provider %s's sandboxes are reached from "
			 "any runner with its configuration: any replica continues a session",
			 shared, ctx->rc.provider);
	else
		snprintf(detail, sizeof(detail), "on %s: provider %s keeps its sandboxes with "
			 "this runner ('%s'%s%s): only a replica with that runner id and "
			 "sandbox root continues its sessions; another refuses their turns "
			 "(session_elsewhere)", shared, ctx->rc.provider, runner ? runner : "?",
			 place ? " at " : "", place ? place : "");
	line("ok", "sessions", detail);
}

int sr__cmd_doctor(int argc, char **argv, const char *config_path)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	char detail[1024], *list, *tok, *save;
	const char *state;
	sr__ctx ctx;
	int c, rc;

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'h':
			printf("Usage: sandrun doctor\n\n"
			       "Check that the configuration parses, the plugins load, and the\n"
			       "configured provider, tunnel and harnesses are usable here; show the\n"
			       "credentials each harness passes its agent (and which are set), the\n"
			       "credential isolation policy, the exceptions to the exact host rule\n"
			       "([secrets] allow_hosts), the store ([store] url: connected and\n"
			       "migrated), which replicas continue this one's sessions, and the\n"
			       "provider's pending cleanups. Prints one\n"
			       "line per check; exits 1 when any check fails.\n");
			return SR_EXIT_OK;
		default:
			return SR_EXIT_USAGE;
		}
	}
	failures = 0;
	rc = sr__cli_setup(&ctx, config_path);
	if (rc != SR_EXIT_OK) {
		line("FAIL", "config", "the configuration is invalid (see above)");
		sr__ctx_cleanup(&ctx);
		return SR_EXIT_FAIL;
	}
	line("ok", "config", sr__config_path(ctx.config));
	snprintf(detail, sizeof(detail), "%zu loaded from %s%s%s", ctx.reg->n,
		 getenv("SANDRUN_PLUGIN_PATH") ? getenv("SANDRUN_PLUGIN_PATH") : "",
		 getenv("SANDRUN_PLUGIN_PATH") ? ":" : "", ctx.rc.plugin_dir);
	line("ok", "plugins", detail);
	for (size_t i = 0; i < ctx.reg->n_rejected; i++) {
		snprintf(detail, sizeof(detail), "%s: %s", ctx.reg->rejected[i].path,
			 ctx.reg->rejected[i].reason);
		line("warn", "plugin rejected", detail);
	}
	state = sr__ctx_state_dir(&ctx);
	if (state && access(state, W_OK) == 0)
		line("ok", "state directory", state);
	else {
		snprintf(detail, sizeof(detail), "%s is not writable", ctx.rc.state_dir);
		line("FAIL", "state directory", detail);
	}
	check_store(state);
	if (ctx.rc.tool_latency_low) {
		/* Without the device, calls run at normal latency (a warning). */
		int w = access(SR__CPU_LATENCY_DEVICE, W_OK) == 0;

		snprintf(detail, sizeof(detail), w ? "low: %s is writable" :
			 "low, but %s is not writable (root's): tool calls run at normal latency",
			 SR__CPU_LATENCY_DEVICE);
		line(w ? "ok" : "warn", "tool latency", detail);
	}
	check_plugin(&ctx, SR_PLUGIN_PROVIDER, ctx.rc.provider);
	check_sessions(&ctx);
	check_credentials(&ctx);
	if (ctx.rc.tunnel)
		check_plugin(&ctx, SR_PLUGIN_TUNNEL, ctx.rc.tunnel);
	list = strdup(ctx.rc.harnesses);
	for (tok = list ? strtok_r(list, ", ", &save) : NULL; tok;
	     tok = strtok_r(NULL, ", ", &save))
		check_plugin(&ctx, SR_PLUGIN_HARNESS, tok);
	free(list);
	sr__ctx_cleanup(&ctx);
	printf("%s\n", failures ? "some checks failed" : "all checks passed");
	return failures ? SR_EXIT_FAIL : SR_EXIT_OK;
}
