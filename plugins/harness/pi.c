/*
 * The pi harness: Pi through pi-acp, with @mariozechner/pi-coding-agent.
 *
 * pi-acp ignores mcpServers and never asks for permission, so platform
 * tools come through a Pi extension shipped with this plugin
 * (pi/sandrun-tools.ts, embedded at build time): it registers each tool of
 * the run's specs and runs `sandrun-shim call` for it. A run with user MCP
 * servers is refused at plan time (describe lists no MCP delivery).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "pi_extension.h" /* pi_extension[], generated from pi/sandrun-tools.ts */

static const char *const npm[] = { "pi-acp@0.0.24",
				   "@mariozechner/pi-coding-agent@0.73.1", NULL };
/* The node those packages require (their package.json "engines"). */
static const char node[] = ">=20.6.0";

typedef struct pi {
	harness h;
	char *model;
	char *api;
} pi;

static int p_describe(void *self, char **out)
{
	pi *p = self;

	return sr_harness_answer(json_pack(
		"{s:o, s:[s, s], s:[{s:s, s:s, s:s}, {s:s, s:s, s:s}], s:[s], s:O, s:s, s:[s, s], "
		"s:s, s:b}",
		"command", sr_harness_command(&p->h),
		"credential_env", "ANTHROPIC_API_KEY", "OPENAI_API_KEY",
		"credentials",
		"env", "ANTHROPIC_API_KEY", "kind", "api_key", "host", "api.anthropic.com",
		"env", "OPENAI_API_KEY", "kind", "bearer", "host", "api.openai.com",
		"tools", "relay_extension",
		"env", p->h.extra_env,
		"install_dir", p->h.install_dir,
		"npm", npm[0], npm[1],
		"node", node,
		/* pi-acp 0.0.24 never asks; 0.0.34 asks only for its
		 * extensions' dialogs, never before Pi's own tools run. */
		"asks_permission", 0), out);
}

/* models.json's apiKey for the run's endpoint. Pi reads an environment
 * variable only when the value is its bare name, and sends any other value
 * as written ("$OPENAI_API_KEY" would be sent as that text):
 * resolveConfigValue() in pi-coding-agent's dist/core/resolve-config-value.js
 * (0.73.1) returns process.env[config] || config. So: the name of the
 * credential the run has, the one of the endpoint's wire API first. */
static const char *api_key(const pi *p, json_t *run)
{
	int anthropic = strcmp(p->api, "anthropic-messages") == 0;
	const char *first = anthropic ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY";
	const char *second = anthropic ? "OPENAI_API_KEY" : "ANTHROPIC_API_KEY";

	if (sr_harness_has_credential(run, first))
		return first;
	if (sr_harness_has_credential(run, second))
		return second;
	/* No credential: a literal Pi sends as it is (an endpoint that
	 * wants no key). */
	return "none";
}

