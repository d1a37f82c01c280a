/* core/tools/mcp_http.c: the loopback MCP server, with the relay behind it and
 * the test callback server behind that. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "harness.h"
#include "core/host/http.h"
#include "core/tools/mcp_http.h"
#include "core/tools/relay.h"

static char *dir, calls_log[4200], url[200], relay_dir[4200], journal[4200];
static pid_t server;
static sr__ctx ctx;
static sr__toolset *tools;
static sr__guard guard;
static sr__relay *relay;
static sr__mcp_http *mcp;
static sr__http *client;

static void setup(void)
{
	char text[2048], err[600];
	sr__relay_opts o = { 0 };
	json_t *arr;

	dir = t_tmpdir();
	snprintf(calls_log, sizeof(calls_log), "%s/calls.log", dir);
	snprintf(relay_dir, sizeof(relay_dir), "%s/relay", dir);
	snprintf(journal, sizeof(journal), "%s/journal", dir);
	server = t_callback_server(calls_log, url, sizeof(url));
	snprintf(text, sizeof(text),
		 "[{\"name\":\"echo\",\"permission\":\"allow\",\"input_schema\":{\"type\":\"object\"},"
		 "\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"fail\",\"permission\":\"allow\",\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"pick\",\"kind\":\"client\",\"permission\":\"allow\"},"
		 "{\"name\":\"blocked\",\"permission\":\"deny\",\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"needy\",\"permission\":\"allow\",\"input_schema\":{\"type\":\"object\","
		 "\"required\":[\"text\"]},\"callback\":{\"url\":\"%s\"}},"
		 "{\"name\":\"careful\",\"callback\":{\"url\":\"%s\"}}]", url, url, url, url, url);
	arr = json_loads(text, 0, NULL);
	cr_assert_eq(sr__tools_parse(arr, "test", &tools, err, sizeof(err)), SR_OK, "%s", err);
	json_decref(arr);
	ctx.loop = uv_default_loop();
	o.dir = relay_dir;
	o.journal = journal;
	o.tools = tools;
	o.guard = &guard;
	cr_assert_eq(sr__relay_new(&ctx, &o, &relay, err, sizeof(err)), SR_OK);
	sr__relay_start(relay);
	cr_assert_eq(sr__mcp_http_start(ctx.loop, relay, tools, &mcp, err, sizeof(err)), SR_OK,
		     "%s", err);
	client = sr__http_new(ctx.loop);
	t_log_capture();
}

static void teardown(void)
{
	sr__relay_free(relay);
	sr__mcp_http_stop(mcp);
	sr__http_free(client);
	uv_run(ctx.loop, UV_RUN_NOWAIT);
	kill(server, SIGTERM);
	waitpid(server, NULL, 0);
}

TestSuite(mcp_http, .init = setup, .fini = teardown, .timeout = 30);

static sr__wait w;
static int http_status;
static json_t *body;
static const char *scheme = "Bearer"; /* of the Authorization header */

/* POST (or another method) to the server; fills http_status and body. */
static void send_req(const char *method, const char *path, const char *auth,
		     const char *origin, const char *text)
{
	char u[300], bearer[200];
	sr_pair headers[4];
	size_t n = 0;
	sr_http_request req = { sizeof(req), method, u, headers, 0, text,
				text ? strlen(text) : 0, 5000, 0 };
	json_t *meta;

	snprintf(u, sizeof(u), "%.*s%s", (int)(strlen(sr__mcp_http_url(mcp)) - 4),
		 sr__mcp_http_url(mcp), path);
	if (auth) {
		snprintf(bearer, sizeof(bearer), "%s %s", scheme, auth);
		headers[n].name = "Authorization";
		headers[n++].value = bearer;
	}
	if (origin) {
		headers[n].name = "Origin";
		headers[n++].value = origin;
	}
	headers[n].name = "Content-Type";
	headers[n++].value = "application/json";
	req.n_headers = n;
	sr__wait_clear(&w);
	json_decref(body);
	body = NULL;
	sr__http_request(client, &req, sr__wait_done, &w);
	t_wait(&ctx, &w);
	cr_assert_eq(w.status, SR_OK, "%s", w.message);
	meta = json_loads(w.json, 0, NULL);
	http_status = (int)json_integer_value(json_object_get(meta, "status"));
	json_decref(meta);
	body = w.len ? json_loadb(w.data, w.len, 0, NULL) : NULL;
}

