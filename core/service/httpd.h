/* libmicrohttpd on the libuv loop, for sandrund: a listening socket
 * (TCP or Unix), MHD in its epoll mode with no thread of its own, a
 * uv_poll_t on its epoll descriptor and a uv_timer_t that follows
 * MHD_get_timeout (as core/tools/mcp_http.c does for the loopback
 * server). */
#ifndef SR_CORE_SERVICE_HTTPD_H
#define SR_CORE_SERVICE_HTTPD_H

#include <microhttpd.h>
#include <uv.h>

typedef struct sr__httpd sr__httpd;

typedef struct sr__httpd_opts {
	const char *listen;                  /* "HOST:PORT" or "unix:PATH" */
	MHD_AccessHandlerCallback handler;
	MHD_RequestCompletedCallback completed;
	void *cls;                           /* both callbacks' */
	unsigned connection_timeout;         /* seconds idle; 0: 60 */
	unsigned header_timeout;             /* seconds for a request's headers
					      * to come whole; 0: 10 */
	unsigned per_client_limit;           /* connections at once from one
					      * address; 0: 256 */
} sr__httpd_opts;

/* Listen and start. A Unix socket is made mode 0600 (replacing a stale
 * one nobody listens on). SR_OK, or an error with err saying why. */
int sr__httpd_start(uv_loop_t *loop, const sr__httpd_opts *o, sr__httpd **out,
		    char *err, size_t n);
/* Where it listens: "http://127.0.0.1:8470", "http://[::1]:8470" or
 * "unix:/run/sandrund.sock". */
const char *sr__httpd_where(const sr__httpd *h);
int sr__httpd_is_unix(const sr__httpd *h);
/* Connections at once in all: what the descriptor limit leaves (raised to
 * its hard limit at start) once a quarter of it is kept for the rest. */
unsigned sr__httpd_max_connections(const sr__httpd *h);
/* Let MHD run on the next loop turn: after a connection was resumed. */
void sr__httpd_kick(sr__httpd *h);
/* Stop accepting connections; the open ones go on. */
void sr__httpd_quiesce(sr__httpd *h);
/* Stop MHD (every suspended connection must have been resumed) and free
 * h once its handles are closed. */
void sr__httpd_stop(sr__httpd *h);

#endif
