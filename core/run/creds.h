/* Credential bindings: the secrets a run hands its sandbox, each bound to
 * one exact destination host, for a provider that keeps them out of the
 * sandbox (SR_CAP_ISOLATED_SECRETS: the sandbox sees a placeholder, the
 * provider's egress proxy swaps in the value for that host only).
 *
 * A binding comes from the harness (an environment variable it declares,
 * with its kind and default host; --model-url replaces the host) or from
 * a user MCP server (a secret header, bound to the server's host). Every
 * destination must pass the exact host rule (sr__creds_host_rule) before
 * anything is created. */
#ifndef SR_CORE_CREDS_H
#define SR_CORE_CREDS_H

#include <jansson.h>
#include <stddef.h>

#include "sandrun/plugin.h"

/* [runner] credential_isolation */
enum sr__isolation {
	SR__ISOLATION_PREFERRED = 0, /* isolate where the provider can, else expose (event) */
	SR__ISOLATION_REQUIRED = 1,  /* refuse a run on a provider that cannot */
	SR__ISOLATION_NONE = 2       /* plain environment, even where it could isolate */
};

typedef struct sr__creds sr__creds;

/* The exact host rule for a binding's destination: a URL, or a bare host
 * name (https on 443 implied). https, lower case, at least two labels, no
 * port other than 443, no IP literal, no localhost, .localhost, .local or
 * .internal, and no wildcard. A host listed in exceptions (NULL-terminated;
 * "host" or "host:port", from [secrets] allow_hosts) passes every check
 * but the wildcard one. SR_OK with the host in host, or SR_EPERM with the
 * reason in why. */
int sr__creds_host_rule(const char *dest, const char *const *exceptions,
			char *host, size_t hn, char *why, size_t n);

/* The value of credential variable name: creds's ({NAME: value}) when
 * creds is not NULL, else the runner's environment's. NULL when unset. */
const char *sr__creds_env(json_t *creds, const char *name);

/* The bindings of a run: the harness's credentials (desc "credentials":
 * [{"env", "kind", "host"}], or the bare names of "credential_env") whose
 * variables are set (sr__creds_env of creds), each bound to model_url's
 * host when given, else to its declared host; then every secret header of
 * the user MCP servers (ACP mcpServers entries with "headers"), bound to
 * the server's host. SR_OK, or SR_EPERM with why naming the binding that
 * breaks the rule (or has no host), or SR_ENOMEM. Values are registered as
 * secrets (never logged). */
int sr__creds_collect(json_t *desc, json_t *creds, const char *model_url,
		      json_t *user_mcp, const char *const *exceptions,
		      sr__creds **out, char *why, size_t n);
size_t sr__creds_count(const sr__creds *c);
/* The bindings as the provider takes them (spec.credentials); owned by c. */
const sr_credential *const *sr__creds_spec(const sr__creds *c);
/* Hex SHA-256 over the bindings' names, hosts and values, in name order:
 * it tells a changed credential without keeping its value. 65 bytes. */
void sr__creds_fingerprint(const sr__creds *c, char out[65]);
/* Put the provider's placeholders (create's or reconnect's
 * "placeholders" object) into the secret headers of user_mcp. SR_OK, or
 * SR_ENOTFOUND with why naming a header binding that got none: the value
 * itself is never sent instead. */
/* The first binding whose value may go to one port of its host only (an
 * allow_hosts "host:port" entry let it through), or NULL. */
const sr_credential *sr__creds_port_bound(const sr__creds *c);
int sr__creds_apply_placeholders(const sr__creds *c, json_t *placeholders,
				 json_t *user_mcp, char *why, size_t n);
/* The names of the secret headers of user_mcp ("MCP server 'S' header
 * 'H'"), appended to names: what a provider without isolation exposes. */
void sr__creds_header_names(json_t *user_mcp, json_t *names);
void sr__creds_free(sr__creds *c);

#endif
