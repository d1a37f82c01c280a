/* Credential bindings (creds.h). */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/host/log.h"
#include "core/run/creds.h"
#include "core/tools/tools.h"

typedef struct binding {
	sr_credential cred;   /* cred.hosts points at hosts */
	const char *hosts[1];
	char host[256];
	char port[16];        /* an allow_hosts "host:port" entry's, or "" */
	char *name;           /* env name, or "<server>/<header>" */
	char *value;
	char *server, *header; /* header bindings */
} binding;

struct sr__creds {
	binding *b;
	size_t n;
	const sr_credential **ptrs;
	sr__secret_holds secrets; /* the values, until freed */
};

#define WHY(...)                                 \
	do {                                     \
		snprintf(why, n, __VA_ARGS__);   \
		return SR_EPERM;                 \
	} while (0)

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int excepted(const char *host, const char *port,
		    const char *const *exceptions)
{
	char with_port[300];

	snprintf(with_port, sizeof(with_port), "%s:%s", host, port ? port : "");
	for (const char *const *e = exceptions; e && *e; e++)
		if (strcasecmp(*e, host) == 0 || (port && strcasecmp(*e, with_port) == 0))
			return 1;
	return 0;
}

/* The port the value of a binding to dest may go to: the one of an
 * allow_hosts "host:port" entry that let dest through, "" for any (a
 * public https host, or a host the operator allowed on every port). */
static void bound_port(const char *dest, const char *host, const char *const *exceptions,
		       char *port, size_t n)
{
	const char *h = strstr(dest, "://"), *end;
	char p[16] = "";
	size_t len;

	port[0] = 0;
	h = h ? h + 3 : dest;
	len = strcspn(h, "/?#");
	end = *h == '[' ? memchr(h, ']', len) : NULL;
	end = end ? end + 1 : h + strcspn(h, ":/?#");
	if (*end == ':') {
		size_t pl = strcspn(end + 1, "/?#");
		if (pl < sizeof(p)) {
			memcpy(p, end + 1, pl);
			p[pl] = 0;
		}
	}
	if (!p[0] || excepted(host, NULL, exceptions) || !excepted(host, p, exceptions))
		return;
	snprintf(port, n, "%s", p);
}

int sr__creds_host_rule(const char *dest, const char *const *exceptions,
			char *host, size_t hn, char *why, size_t n)
{
	const char *h, *scheme_end, *end;
	char port[16] = "", *p;
	unsigned char addr[16];
	size_t len, labels = 1;
	int https;

	if (!dest || !*dest)
		WHY("no destination host");
	scheme_end = strstr(dest, "://");
	https = !scheme_end || (scheme_end - dest == 5 && strncasecmp(dest, "https", 5) == 0);
	h = scheme_end ? scheme_end + 3 : dest;
	len = strcspn(h, "/?#");
	if (memchr(h, '@', len))
		WHY("'%s' carries credentials in the URL", dest);
	if (*h == '[') {
		end = memchr(h, ']', len);
		if (!end)
			WHY("'%s' has no valid host", dest);
		end++;
	} else {
		end = h + strcspn(h, ":/?#");
	}
	if (end == h || (size_t)(end - h) >= hn)
		WHY("'%s' has no valid host", dest);
	memcpy(host, h, (size_t)(end - h));
	host[end - h] = 0;
	if (*end == ':') {
		size_t pl = strcspn(end + 1, "/?#");
		if (pl == 0 || pl >= sizeof(port) || strspn(end + 1, "0123456789") != pl)
			WHY("'%s' has an invalid port", dest);
		memcpy(port, end + 1, pl);
		port[pl] = 0;
	}
	if (strchr(host, '*'))
		WHY("'%s' is a wildcard: a secret is bound to one exact host", host);
	if (excepted(host, port[0] ? port : NULL, exceptions)) {
		for (p = host; *p; p++)
			*p = (char)tolower((unsigned char)*p);
		return SR_OK;
	}
	for (p = host; *p; p++)
		if (isupper((unsigned char)*p))
			WHY("'%s' is not lower case", host);
	if (!https)
		WHY("'%s' is not https (an operator may list the host in [secrets] allow_hosts)",
		    dest);
	if (port[0] && strcmp(port, "443") != 0)
		WHY("'%s' has port %s: only 443 (an operator may list the host in [secrets] "
		    "allow_hosts)", dest, port);
	if (host[0] == '[' || inet_pton(AF_INET, host, addr) == 1 ||
	    inet_pton(AF_INET6, host, addr) == 1)
		WHY("'%s' is an IP address: a secret is bound to a host name", host);
	if (strcmp(host, "localhost") == 0 || ends_with(host, ".localhost") ||
	    ends_with(host, ".local") || ends_with(host, ".internal"))
		WHY("'%s' is a local name", host);
	if (strspn(host, "abcdefghijklmnopqrstuvwxyz0123456789-.") != strlen(host))
		WHY("'%s' is not a valid host name", host);
	for (p = host; *p; p++)
		if (*p == '.') {
			if (p == host || p[1] == '.' || p[1] == 0)
				WHY("'%s' has an empty label", host);
			labels++;
		}
	if (labels < 2)
		WHY("'%s' has a single label: a public host name has at least two", host);
	return SR_OK;
}

