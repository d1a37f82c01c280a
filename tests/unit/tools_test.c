/* core/tools/tools.c: the tools file, argument checks, the permission guard,
 * and the shaping of callback results (core/tools/relay.c). */
#include "harness.h"
#include "core/tools/relay.h"
#include "core/tools/tools.h"
#include "shim/relay_proto.h"

static sr__toolset *set;
static char err[600];

static int parse(const char *text)
{
	json_t *arr = json_loads(text, 0, NULL);
	int rc;

	cr_assert_not_null(arr, "test JSON does not parse: %s", text);
	sr__tools_free(set);
	set = NULL;
	rc = sr__tools_parse(arr, "tools.json", &set, err, sizeof(err));
	json_decref(arr);
	return rc;
}

static void teardown(void)
{
	sr__tools_free(set);
	set = NULL;
}

TestSuite(tools, .fini = teardown);

Test(tools, parses_callback_and_client_tools)
{
	const sr__tool *t;

	cr_assert_eq(parse("[{\"name\":\"search\",\"description\":\"d\",\"read_only\":true,"
			   "\"input_schema\":{\"type\":\"object\",\"required\":[\"q\"]},"
			   "\"callback\":{\"url\":\"http://127.0.0.1:1/x\",\"headers\":{\"X-Key\":\"k3y-value\"},"
			   "\"timeout_ms\":500}},"
			   "{\"name\":\"pick\",\"kind\":\"client\",\"permission\":\"ask\"}]"), SR_OK, "%s", err);
	cr_assert_eq(set->n, 2);
	t = sr__tools_find(set, "search");
	cr_assert_eq(t->kind, SR_TOOL_CALLBACK);
	cr_assert_eq(t->timeout_ms, 500);
	cr_assert_eq(t->n_headers, 1);
	cr_assert(t->read_only);
	cr_assert_eq(t->permission, SR_PERM_UNSET);
	t = sr__tools_find(set, "pick");
	cr_assert_eq(t->kind, SR_TOOL_CLIENT);
	cr_assert_eq(t->permission, SR_PERM_ASK);
	cr_assert_null(sr__tools_find(set, "nope"));
}

Test(tools, default_timeout_is_30_seconds_and_schema_is_open)
{
	cr_assert_eq(parse("[{\"name\":\"a\",\"callback\":{\"url\":\"https://x.example/\"}}]"), SR_OK);
	cr_assert_eq(set->tools[0].timeout_ms, 30000);
	cr_assert_str_eq(json_string_value(json_object_get(set->tools[0].input_schema, "type")),
			 "object");
}

Test(tools, errors_name_the_file_the_tool_and_the_field)
{
	cr_assert_eq(parse("{}"), SR_EINVAL);
	cr_assert(strstr(err, "tools.json: expected a JSON array"), "%s", err);
	cr_assert_eq(parse("[{\"name\":\"a b\"}]"), SR_EINVAL);
	cr_assert(strstr(err, "tool 0: 'name'"), "%s", err);
	cr_assert_eq(parse("[{\"name\":\"a\",\"callback\":{\"url\":\"ftp://x\"}}]"), SR_EINVAL);
	cr_assert(strstr(err, "tools.json: tool 'a': 'callback.url'"), "%s", err);
	cr_assert_eq(parse("[{\"name\":\"a\"}]"), SR_EINVAL);
	cr_assert(strstr(err, "'callback' must be an object"), "%s", err);
	cr_assert_eq(parse("[{\"name\":\"a\",\"kind\":\"magic\"}]"), SR_EINVAL);
	cr_assert(strstr(err, "'kind' must be 'callback' or 'client', not 'magic'"), "%s", err);
	cr_assert_eq(parse("[{\"name\":\"a\",\"kind\":\"client\",\"permission\":\"maybe\"}]"), SR_EINVAL);
	cr_assert(strstr(err, "'permission'"), "%s", err);
	cr_assert_eq(parse("[{\"name\":\"a\",\"kind\":\"client\",\"read_only\":\"yes\"}]"), SR_EINVAL);
	cr_assert(strstr(err, "'read_only'"), "%s", err);
	cr_assert_eq(parse("[{\"name\":\"a\",\"callback\":{\"url\":\"http://x/\",\"timeout_ms\":0}}]"),
		     SR_EINVAL);
	cr_assert(strstr(err, "'callback.timeout_ms'"), "%s", err);
	cr_assert_eq(parse("[{\"name\":\"a\",\"callback\":{\"url\":\"http://x/\",\"headers\":{\"X\":\"a\\nb\"}}}]"),
		     SR_EINVAL);
	cr_assert(strstr(err, "'callback.headers.X'"), "%s", err);
	cr_assert_eq(parse("[{\"name\":\"a\",\"kind\":\"client\",\"input_schema\":{\"required\":\"x\"}}]"),
		     SR_EINVAL);
	cr_assert(strstr(err, "'input_schema'"), "%s", err);
}

