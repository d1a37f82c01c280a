/* Fuzz target: the loopback MCP server's request handling, headers and
 * body, through a real socket: the input is sent as raw bytes after a
 * request line, so both libmicrohttpd's parsing and ours are exercised.
 * The first input byte picks whether the right bearer is added first, so
 * the body handling (JSON-RPC, batches, tools/call) is reached too. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/tools/mcp_http.h"
#include "fuzz_relay.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sr__ctx ctx;
static sr__toolset *tools;
static sr__guard guard;
static sr__relay *relay;
static sr__mcp_http *srv;
static int port;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char dir[128], err[300];

	(void)argc;
	(void)argv;
	relay = fuzz_relay(&ctx, &tools, &guard, dir, sizeof(dir));
	if (sr__mcp_http_start(ctx.loop, relay, tools, &srv, err, sizeof(err)) != SR_OK)
		abort();
	port = atoi(strrchr(sr__mcp_http_url(srv), ':') + 1);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char head[256], buf[4096];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), n = 0;
	size_t off = 0;

	if (size > 60000)
		size = 60000;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	for (int i = 0; i < 100 && n == 0; i++) {
		uv_run(ctx.loop, UV_RUN_NOWAIT);
		n = write(fd, "", 0) == 0;
	}
	snprintf(head, sizeof(head), "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s%s",
		 size && data[0] & 1 ? "Authorization: Bearer " : "",
		 size && data[0] & 1 ? sr__mcp_http_token(srv) : "",
		 size && data[0] & 1 ? "\r\n" : "");
	(void)!write(fd, head, strlen(head));
	while (off < size) {
		ssize_t w = write(fd, data + off, size - off);
		if (w > 0)
			off += (size_t)w;
		uv_run(ctx.loop, UV_RUN_NOWAIT);
	}
	shutdown(fd, SHUT_WR);
	for (int i = 0; i < 2000; i++) {
		ssize_t r;
		uv_run(ctx.loop, UV_RUN_NOWAIT);
		r = read(fd, buf, sizeof(buf));
		if (r == 0 || (r < 0 && errno != EAGAIN))
			break;
		if (r < 0)
			usleep(50);
	}
	close(fd);
	uv_run(ctx.loop, UV_RUN_NOWAIT);
	return 0;
}
