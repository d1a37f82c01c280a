/* Helpers shared by the harness plugins. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

static json_t *parse_env(const char *spec)
{
	json_t *env = json_array();
	char *copy = strdup(spec), *tok, *save;

	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		while (*tok == ' ')
			tok++;
		if (!eq || eq == tok) {
			json_decref(env);
			free(copy);
			return NULL;
		}
		*eq = 0;
		sr_harness_env(env, tok, eq + 1);
	}
	free(copy);
	return env;
}

int sr_harness_init(harness *h, const sr_host *host, const char *name,
		    const char *const *npm, const char *bin)
{
	const char *dir = host->config_get(host, "install_dir");
	const char *cmd = host->config_get(host, "command");
	const char *env = host->config_get(host, "env");
	const char *state;

	memset(h, 0, sizeof(*h));
	h->host = host;
	h->name = name;
	h->npm = npm;
	h->bin = bin;
	if (dir && dir[0] != '/')
		return host->config_invalid(host, "install_dir", "an absolute directory");
	if (cmd && cmd[0] != '/')
		return host->config_invalid(host, "command", "an absolute path");
	if (env && !(h->extra_env = parse_env(env)))
		return host->config_invalid(host, "env", "NAME=VALUE pairs separated by commas");
	if (!h->extra_env)
		h->extra_env = json_array();
	if (dir) {
		h->install_dir = strdup(dir);
	} else {
		state = host->state_dir(host);
		h->install_dir = malloc(strlen(state ? state : "/nonexistent") + 40);
		sprintf(h->install_dir, "%s/harness/%s", state ? state : "/nonexistent", name);
	}
	h->command = cmd ? strdup(cmd) : NULL;
	return SR_OK;
}

void sr_harness_fini(harness *h)
{
	free(h->install_dir);
	free(h->command);
	json_decref(h->extra_env);
}

json_t *sr_harness_command(const harness *h)
{
	char path[4096];

	if (h->command)
		return json_pack("[s]", h->command);
	snprintf(path, sizeof(path), "%s/node_modules/.bin/%s", h->install_dir, h->bin);
	return json_pack("[s]", path);
}

int sr_harness_reply(const harness *h, sr_done_fn done, void *ud, json_t *json)
{
	char *text = json_dumps(json, JSON_COMPACT);
	sr_result r = { sizeof(r), SR_OK, NULL, text, NULL, 0 };
	int rc = text ? h->host->complete(h->host, done, ud, &r) : SR_ENOMEM;

	json_decref(json);
	free(text);
	return rc;
}

int sr_harness_answer(json_t *json, char **out)
{
	*out = json ? json_dumps(json, JSON_COMPACT) : NULL;
	json_decref(json);
	return *out ? SR_OK : SR_ENOMEM;
}

int sr_harness_doctor(const harness *h, sr_done_fn done, void *ud)
{
	json_t *cmd = sr_harness_command(h);
	const char *path = json_string_value(json_array_get(cmd, 0));
	char detail[4400];
	int ok = access(path, X_OK) == 0;

	if (ok)
		snprintf(detail, sizeof(detail), "ready: %s", path);
	else
		snprintf(detail, sizeof(detail),
			 "not installed: %s is missing (run 'sandrun install-harness %s')",
			 path, h->name);
	json_decref(cmd);
	return sr_harness_reply(h, done, ud, json_pack("{s:b, s:s}", "ok", ok, "detail", detail));
}

void sr_harness_env(json_t *env, const char *name, const char *value)
{
	json_array_append_new(env, json_pack("{s:s, s:s}", "name", name, "value", value));
}

void sr_harness_file(json_t *files, const char *path, const char *content,
		     int mode)
{
	json_array_append_new(files, json_pack("{s:s, s:s, s:i}", "path", path,
					       "content", content, "mode", mode));
}

json_t *sr_harness_shim_entry(json_t *run)
{
	const char *shim = json_string_value(json_object_get(run, "shim"));
	const char *specs = json_string_value(json_object_get(run, "specs"));
	const char *relay = json_string_value(json_object_get(run, "relay_dir"));

	if (!shim || !specs || !relay)
		return NULL;
	return json_pack("{s:s, s:s, s:[s, s, s, s, s], s:[]}", "name", SR_TOOLS_SERVER_NAME,
			 "command", shim, "args", "mcp", "--specs", specs,
			 "--relay-dir", relay, "env");
}

int sr_harness_has_credential(json_t *run, const char *name)
{
	json_t *names = json_object_get(run, "credentials"), *v;
	size_t i;

	if (!json_is_array(names)) {
		const char *value = getenv(name);
		return value && *value;
	}
	json_array_foreach(names, i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), name) == 0)
			return 1;
	return 0;
}