Test(tools, names_are_unique_and_the_server_name_is_reserved)
{
	cr_assert_eq(parse("[{\"name\":\"a\",\"kind\":\"client\"},{\"name\":\"a\",\"kind\":\"client\"}]"),
		     SR_EINVAL);
	cr_assert(strstr(err, "tool 'a' is defined twice"), "%s", err);
	cr_assert_eq(parse("[{\"name\":\"sandrun-tools\",\"kind\":\"client\"}]"), SR_EINVAL);
	cr_assert(strstr(err, "reserved"), "%s", err);
}

Test(tools, a_missing_file_names_it)
{
	cr_assert_eq(sr__tools_load("/nonexistent/tools.json", &set, err, sizeof(err)), SR_EINVAL);
	cr_assert(strstr(err, "/nonexistent/tools.json"), "%s", err);
}

Test(tools, specs_carry_no_callback_details)
{
	json_t *specs;
	char *text;

	cr_assert_eq(parse("[{\"name\":\"a\",\"callback\":{\"url\":\"http://secret.example/\","
			   "\"headers\":{\"Authorization\":\"Bearer sk-hidden\"}}}]"), SR_OK);
	specs = sr__tools_specs(set);
	text = json_dumps(specs, 0);
	cr_assert(strstr(text, "secret.example") == NULL && strstr(text, "sk-hidden") == NULL, "%s", text);
	cr_assert(strstr(text, "\"inputSchema\""), "%s", text);
	free(text);
	json_decref(specs);
}

Test(tools, required_arguments_are_checked)
{
	json_t *args = json_pack("{s:i}", "a", 1);

	cr_assert_eq(parse("[{\"name\":\"t\",\"kind\":\"client\",\"input_schema\":{\"type\":\"object\","
			   "\"required\":[\"a\",\"b\"]}}]"), SR_OK);
	cr_assert_eq(sr__tools_check_args(&set->tools[0], args, err, sizeof(err)), SR_EINVAL);
	cr_assert(strstr(err, "missing required argument 'b'"), "%s", err);
	json_object_set_new(args, "b", json_null());
	cr_assert_eq(sr__tools_check_args(&set->tools[0], args, err, sizeof(err)), SR_OK);
	json_decref(args);
}

Test(guard, tool_setting_then_first_rule_then_default)
{
	sr__guard g = { SR_PERM_ALLOW_READS, NULL, 0 };

	cr_assert_eq(parse("[{\"name\":\"read_file\",\"kind\":\"client\",\"read_only\":true},"
			   "{\"name\":\"write_file\",\"kind\":\"client\"},"
			   "{\"name\":\"rm_all\",\"kind\":\"client\",\"permission\":\"allow\"},"
			   "{\"name\":\"rm_one\",\"kind\":\"client\"}]"), SR_OK);
	/* allow_reads: read-only allowed, others asked */
	cr_assert_eq(sr__guard_decide(&g, &set->tools[0]), SR_PERM_ALLOW);
	cr_assert_eq(sr__guard_decide(&g, &set->tools[1]), SR_PERM_ASK);
	cr_assert_eq(sr__guard_add_rule(&g, "rm_*=deny"), SR_OK);
	cr_assert_eq(sr__guard_add_rule(&g, "rm_one=allow"), SR_OK);
	cr_assert_eq(sr__guard_decide(&g, &set->tools[3]), SR_PERM_DENY, "first rule wins");
	cr_assert_eq(sr__guard_decide(&g, &set->tools[2]), SR_PERM_ALLOW, "tool setting first");
	g.default_mode = SR_PERM_DENY;
	cr_assert_eq(sr__guard_decide(&g, &set->tools[0]), SR_PERM_DENY);
	g.default_mode = SR_PERM_ALLOW;
	cr_assert_eq(sr__guard_decide(&g, &set->tools[1]), SR_PERM_ALLOW);
	sr__guard_clear(&g);
}

Test(guard, zeroed_guard_is_allow_reads_not_allow)
{
	sr__guard g;

	memset(&g, 0, sizeof(g));
	cr_assert_eq(parse("[{\"name\":\"w\",\"kind\":\"client\"}]"), SR_OK);
	cr_assert_eq(sr__guard_decide(&g, &set->tools[0]), SR_PERM_ASK);
}

Test(guard, bad_rules_are_refused)
{
	sr__guard g = { 0 };

	cr_assert_eq(sr__guard_add_rule(&g, "x"), SR_EINVAL);
	cr_assert_eq(sr__guard_add_rule(&g, "=allow"), SR_EINVAL);
	cr_assert_eq(sr__guard_add_rule(&g, "x=maybe"), SR_EINVAL);
	cr_assert_eq(sr__guard_add_rule(&g, "x=allow_reads"), SR_EINVAL);
	cr_assert_eq(g.n_rules, 0);
}

