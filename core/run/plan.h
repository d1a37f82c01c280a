/* Plan gates: a run that cannot work is refused before any sandbox
 * exists, each with a fixed code and message (see sandrun(1)). */
#ifndef SR_CORE_PLAN_H
#define SR_CORE_PLAN_H

#include <jansson.h>
#include <stdint.h>

typedef struct sr__plan {
	const char *prompt;
	const char *provider_name;
	int provider_loaded;
	uint32_t provider_caps;
	const char *harness_name;
	int harness_loaded;
	int harness_enabled;
	json_t *harness_tools;   /* describe's "tools" array, borrowed */
	int network;             /* SR_NET_* */
	int enforcement_strict;  /* 1 strict, 0 best_effort */
	int has_tools;           /* platform tools that execute runner-side */
	json_t *user_mcp;        /* array of ACP mcpServers entries, or NULL */
	const char *const *mcp_allow_hosts; /* operator allow-list */
	int credential_isolation; /* enum sr__isolation */
} sr__plan;

/* SR_OK, or SR_EPERM with the gate's code (a static string) and a message. */
int sr__plan_check(const sr__plan *p, const char **code, char *msg, size_t n);

/* The SSRF guard for user MCP URLs: https only, no private, loopback or
 * link-local literal addresses, unless the host is allow-listed. Entries
 * that launch a command (stdio) are refused. */
int sr__plan_mcp_url_ok(const char *url, const char *const *allow,
			char *why, size_t n);

/* The guard for a tool's callback URL, a runner-side service (loopback
 * and private addresses are fine): no credentials in the URL, and no
 * link-local address (169.254/16, where cloud metadata answers, in any
 * spelling: dotted, hex, decimal, v4-mapped IPv6; fe80::/10) unless its
 * host is allow-listed (allow: NULL-terminated, may be NULL). */
int sr__plan_callback_url_ok(const char *url, const char *const *allow,
			     char *why, size_t n);

/* Every callback URL of tools under that guard, with allow_csv the
 * operator's comma-separated allow-list ([runner] callback_allow_hosts):
 * SR_OK, SR_EPERM with the tool and the reason in why, or SR_ENOMEM. */
struct sr__toolset;
int sr__plan_callbacks_ok(const struct sr__toolset *tools, const char *allow_csv,
			  char *why, size_t n);

/* Whether url's host must be resolved before the run (a name, neither a
 * literal address nor allow-listed); the host goes into host. */
int sr__plan_mcp_host_to_resolve(const char *url, const char *const *allow,
				 char *host, size_t hn);
/* The same guard for the addresses url's host resolved to (ai, from
 * getaddrinfo; NULL: it did not resolve): every one must be public. */
struct addrinfo;
int sr__plan_mcp_addrs_ok(const char *url, const struct addrinfo *ai,
			  char *why, size_t n);

/* Whether an IPv4 address (host order) or an IPv6 address (16 bytes; a
 * v4-mapped one is judged as IPv4) is private, loopback, link-local,
 * shared (100.64/10), multicast or otherwise not public. */
int sr__addr_private_v4(uint32_t a);
int sr__addr_private_v6(const unsigned char *b);
/* Whether any of the addresses at ai is not public (as above); the
 * first such one, as text, into text. */
struct addrinfo;
int sr__addrs_private(const struct addrinfo *ai, char *text, size_t n);
/* The host of url (an IPv6 literal without its brackets, trailing dots
 * removed) into host; its length, or 0 with the reason in why (no URL,
 * no host, credentials in the URL). */
size_t sr__url_host(const char *url, char *host, size_t hn, char *why, size_t n);
/* The port of url (its scheme's default, 80 or 443, when it names none),
 * or 0 when it is not a URL with a valid port. */
long sr__url_port(const char *url);

#endif
