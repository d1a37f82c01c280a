/* Plan gates (DESIGN section 5). Each has a fixed code and message. */
#include "config.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/run/creds.h"
#include "core/run/plan.h"
#include "core/tools/tools.h"
#include "sandrun/plugin.h"

#define REFUSE(c, ...)                                  \
	do {                                            \
		*code = (c);                            \
		snprintf(msg, n, __VA_ARGS__);          \
		return SR_EPERM;                        \
	} while (0)

static int has_string(json_t *arr, const char *s)
{
	size_t i;
	json_t *v;

	json_array_foreach(arr, i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
			return 1;
	return 0;
}

/* Private, loopback, link-local and other non-public ranges. */
int sr__addr_private_v4(uint32_t a)
{
	static const struct { uint32_t net, mask; } nets[] = {
		{ 0x00000000, 0xff000000 }, { 0x0a000000, 0xff000000 },
		{ 0x7f000000, 0xff000000 }, { 0xa9fe0000, 0xffff0000 },
		{ 0xac100000, 0xfff00000 }, { 0xc0000000, 0xfffffff8 },
		{ 0xc0000200, 0xffffff00 }, { 0xc0a80000, 0xffff0000 },
		{ 0xc6120000, 0xfffe0000 }, { 0xc6336400, 0xffffff00 },
		{ 0xcb007100, 0xffffff00 }, { 0xe0000000, 0xf0000000 },
		{ 0xf0000000, 0xf0000000 }, { 0x64400000, 0xffc00000 },
	};

	for (size_t i = 0; i < sizeof(nets) / sizeof(*nets); i++)
		if ((a & nets[i].mask) == nets[i].net)
			return 1;
	return 0;
}

int sr__addr_private_v6(const unsigned char *b)
{
	static const unsigned char zero[16];
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (memcmp(b, mapped, 12) == 0)
		return sr__addr_private_v4((uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 |
				  (uint32_t)b[14] << 8 | b[15]);
	if (memcmp(b, zero, 15) == 0 && (b[15] == 0 || b[15] == 1))
		return 1; /* :: and ::1 */
	return (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || /* fe80::/10 */
	       (b[0] & 0xfe) == 0xfc ||                    /* fc00::/7 */
	       b[0] == 0xff ||                             /* ff00::/8 */
	       (b[0] == 0x01 && b[1] == 0 && memcmp(b + 2, zero, 6) == 0) || /* 100::/64 */
	       (b[0] == 0x20 && b[1] == 0x01 && b[2] < 0x02);               /* 2001::/23 */
}

/* The host of url (brackets of an IPv6 literal and trailing dots
 * removed) into host; its length, or 0 with the reason in why. */
/* The host of url, from *h to *end (an IPv6 literal without its
 * brackets); 0, or -1 with the reason in why. */
static int url_authority(const char *url, const char **h, const char **end, char *why, size_t n)
{
	if (!url || strncasecmp(url, "https://", 8) != 0) {
		*h = url && strstr(url, "://") ? strstr(url, "://") + 3 : NULL;
	} else {
		*h = url + 8;
	}
	if (!*h) {
		snprintf(why, n, "'%s' is not a URL", url ? url : "");
		return -1;
	}
	if (strchr(*h, '@') && (!strchr(*h, '/') || strchr(*h, '@') < strchr(*h, '/'))) {
		snprintf(why, n, "'%s' carries credentials in the URL", url);
		return -1;
	}
	if (**h == '[') {
		*end = strchr(*h, ']');
		(*h)++;
	} else {
		*end = *h + strcspn(*h, ":/?#");
	}
	return 0;
}

size_t sr__url_host(const char *url, char *host, size_t hn, char *why, size_t n)
{
	const char *h, *end;
	size_t len;

	if (url_authority(url, &h, &end, why, n) != 0)
		return 0;
	len = end ? (size_t)(end - h) : 0;
	if (len == 0 || len >= hn) {
		snprintf(why, n, "'%s' has no host", url);
		return 0;
	}
	memcpy(host, h, len);
	host[len] = 0;
	while (len && host[len - 1] == '.')
		host[--len] = 0;
	return len;
}

long sr__url_port(const char *url)
{
	const char *h, *end;
	char why[8], *stop;
	long port;

	if (url_authority(url, &h, &end, why, sizeof(why)) != 0 || !end || end == h)
		return 0;
	if (*end == ']')
		end++;
	if (*end != ':' || !end[1] || strchr("/?#", end[1]))
		return strncasecmp(url, "https:", 6) == 0 ? 443 : 80;
	port = strtol(end + 1, &stop, 10);
	return port > 0 && port < 65536 && (!*stop || strchr("/?#", *stop)) ? port : 0;
}

static int allowed(const char *host, const char *const *allow)
{
	for (const char *const *a = allow; a && *a; a++)
		if (strcasecmp(*a, host) == 0)
			return 1;
	return 0;
}

int sr__plan_mcp_url_ok(const char *url, const char *const *allow,
			char *why, size_t n)
{
	char host[256];
	unsigned char addr[16];
	size_t len = sr__url_host(url, host, sizeof(host), why, n);

	if (!len)
		return 0;
	if (allowed(host, allow))
		return 1;
	if (strncasecmp(url, "https://", 8) != 0) {
		snprintf(why, n, "'%s' is not https (allow-list the host to permit it)", url);
		return 0;
	}
	if (strcasecmp(host, "localhost") == 0 ||
	    (len > 10 && strcasecmp(host + len - 10, ".localhost") == 0)) {
		snprintf(why, n, "'%s' points at this machine", url);
		return 0;
	}
	if ((inet_pton(AF_INET, host, addr) == 1 &&
	     sr__addr_private_v4((uint32_t)addr[0] << 24 | (uint32_t)addr[1] << 16 |
			(uint32_t)addr[2] << 8 | addr[3])) ||
	    (inet_pton(AF_INET6, host, addr) == 1 && sr__addr_private_v6(addr))) {
		snprintf(why, n, "'%s' is a private, loopback or link-local address", url);
		return 0;
	}
	return 1;
}

int sr__plan_callback_url_ok(const char *url, const char *const *allow,
			     char *why, size_t n)
{
	char host[256];
	unsigned char addr[16];
	struct in_addr in;
	uint32_t a = 0;
	size_t len = sr__url_host(url, host, sizeof(host), why, n);
	int v4 = 0;

	if (!len)
		return 0;
	if (allowed(host, allow))
		return 1;
	/* inet_aton takes every spelling an HTTP client would connect to:
	 * 0xa9fea9fe, 2852039166, 0251.0376.0251.0376. */
	if (inet_aton(host, &in) == 1) {
		a = ntohl(in.s_addr);
		v4 = 1;
	} else if (inet_pton(AF_INET6, host, addr) == 1) {
		static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		if (memcmp(addr, mapped, 12) == 0) {
			a = (uint32_t)addr[12] << 24 | (uint32_t)addr[13] << 16 |
			    (uint32_t)addr[14] << 8 | addr[15];
			v4 = 1;
		} else if (addr[0] == 0xfe && (addr[1] & 0xc0) == 0x80) {
			snprintf(why, n, "'%s' is a link-local address (allow-list the host in "
				 "[runner] callback_allow_hosts to permit it)", url);
			return 0;
		}
	}
	if (v4 && (a & 0xffff0000) == 0xa9fe0000) {
		snprintf(why, n, "'%s' is a link-local address, where cloud metadata answers "
			 "(allow-list the host in [runner] callback_allow_hosts to permit it)", url);
		return 0;
	}
	return 1;
}

int sr__plan_callbacks_ok(const struct sr__toolset *tools, const char *allow_csv,
			  char *why, size_t n)
{
	char *buf = strdup(allow_csv ? allow_csv : ""), *tok, *save, reason[600];
	const char **allow = calloc(strlen(buf ? buf : "") / 2 + 2, sizeof(*allow));
	size_t k = 0;
	int rc = SR_OK;

	if (!buf || !allow) {
		free(buf);
		free(allow);
		return SR_ENOMEM;
	}
	for (tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
		allow[k++] = tok;
	for (size_t i = 0; i < tools->n && rc == SR_OK; i++) {
		const sr__tool *t = &tools->tools[i];
		if (t->url && !sr__plan_callback_url_ok(t->url, allow, reason, sizeof(reason))) {
			snprintf(why, n, "tool '%s': callback: %s", t->name, reason);
			rc = SR_EPERM;
		}
	}
	free(allow);
	free(buf);
	return rc;
}

int sr__plan_mcp_host_to_resolve(const char *url, const char *const *allow,
				 char *host, size_t hn)
{
	char why[400];
	unsigned char addr[16];

	if (!sr__url_host(url, host, hn, why, sizeof(why)) || allowed(host, allow))
		return 0;
	return inet_pton(AF_INET, host, addr) != 1 && inet_pton(AF_INET6, host, addr) != 1;
}

int sr__addrs_private(const struct addrinfo *ai, char *text, size_t n)
{
	for (; ai; ai = ai->ai_next) {
		int priv = 1; /* an address family we do not know: not public */
		text[0] = 0;
		if (ai->ai_family == AF_INET) {
			const struct sockaddr_in *in = (const void *)ai->ai_addr;
			priv = sr__addr_private_v4(ntohl(in->sin_addr.s_addr));
			inet_ntop(AF_INET, &in->sin_addr, text, (socklen_t)n);
		} else if (ai->ai_family == AF_INET6) {
			const struct sockaddr_in6 *in6 = (const void *)ai->ai_addr;
			priv = sr__addr_private_v6(in6->sin6_addr.s6_addr);
			inet_ntop(AF_INET6, &in6->sin6_addr, text, (socklen_t)n);
		}
		if (priv)
			return 1;
	}
	return 0;
}

int sr__plan_mcp_addrs_ok(const char *url, const struct addrinfo *ai,
			  char *why, size_t n)
{
	char text[INET6_ADDRSTRLEN] = "";

	if (!ai) {
		snprintf(why, n, "'%s': its host cannot be resolved", url);
		return 0;
	}
	if (sr__addrs_private(ai, text, sizeof(text))) {
		snprintf(why, n,
			 "'%s' resolves to %s, a private, loopback or link-local address "
			 "(allow-list the host to permit it)", url, text);
		return 0;
	}
	return 1;
}

int sr__plan_check(const sr__plan *p, const char **code, char *msg, size_t n)
{
	size_t i;
	json_t *s;

	if (!p->prompt || !*p->prompt)
		REFUSE("no_prompt", "no prompt: give the agent something to do");
	if (!p->provider_loaded)
		REFUSE("provider_not_enabled",
		       "provider '%s' is not available: no such plugin is loaded (see 'sandrun plugins')",
		       p->provider_name);
	if (!p->harness_enabled)
		REFUSE("harness_not_enabled",
		       "harness '%s' is not enabled: add it to 'harnesses' in [runner]",
		       p->harness_name);
	if (!p->harness_loaded)
		REFUSE("harness_not_enabled",
		       "harness '%s' is enabled but no such plugin is loaded (see 'sandrun plugins')",
		       p->harness_name);
	if (p->network != SR_NET_OPEN && !(p->provider_caps & SR_CAP_NETWORK_POLICY))
		REFUSE("network_unenforceable",
		       "provider '%s' cannot enforce a restricted network here",
		       p->provider_name);
	if (p->credential_isolation == SR__ISOLATION_REQUIRED &&
	    !(p->provider_caps & SR_CAP_ISOLATED_SECRETS))
		REFUSE("credential_isolation_unavailable",
		       "provider '%s' cannot keep credentials out of its sandboxes (they would "
		       "see them in plain text), and [runner] credential_isolation is 'required'",
		       p->provider_name);
	if (p->has_tools && (p->provider_caps & SR_CAP_REMOTE) &&
	    !has_string(p->harness_tools, "mcp_stdio") &&
	    !has_string(p->harness_tools, "relay_extension"))
		REFUSE("tools_on_remote_provider",
		       "harness '%s' takes platform tools only over HTTP from this host, which "
		       "a sandbox of remote provider '%s' cannot reach",
		       p->harness_name, p->provider_name);
	if (p->has_tools && p->network != SR_NET_OPEN && p->enforcement_strict)
		REFUSE("tools_bypass_network",
		       "a restricted network with strict enforcement cannot have platform tools: "
		       "they run on the runner, outside the sandbox's network boundary "
		       "(use --network-enforcement best_effort to accept that)");
	if (json_array_size(p->user_mcp) && !has_string(p->harness_tools, "mcp_stdio") &&
	    !has_string(p->harness_tools, "mcp_http"))
		REFUSE("mcp_unsupported",
		       "harness '%s' cannot use MCP servers", p->harness_name);
	json_array_foreach(p->user_mcp, i, s) {
		const char *name = json_string_value(json_object_get(s, "name"));
		const char *url = json_string_value(json_object_get(s, "url"));
		char why[400];
		if (!name || !*name)
			REFUSE("mcp_server_invalid", "MCP server %zu has no name", i);
		if (strcmp(name, SR_TOOLS_SERVER_NAME) == 0)
			REFUSE("mcp_server_reserved",
			       "the MCP server name '%s' is reserved for platform tools",
			       SR_TOOLS_SERVER_NAME);
		/* Only the internal sandrun-tools entry may launch a command
		 * in the sandbox. */
		if (json_object_get(s, "command") || !url)
			REFUSE("mcp_server_stdio",
			       "MCP server '%s' launches a command: only URL servers (http, sse) "
			       "are accepted; commands in the sandbox are the harness's own",
			       name);
		if (!sr__plan_mcp_url_ok(url, p->mcp_allow_hosts, why, sizeof(why)))
			REFUSE("mcp_url_refused", "MCP server '%s': %s", name, why);
	}
	return SR_OK;
}
