/* The claude, codex and pi harness plugins on their own, against a mock
 * host table (mock_host.h): what each describes, prepares and offers as
 * MCP servers, and which permission requests it claims. */
#include <jansson.h>

#include "harness.h"
#include "mock_host.h"

static sr__registry *reg;
static mock_host host;
static const sr_plugin_descriptor *desc;
static const sr_harness_ops *ops;
static void *self;

static void setup(void)
{
	const char *path = getenv("SANDRUN_PLUGIN_PATH");

	cr_assert_not_null(path, "run under make check");
	t_log_capture();
	reg = sr__registry_new();
	sr__registry_scan(reg, path);
}

static void teardown(void)
{
	if (desc && self && desc->fini)
		desc->fini(self);
	self = NULL;
	desc = NULL;
	sr__registry_free(reg);
}

TestSuite(harness_plugins, .init = setup, .fini = teardown);

/* Start the named harness with config pairs; SR_OK or init's status. */
static int start(const char *name, const char *const *config)
{
	sr__plugin *p = sr__registry_find(reg, SR_PLUGIN_HARNESS, name);

	cr_assert_not_null(p, "harness plugin '%s' not found", name);
	desc = p->desc;
	ops = desc->ops;
	mock_init(&host, name, config, "/state");
	return desc->init(&host.pub, &self);
}

static json_t *describe(void)
{
	char *text = NULL;
	json_t *j;

	cr_assert_eq(ops->describe(self, &text), SR_OK);
	j = json_loads(text, 0, NULL);
	free(text);
	cr_assert(json_is_object(j));
	return j;
}

static json_t *servers(const char *run)
{
	char *text = NULL;
	json_t *j;

	cr_assert_eq(ops->mcp_servers(self, run, &text), SR_OK);
	j = json_loads(text, 0, NULL);
	free(text);
	cr_assert(json_is_array(j));
	return j;
}

typedef struct prepared {
	int calls, status;
	json_t *json;
	char message[256];
} prepared;

static void on_prepared(void *ud, const sr_result *r)
{
	prepared *p = ud;

	p->calls++;
	p->status = r->status;
	p->json = r->json ? json_loads(r->json, 0, NULL) : NULL;
	snprintf(p->message, sizeof(p->message), "%s", r->message ? r->message : "");
}

/* prepare, checking the completion rule on the way. */
static void prepare(const char *run, prepared *out)
{
	memset(out, 0, sizeof(*out));
	cr_assert_eq(ops->prepare(self, 1, run, on_prepared, out), SR_OK);
	cr_assert_eq(out->calls, 0, "prepare called back from inside the call");
	mock_deliver(&host);
	cr_assert_eq(out->calls, 1);
}

/* The value of env entry name in a prepare answer, or NULL. */
static const char *env_of(json_t *answer, const char *name)
{
	size_t i;
	json_t *e;

	json_array_foreach(json_object_get(answer, "env"), i, e)
		if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0)
			return json_string_value(json_object_get(e, "value"));
	return NULL;
}

static json_t *file_of(json_t *answer, const char *path)
{
	size_t i;
	json_t *f;

	json_array_foreach(json_object_get(answer, "files"), i, f)
		if (strcmp(json_string_value(json_object_get(f, "path")), path) == 0)
			return f;
	return NULL;
}

static const char run_with_tools[] =
	"{\"workspace\":\"/w\",\"home\":\"/h\",\"session\":\"ses-1\",\"as_root\":true,"
	"\"model_url\":\"http://127.0.0.1:9/m\",\"shim\":\"/s/sandrun-shim\","
	"\"specs\":\"/r/specs.json\",\"relay_dir\":\"/r/relay\","
	"\"user_mcp_servers\":[{\"type\":\"http\",\"name\":\"docs\",\"url\":\"https://d.example/mcp\",\"headers\":[]}]}";

Test(harness_plugins, claude_describes_its_adapter_node_and_credentials)
{
	static const char *const conf[] = { "install_dir", "/opt/claude", NULL };
	json_t *d;

	cr_assert_eq(start("claude", conf), SR_OK);
	d = describe();
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(d, "command"), 0)),
			 "/opt/claude/node_modules/.bin/claude-agent-acp");
	cr_assert_str_eq(json_string_value(json_object_get(d, "node")), ">=22");
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(d, "credential_env"), 0)),
			 "ANTHROPIC_API_KEY");
	cr_assert_str_eq(json_string_value(json_object_get(d, "install_dir")), "/opt/claude");
	cr_assert(strstr(json_string_value(json_array_get(json_object_get(d, "npm"), 0)),
			 "claude-agent-acp@"));
	json_decref(d);
}

Test(harness_plugins, a_relative_install_dir_is_refused_naming_the_key)
{
	static const char *const conf[] = { "install_dir", "relative/dir", NULL };

	cr_assert_eq(start("claude", conf), SR_EINVAL);
	self = NULL;
	cr_assert_str_eq(host.invalid_key, "install_dir");
}

