/* Checked calls into harness plugins: the only way the core calls one. */
#include "config.h"

#include <stdlib.h>

#include "core/plugins/complete.h"
#include "core/host/ctx.h"
#include "core/plugins/harness.h"
#include "core/plugins/host.h"
#include "core/host/log.h"
#include "core/host/status.h"

#define OP(slot) SR__OP(p, sr_harness_ops, slot)

/* A synchronous operation's malloc'd JSON answer, parsed: a new reference
 * of the wanted type, or NULL after logging why. */
static json_t *answer(sr__plugin *p, const char *op, int rc, char *text,
		      json_type type)
{
	json_error_t e;
	json_t *j = NULL;

	if (rc != SR_OK)
		sr__log(SR_LOG_ERROR, p->section, "operation '%s' failed: %s", op,
			sr__strerror(rc));
	else if (!text)
		sr__log(SR_LOG_ERROR, p->section, "operation '%s' answered nothing", op);
	else if (!(j = json_loads(text, 0, &e)) || json_typeof(j) != type)
		sr__log(SR_LOG_ERROR, p->section, "operation '%s' answered no JSON %s",
			op, type == JSON_OBJECT ? "object" : "array");
	free(text);
	if (j && json_typeof(j) != type) {
		json_decref(j);
		j = NULL;
	}
	return j;
}

json_t *sr__harness_describe(sr__plugin *p)
{
	char *text = NULL;
	json_t *desc = NULL;
	int rc;

	if (OP(describe)) {
		rc = OP(describe)(p->self, &text);
		desc = answer(p, "describe", rc, text, JSON_OBJECT);
	}
	return desc ? desc : json_object();
}

json_t *sr__harness_mcp_servers(sr__plugin *p, json_t *run)
{
	char *in = json_dumps(run, JSON_COMPACT), *text = NULL;
	json_t *servers = NULL;
	int rc;

	if (in && OP(mcp_servers)) {
		rc = OP(mcp_servers)(p->self, in, &text);
		servers = answer(p, "mcp_servers", rc, text, JSON_ARRAY);
	}
	free(in);
	return servers ? servers : json_array();
}

int sr__harness_prepare(sr__plugin *p, uint64_t req, json_t *run,
			sr_done_fn done, void *ud)
{
	static const sr_result nothing = { sizeof(sr_result), SR_OK, NULL, "{}", NULL, 0 };
	__typeof__(OP(prepare)) fn = OP(prepare);
	char *in;
	sr__call *g;
	int rc;

	if (!fn) /* nothing to prepare */
		return sr__complete_later(p->host->ctx->loop, done, ud, &nothing);
	if (!(in = json_dumps(run, JSON_COMPACT)))
		return SR_ENOMEM;
	if (!(g = sr__call_new(p, "prepare", done, ud))) {
		free(in);
		return SR_ENOMEM;
	}
	rc = sr__call_end(g, fn(p->self, req, in, sr__call_done, g));
	free(in);
	return rc;
}

int sr__harness_is_own_permission(sr__plugin *p, json_t *params)
{
	char *text;
	int own = 0;

	if (!OP(is_own_permission) || !(text = json_dumps(params, JSON_COMPACT)))
		return 0;
	own = OP(is_own_permission)(p->self, text) == 1;
	free(text);
	return own;
}
