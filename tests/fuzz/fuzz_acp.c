/* Fuzz target: the ACP transport's framing and dispatch (core/run/acp.c), fed
 * the bytes an agent writes on its stdout, in chunks of varying size. */
#include <stdlib.h>
#include <string.h>

#include "core/run/acp.h"
#include "sandrun/plugin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sr__acp *acp;

static int sink(void *ud, const char *d, size_t n)
{
	(void)ud;
	(void)d;
	(void)n;
	return SR_OK;
}

static void on_request(void *ud, json_t *id, const char *method, json_t *params)
{
	(void)ud;
	(void)params;
	if (strcmp(method, "fs/read_text_file") == 0)
		sr__acp_respond(acp, id, json_pack("{s:s}", "content", ""));
	else
		sr__acp_respond_error(acp, id, -32601, "no");
}

static void on_note(void *ud, const char *method, json_t *params)
{
	(void)ud;
	(void)method;
	(void)params;
}

static void on_reply(void *ud, json_t *result, json_t *error, const char *message)
{
	(void)ud;
	(void)result;
	(void)error;
	(void)message;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const sr__acp_handlers h = { sink, on_request, on_note, NULL };
	size_t off = 0, step = size ? (size_t)data[0] % 64 + 1 : 1;

	acp = sr__acp_new(uv_default_loop(), &h, NULL);
	/* Requests in flight, so that answers (ids 0, 1) match something. */
	sr__acp_request(acp, "initialize", json_object(), 0, on_reply, NULL);
	sr__acp_request(acp, "session/new", json_object(), 0, on_reply, NULL);
	while (off < size) {
		size_t n = size - off < step ? size - off : step;
		sr__acp_feed(acp, (const char *)data + off, n);
		off += n;
	}
	sr__acp_free(acp);
	return 0;
}
