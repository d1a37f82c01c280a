/* core/host/http.c against a libmicrohttpd server on 127.0.0.1. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "harness.h"
#include "core/host/http.h"

static struct MHD_Daemon *server;
static int port;
static uv_loop_t loop;
static sr__http *http;
static char big[10 << 20];

/* /stream: three chunks 100 ms apart; /long: five chunks 400 ms apart;
 * /stall: one chunk, then 6 s of silence. */
static ssize_t stream_body(void *cls, uint64_t pos, char *buf, size_t max)
{
	const char *kind = cls;
	int stall = strcmp(kind, "stall") == 0, slow = strcmp(kind, "long") == 0;

	(void)max;
	if (stall && pos == 1) {
		sleep(6);
		return MHD_CONTENT_READER_END_OF_STREAM;
	}
	if (pos >= (slow ? 5u : 3u))
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (pos > 0)
		usleep(slow ? 400000 : 100000);
	buf[0] = (char)('a' + pos);
	return 1;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn,
			      const char *url, const char *method,
			      const char *version, const char *upload,
			      size_t *upload_size, void **state)
{
	struct MHD_Response *r;
	enum MHD_Result ret;
	static int marker;
	unsigned status = MHD_HTTP_OK;

	(void)cls;
	(void)version;
	if (strcmp(method, "POST") == 0) {
		/* Echo the body: gather it, answer on the last call. */
		char **acc = (char **)state;
		if (*acc == NULL) {
			*acc = calloc(1, 1 << 20);
			return MHD_YES;
		}
		if (*upload_size) {
			strncat(*acc, upload, *upload_size);
			*upload_size = 0;
			return MHD_YES;
		}
		r = MHD_create_response_from_buffer(strlen(*acc), *acc,
						    MHD_RESPMEM_MUST_FREE);
		ret = MHD_queue_response(conn, MHD_HTTP_CREATED, r);
		MHD_destroy_response(r);
		return ret;
	}
	if (*state == NULL) {
		*state = &marker;
		return MHD_YES;
	}
	if (strcmp(url, "/stream") == 0 || strcmp(url, "/stall") == 0 ||
	    strcmp(url, "/long") == 0) {
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1, stream_body,
						      (void *)(url + 1), NULL);
		MHD_add_response_header(r, "Content-Type", "text/event-stream");
		ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
		MHD_destroy_response(r);
		return ret;
	}
	if (strcmp(url, "/slow") == 0) {
		sleep(2);
	} else if (strcmp(url, "/big") == 0) {
		r = MHD_create_response_from_buffer(sizeof(big), big,
						    MHD_RESPMEM_PERSISTENT);
		ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
		MHD_destroy_response(r);
		return ret;
	} else if (strcmp(url, "/fail") == 0) {
		status = MHD_HTTP_INTERNAL_SERVER_ERROR;
	}
	r = MHD_create_response_from_buffer(5, (void *)"hello",
					    MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(r, "X-Test", "yes \"quoted\"");
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static void setup(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	server = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
					  MHD_USE_THREAD_PER_CONNECTION,
				  0, NULL, NULL, answer, NULL,
				  MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_END);
	cr_assert_not_null(server);
	port = MHD_get_daemon_info(server, MHD_DAEMON_INFO_BIND_PORT)->port;
	uv_loop_init(&loop);
	http = sr__http_new(&loop);
}

static void teardown(void)
{
	sr__http_free(http);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	MHD_stop_daemon(server);
}

TestSuite(http, .init = setup, .fini = teardown, .timeout = 20);

static sr__wait w;

static void fetch(const char *method, const char *path, const char *body,
		  uint64_t timeout_ms, size_t max)
{
	char url[256];
	sr_pair hdr[] = { { "X-Req", "1" } };
	sr_http_request req = { sizeof(req), method, url, hdr, 1, body,
				body ? strlen(body) : 0, timeout_ms, max };
	sr__ctx ctx = { .loop = &loop };

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	memset(&w, 0, sizeof(w));
	cr_assert_not_null(sr__http_request(http, &req, sr__wait_done, &w));
	/* The completion rule: never called back from inside the call, even
	 * when the request is sent (or refused) at once. */
	cr_assert_not(w.done, "done was called from inside sr__http_request");
	t_wait(&ctx, &w);
}

Test(http, get_returns_status_headers_and_body)
{
	fetch("GET", "/ok", NULL, 0, 0);
	cr_assert_eq(w.status, SR_OK, "%s", w.message);
	cr_assert_eq(w.len, 5);
	cr_assert_str_eq(w.data, "hello");
	cr_assert(strstr(w.json, "\"status\":200"), "%s", w.json);
	cr_assert(strstr(w.json, "\"x-test\":\"yes \\\"quoted\\\"\""), "%s", w.json);
}

Test(http, post_sends_the_body)
{
	fetch("POST", "/echo", "{\"a\":1}", 0, 0);
	cr_assert_eq(w.status, SR_OK, "%s", w.message);
	cr_assert(strstr(w.json, "\"status\":201"));
	cr_assert_str_eq(w.data, "{\"a\":1}");
}

