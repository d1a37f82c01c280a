/* Tools file parsing and the permission guard. */
#include "config.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/host/log.h"
#include "core/tools/tools.h"

#define DEFAULT_CALLBACK_TIMEOUT_MS 30000
#define MAX_CALLBACK_TIMEOUT_MS (15LL * 60 * 1000)

static const char *const perm_names[] = { "allow_reads", "allow", "ask", "deny" };

int sr__perm_parse(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (s && strcmp(s, perm_names[i]) == 0)
			return i;
	return SR_PERM_UNSET;
}

const char *sr__perm_name(int perm)
{
	return perm >= 0 && perm < 4 ? perm_names[perm] : "unset";
}

static void tool_clear(sr__tool *t)
{
	free(t->name);
	free(t->description);
	json_decref(t->input_schema);
	free(t->url);
	for (size_t i = 0; i < t->n_headers; i++) {
		free((char *)t->headers[i].name);
		free((char *)t->headers[i].value);
	}
	free(t->headers);
	sr__secret_holds_release(&t->secrets);
}

void sr__tools_free(sr__toolset *set)
{
	if (!set)
		return;
	for (size_t i = 0; i < set->n; i++)
		tool_clear(&set->tools[i]);
	free(set->tools);
	free(set);
}

static int valid_tool_name(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') ||
		      (s[n] >= '0' && s[n] <= '9') || s[n] == '_' || s[n] == '-'))
			return 0;
	return n >= 1 && n <= 64;
}

/* A header's value is a secret when its name says so: Authorization,
 * Proxy-Authorization and Cookie, any name containing "auth", "token",
 * "key", "secret", "password" or "signature" (in any case), and the names
 * a tool lists in callback.secret_headers. Other values (Content-Type,
 * Accept, a tenant name) are not secrets: redacting them would garble
 * every event that happens to contain the same text. */
static int secret_header_name(const char *name, json_t *listed)
{
	static const char *const words[] = { "auth", "token", "key", "secret",
					     "password", "signature", "cookie", NULL };
	json_t *v;
	size_t i;

	for (const char *const *w = words; *w; w++)
		if (strcasestr(name, *w))
			return 1;
	json_array_foreach(listed, i, v)
		if (json_is_string(v) && strcasecmp(json_string_value(v), name) == 0)
			return 1;
	return 0;
}

int sr__tools_secret_header(const char *name)
{
	return secret_header_name(name, NULL);
}

#define FAIL(...)                                         \
	do {                                              \
		snprintf(err, errlen, __VA_ARGS__);       \
		return SR_EINVAL;                         \
	} while (0)

static int parse_callback(json_t *cb, sr__tool *t, const char *where,
			  char *err, size_t errlen)
{
	const char *url = json_string_value(json_object_get(cb, "url"));
	json_t *headers = json_object_get(cb, "headers");
	json_t *timeout = json_object_get(cb, "timeout_ms");
	json_t *secret = json_object_get(cb, "secret_headers");
	const char *k;
	json_t *v;
	size_t i;

	if (!json_is_object(cb))
		FAIL("%s: 'callback' must be an object with a 'url'", where);
	if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0))
		FAIL("%s: 'callback.url' must be an http:// or https:// URL", where);
	t->url = strdup(url);
	if (headers && !json_is_object(headers))
		FAIL("%s: 'callback.headers' must be an object of strings", where);
	if (secret && !json_is_array(secret))
		FAIL("%s: 'callback.secret_headers' must be an array of header names", where);
	json_array_foreach(secret, i, v)
		if (!json_is_string(v) || !json_object_get(headers, json_string_value(v)))
			FAIL("%s: 'callback.secret_headers' item %zu must name one of 'callback.headers'",
			     where, i);
	t->headers = calloc(json_object_size(headers) + 1, sizeof(*t->headers));
	if (!t->url || !t->headers)
		FAIL("%s: out of memory", where);
	json_object_foreach(headers, k, v) {
		if (!json_is_string(v) || strpbrk(k, "\r\n:") ||
		    strpbrk(json_string_value(v), "\r\n"))
			FAIL("%s: 'callback.headers.%s' must be a one-line string", where, k);
		t->headers[t->n_headers].name = strdup(k);
		t->headers[t->n_headers].value = strdup(json_string_value(v));
		t->n_headers++;
		if (secret_header_name(k, secret))
			sr__secret_hold_in(&t->secrets, json_string_value(v));
	}
	t->timeout_ms = DEFAULT_CALLBACK_TIMEOUT_MS;
	if (timeout) {
		if (!json_is_integer(timeout) || json_integer_value(timeout) <= 0 ||
		    json_integer_value(timeout) > MAX_CALLBACK_TIMEOUT_MS)
			FAIL("%s: 'callback.timeout_ms' must be a whole number from 1 to %lld",
			     where, MAX_CALLBACK_TIMEOUT_MS);
		t->timeout_ms = (uint64_t)json_integer_value(timeout);
	}
	return SR_OK;
}

