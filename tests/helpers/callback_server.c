/*
 * A tool callback endpoint for tests, on 127.0.0.1 at an ephemeral port.
 * It behaves by the "tool" of each POSTed call:
 *   echo     {"content":[{"type":"text","text":ARGS.text}]}
 *   fail     an MCP result with isError true
 *   slow*    waits ARGS.ms (default 2000) milliseconds, then "ok"
 *   big      a 10 MiB body
 *   long     150,000 bytes of plain text
 *   plain    the plain-text body "plain answer"
 *   err500   HTTP 500 "boom"
 *   hangup   closes the connection without an answer
 *   badutf8  the plain-text body "ok \xff\xfe end" (not UTF-8)
 *   err500u  HTTP 500: 499 'x' then "\xc3\xa9" (the 500th byte is cut
 *            inside a character by a 500-byte quote)
 *   other    "ok"
 * Every call is appended to the log file (--log FILE) as "CALL_ID TOOL",
 * so a test can count executions. Prints {"url":"http://127.0.0.1:PORT/"}
 * and runs until killed.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int log_fd = -1;

typedef struct body {
	char *data;
	size_t len;
} body;

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status,
			     char *text, size_t len, const char *type)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, text,
		MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ret;

	MHD_add_response_header(r, "Content-Type", type);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_size, void **state)
{
	body *b = *state;
	json_t *call, *args;
	const char *tool, *id;
	char line[300], *text;

	(void)cls; (void)url; (void)method; (void)version;
	if (!b) {
		*state = calloc(1, sizeof(body));
		return MHD_YES;
	}
	if (*upload_size) {
		b->data = realloc(b->data, b->len + *upload_size + 1);
		memcpy(b->data + b->len, upload, *upload_size);
		b->len += *upload_size;
		*upload_size = 0;
		return MHD_YES;
	}
	call = json_loadb(b->data ? b->data : "", b->len, 0, NULL);
	free(b->data);
	free(b);
	*state = NULL;
	tool = json_string_value(json_object_get(call, "tool"));
	id = json_string_value(json_object_get(call, "call_id"));
	args = json_object_get(call, "arguments");
	tool = tool ? tool : "";
	snprintf(line, sizeof(line), "%s %s\n", id ? id : "-", tool);
	if (log_fd >= 0 && write(log_fd, line, strlen(line)) < 0)
		perror("log");
	if (strncmp(tool, "slow", 4) == 0) {
		json_int_t ms = json_integer_value(json_object_get(args, "ms"));
		usleep((useconds_t)(ms > 0 ? ms : 2000) * 1000);
	}
	if (strcmp(tool, "hangup") == 0) {
		json_decref(call);
		return MHD_NO;
	}
	if (strcmp(tool, "echo") == 0) {
		json_t *r = json_pack("{s:[{s:s, s:s}]}", "content", "type", "text", "text",
				      json_string_value(json_object_get(args, "text")) ?
				      json_string_value(json_object_get(args, "text")) : "");
		text = json_dumps(r, JSON_COMPACT);
		json_decref(r);
	} else if (strcmp(tool, "fail") == 0) {
		text = strdup("{\"content\":[{\"type\":\"text\",\"text\":\"it failed\"}],\"isError\":true}");
	} else if (strcmp(tool, "big") == 0) {
		size_t n = 10u << 20;
		text = malloc(n);
		memset(text, 'x', n);
		json_decref(call);
		return reply(c, 200, text, n, "text/plain");
	} else if (strcmp(tool, "long") == 0) {
		size_t n = 150000;
		text = malloc(n);
		memset(text, 'y', n);
		json_decref(call);
		return reply(c, 200, text, n, "text/plain");
	} else if (strcmp(tool, "plain") == 0) {
		json_decref(call);
		text = strdup("plain answer");
		return reply(c, 200, text, strlen(text), "text/plain");
	} else if (strcmp(tool, "badutf8") == 0) {
		json_decref(call);
		text = strdup("ok \xff\xfe end");
		return reply(c, 200, text, strlen(text), "text/plain");
	} else if (strcmp(tool, "err500u") == 0) {
		json_decref(call);
		text = malloc(502);
		memset(text, 'x', 499);
		memcpy(text + 499, "\xc3\xa9", 3);
		return reply(c, 500, text, 501, "text/plain");
	} else if (strcmp(tool, "err500") == 0) {
		json_decref(call);
		text = strdup("boom");
		return reply(c, 500, text, strlen(text), "text/plain");
	} else {
		text = strdup("{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}");
	}
	json_decref(call);
	return reply(c, 200, text, strlen(text), "application/json");
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa;
	struct MHD_Daemon *d;
	sigset_t set;
	int sig;

	if (argc == 3 && strcmp(argv[1], "--log") == 0)
		log_fd = open(argv[2], O_WRONLY | O_CREAT | O_APPEND, 0644);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION,
			     0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, &sa,
			     MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "callback_server: cannot listen on 127.0.0.1\n");
		return 1;
	}
	printf("{\"url\":\"http://127.0.0.1:%d/\"}\n",
	       MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port);
	fflush(stdout);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	sigwait(&set, &sig);
	MHD_stop_daemon(d);
	return 0;
}