static int p_prepare(void *self, uint64_t req, const char *run_json,
		     sr_done_fn done, void *ud)
{
	pi *p = self;
	json_t *run = json_loads(run_json, 0, NULL);
	json_t *files = json_array(), *env = json_array(), *j;
	const char *home = json_string_value(json_object_get(run, "home"));
	const char *model = json_string_value(json_object_get(run, "model_url"));
	const char *shim = json_string_value(json_object_get(run, "shim"));
	char dir[4096], path[4200], bin[4200], *text;

	(void)req;
	snprintf(dir, sizeof(dir), "%s/.pi-agent", home ? home : "/tmp");
	if (model) {
		/* The OpenAI wire APIs live under /v1, as for the codex harness:
		 * --model-url means the same for both. */
		char base[4096];
		snprintf(base, sizeof(base), "%s%s", model,
			 strncmp(p->api, "openai-", 7) == 0 && !strstr(model, "/v1") ? "/v1" : "");
		j = json_pack("{s:{s:{s:s, s:s, s:s, s:[{s:s}]}}}", "providers", "sandrun",
			      "baseUrl", base, "api", p->api, "apiKey", api_key(p, run),
			      "models", "id", p->model);
		text = json_dumps(j, JSON_INDENT(2));
		snprintf(path, sizeof(path), "%s/models.json", dir);
		sr_harness_file(files, path, text, 0600);
		free(text);
		json_decref(j);
		j = json_pack("{s:s, s:s}", "defaultProvider", "sandrun", "defaultModel", p->model);
	} else {
		j = json_object();
	}
	text = json_dumps(j, JSON_INDENT(2));
	snprintf(path, sizeof(path), "%s/settings.json", dir);
	sr_harness_file(files, path, text, 0600);
	free(text);
	json_decref(j);
	/* Auto-discovered by Pi from its agent directory. */
	snprintf(path, sizeof(path), "%s/extensions/sandrun-tools.ts", dir);
	sr_harness_file(files, path, (const char *)pi_extension, 0644);
	sr_harness_env(env, "PI_CODING_AGENT_DIR", dir);
	sr_harness_env(env, "PI_OFFLINE", "1");
	snprintf(bin, sizeof(bin), "%s/node_modules/.bin/pi", p->h.install_dir);
	sr_harness_env(env, "PI_ACP_PI_COMMAND", bin);
	if (shim && json_object_get(run, "specs")) {
		sr_harness_env(env, "SANDRUN_SHIM", shim);
		sr_harness_env(env, "SANDRUN_TOOL_SPECS",
			       json_string_value(json_object_get(run, "specs")));
		sr_harness_env(env, "SANDRUN_RELAY_DIR",
			       json_string_value(json_object_get(run, "relay_dir")));
	}
	json_decref(run);
	return sr_harness_reply(&p->h, done, ud,
				json_pack("{s:o, s:o}", "files", files, "env", env));
}

static int p_mcp_servers(void *self, const char *run_json, char **out)
{
	(void)self;
	(void)run_json;
	return sr_harness_answer(json_array(), out);
}

static int p_is_own_permission(void *self, const char *request_json)
{
	(void)self;
	(void)request_json;
	return 0; /* pi-acp never asks */
}

static int p_doctor(void *self, sr_done_fn done, void *ud)
{
	return sr_harness_doctor(&((pi *)self)->h, done, ud);
}

static void p_fini(void *self)
{
	pi *p = self;

	sr_harness_fini(&p->h);
	free(p->model);
	free(p->api);
	free(p);
}

static int p_init(const sr_host *host, void **self)
{
	pi *p = calloc(1, sizeof(*p));
	const char *model = host->config_get(host, "model");
	const char *api = host->config_get(host, "api");
	int rc;

	if (!p)
		return SR_ENOMEM;
	rc = sr_harness_init(&p->h, host, "pi", npm, "pi-acp");
	if (rc == SR_OK && api && strcmp(api, "openai-responses") != 0 &&
	    strcmp(api, "openai-completions") != 0 && strcmp(api, "anthropic-messages") != 0)
		rc = host->config_invalid(host, "api",
			"openai-responses, openai-completions or anthropic-messages");
	if (rc != SR_OK) {
		p_fini(p);
		return rc;
	}
	p->model = strdup(model ? model : "sandrun-model");
	p->api = strdup(api ? api : "openai-responses");
	*self = p;
	return SR_OK;
}

static const sr_harness_ops ops = {
	.size = sizeof(sr_harness_ops),
	.describe = p_describe,
	.prepare = p_prepare,
	.mcp_servers = p_mcp_servers,
	.is_own_permission = p_is_own_permission,
	.cancel = NULL,
};

static const char *const keys[] = { "command", "install_dir", "env", "model", "api", NULL };

static const sr_plugin_descriptor descriptor = {
	.abi_major = SR_ABI_MAJOR,
	.abi_minor = SR_ABI_MINOR,
	.size = sizeof(sr_plugin_descriptor),
	.kind = SR_PLUGIN_HARNESS,
	.name = "pi",
	.version = "0.1.0",
	.description = "Pi through pi-acp, platform tools by a Pi extension",
	.ops = &ops,
	.config_keys = keys,
	.init = p_init,
	.fini = p_fini,
	.doctor = p_doctor,
};

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &descriptor;
}
