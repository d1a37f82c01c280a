/* Permission requests: the agent's own, answered by the caller (or by
 * policy), and those of platform tools, left to the relay's guard. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plugins/harness.h"
#include "core/run/run_int.h"

struct sr__run_perm {
	char id[32];
	json_t *acp_id;   /* the ACP request's id */
	json_t *options;  /* its options */
	struct sr__run_perm *next;
};

static json_t *pick_option(json_t *options, const char *kind)
{
	size_t i;
	json_t *o;

	json_array_foreach(options, i, o)
		if (strcmp(json_string_value(json_object_get(o, "kind")) ?
			   json_string_value(json_object_get(o, "kind")) : "", kind) == 0)
			return json_object_get(o, "optionId");
	return NULL;
}

/* Allow: an allow-once option (never "always"); deny: reject-once. */
static void answer_permission(sr__run *r, json_t *acp_id, json_t *options,
			      int allow)
{
	json_t *opt = pick_option(options, allow ? "allow_once" : "reject_once");

	if (!opt)
		opt = pick_option(options, allow ? "allow_always" : "reject_always");
	if (!r->acp || r->phase >= SR__RUN_STOPPING)
		return;
	if (!opt)
		sr__acp_respond(r->acp, acp_id, json_pack("{s:{s:s}}", "outcome",
							  "outcome", "cancelled"));
	else
		sr__acp_respond(r->acp, acp_id, json_pack("{s:{s:s, s:O}}", "outcome",
							  "outcome", "selected", "optionId", opt));
}

void sr__run_on_permission_request(sr__run *r, json_t *id, json_t *params)
{
	json_t *options = json_object_get(params, "options");
	json_t *tool = json_object_get(params, "toolCall");
	int platform = sr__harness_is_own_permission(r->harness, params);
	sr__run_perm *p;

	if (r->phase >= SR__RUN_CANCELLING) {
		sr__acp_respond(r->acp, id, json_pack("{s:{s:s}}", "outcome", "outcome",
						      "cancelled"));
		return;
	}
	/* A platform tool: the relay's guard decides when it executes. */
	if (platform || r->o.ask_policy != SR_ASK_WAIT) {
		answer_permission(r, id, options, platform || r->o.ask_policy == SR_ASK_APPROVE);
		return;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		/* Nobody can be asked: the safe answer is no. */
		answer_permission(r, id, options, 0);
		return;
	}
	snprintf(p->id, sizeof(p->id), "perm-%d", ++r->next_perm);
	p->acp_id = json_incref(id);
	p->options = json_incref(options);
	p->next = r->perms;
	r->perms = p;
	sr__run_emit(r, json_pack("{s:s, s:s, s:s, s:s, s:O}", "type", "permission.request",
				  "request_id", p->id, "source", "agent", "tool",
				  json_string_value(json_object_get(tool, "title")) ?
					  json_string_value(json_object_get(tool, "title")) : "a tool",
				  "tool_call", tool ? tool : json_null()));
}

static sr__run_perm *take_perm(sr__run *r, const char *id)
{
	for (sr__run_perm **pp = &r->perms; *pp; pp = &(*pp)->next)
		if (!id || strcmp((*pp)->id, id) == 0) {
			sr__run_perm *p = *pp;
			*pp = p->next;
			return p;
		}
	return NULL;
}

static void free_perm(sr__run_perm *p)
{
	json_decref(p->acp_id);
	json_decref(p->options);
	free(p);
}

int sr__run_permission(sr__run *r, const char *request_id, int allow)
{
	sr__run_perm *p = take_perm(r, request_id);

	if (!p)
		return r->relay ? sr__relay_permission(r->relay, request_id, allow) :
				  SR_ENOTFOUND;
	answer_permission(r, p->acp_id, p->options, allow);
	free_perm(p);
	return SR_OK;
}

void sr__run_deny_asks(sr__run *r)
{
	sr__run_perm *p;

	r->o.ask_policy = SR_ASK_DENY;
	while ((p = take_perm(r, NULL))) {
		answer_permission(r, p->acp_id, p->options, 0);
		free_perm(p);
	}
	if (r->relay)
		sr__relay_set_ask_policy(r->relay, SR_ASK_DENY);
}

void sr__run_perms_cancel(sr__run *r)
{
	sr__run_perm *p;

	while ((p = take_perm(r, NULL))) {
		if (r->acp)
			sr__acp_respond(r->acp, p->acp_id, json_pack("{s:{s:s}}", "outcome",
								     "outcome", "cancelled"));
		free_perm(p);
	}
}

void sr__run_perms_free(sr__run *r)
{
	sr__run_perm *p;

	while ((p = take_perm(r, NULL)))
		free_perm(p);
}
