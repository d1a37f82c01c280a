/* The relay protocol's fixed names and limits (doc/relay-protocol.md),
 * shared by the shim (the writer of requests) and the runner (their
 * reader). Header-only and dependency-free: the shim is linked statically. */
#ifndef SR_RELAY_PROTO_H
#define SR_RELAY_PROTO_H

#include <stddef.h>
#include <string.h>

#define SR_RELAY_VERSION 1
#define SR_RELAY_ID_MAX 128
#define SR_RELAY_REQ_MAX (1u << 20)   /* a request file, bytes */
#define SR_RELAY_RES_MAX (8u << 20)   /* a response file, bytes */
#define SR_RELAY_REQ_SUFFIX ".req"
#define SR_RELAY_RES_SUFFIX ".res"
#define SR_RELAY_TMP_PREFIX "."       /* temporaries are hidden files */
#define SR_RELAY_SPARE_DIR ".spare"   /* the shim's files kept for reuse */

/* Ids: [A-Za-z0-9_-]{1,128}. Anything else is rejected, never rewritten. */
static inline int sr_relay_valid_id(const char *id, size_t len)
{
	if (len == 0 || len > SR_RELAY_ID_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

/* If name is "<valid id><suffix>", the id's length; else 0. */
static inline size_t sr_relay_id_of(const char *name, const char *suffix)
{
	size_t n = strlen(name), s = strlen(suffix);

	if (n <= s || strcmp(name + n - s, suffix) != 0)
		return 0;
	return sr_relay_valid_id(name, n - s) ? n - s : 0;
}

#endif