Test(harness_plugins, claude_prepares_settings_and_model_env_and_offers_the_shim)
{
	prepared p;
	json_t *s, *first;

	cr_assert_eq(start("claude", NULL), SR_OK);
	prepare(run_with_tools, &p);
	cr_assert_eq(p.status, SR_OK);
	cr_assert_not_null(file_of(p.json, "/h/.claude/settings.json"));
	cr_assert_str_eq(env_of(p.json, "ANTHROPIC_BASE_URL"), "http://127.0.0.1:9/m");
	cr_assert_str_eq(env_of(p.json, "IS_SANDBOX"), "1");
	json_decref(p.json);

	s = servers(run_with_tools);
	cr_assert_eq(json_array_size(s), 2);
	first = json_array_get(s, 0);
	cr_assert_str_eq(json_string_value(json_object_get(first, "name")), SR_TOOLS_SERVER_NAME);
	cr_assert_str_eq(json_string_value(json_object_get(first, "command")), "/s/sandrun-shim");
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(s, 1), "name")), "docs");
	json_decref(s);
}

Test(harness_plugins, claude_with_http_tools_offers_the_loopback_server_with_its_bearer)
{
	static const char *const conf[] = { "tools", "http", NULL };
	json_t *s, *h;

	cr_assert_eq(start("claude", conf), SR_OK);
	s = servers("{\"mcp_http\":{\"url\":\"http://127.0.0.1:5/mcp\",\"token\":\"tok\"}}");
	cr_assert_eq(json_array_size(s), 1);
	h = json_array_get(s, 0);
	cr_assert_str_eq(json_string_value(json_object_get(h, "type")), "http");
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(
		json_object_get(h, "headers"), 0), "value")), "Bearer tok");
	json_decref(s);
}

Test(harness_plugins, claude_claims_only_permission_requests_of_platform_tools)
{
	cr_assert_eq(start("claude", NULL), SR_OK);
	cr_assert_eq(ops->is_own_permission(self,
		"{\"toolCall\":{\"title\":\"mcp__sandrun-tools__echo\"}}"), 1);
	cr_assert_eq(ops->is_own_permission(self, "{\"toolCall\":{\"title\":\"Bash\"}}"), 0);
	cr_assert_eq(ops->is_own_permission(self,
		"{\"toolCall\":{\"title\":\"mcp__docs__search\"}}"), 0);
}

Test(harness_plugins, claude_refuses_an_unknown_tools_mode)
{
	static const char *const conf[] = { "tools", "carrier-pigeon", NULL };

	cr_assert_eq(start("claude", conf), SR_EINVAL);
	self = NULL;
	cr_assert_str_eq(host.invalid_key, "tools");
}

Test(harness_plugins, codex_writes_its_home_and_points_it_at_the_model)
{
	prepared p;
	json_t *f, *d;

	cr_assert_eq(start("codex", NULL), SR_OK);
	d = describe();
	cr_assert_str_eq(json_string_value(json_object_get(d, "node")), ">=16");
	json_decref(d);
	prepare(run_with_tools, &p);
	cr_assert_eq(p.status, SR_OK, "%s", p.message);
	cr_assert_str_eq(env_of(p.json, "CODEX_HOME"), "/h/.codex");
	f = file_of(p.json, "/h/.codex/config.toml");
	cr_assert_not_null(f);
	cr_assert(strstr(json_string_value(json_object_get(f, "content")),
			 "base_url = \"http://127.0.0.1:9/m/v1\""),
		  "%s", json_string_value(json_object_get(f, "content")));
	json_decref(p.json);
}

/* codex's config.toml for run (a JSON text), its content. */
static char *codex_config(const char *run)
{
	prepared p;
	json_t *f;
	char *text;

	prepare(run, &p);
	cr_assert_eq(p.status, SR_OK, "%s", p.message);
	f = file_of(p.json, "/h/.codex/config.toml");
	cr_assert_not_null(f);
	text = strdup(json_string_value(json_object_get(f, "content")));
	json_decref(p.json);
	return text;
}

/* The apiKey of the provider sandrun in a Pi models.json file entry. */
static const char *pi_api_key(json_t *file)
{
	static char key[256];
	json_t *j;

	cr_assert_not_null(file);
	j = json_loads(json_string_value(json_object_get(file, "content")), 0, NULL);
	cr_assert_not_null(j);
	snprintf(key, sizeof(key), "%s", json_string_value(json_object_get(
		json_object_get(json_object_get(j, "providers"), "sandrun"), "apiKey")));
	json_decref(j);
	return key;
}

