/* The pure parts of credential bindings on Daytona (no host call in this
 * file, so tests/unit/daytona_test.c links it directly): the checks of a
 * binding and of the secret record Daytona returns, secret names, and the
 * lease record.
 *
 * A lease is one JSON object in the plugin's kv area under "lease.<id>",
 * written before the first secret of a sandbox is created:
 *
 *   {"v": 1, "id": "<16 hex>", "prefix": "sandrun", "runner": "...",
 *    "state": "creating" | "active" | "releasing" | "cleanup_pending",
 *    "created": unix s, "updated": unix s, "sandbox": id | null,
 *    "owner": {"pid", "host", "instance"} | null,
 *    "attempts": N, "error": "..." (cleanup_pending),
 *    "secrets": [{"name": "<prefix>_<id>_<n>", "binding", "target":
 *                 "env" | "header", "env", "host", "state": "planned" |
 *                 "created" | "absent" | "deleted", "id", "placeholder"}]}
 *
 * "creating": no sandbox yet; "active": the sandbox's id is known (it
 * lives, stopped and archived included); "releasing": its deletion was
 * confirmed and the secrets are being deleted; "cleanup_pending": a
 * deletion failed and is retried. A secret is "planned" until Daytona
 * answered its creation (a crash in between leaves its name, which
 * sandrun resolves by listing), "absent" when it was never created. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daytona.h"

static int is_alpha(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_digit(int c)
{
	return c >= '0' && c <= '9';
}

/* An id Daytona gave (a sandbox's, a secret's) or a lease's: safe in a URL
 * path and a kv key. */
int dy__valid_id(const char *id)
{
	size_t n = id ? strlen(id) : 0;

	if (n == 0 || n > 128)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
		      (id[i] >= '0' && id[i] <= '9') || id[i] == '-' || id[i] == '_' ||
		      id[i] == '.'))
			return 0;
	return strcmp(id, ".") != 0 && strcmp(id, "..") != 0;
}

/* ^[a-zA-Z_][a-zA-Z0-9_-]*$ (Daytona's rule for secret names), at most
 * 64 characters so that a whole secret name stays short. */
int dy__prefix_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 64 || !(is_alpha(s[0]) || s[0] == '_'))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!(is_alpha(s[i]) || is_digit(s[i]) || s[i] == '_' || s[i] == '-'))
			return 0;
	return 1;
}

/* "<prefix>_<lease id>_<i + 1>" into buf; 0, or -1 when it does not fit. */
int dy__secret_name(char *buf, size_t n, const char *prefix, const char *lease_id,
		    size_t i)
{
	int w = snprintf(buf, n, "%s_%s_%zu", prefix, lease_id, i + 1);

	return w > 0 && (size_t)w < n ? 0 : -1;
}

/* An environment variable name: [A-Za-z_][A-Za-z0-9_]*. */
int dy__env_name_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 256 || !(is_alpha(s[0]) || s[0] == '_'))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!(is_alpha(s[i]) || is_digit(s[i]) || s[i] == '_'))
			return 0;
	return 1;
}

/* "<mcp server>/<header>": a server name and an HTTP header token. */
static int header_binding_valid(const char *s)
{
	const char *slash = s ? strrchr(s, '/') : NULL;

	if (!slash || slash == s || !slash[1] || strlen(s) > 512)
		return 0;
	for (const char *p = slash + 1; *p; p++)
		if (!(is_alpha(*p) || is_digit(*p) || strchr("!#$%&'*+-.^_`|~", *p)))
			return 0;
	return 1;
}

/* Why host is not one exact host name (lower case, no port, no wildcard),
 * or NULL when it is. */