Test(result, mcp_shaped_bodies_pass_through)
{
	const char *b = "{\"content\":[{\"type\":\"image\",\"data\":\"AA==\",\"mimeType\":\"image/png\"}],\"isError\":true}";
	json_t *r = sr__relay_callback_result(200, b, strlen(b));

	cr_assert(json_is_true(json_object_get(r, "isError")));
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(
		json_object_get(r, "content"), 0), "type")), "image");
	json_decref(r);
}

Test(result, any_other_body_is_one_text_item)
{
	json_t *r = sr__relay_callback_result(200, "{\"a\":1}", 7);

	cr_assert_eq(json_array_size(json_object_get(r, "content")), 1);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(
		json_object_get(r, "content"), 0), "text")), "{\"a\":1}");
	cr_assert(json_is_false(json_object_get(r, "isError")));
	json_decref(r);
}

Test(result, long_text_is_cut_with_a_note)
{
	static char body[150001];
	json_t *r, *content;
	const char *note;

	memset(body, 'y', 150000);
	r = sr__relay_callback_result(200, body, 150000);
	content = json_object_get(r, "content");
	cr_assert_eq(json_array_size(content), 2);
	cr_assert_eq(strlen(json_string_value(json_object_get(json_array_get(content, 0), "text"))),
		     100000);
	note = json_string_value(json_object_get(json_array_get(content, 1), "text"));
	cr_assert(strstr(note, "cut at 100000 bytes; 50000 bytes were left out"), "%s", note);
	json_decref(r);
}

Test(result, http_errors_are_tool_errors)
{
	json_t *r = sr__relay_callback_result(503, "down", 4);

	cr_assert(json_is_true(json_object_get(r, "isError")));
	cr_assert(strstr(json_string_value(json_object_get(json_array_get(
		json_object_get(r, "content"), 0), "text")), "HTTP 503: down"));
	json_decref(r);
}

Test(relay_ids, only_the_safe_alphabet_up_to_128)
{
	char id[130];

	cr_assert(sr_relay_valid_id("abc-_9Z", 7));
	cr_assert_not(sr_relay_valid_id("../x", 4));
	cr_assert_not(sr_relay_valid_id("a/b", 3));
	cr_assert_not(sr_relay_valid_id("a\0b", 3));
	cr_assert_not(sr_relay_valid_id("", 0));
	cr_assert_not(sr_relay_valid_id("a b", 3));
	cr_assert_not(sr_relay_valid_id("a.b", 3));
	memset(id, 'a', sizeof(id));
	cr_assert(sr_relay_valid_id(id, 128));
	cr_assert_not(sr_relay_valid_id(id, 129));
	cr_assert_eq(sr_relay_id_of("abc.req", ".req"), 3);
	cr_assert_eq(sr_relay_id_of(".abc.req.tmp", ".req"), 0);
	cr_assert_eq(sr_relay_id_of("a b.req", ".req"), 0);
	cr_assert_eq(sr_relay_id_of(".req", ".req"), 0);
}

static int redacted(const char *value)
{
	char *s = sr__redact(value);
	int r = strcmp(s, "[REDACTED]") == 0;

	free(s);
	return r;
}

Test(tools, only_credential_headers_become_secrets)
{
	cr_assert_eq(parse("[{\"name\":\"a\",\"callback\":{\"url\":\"http://x/\",\"headers\":{"
			   "\"Authorization\":\"Bearer sk-1234\",\"X-Api-Key\":\"k-5678\","
			   "\"Cookie\":\"sid=abcd\",\"X-Custom\":\"hush-hush\","
			   "\"Accept\":\"application/json\",\"X-Tenant\":\"true\"},"
			   "\"secret_headers\":[\"X-Custom\"]}}]"), SR_OK, "%s", err);
	cr_assert(redacted("Bearer sk-1234"));
	cr_assert(redacted("k-5678"));
	cr_assert(redacted("sid=abcd"));
	cr_assert(redacted("hush-hush"), "a listed header is a secret");
	cr_assert_not(redacted("application/json"), "Accept is not a secret");
	cr_assert_not(redacted("true"), "X-Tenant is not a secret");
}

Test(tools, secret_headers_must_name_configured_headers)
{
	cr_assert_eq(parse("[{\"name\":\"a\",\"callback\":{\"url\":\"http://x/\",\"headers\":{"
			   "\"X-A\":\"v\"},\"secret_headers\":[\"X-B\"]}}]"), SR_EINVAL);
	cr_assert(strstr(err, "'callback.secret_headers' item 0"), "%s", err);
}