static void post(const char *text)
{
	send_req("POST", "/mcp", sr__mcp_http_token(mcp), NULL, text);
}

static int error_code(json_t *msg)
{
	return (int)json_integer_value(json_object_get(json_object_get(msg, "error"), "code"));
}

Test(mcp_http, listens_on_loopback_with_a_long_random_token)
{
	cr_assert(strncmp(sr__mcp_http_url(mcp), "http://127.0.0.1:", 17) == 0);
	cr_assert_eq(strlen(sr__mcp_http_token(mcp)), 43); /* 32 bytes, base64url */
}

Test(mcp_http, initialize_echoes_a_known_version_else_the_latest)
{
	post("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2024-11-05\"}}");
	cr_assert_eq(http_status, 200);
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(body, "result"),
							   "protocolVersion")), "2024-11-05");
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(body, "result"),
		"serverInfo"), "name")), "sandrun-tools");
	post("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"1999-01-01\"}}");
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(body, "result"),
							   "protocolVersion")), "2025-11-25");
}

Test(mcp_http, wrong_or_missing_bearer_is_401)
{
	send_req("POST", "/mcp", "wrong", NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
	cr_assert_eq(http_status, 401);
	cr_assert_eq(error_code(body), -32001);
	send_req("POST", "/mcp", NULL, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
	cr_assert_eq(http_status, 401);
}

typedef struct raw {
	int port;
	char request[512];
	char reply[512];
	int done;
} raw;

/* Send r->request (headers only) and read the first reply. */
static void *raw_client(void *arg)
{
	raw *r = arg;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct timeval tv = { 3, 0 };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ssize_t n;

	sa.sin_port = htons((uint16_t)r->port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    write(fd, r->request, strlen(r->request)) > 0) {
		n = read(fd, r->reply, sizeof(r->reply) - 1);
		if (n > 0)
			r->reply[n] = 0;
	}
	close(fd);
	r->done = 1;
	return NULL;
}

/* Headers that announce a body which is never sent: the answer must come
 * without waiting for it. */
static const char *headers_only(const char *auth, const char *length)
{
	static raw r;
	pthread_t th;

	memset(&r, 0, sizeof(r));
	r.port = atoi(strrchr(sr__mcp_http_url(mcp), ':') + 1);
	snprintf(r.request, sizeof(r.request),
		 "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
		 "Content-Type: application/json\r\nContent-Length: %s\r\n\r\n", auth, length);
	pthread_create(&th, NULL, raw_client, &r);
	while (!r.done)
		uv_run(ctx.loop, UV_RUN_NOWAIT), usleep(1000);
	pthread_join(th, NULL);
	return r.reply;
}

Test(mcp_http, bearer_is_checked_before_the_body_is_read)
{
	const char *reply = headers_only("nope", "100000");

	cr_assert(strstr(reply, "HTTP/1.1 401"), "got: %s", reply);
}

Test(mcp_http, other_methods_and_paths_are_refused)
{
	send_req("GET", "/mcp", sr__mcp_http_token(mcp), NULL, NULL);
	cr_assert_eq(http_status, 405);
	send_req("DELETE", "/mcp", sr__mcp_http_token(mcp), NULL, NULL);
	cr_assert_eq(http_status, 405);
	send_req("POST", "/other", sr__mcp_http_token(mcp), NULL, "{}");
	cr_assert_eq(http_status, 404);
}

Test(mcp_http, foreign_origins_are_refused)
{
	send_req("POST", "/mcp", sr__mcp_http_token(mcp), "https://evil.example",
		 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
	cr_assert_eq(http_status, 403);
	send_req("POST", "/mcp", sr__mcp_http_token(mcp), "http://localhost:3000",
		 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
	cr_assert_eq(http_status, 200);
}

Test(mcp_http, bodies_over_one_megabyte_are_refused_before_reading)
{
	const char *reply = headers_only(sr__mcp_http_token(mcp), "1000001");

	cr_assert(strstr(reply, "HTTP/1.1 413"), "got: %s", reply);
}

Test(mcp_http, bad_json_is_400_parse_error)
{
	post("{\"jsonrpc\":");
	cr_assert_eq(http_status, 400);
	cr_assert_eq(error_code(body), -32700);
}

Test(mcp_http, notifications_are_202_without_a_body)
{
	post("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
	cr_assert_eq(http_status, 202);
	cr_assert_null(body);
}

Test(mcp_http, the_2026_probe_gets_400_so_clients_fall_back)
{
	post("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{\"_meta\":"
	     "{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}");
	cr_assert_eq(http_status, 400);
	cr_assert_eq(error_code(body), -32601);
}

Test(mcp_http, tools_list_and_calls_go_through_the_relay)
{
	json_t *result;

	post("{\"jsonrpc\":\"2.0\",\"id\":\"L\",\"method\":\"tools/list\"}");
	cr_assert_eq(json_array_size(json_object_get(json_object_get(body, "result"), "tools")), 6);
	post("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
	     "\"arguments\":{\"text\":\"over http\"}}}");
	result = json_object_get(body, "result");
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(result,
		"content"), 0), "text")), "over http");
	post("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"fail\"}}");
	cr_assert(json_is_true(json_object_get(json_object_get(body, "result"), "isError")));
	post("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"nope\"}}");
	cr_assert_eq(error_code(body), -32602);
	post("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\",\"params\":{\"cursor\":\"zz\"}}");
	cr_assert_eq(error_code(body), -32602);
	post("{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"frobnicate\"}");
	cr_assert_eq(error_code(body), -32601);
	cr_assert_eq(t_count_lines(calls_log), 2);
}

Test(mcp_http, a_batch_with_a_client_tool_is_refused_whole)
{
	post("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
	     "\"arguments\":{\"text\":\"x\"}}},"
	     "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"pick\"}}]");
	cr_assert_eq(http_status, 400);
	cr_assert_eq(error_code(body), -32600);
	uv_run(ctx.loop, UV_RUN_NOWAIT);
	cr_assert_eq(t_count_lines(calls_log), 0, "an item of the refused batch ran");
}

Test(mcp_http, a_batch_is_answered_in_order_without_notifications)
{
	post("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
	     "\"arguments\":{\"text\":\"b\"}}},"
	     "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"},"
	     "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}]");
	cr_assert_eq(http_status, 200);
	cr_assert_eq(json_array_size(body), 2);
	cr_assert_eq(json_integer_value(json_object_get(json_array_get(body, 0), "id")), 1);
	cr_assert_eq(json_integer_value(json_object_get(json_array_get(body, 1), "id")), 2);
}

