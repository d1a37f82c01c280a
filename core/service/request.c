/* POST /v1/runs bodies (request.h). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "core/host/log.h"
#include "core/run/session.h"
#include "core/service/request.h"
#include "core/tools/relay.h"
#include "sandrun/plugin.h"

#define CREDENTIAL_MAX 16384
/* A credential's value is redacted from every output while it is held:
 * one too short, or a plain word, would garble the events of every run
 * ("local", "ses-" as values), so it is refused, not held. */
#define CREDENTIAL_MIN 8
#define CREDENTIALS_MAX_N 32

#define BAD(...)                                   \
	do {                                       \
		snprintf(msg, n, __VA_ARGS__);     \
		return SR_EINVAL;                  \
	} while (0)

/* Every key of o is one of allowed (NULL-terminated). */
static int only_keys(json_t *o, const char *const *allowed, const char *where,
		     char *msg, size_t n)
{
	const char *k;
	json_t *v;

	json_object_foreach(o, k, v) {
		const char *const *a = allowed;
		while (*a && strcmp(*a, k) != 0)
			a++;
		if (!*a)
			BAD("unknown field '%s%s%.100s'", where, *where ? "." : "", k);
	}
	return SR_OK;
}

/* o's member key: absent or null gives NULL; else it must have type. */
static int member(json_t *o, const char *key, json_type type, const char *what,
		  json_t **out, char *msg, size_t n)
{
	json_t *v = json_object_get(o, key);

	*out = NULL;
	if (!v || json_is_null(v))
		return SR_OK;
	if (json_typeof(v) != type)
		BAD("'%s' must be %s", what, type == JSON_STRING ? "a string" :
		    type == JSON_ARRAY ? "an array" : "an object");
	*out = v;
	return SR_OK;
}

static int is_name(const char *s, size_t max)
{
	size_t len = strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_-");

	return len > 0 && len <= max && s[len] == 0;
}

static int env_name(const char *s)
{
	size_t len = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");

	return len > 0 && len <= 128 && s[len] == 0 && !(s[0] >= '0' && s[0] <= '9');
}

static int parse_model(sr__svc_request *q, json_t *model, char *msg, size_t n)
{
	static const char *const keys[] = { "url", "credentials", NULL };
	json_t *url, *creds, *v;
	const char *k;

	if (only_keys(model, keys, "model", msg, n) != SR_OK ||
	    member(model, "url", JSON_STRING, "model.url", &url, msg, n) != SR_OK ||
	    member(model, "credentials", JSON_OBJECT, "model.credentials", &creds, msg, n) != SR_OK)
		return SR_EINVAL;
	if (url) {
		q->model_url = json_string_value(url);
		if (strncmp(q->model_url, "https://", 8) != 0 &&
		    strncmp(q->model_url, "http://", 7) != 0)
			BAD("'model.url' must be an http:// or https:// URL");
	}
	if (json_object_size(creds) > CREDENTIALS_MAX_N)
		BAD("'model.credentials' has more than %d entries", CREDENTIALS_MAX_N);
	json_object_foreach(creds, k, v) {
		const char *val;
		if (!env_name(k))
			BAD("'model.credentials': '%.100s' is not an environment variable name", k);
		if (!json_is_string(v) || !*json_string_value(v) ||
		    json_string_length(v) > CREDENTIAL_MAX ||
		    strlen(json_string_value(v)) != json_string_length(v))
			BAD("'model.credentials.%s' must be a non-empty string (at most %d bytes, "
			    "no NUL)", k, CREDENTIAL_MAX);
		val = json_string_value(v);
		if (strlen(val) < CREDENTIAL_MIN || strspn(val, "abcdefghijklmnopqrstuvwxyz") ==
		    strlen(val))
			BAD("'model.credentials.%s' is too short or too common to be a secret (at "
			    "least %d characters, not a plain word): its value would be hidden "
			    "from every output while it is held", k, CREDENTIAL_MIN);
	}
	/* Held before anything could show them, until the request is cleared. */
	json_object_foreach(creds, k, v)
		sr__secret_hold_in(&q->secrets, json_string_value(v));
	q->credentials = creds;
	return SR_OK;
}

static int parse_network(sr__svc_request *q, json_t *net, char *msg, size_t n)
{
	static const char *const keys[] = { "mode", "enforcement", NULL };
	json_t *mode, *enf;

	if (only_keys(net, keys, "network", msg, n) != SR_OK ||
	    member(net, "mode", JSON_STRING, "network.mode", &mode, msg, n) != SR_OK ||
	    member(net, "enforcement", JSON_STRING, "network.enforcement", &enf, msg, n) != SR_OK)
		return SR_EINVAL;
	if (mode && strcmp(json_string_value(mode), "off") == 0)
		q->network = SR_NET_OFF;
	else if (mode && strcmp(json_string_value(mode), "open") != 0)
		BAD("'network.mode' must be \"open\" or \"off\"");
	if (enf && strcmp(json_string_value(enf), "best_effort") == 0)
		q->enforcement_strict = 0;
	else if (enf && strcmp(json_string_value(enf), "strict") != 0)
		BAD("'network.enforcement' must be \"strict\" or \"best_effort\"");
	return SR_OK;
}

/* An array of at most 8 strings without NUL (each checked by the run's
 * plan) into out. */
