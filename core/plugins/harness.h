/* Checked calls into harness plugins: the only way the core calls one. */
#ifndef SR_CORE_HARNESS_H
#define SR_CORE_HARNESS_H

#include <jansson.h>

#include "core/plugins/loader.h"

/* The harness's describe answer (a new reference; an empty object when
 * the plugin offers none or answers no JSON object, which is logged). */
json_t *sr__harness_describe(sr__plugin *p);
/* The ACP mcpServers for the run (borrowed): a new reference, an empty
 * array when the plugin offers none. */
json_t *sr__harness_mcp_servers(sr__plugin *p, json_t *run);
/* Prepare the sandbox for the run (borrowed), under the completion rule;
 * a harness without the operation completes with "{}". */
int sr__harness_prepare(sr__plugin *p, uint64_t req, json_t *run,
			sr_done_fn done, void *ud);
/* 1 when the harness raised this session/request_permission (params) for
 * a platform tool. */
int sr__harness_is_own_permission(sr__plugin *p, json_t *params);

#endif