Test(mcp_http, the_token_never_reaches_a_log_line)
{
	sr__log(SR_LOG_ERROR, "test", "token is %s", sr__mcp_http_token(mcp));
	/* The line is there, with the token replaced. */
	cr_assert(strstr(t_log_text(), "token is [REDACTED]"), "log: %s", t_log_text());
	cr_assert(strstr(t_log_text(), sr__mcp_http_token(mcp)) == NULL);
}

/* A 200 whose body is a JSON-RPC result for id: what SDK clients need. */
static json_t *result_of(json_t *id)
{
	cr_assert_eq(http_status, 200);
	cr_assert_not_null(body, "200 with an empty or non-JSON body");
	cr_assert(json_equal(json_object_get(body, "id"), id), "wrong id");
	cr_assert(json_is_object(json_object_get(body, "result")), "no result");
	return json_object_get(body, "result");
}

Test(mcp_http, calls_that_finish_at_once_get_a_json_answer)
{
	json_t *id;

	post("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"blocked\"}}");
	id = json_integer(7);
	cr_assert(json_is_true(json_object_get(result_of(id), "isError")), "a denial is a tool error");
	json_decref(id);
	post("{\"jsonrpc\":\"2.0\",\"id\":\"m\",\"method\":\"tools/call\",\"params\":{\"name\":\"needy\"}}");
	id = json_string("m");
	cr_assert(json_is_true(json_object_get(result_of(id), "isError")));
	json_decref(id);
	post("{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":\"pick\"}}");
	id = json_integer(8);
	cr_assert_not(json_is_true(json_object_get(result_of(id), "isError")), "paused is not an error");
	json_decref(id);
	/* --deny-all */
	sr__relay_set_ask_policy(relay, SR_ASK_DENY);
	post("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"careful\"}}");
	id = json_integer(9);
	result_of(id);
	json_decref(id);
	cr_assert_eq(t_count_lines(calls_log), 0);
}

Test(mcp_http, the_bearer_scheme_is_case_insensitive)
{
	scheme = "bearer";
	post("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
	cr_assert_eq(http_status, 200);
	scheme = "BEARER ";
	post("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
	cr_assert_eq(http_status, 200);
	scheme = "Basic";
	post("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
	cr_assert_eq(http_status, 401);
	scheme = "Bearer";
}
