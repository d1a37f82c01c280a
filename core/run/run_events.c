/* The run's events: emitted to the caller, timings, and what the relay,
 * the plugins and the agent's session/updates contribute. */
#include "config.h"

#include <string.h>

#include "core/host/log.h"
#include "core/run/run_int.h"

void sr__run_emit(sr__run *r, json_t *ev)
{
	if (r->o.event)
		r->o.event(r->o.ud, ev);
	json_decref(ev);
}

void sr__run_timing(sr__run *r, const char *stage)
{
	uint64_t now = uv_now(r->ctx->loop);

	sr__run_emit(r, json_pack("{s:s, s:s, s:I}", "type", "timing", "stage", stage, "ms",
				  (json_int_t)(now - r->t_phase)));
	sr__log(SR_LOG_DEBUG, "run", "[timing] stage=%s ms=%llu", stage,
		(unsigned long long)(now - r->t_phase));
	r->t_phase = now;
}

void sr__run_on_relay_event(void *ud, json_t *ev)
{
	sr__run *r = ud;
	const char *type = json_string_value(json_object_get(ev, "type"));

	if (type && strcmp(type, "permission.request") == 0) {
		json_t *copy = json_copy(ev);
		json_object_set(copy, "request_id", json_object_get(ev, "call_id"));
		json_object_set_new(copy, "source", json_string("tool"));
		sr__run_emit(r, copy);
		return;
	}
	sr__run_emit(r, json_incref(ev));
}

/* Plugins' events (host->event) join the run's. */
/* A tunnel that failed under the run: which of its endpoints went with
 * it (the agent's URL for it no longer works; the next turn resolves
 * again). */
static void endpoints_lost(sr__run *r, json_t *ev)
{
	const char *local = json_string_value(json_object_get(ev, "url"));
	json_t *route;
	size_t i;

	json_array_foreach(r->ep_routes, i, route)
		if (local && strcmp(json_string_value(json_object_get(route, "source")), "tunnel") == 0 &&
		    strcmp(json_string_value(json_object_get(route, "local")), local) == 0)
			sr__run_emit(r, json_pack("{s:s, s:O, s:O, s:O?}", "type", "endpoint.lost",
						  "service", json_object_get(route, "service"), "url",
						  json_object_get(route, "url"), "reason",
						  json_object_get(ev, "reason")));
}

void sr__run_plugin_event(void *ud, json_t *ev)
{
	sr__run *r = ud;
	const char *type = json_string_value(json_object_get(ev, "type"));

	sr__run_emit(r, json_incref(ev));
	if (type && strcmp(type, "tunnel.failed") == 0)
		endpoints_lost(r, ev);
}

void sr__run_on_update(sr__run *r, json_t *update)
{
	const char *kind = json_string_value(json_object_get(update, "sessionUpdate"));
	json_t *content = json_object_get(update, "content");
	const char *text = json_string_value(json_object_get(content, "text"));

	if (!kind)
		return;
	if (r->loading) {
		/* session/load replays the conversation before it answers. */
		if ((strcmp(kind, "agent_message_chunk") == 0 ||
		     strcmp(kind, "user_message_chunk") == 0) && text)
			sr__run_emit(r, json_pack("{s:s, s:s, s:s}", "type", "agent.history", "role",
					  kind[0] == 'a' ? "agent" : "user", "text", text));
		return;
	}
	if (strcmp(kind, "agent_message_chunk") == 0 && text) {
		sr__run_emit(r, json_pack("{s:s, s:s}", "type", "agent.message", "text", text));
	} else if (strcmp(kind, "agent_thought_chunk") == 0 && text) {
		sr__run_emit(r, json_pack("{s:s, s:s}", "type", "agent.thought", "text", text));
	} else if (strcmp(kind, "tool_call") == 0 || strcmp(kind, "tool_call_update") == 0) {
		json_t *ev = json_pack("{s:s, s:O}", "type",
				       strcmp(kind, "tool_call") == 0 ? "agent.tool_call" :
								      "agent.tool_update",
				       "id", json_object_get(update, "toolCallId") ?
				       json_object_get(update, "toolCallId") : json_null());
		static const char *const keys[] = { "title", "kind", "status", "rawInput",
						    "rawOutput", NULL };
		for (const char *const *k = keys; *k; k++)
			if (json_object_get(update, *k))
				json_object_set(ev, *k, json_object_get(update, *k));
		sr__run_emit(r, ev);
	} else if (strcmp(kind, "plan") == 0 || strcmp(kind, "available_commands_update") == 0 ||
		   strcmp(kind, "current_mode_update") == 0 || strcmp(kind, "usage_update") == 0 ||
		   strcmp(kind, "session_info_update") == 0 ||
		   strcmp(kind, "config_option_update") == 0) {
		json_t *ev = json_pack("{s:s, s:s, s:O}", "type", "agent.update", "kind", kind,
				       "update", update);
		sr__run_emit(r, ev);
	}
	/* Unknown variants are ignored. */
}
