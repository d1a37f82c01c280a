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

/* ------------------------------------------------------------ UTF-8 */

/* The length of the well-formed UTF-8 sequence at p (RFC 3629: no
 * overlong forms, surrogates or code points above U+10FFFF), or 0. */
static inline size_t sr_utf8_seq(const unsigned char *p, size_t left)
{
	unsigned char lo = 0x80, hi = 0xBF;
	size_t n;

	if (left == 0)
		return 0;
	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xC2 && p[0] <= 0xDF)
		n = 2;
	else if (p[0] >= 0xE0 && p[0] <= 0xEF)
		n = 3;
	else if (p[0] >= 0xF0 && p[0] <= 0xF4)
		n = 4;
	else
		return 0;
	if (p[0] == 0xE0)
		lo = 0xA0;
	else if (p[0] == 0xED)
		hi = 0x9F;
	else if (p[0] == 0xF0)
		lo = 0x90;
	else if (p[0] == 0xF4)
		hi = 0x8F;
	if (left < n || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xBF)
			return 0;
	return n;
}

/* len bytes of s as valid UTF-8, each byte that begins no well-formed
 * sequence replaced by U+FFFD: jansson refuses invalid UTF-8, and an
 * answer it cannot encode would never be sent. Returns a malloc'd,
 * NUL-terminated copy (its length in *out_len when not NULL), or NULL
 * without memory. */
static inline char *sr_utf8_clean(const char *s, size_t len, size_t *out_len)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	char *out = malloc(len * 3 + 1);
	size_t o = 0;

	if (!out)
		return NULL;
	for (size_t i = 0; s && i < len;) {
		size_t n = sr_utf8_seq(p + i, len - i);
		if (n) {
			memcpy(out + o, p + i, n);
			o += n;
			i += n;
		} else {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i++;
		}
	}
	out[o] = 0;
	if (out_len)
		*out_len = o;
	return out;
}

/* A JSON string of len bytes of s made valid UTF-8. New reference; NULL
 * only without memory. */
static inline json_t *sr_json_textn(const char *s, size_t len)
{
	size_t n;
	char *clean = sr_utf8_clean(s, len, &n);
	json_t *j = clean ? json_stringn(clean, n) : NULL;

	free(clean);
	return j;
}

static inline json_t *sr_json_text(const char *s)
{
	return sr_json_textn(s, s ? strlen(s) : 0);
}

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
/* text is made valid UTF-8 first. */
static inline json_t *sr_mcp_text_result(const char *text, int is_error)
{
	return json_pack("{s:[{s:s, s:o}], s:b}", "content", "type", "text",
			 "text", sr_json_text(text), "isError", is_error);
}

/* message is made valid UTF-8 first. NULL only without memory. */
static inline json_t *sr_mcp_error(json_t *id, int code, const char *message)
{
	return json_pack("{s:s, s:O, s:{s:i, s:o}}", "jsonrpc", "2.0", "id",
			 id ? id : json_null(), "error", "code", code, "message",
			 sr_json_text(message));
}

/* Takes result; a NULL result (it could not be built) becomes an
 * internal error, so that the request is still answered. */
static inline json_t *sr_mcp_response(json_t *id, json_t *result)
{
	if (!result)
		return sr_mcp_error(id, -32603, "internal error: the result could not be built");
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
			 id ? id : json_null(), "result", result);
}

#endif