static int parse_tool(json_t *spec, size_t index, const char *origin,
		      sr__tool *t, char *err, size_t errlen)
{
	char where[300];
	const char *name = json_string_value(json_object_get(spec, "name"));
	const char *kind = json_string_value(json_object_get(spec, "kind"));
	json_t *desc = json_object_get(spec, "description");
	json_t *schema = json_object_get(spec, "input_schema");
	json_t *perm = json_object_get(spec, "permission");
	json_t *ro = json_object_get(spec, "read_only");
	json_t *cb = json_object_get(spec, "callback");

	t->permission = SR_PERM_UNSET;
	if (!json_is_object(spec))
		FAIL("%s: tool %zu: must be an object", origin, index);
	if (!name || !valid_tool_name(name))
		FAIL("%s: tool %zu: 'name' must be 1 to 64 of [A-Za-z0-9_-]", origin, index);
	snprintf(where, sizeof(where), "%s: tool '%s'", origin, name);
	if (strcmp(name, SR_TOOLS_SERVER_NAME) == 0)
		FAIL("%s: the name '%s' is reserved", where, SR_TOOLS_SERVER_NAME);
	t->name = strdup(name);
	if (desc && !json_is_string(desc))
		FAIL("%s: 'description' must be a string", where);
	t->description = strdup(desc ? json_string_value(desc) : "");
	if (schema && (!json_is_object(schema) ||
		       (json_object_get(schema, "required") &&
			!json_is_array(json_object_get(schema, "required")))))
		FAIL("%s: 'input_schema' must be a JSON Schema object ('required' an array)",
		     where);
	t->input_schema = schema ? json_deep_copy(schema) :
		json_pack("{s:s, s:{}, s:b}", "type", "object", "properties",
			  "additionalProperties", 1);
	if (!kind || strcmp(kind, "callback") == 0) {
		t->kind = SR_TOOL_CALLBACK;
		if (parse_callback(cb, t, where, err, errlen) != SR_OK)
			return SR_EINVAL;
	} else if (strcmp(kind, "client") == 0) {
		t->kind = SR_TOOL_CLIENT;
		if (cb)
			FAIL("%s: a 'client' tool has no 'callback'", where);
	} else {
		FAIL("%s: 'kind' must be 'callback' or 'client', not '%s'", where, kind);
	}
	if (perm) {
		t->permission = sr__perm_parse(json_string_value(perm));
		if (t->permission == SR_PERM_UNSET || t->permission == SR_PERM_ALLOW_READS)
			FAIL("%s: 'permission' must be 'allow', 'ask' or 'deny'", where);
	}
	if (ro && !json_is_boolean(ro))
		FAIL("%s: 'read_only' must be true or false", where);
	t->read_only = json_is_true(ro);
	return SR_OK;
}

