/*
 * The claude harness: Claude Code through @agentclientprotocol/claude-agent-acp.
 *
 * Platform tools reach it as the stdio MCP server "sandrun-tools" (the
 * shim), or, with tools = http in [harness.claude] and a provider on the
 * runner's host, as the loopback MCP server with its bearer. The session
 * is put in mode "default" so that tool calls raise ACP permission
 * requests that sandrun answers (the "auto" mode would ask the model).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const char *const npm[] = { "@agentclientprotocol/claude-agent-acp@0.101", NULL };
/* The node those packages require (their package.json "engines"). */
static const char node[] = ">=22";

typedef struct claude {
	harness h;
	int tools_http;
} claude;

static int c_describe(void *self, char **out)
{
	claude *c = self;

	return sr_harness_answer(json_pack(
		"{s:o, s:[s, s], s:[{s:s, s:s, s:s}, {s:s, s:s, s:s}], s:[s], s:[s, s], s:s, s:O, "
		"s:s, s:[s], s:s, s:b}",
		"command", sr_harness_command(&c->h),
		"credential_env", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN",
		"credentials",
		"env", "ANTHROPIC_API_KEY", "kind", "api_key", "host", "api.anthropic.com",
		"env", "ANTHROPIC_AUTH_TOKEN", "kind", "bearer", "host", "api.anthropic.com",
		"passthrough_env", "ANTHROPIC_BASE_URL",
		"tools", "mcp_stdio", "mcp_http",
		"mode", "default",
		"env", c->h.extra_env,
		"install_dir", c->h.install_dir,
		"npm", npm[0],
		"node", node,
		"wants_mcp_http", c->tools_http), out);
}

static int c_prepare(void *self, uint64_t req, const char *run_json,
		     sr_done_fn done, void *ud)
{
	json_t *run = json_loads(run_json, 0, NULL);
	json_t *files = json_array(), *env = json_array();
	const char *home = json_string_value(json_object_get(run, "home"));
	const char *model = json_string_value(json_object_get(run, "model_url"));
	char path[4096];

	(void)req;
	if (home) {
		/* Permission requests only arrive in the "default" mode. */
		snprintf(path, sizeof(path), "%s/.claude/settings.json", home);
		sr_harness_file(files, path,
				"{\"permissions\":{\"defaultMode\":\"default\"}}\n", 0600);
	}
	if (json_is_true(json_object_get(run, "as_root")))
		sr_harness_env(env, "IS_SANDBOX", "1");
	sr_harness_env(env, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
	/* After each turn Claude Code would replay the whole conversation to
	 * suggest a next prompt: traffic and cost for nothing here. */
	sr_harness_env(env, "CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION", "false");
	/* Otherwise MCP tools hide behind a ToolSearch tool. */
	sr_harness_env(env, "ENABLE_TOOL_SEARCH", "false");
	if (model)
		sr_harness_env(env, "ANTHROPIC_BASE_URL", model);
	json_decref(run);
	return sr_harness_reply(&((claude *)self)->h, done, ud,
				json_pack("{s:o, s:o}", "files", files, "env", env));
}

static int c_mcp_servers(void *self, const char *run_json, char **out)
{
	claude *c = self;
	json_t *run = json_loads(run_json, 0, NULL);
	json_t *servers = json_array(), *user = json_object_get(run, "user_mcp_servers");
	json_t *http = json_object_get(run, "mcp_http"), *shim;
	size_t i;
	json_t *s;

	if (c->tools_http && json_is_object(http)) {
		char bearer[200];
		snprintf(bearer, sizeof(bearer), "Bearer %s",
			 json_string_value(json_object_get(http, "token")));
		json_array_append_new(servers, json_pack("{s:s, s:s, s:O, s:[{s:s, s:s}]}",
			"type", "http", "name", SR_TOOLS_SERVER_NAME, "url",
			json_object_get(http, "url"), "headers", "name", "Authorization",
			"value", bearer));
	} else if ((shim = sr_harness_shim_entry(run))) {
		json_array_append_new(servers, shim);
	}
	json_array_foreach(user, i, s)
		json_array_append(servers, s);
	json_decref(run);
	return sr_harness_answer(servers, out);
}

/* Claude Code names MCP tools mcp__<server>__<tool>. */
static int c_is_own_permission(void *self, const char *request_json)
{
	(void)self;
	return request_json && strstr(request_json, "mcp__" SR_TOOLS_SERVER_NAME "__") != NULL;
}

static int c_doctor(void *self, sr_done_fn done, void *ud)
{
	return sr_harness_doctor(&((claude *)self)->h, done, ud);
}

static void c_fini(void *self)
{
	claude *c = self;

	sr_harness_fini(&c->h);
	free(c);
}

static int c_init(const sr_host *host, void **self)
{
	claude *c = calloc(1, sizeof(*c));
	const char *tools = host->config_get(host, "tools");
	int rc;

	if (!c)
		return SR_ENOMEM;
	rc = sr_harness_init(&c->h, host, "claude", npm, "claude-agent-acp");
	if (rc == SR_OK && tools && strcmp(tools, "stdio") != 0 && strcmp(tools, "http") != 0)
		rc = host->config_invalid(host, "tools", "'stdio' (the shim) or 'http' (the loopback server)");
	if (rc != SR_OK) {
		c_fini(c);
		return rc;
	}
	c->tools_http = tools && strcmp(tools, "http") == 0;
	*self = c;
	return SR_OK;
}

static const sr_harness_ops ops = {
	.size = sizeof(sr_harness_ops),
	.describe = c_describe,
	.prepare = c_prepare,
	.mcp_servers = c_mcp_servers,
	.is_own_permission = c_is_own_permission,
	.cancel = NULL,
};

static const char *const keys[] = { "command", "install_dir", "env", "tools", NULL };

static const sr_plugin_descriptor descriptor = {
	.abi_major = SR_ABI_MAJOR,
	.abi_minor = SR_ABI_MINOR,
	.size = sizeof(sr_plugin_descriptor),
	.kind = SR_PLUGIN_HARNESS,
	.name = "claude",
	.version = "0.1.0",
	.description = "Claude Code through claude-agent-acp",
	.ops = &ops,
	.config_keys = keys,
	.init = c_init,
	.fini = c_fini,
	.doctor = c_doctor,
};

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &descriptor;
}
