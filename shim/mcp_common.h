/* MCP answers that the shim (stdio) and the runner's loopback server
 * (Streamable HTTP) give alike. Header-only: the shim is a static binary
 * that links nothing of the core. */
#ifndef SR_MCP_COMMON_H
#define SR_MCP_COMMON_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandrun/plugin.h"

#define SR_MCP_SERVER_NAME SR_TOOLS_SERVER_NAME
#define SR_MCP_LATEST "2025-11-25"

/* -32602 for a bad cursor: the caller sends this code with err's text. */
#define SR_MCP_INVALID_PARAMS (-32602)

/* The initialize result: echo the client's version when supported, else
 * the latest. New reference. */
static inline json_t *sr_mcp_initialize(json_t *params, const char *version)
{
	static const char *const known[] = { "2024-11-05", "2025-03-26",
					     "2025-06-18", "2025-11-25", NULL };
	const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
	const char *use = SR_MCP_LATEST;

	for (const char *const *p = known; asked && *p; p++)
		if (strcmp(*p, asked) == 0)
			use = asked;
	return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}}", "protocolVersion",
			 use, "capabilities", "tools", "listChanged", 0,
			 "serverInfo", "name", SR_MCP_SERVER_NAME, "version",
			 version);
}

/* One page of tools/list from specs (an array of MCP tool objects). The
 * cursor is the decimal index of the page's first tool. Returns a new
 * result, or NULL for an invalid cursor. */
static inline json_t *sr_mcp_tools_page(json_t *specs, json_t *params,
					size_t page_size)
{
	json_t *cursor = json_object_get(params, "cursor");
	size_t start = 0, total = json_array_size(specs);
	json_t *page, *result;

	if (cursor && !json_is_null(cursor)) {
		const char *c = json_string_value(cursor);
		char *end = NULL;
		unsigned long v = c ? strtoul(c, &end, 10) : 0;
		if (!c || !*c || *end || v == 0 || v >= total)
			return NULL;
		start = v;
	}
	page = json_array();
	for (size_t i = start; i < total && i < start + page_size; i++)
		json_array_append(page, json_array_get(specs, i));
	result = json_pack("{s:o}", "tools", page);
	if (start + page_size < total) {
		char next[32];
		snprintf(next, sizeof(next), "%zu", start + page_size);
		json_object_set_new(result, "nextCursor", json_string(next));
	}
	return result;
}

/* {"content":[{"type":"text","text":...}],"isError":...}. New reference. */
static inline json_t *sr_mcp_text_result(const char *text, int is_error)
{
	return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text",
			 "text", text, "isError", is_error);
}

static inline json_t *sr_mcp_error(json_t *id, int code, const char *message)
{
	return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
			 id ? id : json_null(), "error", "code", code, "message",
			 message);
}

static inline json_t *sr_mcp_response(json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
			 id ? id : json_null(), "result", result);
}

#endif
