/* Fuzz target: the shim's MCP message handler, one input line a message.
 * The relay directory does not exist, so tools/call fails fast. */
#define SR_SHIM_FUZZ
#include "../../shim/shim.c"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (!freopen("/dev/null", "w", stdout))
		return 1;
	relay_dir = "/nonexistent/sandrun-fuzz-relay";
	timeout_ms = 1;
	page_size = 2;
	specs = json_loads("[{\"name\":\"echo\",\"inputSchema\":{\"type\":\"object\"}},"
			   "{\"name\":\"a\",\"inputSchema\":{}},{\"name\":\"b\"}]", 0, NULL);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1), *line, *save = NULL;

	memcpy(buf, data, size);
	buf[size] = 0;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		handle_message(line, strlen(line));
	free(buf);
	/* A call that was published (it cannot be: the relay directory does
	 * not exist) would wait in serve_loop(); none is left behind. */
	return 0;
}
