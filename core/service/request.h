/* The body of POST /v1/runs: parsed and checked before a run exists. */
#ifndef SR_CORE_SERVICE_REQUEST_H
#define SR_CORE_SERVICE_REQUEST_H

#include <jansson.h>
#include <stddef.h>

#include "core/host/log.h"

typedef struct sr__svc_request {
	json_t *root;             /* the whole body; owned */
	/* Borrowed from root: */
	const char *harness;      /* NULL: the first enabled */
	const char *prompt;
	const char *session;      /* resume it, or NULL */
	json_t *tools;            /* a tools-file array, or NULL */
	json_t *mcp_servers;      /* ACP mcpServers entries, or NULL */
	const char *model_url;    /* or NULL */
	json_t *credentials;      /* {NAME: value}, or NULL: the service's own */
	int network;              /* SR_NET_OPEN or SR_NET_OFF */
	int enforcement_strict;
	int ask_policy;           /* enum sr__ask_policy */
	int ask_explicit;         /* permission_mode "ask" was given */
	/* Strings borrowed from root, as sandrun run's --endpoint, --mount. */
	const char *endpoints[8];
	size_t n_endpoints;
	const char *mounts[8];
	size_t n_mounts;
	sr__secret_holds secrets; /* the credential values */
} sr__svc_request;

/*
 * {"harness", "prompt", "session", "tools": [...], "mcp_servers": [...],
 *  "model": {"url", "credentials": {NAME: value}},
 *  "network": {"mode": "open"|"off", "enforcement": "strict"|"best_effort"},
 *  "permission_mode": "ask"|"approve_all"|"deny_all",
 *  "endpoints": [NAME, ...], "mounts": ["s3://BUCKET/PREFIX:PATH", ...]}
 *
 * Only prompt is required; null is the same as absent; an unknown field is
 * an error (a misspelt option never silently does nothing). SR_OK, or
 * SR_EINVAL with *code ("invalid_json" or "invalid_request") and msg
 * naming the field. Credential values are held as secrets until the
 * request is cleared.
 */
int sr__svc_request_parse(const char *body, size_t len, sr__svc_request *out,
			  const char **code, char *msg, size_t n);
/* Wipe the credential values, release them as secrets, free the body. */
void sr__svc_request_clear(sr__svc_request *q);

#endif