int sr__tools_parse(json_t *array, const char *origin, sr__toolset **out,
		    char *err, size_t errlen)
{
	sr__toolset *set;
	json_t *spec;
	size_t i;

	*out = NULL;
	if (!json_is_array(array))
		FAIL("%s: expected a JSON array of tool specs", origin);
	set = calloc(1, sizeof(*set));
	if (!set || !(set->tools = calloc(json_array_size(array) + 1, sizeof(*set->tools)))) {
		free(set);
		FAIL("%s: out of memory", origin);
	}
	json_array_foreach(array, i, spec) {
		sr__tool *t = &set->tools[set->n++];
		if (parse_tool(spec, i, origin, t, err, errlen) != SR_OK) {
			sr__tools_free(set);
			return SR_EINVAL;
		}
		for (size_t j = 0; j + 1 < set->n; j++)
			if (strcmp(set->tools[j].name, t->name) == 0) {
				snprintf(err, errlen, "%s: tool '%s' is defined twice (tools %zu and %zu)",
					 origin, t->name, j, i);
				sr__tools_free(set);
				return SR_EINVAL;
			}
	}
	*out = set;
	return SR_OK;
}

int sr__tools_load(const char *path, sr__toolset **out, char *err,
		   size_t errlen)
{
	json_error_t jerr;
	json_t *arr = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	int rc;

	*out = NULL;
	if (!arr)
		FAIL("%s:%d: %s", path, jerr.line, jerr.text);
	rc = sr__tools_parse(arr, path, out, err, errlen);
	json_decref(arr);
	return rc;
}

sr__tool *sr__tools_find(const sr__toolset *set, const char *name)
{
	for (size_t i = 0; set && name && i < set->n; i++)
		if (strcmp(set->tools[i].name, name) == 0)
			return &set->tools[i];
	return NULL;
}

json_t *sr__tools_specs(const sr__toolset *set)
{
	json_t *arr = json_array();

	for (size_t i = 0; set && i < set->n; i++)
		json_array_append_new(arr, json_pack("{s:s, s:s, s:O}", "name",
			set->tools[i].name, "description", set->tools[i].description,
			"inputSchema", set->tools[i].input_schema));
	return arr;
}

int sr__tools_check_args(const sr__tool *t, json_t *args, char *err,
			 size_t errlen)
{
	json_t *req = json_object_get(t->input_schema, "required"), *name;
	size_t i;

	if (!json_is_object(args))
		FAIL("tool '%s': arguments must be an object", t->name);
	json_array_foreach(req, i, name)
		if (json_is_string(name) &&
		    !json_object_get(args, json_string_value(name)))
			FAIL("tool '%s': missing required argument '%s'", t->name,
			     json_string_value(name));
	return SR_OK;
}

int sr__guard_add_rule(sr__guard *g, const char *spec)
{
	const char *eq = spec ? strrchr(spec, '=') : NULL;
	int perm = eq ? sr__perm_parse(eq + 1) : SR_PERM_UNSET;
	sr__rule *grown;

	if (!eq || eq == spec || perm == SR_PERM_UNSET || perm == SR_PERM_ALLOW_READS)
		return SR_EINVAL;
	grown = realloc(g->rules, (g->n_rules + 1) * sizeof(*grown));
	if (!grown)
		return SR_ENOMEM;
	g->rules = grown;
	grown[g->n_rules].pattern = strndup(spec, (size_t)(eq - spec));
	grown[g->n_rules].perm = perm;
	g->n_rules++;
	return SR_OK;
}

void sr__guard_clear(sr__guard *g)
{
	for (size_t i = 0; i < g->n_rules; i++)
		free(g->rules[i].pattern);
	free(g->rules);
	g->rules = NULL;
	g->n_rules = 0;
}

int sr__guard_decide(const sr__guard *g, const sr__tool *t)
{
	if (t->permission != SR_PERM_UNSET)
		return t->permission;
	for (size_t i = 0; i < g->n_rules; i++)
		if (fnmatch(g->rules[i].pattern, t->name, 0) == 0)
			return g->rules[i].perm;
	switch (g->default_mode) {
	case SR_PERM_ALLOW:
	case SR_PERM_ASK:
	case SR_PERM_DENY:
		return g->default_mode;
	default: /* allow_reads */
		return t->read_only ? SR_PERM_ALLOW : SR_PERM_ASK;
	}
}
