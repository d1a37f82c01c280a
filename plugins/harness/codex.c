/*
 * The codex harness: OpenAI Codex through @agentclientprotocol/codex-acp.
 *
 * Each sandbox gets its own CODEX_HOME with a generated config.toml for the
 * run's model endpoint. Platform tools arrive through the stdio shim; Codex
 * presents them to the model as the namespace mcp__sandrun_tools (it turns
 * the server name's hyphen into an underscore). The session runs in mode
 * workspace-write, in which Codex asks the client before an MCP tool call
 * (its default "agent" mode asks a reviewing model instead).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const char *const npm[] = { "@agentclientprotocol/codex-acp@2.6.0",
				   "@openai/codex@0.166.0", NULL };
/* The node those packages require (their package.json "engines"). */
static const char node[] = ">=16";

typedef struct codex {
	harness h;
	char *model;
	char *mode;
} codex;

static int x_describe(void *self, char **out)
{
	codex *c = self;

	return sr_harness_answer(json_pack(
		"{s:o, s:[s, s], s:[{s:s, s:s, s:s}, {s:s, s:s, s:s}], s:[s, s], s:s, s:O, s:s, "
		"s:[s, s], s:s}",
		"command", sr_harness_command(&c->h),
		"credential_env", "OPENAI_API_KEY", "CODEX_API_KEY",
		"credentials",
		"env", "OPENAI_API_KEY", "kind", "bearer", "host", "api.openai.com",
		"env", "CODEX_API_KEY", "kind", "bearer", "host", "api.openai.com",
		"tools", "mcp_stdio", "mcp_http",
		"mode", c->mode,
		"env", c->h.extra_env,
		"install_dir", c->h.install_dir,
		"npm", npm[0], npm[1],
		"node", node), out);
}

/* The provider's key for the run's endpoint: codex sends the value of the
 * variable named by env_key as the bearer token (ModelProviderInfo's
 * env_key in codex-rs/core/src/model_provider_info.rs; a provider without
 * it sends no Authorization header). Every name the harness declares is
 * tried, OPENAI_API_KEY first. */
static const char *env_key(json_t *run)
{
	if (sr_harness_has_credential(run, "OPENAI_API_KEY"))
		return "env_key = \"OPENAI_API_KEY\"";
	if (sr_harness_has_credential(run, "CODEX_API_KEY"))
		return "env_key = \"CODEX_API_KEY\"";
	return "requires_openai_auth = false";
}

static int x_prepare(void *self, uint64_t req, const char *run_json,
		     sr_done_fn done, void *ud)
{
	codex *c = self;
	json_t *run = json_loads(run_json, 0, NULL);
	json_t *files = json_array(), *env = json_array();
	const char *home = json_string_value(json_object_get(run, "home"));
	const char *model = json_string_value(json_object_get(run, "model_url"));
	char dir[4096], path[4200], toml[2048];

	(void)req;
	if (model && strpbrk(model, "\"\\\n")) {
		sr_result r = { sizeof(r), SR_EINVAL,
				"codex: the model URL cannot hold quotes, backslashes or newlines",
				NULL, NULL, 0 };
		json_decref(run);
		json_decref(files);
		json_decref(env);
		return c->h.host->complete(c->h.host, done, ud, &r);
	}
	snprintf(dir, sizeof(dir), "%s/.codex", home ? home : "/tmp");
	snprintf(path, sizeof(path), "%s/config.toml", dir);
	if (model) {
		snprintf(toml, sizeof(toml),
			 "# Written by sandrun for this sandbox.\n"
			 "model = \"%s\"\n"
			 "model_provider = \"sandrun\"\n\n"
			 "[model_providers.sandrun]\n"
			 "name = \"sandrun\"\n"
			 "base_url = \"%s%s\"\n"
			 "wire_api = \"responses\"\n"
			 "%s\n",
			 c->model, model,
			 strstr(model, "/v1") ? "" : "/v1",
			 env_key(run));
	} else {
		snprintf(toml, sizeof(toml), "# Written by sandrun for this sandbox.\nmodel = \"%s\"\n",
			 c->model);
	}
	sr_harness_file(files, path, toml, 0600);
	sr_harness_env(env, "CODEX_HOME", dir);
	sr_harness_env(env, "NO_BROWSER", "1");
	json_decref(run);
	return sr_harness_reply(&c->h, done, ud,
				json_pack("{s:o, s:o}", "files", files, "env", env));
}

static int x_mcp_servers(void *self, const char *run_json, char **out)
{
	json_t *run = json_loads(run_json, 0, NULL);
	json_t *servers = json_array(), *shim = sr_harness_shim_entry(run), *s;
	size_t i;

	(void)self;
	if (shim)
		json_array_append_new(servers, shim);
	json_array_foreach(json_object_get(run, "user_mcp_servers"), i, s)
		json_array_append(servers, s);
	json_decref(run);
	return sr_harness_answer(servers, out);
}

/* Codex's MCP approvals name the server (sandrun_tools) in the tool call's
 * title when it has one. */
static int x_is_own_permission(void *self, const char *request_json)
{
	(void)self;
	return request_json && (strstr(request_json, "sandrun_tools") ||
				strstr(request_json, SR_TOOLS_SERVER_NAME));
}

static int x_doctor(void *self, sr_done_fn done, void *ud)
{
	return sr_harness_doctor(&((codex *)self)->h, done, ud);
}

static void x_fini(void *self)
{
	codex *c = self;

	sr_harness_fini(&c->h);
	free(c->model);
	free(c->mode);
	free(c);
}

static int x_init(const sr_host *host, void **self)
{
	codex *c = calloc(1, sizeof(*c));
	const char *model = host->config_get(host, "model");
	const char *mode = host->config_get(host, "mode");
	int rc;

	if (!c)
		return SR_ENOMEM;
	rc = sr_harness_init(&c->h, host, "codex", npm, "codex-acp");
	if (rc == SR_OK && model && (strchr(model, '"') || strchr(model, '\n')))
		rc = host->config_invalid(host, "model", "a model name without quotes");
	if (rc == SR_OK && mode && strcmp(mode, "read-only") != 0 &&
	    strcmp(mode, "workspace-write") != 0)
		rc = host->config_invalid(host, "mode",
			"'read-only' or 'workspace-write' (modes in which codex asks before a tool runs)");
	if (rc != SR_OK) {
		x_fini(c);
		return rc;
	}
	c->model = strdup(model ? model : "gpt-5-codex");
	c->mode = strdup(mode ? mode : "workspace-write");
	*self = c;
	return SR_OK;
}

static const sr_harness_ops ops = {
	.size = sizeof(sr_harness_ops),
	.describe = x_describe,
	.prepare = x_prepare,
	.mcp_servers = x_mcp_servers,
	.is_own_permission = x_is_own_permission,
	.cancel = NULL,
};

static const char *const keys[] = { "command", "install_dir", "env", "model", "mode", NULL };

static const sr_plugin_descriptor descriptor = {
	.abi_major = SR_ABI_MAJOR,
	.abi_minor = SR_ABI_MINOR,
	.size = sizeof(sr_plugin_descriptor),
	.kind = SR_PLUGIN_HARNESS,
	.name = "codex",
	.version = "0.1.0",
	.description = "OpenAI Codex through codex-acp",
	.ops = &ops,
	.config_keys = keys,
	.init = x_init,
	.fini = x_fini,
	.doctor = x_doctor,
};

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &descriptor;
}