#undef WHY

/* The harness's declaration of env name (kind and host), or NULL. */
static json_t *declared(json_t *desc, const char *env)
{
	json_t *v;
	size_t i;

	json_array_foreach(json_object_get(desc, "credentials"), i, v) {
		const char *e = json_string_value(json_object_get(v, "env"));
		if (e && strcmp(e, env) == 0)
			return v;
	}
	return NULL;
}

static binding *grow(sr__creds *c)
{
	binding *b = realloc(c->b, (c->n + 1) * sizeof(*b));

	if (!b)
		return NULL;
	c->b = b;
	memset(&b[c->n], 0, sizeof(*b));
	return &b[c->n++];
}

static int cmp_binding(const void *a, const void *b)
{
	return strcmp(((const binding *)a)->name, ((const binding *)b)->name);
}

const char *sr__creds_env(json_t *creds, const char *name)
{
	if (creds)
		return json_string_value(json_object_get(creds, name));
	return getenv(name);
}

int sr__creds_collect(json_t *desc, json_t *creds, const char *model_url,
		      json_t *user_mcp, const char *const *exceptions,
		      sr__creds **out, char *why, size_t n)
{
	sr__creds *c = calloc(1, sizeof(*c));
	char reason[400];
	json_t *v, *s;
	size_t i, j;
	int rc = SR_OK;

	*out = NULL;
	if (!c)
		return SR_ENOMEM;
	json_array_foreach(json_object_get(desc, "credential_env"), i, v) {
		const char *env = json_string_value(v), *value, *dest;
		json_t *d;
		binding *b;
		if (!env || !(value = sr__creds_env(creds, env)) || !*value)
			continue;
		d = declared(desc, env);
		dest = model_url ? model_url : json_string_value(json_object_get(d, "host"));
		if (!dest) {
			snprintf(why, n, "credential %s has no destination host: the harness declares "
				 "none (give the model's URL)", env);
			rc = SR_EPERM;
			break;
		}
		if (!(b = grow(c))) {
			rc = SR_ENOMEM;
			break;
		}
		if (sr__creds_host_rule(dest, exceptions, b->host, sizeof(b->host), reason,
					sizeof(reason)) != SR_OK) {
			snprintf(why, n, "credential %s: %s", env, reason);
			rc = SR_EPERM;
			break;
		}
		bound_port(dest, b->host, exceptions, b->port, sizeof(b->port));
		b->name = strdup(env);
		b->value = strdup(value);
		b->cred.target = SR_CRED_ENV;
		b->cred.usage = strcmp(json_string_value(json_object_get(d, "kind")) ?
				       json_string_value(json_object_get(d, "kind")) : "",
				       "bearer") == 0 ? "bearer" : "api_key";
		if (!b->name || !b->value) {
			rc = SR_ENOMEM;
			break;
		}
	}
	json_array_foreach(rc == SR_OK ? user_mcp : NULL, i, s) {
		const char *server = json_string_value(json_object_get(s, "name"));
		const char *url = json_string_value(json_object_get(s, "url"));
		json_array_foreach(json_object_get(s, "headers"), j, v) {
			const char *h = json_string_value(json_object_get(v, "name"));
			const char *value = json_string_value(json_object_get(v, "value"));
			size_t len;
			binding *b;
			if (!h || !value || !*value || !sr__tools_secret_header(h))
				continue;
			if (!(b = grow(c))) {
				rc = SR_ENOMEM;
				break;
			}
			if (sr__creds_host_rule(url, exceptions, b->host, sizeof(b->host), reason,
						sizeof(reason)) != SR_OK) {
				snprintf(why, n, "MCP server '%s' header '%s': %s", server ? server : "",
					 h, reason);
				rc = SR_EPERM;
				break;
			}
			bound_port(url, b->host, exceptions, b->port, sizeof(b->port));
			len = strlen(server ? server : "") + strlen(h) + 2;
			b->name = malloc(len);
			if (b->name)
				snprintf(b->name, len, "%s/%s", server ? server : "", h);
			b->value = strdup(value);
			b->server = strdup(server ? server : "");
			b->header = strdup(h);
			b->cred.target = SR_CRED_HEADER;
			b->cred.usage = strncasecmp(value, "Bearer ", 7) == 0 ? "bearer" : "api_key";
			if (!b->name || !b->value || !b->server || !b->header) {
				rc = SR_ENOMEM;
				break;
			}
		}
		if (rc != SR_OK)
			break;
	}
	if (rc == SR_OK && c->n)
		qsort(c->b, c->n, sizeof(*c->b), cmp_binding);
	// NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers
	if (rc == SR_OK && !(c->ptrs = calloc(c->n + 1, sizeof(*c->ptrs))))
		rc = SR_ENOMEM;
	if (rc != SR_OK) {
		if (rc == SR_ENOMEM)
			snprintf(why, n, "out of memory");
		sr__creds_free(c);
		return rc;
	}
	for (i = 0; i < c->n; i++) {
		binding *b = &c->b[i];
		sr__secret_hold_in(&c->secrets, b->value);
		b->hosts[0] = b->host;
		b->cred.size = sizeof(b->cred);
		b->cred.name = b->name;
		b->cred.value = b->value;
		b->cred.hosts = b->hosts;
		b->cred.n_hosts = 1;
		b->cred.port = b->port[0] ? b->port : NULL;
		b->cred.isolation_required = 1;
		c->ptrs[i] = &b->cred;
	}
	*out = c;
	return SR_OK;
}

