/* JSON-RPC 2.0 over a byte stream, newline-delimited, both directions: the
 * transport of the Agent Client Protocol (sandrun is the client, the
 * harness's adapter the agent). */
#ifndef SR_CORE_ACP_H
#define SR_CORE_ACP_H

#include <jansson.h>
#include <uv.h>

typedef struct sr__acp sr__acp;

typedef struct sr__acp_handlers {
	/* Write bytes to the agent; returns SR_OK or an error. */
	int (*write)(void *ud, const char *data, size_t len);
	/* A request from the agent: answer it with sr__acp_respond or
	 * sr__acp_respond_error, now or later. params borrowed. */
	void (*request)(void *ud, json_t *id, const char *method, json_t *params);
	/* A notification from the agent. params borrowed. */
	void (*notification)(void *ud, const char *method, json_t *params);
	/* The stream broke: a line over the limit, or not JSON-RPC. */
	void (*protocol_error)(void *ud, const char *message);
} sr__acp_handlers;

/* result (or error, a JSON-RPC error object) is borrowed; exactly one is
 * not NULL, except on timeout or close: both NULL and message set. */
typedef void (*sr__acp_reply_fn)(void *ud, json_t *result, json_t *error,
				 const char *message);

sr__acp *sr__acp_new(uv_loop_t *loop, const sr__acp_handlers *h, void *ud);
/* Fails every pending request with message "closed", then frees. */
void sr__acp_free(sr__acp *a);

/* Bytes from the agent's stdout. */
void sr__acp_feed(sr__acp *a, const char *data, size_t len);
/* The agent's stdout ended: pending requests fail with message. */
void sr__acp_closed(sr__acp *a, const char *message);

/* Send a request (params stolen); timeout_ms 0: none. */
int sr__acp_request(sr__acp *a, const char *method, json_t *params,
		    uint64_t timeout_ms, sr__acp_reply_fn fn, void *ud);
int sr__acp_notify(sr__acp *a, const char *method, json_t *params);
/* Answer a request of the agent (result stolen). */
int sr__acp_respond(sr__acp *a, json_t *id, json_t *result);
int sr__acp_respond_error(sr__acp *a, json_t *id, int code,
			  const char *message);
size_t sr__acp_pending(const sr__acp *a);

#endif