static const char *host_problem(const char *h)
{
	size_t n = strlen(h), label = 0;

	if (n == 0)
		return "is empty";
	if (strchr(h, '*'))
		return "is a wildcard; a Daytona secret of sandrun is bound to one exact host";
	if (strchr(h, ':'))
		return "has a port or is an IPv6 literal; give the host name alone";
	if (n > 253)
		return "is longer than 253 characters";
	for (size_t i = 0; i < n; i++) {
		char c = h[i];
		if (c >= 'A' && c <= 'Z')
			return "is not lower case";
		if (c == '.') {
			if (label == 0 || h[i - 1] == '-')
				return "has an empty label or one ending with '-'";
			label = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || is_digit(c) || c == '-'))
			return "holds a character other than a-z, 0-9, '-' and '.'";
		if (c == '-' && label == 0)
			return "has a label starting with '-'";
		if (++label > 63)
			return "has a label longer than 63 characters";
	}
	if (label == 0 || h[n - 1] == '-')
		return "has an empty label or one ending with '-'";
	return NULL;
}

/* Whether binding c (the i-th) can become one Daytona secret: a known
 * target with a valid name, a value, and exactly one exact host. why names
 * the binding and what is wrong. */
int dy__cred_check(const sr_credential *c, size_t i, char *why, size_t n)
{
	const char *name, *problem;

	if (!c || c->size < SR_TABLE_HAS(sr_credential, n_hosts)) {
		snprintf(why, n, "daytona: credential binding %zu: missing or too small", i);
		return SR_EINVAL;
	}
	name = c->name ? c->name : "";
	if (c->target == SR_CRED_ENV ? !dy__env_name_valid(name) :
	    c->target == SR_CRED_HEADER ? !header_binding_valid(name) : 1) {
		snprintf(why, n, "daytona: credential binding %zu '%.200s': %s", i, name,
			 c->target == SR_CRED_ENV ? "not an environment variable name" :
			 c->target == SR_CRED_HEADER ? "not '<mcp server>/<header name>'" :
			 "unknown target");
		return SR_EINVAL;
	}
	if (!c->value || !*c->value) {
		snprintf(why, n, "daytona: credential binding '%s': no value", name);
		return SR_EINVAL;
	}
	if (c->n_hosts != 1 || !c->hosts || !c->hosts[0]) {
		snprintf(why, n, "daytona: credential binding '%s': %zu hosts given; a Daytona "
			 "secret is bound to exactly one host (never to none: that would let "
			 "the sandbox send it anywhere)", name, c->hosts ? c->n_hosts : 0);
		return SR_EINVAL;
	}
	if ((problem = host_problem(c->hosts[0]))) {
		snprintf(why, n, "daytona: credential binding '%s': host '%.200s' %s", name,
			 c->hosts[0], problem);
		return SR_EINVAL;
	}
	return SR_OK;
}

/* Whether rec, Daytona's answer to creating secret name for host, is what
 * was asked: its id, the name, exactly that one host, and a placeholder
 * with the expected prefix. why says what differs. */
int dy__secret_check(json_t *rec, const char *name, const char *host,
		     const char *ph_prefix, char *why, size_t n)
{
	json_t *hosts = json_object_get(rec, "hosts");
	const char *id = json_string_value(json_object_get(rec, "id"));
	const char *got = json_string_value(json_object_get(rec, "name"));
	const char *ph = json_string_value(json_object_get(rec, "placeholder"));
	const char *h0 = json_string_value(json_array_get(hosts, 0));

	if (!json_is_object(rec) || !dy__valid_id(id)) {
		snprintf(why, n, "the answer has no valid secret id");
		return SR_EPROTO;
	}
	if (!got || strcmp(got, name) != 0) {
		snprintf(why, n, "the answer names secret '%.100s', not '%s'", got ? got : "",
			 name);
		return SR_EPROTO;
	}
	if (!json_is_array(hosts) || json_array_size(hosts) != 1 || !h0 ||
	    strcmp(h0, host) != 0) {
		char *s = json_dumps(hosts ? hosts : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
		snprintf(why, n, "its hosts are %.200s, not exactly [\"%s\"]", s ? s : "?", host);
		free(s);
		return SR_EPROTO;
	}
	if (!ph || strncmp(ph, ph_prefix, strlen(ph_prefix)) != 0 ||
	    strlen(ph) <= strlen(ph_prefix)) {
		snprintf(why, n, "its placeholder does not start with '%s'", ph_prefix);
		return SR_EPROTO;
	}
	return SR_OK;
}

/* ------------------------------------------------------------ leases */

/* A new lease in state "creating", without secrets. New reference. */
json_t *dy__lease_new(const char *id, const char *prefix, const char *runner,
		      json_t *owner, long long now)
{
	return json_pack("{s:i, s:s, s:s, s:s?, s:s, s:I, s:I, s:n, s:O?, s:i, s:[]}", "v", 1,
			 "id", id, "prefix", prefix, "runner", runner, "state", "creating",
			 "created", (json_int_t)now, "updated", (json_int_t)now, "sandbox",
			 "owner", owner, "attempts", 0, "secrets");
}

/* Plan a secret in lease (state "planned"). */
int dy__lease_plan(json_t *lease, const char *name, const char *binding, int header,
		   const char *env, const char *host)
{
	json_t *s = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:n, s:n}", "name", name,
			      "binding", binding, "target", header ? "header" : "env", "env", env,
			      "host", host, "state", "planned", "id", "placeholder");

	if (!s || json_array_append_new(json_object_get(lease, "secrets"), s) != 0)
		return SR_ENOMEM;
	return SR_OK;
}