Test(http, http_error_status_is_a_response_not_a_failure)
{
	fetch("GET", "/fail", NULL, 0, 0);
	cr_assert_eq(w.status, SR_OK);
	cr_assert(strstr(w.json, "\"status\":500"));
}

static long bare_code;
static int bare_json_null;

static void bare_done(void *ud, const sr_result *res)
{
	bare_code = sr__http_code(res);
	bare_json_null = res->json == NULL;
	sr__wait_done(ud, res);
}

/* A bare request: the status code from sr__http_code, the body, and no
 * headers or JSON; a failure has code 0. */
static void fetch_bare(const char *path, uint64_t timeout_ms)
{
	char url[256];
	sr_http_request req = { sizeof(req), "GET", url, NULL, 0, NULL, 0, timeout_ms, 0 };
	sr__ctx ctx = { .loop = &loop };

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	memset(&w, 0, sizeof(w));
	bare_code = -1;
	bare_json_null = 0;
	cr_assert_not_null(sr__http_request_bare(http, &req, bare_done, &w));
	cr_assert_not(w.done, "done was called from inside sr__http_request_bare");
	t_wait(&ctx, &w);
}

Test(http, a_bare_request_gives_the_code_and_body_without_json)
{
	fetch_bare("/ok", 0);
	cr_assert_eq(w.status, SR_OK, "%s", w.message);
	cr_assert_eq(bare_code, 200);
	cr_assert(bare_json_null);
	cr_assert_str_eq(w.data, "hello");
	sr__wait_clear(&w);
	fetch_bare("/fail", 0);
	cr_assert_eq(w.status, SR_OK);
	cr_assert_eq(bare_code, 500);
	sr__wait_clear(&w);
	fetch_bare("/slow", 300);
	cr_assert_eq(w.status, SR_ETIMEDOUT);
	cr_assert_eq(bare_code, 0);
}

/* Two requests one after the other on one kept-alive connection: the
 * second is answered so fast that it ends in the loop's timers phase, and
 * the wait must not then block in poll (the guard's 10 s timer is open). */
Test(http, back_to_back_requests_on_a_kept_connection_end_promptly)
{
	for (int i = 0; i < 20; i++) {
		uint64_t t0 = uv_hrtime();
		fetch("GET", i % 2 ? "/fail" : "/ok", NULL, 0, 0);
		cr_assert_eq(w.status, SR_OK, "%s", w.message);
		cr_assert_lt(uv_hrtime() - t0, 2000000000ull, "request %d took %llu ns", i,
			     (unsigned long long)(uv_hrtime() - t0));
		sr__wait_clear(&w);
	}
}

Test(http, slow_server_times_out)
{
	fetch("GET", "/slow", NULL, 300, 0);
	cr_assert_eq(w.status, SR_ETIMEDOUT, "status %d: %s", w.status, w.message);
	cr_assert(strstr(w.message, "/slow"), "%s", w.message);
}

Test(http, closed_port_is_connection_refused)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), closed_port;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	getsockname(fd, (struct sockaddr *)&sa, &len);
	closed_port = ntohs(sa.sin_port);
	close(fd); /* nothing listens there now */
	port = closed_port;
	fetch("GET", "/", NULL, 2000, 0);
	cr_assert_eq(w.status, SR_ECONNREFUSED, "status %d: %s", w.status, w.message);
}

Test(http, oversized_body_is_cut_off)
{
	fetch("GET", "/big", NULL, 0, 1 << 20);
	cr_assert_eq(w.status, SR_ETOOBIG, "status %d: %s", w.status, w.message);
	cr_assert(strstr(w.message, "over 1048576 bytes"), "%s", w.message);
	cr_assert_null(w.data);
}

Test(http, body_at_the_default_cap_arrives_whole)
{
	fetch("GET", "/big", NULL, 0, sizeof(big));
	cr_assert_eq(w.status, SR_OK, "%s", w.message);
	cr_assert_eq(w.len, sizeof(big));
}

Test(http, refuses_urls_that_are_not_http)
{
	sr_http_request req = { sizeof(req), "GET", "file:///etc/passwd", NULL, 0,
				NULL, 0, 0, 0 };

	memset(&w, 0, sizeof(w));
	cr_assert_null(sr__http_request(http, &req, sr__wait_done, &w));
	cr_assert(w.done);
	cr_assert_eq(w.status, SR_EINVAL);
}

Test(http, cancel_reports_cancelled_once)
{
	char url[256];
	sr_http_request req = { sizeof(req), "GET", url, NULL, 0, NULL, 0, 0, 0 };
	sr_http_call *call;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/slow", port);
	memset(&w, 0, sizeof(w));
	call = sr__http_request(http, &req, sr__wait_done, &w);
	cr_assert_not_null(call);
	sr__http_cancel(call);
	cr_assert(w.done);
	cr_assert_eq(w.status, SR_ECANCELED);
}

/* Streamed responses: headers first, then each chunk as it arrives. */
typedef struct streamed {
	int headers, status, chunks_before_headers;
	char body[64];
	size_t len;
	char content_type[64];
} streamed;

