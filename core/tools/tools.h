/* Platform tools: the tools file, argument checks, and the permission
 * guard. */
#ifndef SR_CORE_TOOLS_H
#define SR_CORE_TOOLS_H

#include <jansson.h>
#include <stdint.h>

#include "core/host/log.h"
#include "sandrun/plugin.h"
#include "shim/mcp_common.h"


enum sr__tool_kind { SR_TOOL_CALLBACK = 0, SR_TOOL_CLIENT = 1 };

/* Permission modes. SR_PERM_UNSET: the tool says nothing. Zero is the
 * documented default, so a zeroed guard is never "allow everything". */
enum sr__perm {
	SR_PERM_UNSET = -1,
	SR_PERM_ALLOW_READS = 0, /* a default mode only */
	SR_PERM_ALLOW = 1,
	SR_PERM_ASK = 2,
	SR_PERM_DENY = 3
};

typedef struct sr__tool {
	char *name;
	char *description;
	json_t *input_schema; /* owned; an object */
	int kind;
	char *url;            /* callback */
	sr_pair *headers;     /* callback; owned strings */
	size_t n_headers;
	uint64_t timeout_ms;  /* callback; default 30000 */
	int permission;       /* enum sr__perm */
	int read_only;
	sr__secret_holds secrets; /* its credential headers' values */
} sr__tool;

typedef struct sr__toolset {
	sr__tool *tools;
	size_t n;
} sr__toolset;

/* Parse a tools file (a JSON array of specs). On error returns SR_EINVAL
 * and writes a message naming the file, the tool and the field into err.
 * The values of credential headers (Authorization, Cookie, names with
 * "auth", "token", "key", "secret", "password" or "signature", and those
 * listed in callback.secret_headers) are held as secrets until the set is
 * freed. */
int sr__tools_load(const char *path, sr__toolset **out, char *err,
		   size_t errlen);
int sr__tools_parse(json_t *array, const char *origin, sr__toolset **out,
		    char *err, size_t errlen);
void sr__tools_free(sr__toolset *set);
sr__tool *sr__tools_find(const sr__toolset *set, const char *name);
/* The specs the sandbox may see: name, description, inputSchema. New ref. */
json_t *sr__tools_specs(const sr__toolset *set);
/* Check args against the schema's "required" list; SR_EINVAL with the
 * first missing name in err. */
int sr__tools_check_args(const sr__tool *t, json_t *args, char *err,
			 size_t errlen);

int sr__perm_parse(const char *s);
const char *sr__perm_name(int perm);

typedef struct sr__rule {
	char *pattern; /* fnmatch(3) glob on the tool name */
	int perm;      /* allow, ask or deny */
} sr__rule;

typedef struct sr__guard {
	int default_mode; /* allow, ask, deny or allow_reads */
	sr__rule *rules;
	size_t n_rules;
} sr__guard;

/* Add "PATTERN=PERM"; SR_EINVAL on a bad one. */
int sr__guard_add_rule(sr__guard *g, const char *spec);
void sr__guard_clear(sr__guard *g);
/* The tool's own setting, then the first matching rule, then the default
 * (allow_reads: read-only tools allowed, the others asked). Returns
 * SR_PERM_ALLOW, SR_PERM_ASK or SR_PERM_DENY. */
int sr__guard_decide(const sr__guard *g, const sr__tool *t);

/* Whether a header's value is a secret by its name (Authorization,
 * Cookie, names with "auth", "token", "key", "secret", ...). */
int sr__tools_secret_header(const char *name);

#endif