const sr_credential *sr__creds_port_bound(const sr__creds *c)
{
	for (size_t i = 0; c && i < c->n; i++)
		if (c->b[i].port[0])
			return &c->b[i].cred;
	return NULL;
}

size_t sr__creds_count(const sr__creds *c)
{
	return c ? c->n : 0;
}

const sr_credential *const *sr__creds_spec(const sr__creds *c)
{
	return c ? c->ptrs : NULL;
}

void sr__creds_fingerprint(const sr__creds *c, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	EVP_MD_CTX *x = EVP_MD_CTX_new();

	out[0] = 0;
	if (!x)
		return;
	EVP_DigestInit_ex(x, EVP_sha256(), NULL);
	for (size_t i = 0; c && i < c->n; i++) {
		const binding *b = &c->b[i];
		EVP_DigestUpdate(x, b->name, strlen(b->name) + 1);
		EVP_DigestUpdate(x, b->host, strlen(b->host) + 1);
		EVP_DigestUpdate(x, b->port, strlen(b->port) + 1);
		EVP_DigestUpdate(x, b->value, strlen(b->value) + 1);
	}
	if (EVP_DigestFinal_ex(x, md, &len) == 1 && len == 32)
		for (unsigned int i = 0; i < len; i++)
			snprintf(out + (size_t)i * 2, 3, "%02x", md[i]);
	EVP_MD_CTX_free(x);
}

int sr__creds_apply_placeholders(const sr__creds *c, json_t *placeholders,
				 json_t *user_mcp, char *why, size_t n)
{
	for (size_t i = 0; c && i < c->n; i++) {
		const binding *b = &c->b[i];
		const char *ph;
		json_t *s, *v;
		size_t k, j;
		if (b->cred.target != SR_CRED_HEADER)
			continue;
		ph = json_string_value(json_object_get(placeholders, b->name));
		if (!ph || !*ph) {
			snprintf(why, n, "the provider gave no placeholder for MCP server '%s' "
				 "header '%s': its value is not sent in plain text", b->server,
				 b->header);
			return SR_ENOTFOUND;
		}
		json_array_foreach(user_mcp, k, s) {
			const char *name = json_string_value(json_object_get(s, "name"));
			if (!name || strcmp(name, b->server) != 0)
				continue;
			json_array_foreach(json_object_get(s, "headers"), j, v) {
				const char *h = json_string_value(json_object_get(v, "name"));
				if (h && strcmp(h, b->header) == 0)
					json_object_set_new(v, "value", json_string(ph));
			}
		}
	}
	return SR_OK;
}

void sr__creds_header_names(json_t *user_mcp, json_t *names)
{
	json_t *s, *v;
	size_t i, j;
	char text[400];

	json_array_foreach(user_mcp, i, s) {
		const char *server = json_string_value(json_object_get(s, "name"));
		json_array_foreach(json_object_get(s, "headers"), j, v) {
			const char *h = json_string_value(json_object_get(v, "name"));
			const char *value = json_string_value(json_object_get(v, "value"));
			if (!h || !value || !*value || !sr__tools_secret_header(h))
				continue;
			snprintf(text, sizeof(text), "MCP server '%s' header '%s'",
				 server ? server : "", h);
			json_array_append_new(names, json_string(text));
		}
	}
}

void sr__creds_free(sr__creds *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++) {
		binding *b = &c->b[i];
		free(b->name);
		if (b->value) {
			/* Not left behind in freed memory. */
			volatile char *p = b->value;
			while (*p)
				*p++ = 0;
		}
		free(b->value);
		free(b->server);
		free(b->header);
	}
	sr__secret_holds_release(&c->secrets);
	free(c->b);
	free(c->ptrs);
	free(c);
}