static void s_headers(void *ud, int status, const char *headers)
{
	streamed *s = ud;
	json_t *h = json_loads(headers, 0, NULL);

	s->headers++;
	s->status = status;
	snprintf(s->content_type, sizeof(s->content_type), "%s",
		 json_string_value(json_object_get(h, "content-type")) ?
			 json_string_value(json_object_get(h, "content-type")) : "");
	json_decref(h);
}

static streamed st;

static void s_chunk(void *ud, const void *data, size_t len)
{
	streamed *s = ud;

	if (!s->headers)
		s->chunks_before_headers++;
	if (s->len + len < sizeof(s->body)) {
		memcpy(s->body + s->len, data, len);
		s->len += len;
	}
}

static void s_done(void *ud, const sr_result *r)
{
	(void)ud;
	sr__wait_done(&w, r);
}

static void stream(const char *path, uint64_t timeout_ms)
{
	char url[256];
	sr_http_request req = { sizeof(req), "GET", url, NULL, 0, NULL, 0, timeout_ms, 0 };
	sr_http_stream_callbacks cbs = { sizeof(cbs), s_headers, s_chunk, s_done };
	sr__ctx ctx = { .loop = &loop };

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	memset(&w, 0, sizeof(w));
	memset(&st, 0, sizeof(st));
	cr_assert_not_null(sr__http_stream(http, &req, &cbs, &st));
	t_wait(&ctx, &w);
}

Test(http, a_stream_gives_headers_then_each_chunk_then_done)
{
	stream("/stream", 0);
	cr_assert_eq(w.status, SR_OK, "%s", w.message);
	cr_assert_eq(st.headers, 1);
	cr_assert_eq(st.status, 200);
	cr_assert_str_eq(st.content_type, "text/event-stream");
	cr_assert_eq(st.chunks_before_headers, 0);
	cr_assert_eq(st.len, 3);
	cr_assert_str_eq(st.body, "abc");
	cr_assert_eq(w.len, 0, "a stream's done carries no body");
}

Test(http, a_stream_may_last_longer_than_its_timeout_while_chunks_flow)
{
	/* 5 chunks over 1.6 s, with 1 s allowed between two chunks. */
	stream("/long", 1000);
	cr_assert_eq(w.status, SR_OK, "%s", w.message);
	cr_assert_str_eq(st.body, "abcde");
}

Test(http, a_stalled_stream_times_out)
{
	/* 2.5 s: the first chunk comes in time even under valgrind on a
	 * busy machine; the silence after it is longer. */
	stream("/stall", 2500);
	cr_assert_eq(w.status, SR_ETIMEDOUT, "status %d: %s", w.status, w.message);
	cr_assert_str_eq(st.body, "a");
}

/* A chunk's callback starts another request and cancels its own stream:
 * what a provider does when a channel's output asks for input. libcurl
 * refuses both from inside its callbacks; they must still happen, and
 * each call still ends exactly once. */
static sr_http_call *inner_stream;
static sr__wait inner_w;
static int inner_chunks, stream_dones;
static sr_result stream_end;

static void inner_done(void *ud, const sr_result *r)
{
	(void)ud;
	sr__wait_done(&inner_w, r);
}

static void chunk_starts_and_cancels(void *ud, const void *data, size_t len)
{
	char url[256];
	sr_http_request req = { sizeof(req), "POST", url, NULL, 0, "from a chunk", 12, 0, 0 };

	(void)ud;
	(void)data;
	(void)len;
	if (inner_chunks++)
		return;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/echo", port);
	cr_assert_not_null(sr__http_request(http, &req, inner_done, NULL));
	sr__http_cancel(inner_stream);
}

static void stream_done_once(void *ud, const sr_result *r)
{
	(void)ud;
	stream_dones++;
	stream_end.status = r->status;
}

Test(http, a_chunk_callback_may_start_a_request_and_cancel_its_stream)
{
	char url[256];
	sr_http_request req = { sizeof(req), "GET", url, NULL, 0, NULL, 0, 5000, 0 };
	sr_http_stream_callbacks cbs = { sizeof(cbs), NULL, chunk_starts_and_cancels,
					 stream_done_once };
	sr__ctx ctx = { .loop = &loop };

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/long", port);
	inner_stream = sr__http_stream(http, &req, &cbs, NULL);
	cr_assert_not_null(inner_stream);
	t_wait(&ctx, &inner_w);
	cr_assert_eq(inner_w.status, SR_OK, "%s", inner_w.message);
	cr_assert_eq(inner_w.len, 12);
	cr_assert_eq(memcmp(inner_w.data, "from a chunk", 12), 0);
	for (int i = 0; i < 50 && !stream_dones; i++)
		uv_run(&loop, UV_RUN_NOWAIT);
	cr_assert_eq(stream_dones, 1, "the cancelled stream ended %d times", stream_dones);
	cr_assert_eq(stream_end.status, SR_ECANCELED);
	cr_assert_eq(inner_chunks, 1, "chunks reached the caller after it cancelled");
}