/* The secret entry of lease named name, borrowed; NULL when none. */
json_t *dy__lease_secret(json_t *lease, const char *name)
{
	json_t *s;
	size_t i;

	json_array_foreach(json_object_get(lease, "secrets"), i, s) {
		const char *n = json_string_value(json_object_get(s, "name"));
		if (n && strcmp(n, name) == 0)
			return s;
	}
	return NULL;
}

const char *dy__lease_str(json_t *j, const char *key)
{
	return json_string_value(json_object_get(j, key));
}

/* {binding: placeholder} of the secrets created. New reference. */
json_t *dy__lease_placeholders(json_t *lease)
{
	json_t *out = json_object(), *s;
	size_t i;

	json_array_foreach(json_object_get(lease, "secrets"), i, s) {
		const char *b = dy__lease_str(s, "binding");
		const char *ph = dy__lease_str(s, "placeholder");
		const char *st = dy__lease_str(s, "state");
		if (out && b && ph && st && strcmp(st, "created") == 0)
			json_object_set_new(out, b, json_string(ph));
	}
	return out;
}

/* Whether lease text is a lease this plugin wrote: the shape above, and
 * every secret named "<prefix>_<id>_<n>" (so a damaged record can never
 * make sandrun touch a secret it did not create). New reference in *out;
 * why says what is wrong. */
int dy__lease_parse(const char *text, size_t len, json_t **out, char *why, size_t n)
{
	json_t *l = json_loadb(text, len, 0, NULL), *s;
	const char *id = dy__lease_str(l, "id"), *prefix = dy__lease_str(l, "prefix");
	const char *state = dy__lease_str(l, "state");
	char stem[256];
	size_t i;

	*out = NULL;
	if (!json_is_object(l) || json_integer_value(json_object_get(l, "v")) != 1 ||
	    !dy__valid_id(id) || !dy__prefix_valid(prefix) || !state ||
	    !json_is_array(json_object_get(l, "secrets")) ||
	    !json_is_integer(json_object_get(l, "created"))) {
		snprintf(why, n, "not a lease record of this plugin (version 1)");
		json_decref(l);
		return SR_EPROTO;
	}
	snprintf(stem, sizeof(stem), "%s_%s_", prefix, id);
	json_array_foreach(json_object_get(l, "secrets"), i, s) {
		const char *name = dy__lease_str(s, "name");
		const char *sid = dy__lease_str(s, "id");
		if (!name || strncmp(name, stem, strlen(stem)) != 0 || !dy__lease_str(s, "state") ||
		    (sid && !dy__valid_id(sid))) {
			snprintf(why, n, "its secret %zu is not named '%s<n>' or has a bad id", i,
				 stem);
			json_decref(l);
			return SR_EPROTO;
		}
	}
	*out = l;
	return SR_OK;
}
