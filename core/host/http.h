/* Asynchronous HTTP client: libcurl multi driven by the libuv loop. */
#ifndef SR_CORE_HTTP_H
#define SR_CORE_HTTP_H

#include <uv.h>

#include "sandrun/plugin.h"

typedef struct sr__http sr__http;

sr__http *sr__http_new(uv_loop_t *loop);
/* Cancels every call still running (their done runs with SR_ECANCELED),
 * then frees the client once its handles are closed. */
void sr__http_free(sr__http *h);

/* Send every later request of h to the Unix socket at path (a copy; NULL:
 * TCP again) whatever host the URL names: sandrun run --server unix:PATH. */
int sr__http_set_unix_socket(sr__http *h, const char *path);

/* Trust the CAs in the PEM file at path (a copy; NULL: the system's
 * again) in place of the system's bundle: [runner] ca_file. */
int sr__http_set_ca_file(sr__http *h, const char *path);

/* Start a request; see sr_host.http_request. Returns NULL (and runs done
 * with the error before returning) when it cannot start. */
sr_http_call *sr__http_request(sr__http *h, const sr_http_request *req,
			       sr_done_fn done, void *ud);
/* The same, for the core's callers that want only the status code and the
 * body (a tool's callback): no response header is kept and the result's
 * json is NULL; sr__http_code gives the code. It spares each tool call a
 * JSON object built, printed and parsed again. */
sr_http_call *sr__http_request_bare(sr__http *h, const sr_http_request *req,
				    sr_done_fn done, void *ud);
/* The HTTP status code in a result of sr__http_request(_bare); 0 unless
 * its status is SR_OK. */
long sr__http_code(const sr_result *res);
/* A streamed request; see sr_host.http_stream. Returns NULL when it cannot
 * start: then cbs->done ran with the error before it returned, unless cbs
 * itself was unusable (no done). */
sr_http_call *sr__http_stream(sr__http *h, const sr_http_request *req,
			      const sr_http_stream_callbacks *cbs, void *ud);
void sr__http_cancel(sr_http_call *call);

#endif