static int strings(json_t *a, const char *what, const char **out, size_t *count, char *msg,
		   size_t n)
{
	json_t *v;
	size_t i;

	if (json_array_size(a) > 8)
		BAD("'%s' has more than 8 entries", what);
	json_array_foreach(a, i, v) {
		if (!json_is_string(v) || !json_string_length(v) ||
		    strlen(json_string_value(v)) != json_string_length(v))
			BAD("'%s[%zu]' must be a non-empty string", what, i);
		out[i] = json_string_value(v);
	}
	*count = json_array_size(a);
	return SR_OK;
}

static int parse_fields(sr__svc_request *q, char *msg, size_t n)
{
	static const char *const keys[] = { "harness", "prompt", "session", "tools", "mcp_servers",
					    "model", "network", "permission_mode", "endpoints",
					    "mounts", NULL };
	json_t *o = q->root, *harness, *prompt, *session, *model, *net, *perm, *v, *eps, *mounts;
	size_t i;

	if (only_keys(o, keys, "", msg, n) != SR_OK ||
	    member(o, "harness", JSON_STRING, "harness", &harness, msg, n) != SR_OK ||
	    member(o, "prompt", JSON_STRING, "prompt", &prompt, msg, n) != SR_OK ||
	    member(o, "session", JSON_STRING, "session", &session, msg, n) != SR_OK ||
	    member(o, "tools", JSON_ARRAY, "tools", &q->tools, msg, n) != SR_OK ||
	    member(o, "mcp_servers", JSON_ARRAY, "mcp_servers", &q->mcp_servers, msg, n) != SR_OK ||
	    member(o, "model", JSON_OBJECT, "model", &model, msg, n) != SR_OK ||
	    member(o, "network", JSON_OBJECT, "network", &net, msg, n) != SR_OK ||
	    member(o, "permission_mode", JSON_STRING, "permission_mode", &perm, msg, n) != SR_OK ||
	    member(o, "endpoints", JSON_ARRAY, "endpoints", &eps, msg, n) != SR_OK ||
	    member(o, "mounts", JSON_ARRAY, "mounts", &mounts, msg, n) != SR_OK ||
	    strings(eps, "endpoints", q->endpoints, &q->n_endpoints, msg, n) != SR_OK ||
	    strings(mounts, "mounts", q->mounts, &q->n_mounts, msg, n) != SR_OK)
		return SR_EINVAL;
	if (!prompt)
		BAD("'prompt' is required (a string)");
	q->prompt = json_string_value(prompt);
	if (strlen(q->prompt) != json_string_length(prompt))
		BAD("'prompt' contains a NUL character");
	if (harness && !is_name(json_string_value(harness), 32))
		BAD("'harness' must be a plugin name (1 to 32 of a-z, 0-9, '_', '-')");
	q->harness = harness ? json_string_value(harness) : NULL;
	if (session && !sr__session_valid_id(json_string_value(session)))
		BAD("'session' must be a session id (\"ses-\" and 16 hex digits)");
	q->session = session ? json_string_value(session) : NULL;
	json_array_foreach(q->tools, i, v)
		if (!json_is_object(v))
			BAD("'tools[%zu]' must be an object (a tool spec, as in a tools file)", i);
	json_array_foreach(q->mcp_servers, i, v)
		if (!json_is_object(v))
			BAD("'mcp_servers[%zu]' must be an object (an ACP mcpServers entry)", i);
	if (model && parse_model(q, model, msg, n) != SR_OK)
		return SR_EINVAL;
	if (net && parse_network(q, net, msg, n) != SR_OK)
		return SR_EINVAL;
	if (perm) {
		const char *p = json_string_value(perm);
		if (strcmp(p, "approve_all") == 0)
			q->ask_policy = SR_ASK_APPROVE;
		else if (strcmp(p, "deny_all") == 0)
			q->ask_policy = SR_ASK_DENY;
		else if (strcmp(p, "ask") == 0)
			q->ask_explicit = 1;
		else
			BAD("'permission_mode' must be \"ask\", \"approve_all\" or \"deny_all\"");
	}
	return SR_OK;
}

int sr__svc_request_parse(const char *body, size_t len, sr__svc_request *out,
			  const char **code, char *msg, size_t n)
{
	json_error_t err;

	memset(out, 0, sizeof(*out));
	/* What this request brings is hidden from its run's output (and the
	 * log), not from other runs'. */
	out->secrets.scope = sr__secret_scope_new();
	out->network = SR_NET_OPEN;
	out->enforcement_strict = 1;
	out->ask_policy = SR_ASK_WAIT;
	*code = "invalid_json";
	out->root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &err);
	if (!out->root) {
		snprintf(msg, n, "the body is not JSON: %s (line %d, column %d)", err.text, err.line,
			 err.column);
		return SR_EINVAL;
	}
	*code = "invalid_request";
	if (!json_is_object(out->root)) {
		snprintf(msg, n, "the body must be a JSON object");
		sr__svc_request_clear(out);
		return SR_EINVAL;
	}
	if (parse_fields(out, msg, n) != SR_OK) {
		sr__svc_request_clear(out);
		return SR_EINVAL;
	}
	return SR_OK;
}

void sr__svc_request_clear(sr__svc_request *q)
{
	const char *k;
	json_t *v;

	/* The values stay in jansson's memory until freed: wiped first. */
	json_object_foreach(q->credentials, k, v) {
		volatile char *p = (volatile char *)(char *)json_string_value(v);
		size_t len = json_string_length(v);
		while (p && len--)
			*p++ = 0;
	}
	sr__secret_holds_release(&q->secrets);
	json_decref(q->root);
	memset(q, 0, sizeof(*q));
}