Test(harness_plugins, codex_and_pi_take_the_runs_credentials_not_their_environment)
{
	prepared p;
	json_t *f;
	char *text;

	cr_assert_eq(start("codex", NULL), SR_OK);
	/* The key came with the run (sandrund's request), not the environment. */
	unsetenv("OPENAI_API_KEY");
	text = codex_config("{\"home\":\"/h\",\"model_url\":\"http://m\",\"credentials\":[\"OPENAI_API_KEY\"]}");
	cr_assert(strstr(text, "env_key = \"OPENAI_API_KEY\""), "%s", text);
	free(text);
	/* The environment has one, the run none. */
	setenv("OPENAI_API_KEY", "sk-runner-own-1234", 1);
	text = codex_config("{\"home\":\"/h\",\"model_url\":\"http://m\",\"credentials\":[]}");
	cr_assert(strstr(text, "requires_openai_auth = false"), "%s", text);
	free(text);
	/* An older core says nothing: the environment decides. */
	text = codex_config("{\"home\":\"/h\",\"model_url\":\"http://m\"}");
	cr_assert(strstr(text, "env_key = \"OPENAI_API_KEY\""), "%s", text);
	free(text);
	unsetenv("OPENAI_API_KEY");
	/* Only CODEX_API_KEY, a name codex declares: the bearer is its. */
	text = codex_config("{\"home\":\"/h\",\"model_url\":\"http://m\",\"credentials\":[\"CODEX_API_KEY\"]}");
	cr_assert(strstr(text, "env_key = \"CODEX_API_KEY\""), "%s", text);
	cr_assert_null(strstr(text, "requires_openai_auth"), "%s", text);
	free(text);
	teardown();
	setup();
	cr_assert_eq(start("pi", NULL), SR_OK);
	prepare("{\"home\":\"/h\",\"model_url\":\"http://m\",\"credentials\":[\"OPENAI_API_KEY\"]}", &p);
	cr_assert_eq(p.status, SR_OK, "%s", p.message);
	f = file_of(p.json, "/h/.pi-agent/models.json");
	cr_assert_not_null(f);
	cr_assert_str_eq(pi_api_key(f), "OPENAI_API_KEY");
	json_decref(p.json);
}

/* Pi reads a variable only when apiKey is its bare name: the name of the
 * credential the run has, the endpoint's own API's first; a literal that is
 * no variable when the run has none. */
Test(harness_plugins, pi_names_the_runs_credential_as_a_bare_variable)
{
	static const char *const anthropic[] = { "api", "anthropic-messages", NULL };
	prepared p;

	cr_assert_eq(start("pi", NULL), SR_OK);
	prepare("{\"home\":\"/h\",\"model_url\":\"http://m\",\"credentials\":[\"ANTHROPIC_API_KEY\"]}", &p);
	cr_assert_str_eq(pi_api_key(file_of(p.json, "/h/.pi-agent/models.json")), "ANTHROPIC_API_KEY");
	json_decref(p.json);
	prepare("{\"home\":\"/h\",\"model_url\":\"http://m\",\"credentials\":[]}", &p);
	cr_assert_str_eq(pi_api_key(file_of(p.json, "/h/.pi-agent/models.json")), "none");
	json_decref(p.json);
	teardown();
	setup();
	cr_assert_eq(start("pi", anthropic), SR_OK);
	prepare("{\"home\":\"/h\",\"model_url\":\"http://m\",\"credentials\":[\"OPENAI_API_KEY\",\"ANTHROPIC_API_KEY\"]}", &p);
	cr_assert_str_eq(pi_api_key(file_of(p.json, "/h/.pi-agent/models.json")), "ANTHROPIC_API_KEY");
	json_decref(p.json);
}

Test(harness_plugins, codex_refuses_a_model_url_that_would_break_its_config)
{
	prepared p;

	cr_assert_eq(start("codex", NULL), SR_OK);
	prepare("{\"home\":\"/h\",\"model_url\":\"http://x/\\\"\\nevil = 1\"}", &p);
	cr_assert_eq(p.status, SR_EINVAL);
	cr_assert(strstr(p.message, "model URL"), "%s", p.message);
}

Test(harness_plugins, codex_claims_its_server_by_either_spelling)
{
	cr_assert_eq(start("codex", NULL), SR_OK);
	cr_assert_eq(ops->is_own_permission(self, "{\"toolCall\":{\"title\":\"sandrun_tools.echo\"}}"), 1);
	cr_assert_eq(ops->is_own_permission(self, "{\"toolCall\":{\"title\":\"shell\"}}"), 0);
}

Test(harness_plugins, pi_delivers_tools_through_its_extension_not_mcp)
{
	prepared p;
	json_t *d, *s;

	cr_assert_eq(start("pi", NULL), SR_OK);
	d = describe();
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(d, "tools"), 0)),
			 "relay_extension");
	cr_assert_str_eq(json_string_value(json_object_get(d, "node")), ">=20.6.0");
	json_decref(d);
	s = servers(run_with_tools);
	cr_assert_eq(json_array_size(s), 0);
	json_decref(s);
	prepare(run_with_tools, &p);
	cr_assert_eq(p.status, SR_OK);
	cr_assert_not_null(file_of(p.json, "/h/.pi-agent/extensions/sandrun-tools.ts"));
	cr_assert_not_null(file_of(p.json, "/h/.pi-agent/models.json"));
	cr_assert_str_eq(env_of(p.json, "SANDRUN_RELAY_DIR"), "/r/relay");
	cr_assert_str_eq(env_of(p.json, "SANDRUN_SHIM"), "/s/sandrun-shim");
	cr_assert(strstr(env_of(p.json, "PI_ACP_PI_COMMAND"), "/node_modules/.bin/pi"));
	json_decref(p.json);
}
