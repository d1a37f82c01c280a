/* The loopback MCP server (Streamable HTTP on 127.0.0.1). */
#ifndef SR_CORE_MCP_HTTP_H
#define SR_CORE_MCP_HTTP_H

#include <uv.h>

#include "core/tools/relay.h"
#include "core/tools/tools.h"

typedef struct sr__mcp_http sr__mcp_http;

/* Listen on 127.0.0.1 at an ephemeral port with a fresh bearer token (32
 * random bytes, base64url; registered as a secret). Tool calls go through
 * relay. tools and relay are borrowed and must outlive the server. */
int sr__mcp_http_start(uv_loop_t *loop, sr__relay *relay,
		       const sr__toolset *tools, sr__mcp_http **out,
		       char *err, size_t errlen);
const char *sr__mcp_http_url(const sr__mcp_http *s);
const char *sr__mcp_http_token(const sr__mcp_http *s);
/* Answer waiting requests with an error, close, free. Stop the relay
 * first: its calls then never answer into a closed server. */
void sr__mcp_http_stop(sr__mcp_http *s);

#endif
