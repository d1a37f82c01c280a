/* Fuzz target: the ngrok tunnel plugin (plugins/tunnel/ngrok.c) against a
 * control plane that answers from the fuzzer's input (fuzz_host.h): start,
 * resolve, enrol and release, probe, one operation left in flight at fini. */
#include "tests/fuzz/fuzz_plugin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const config[] = { "api_url", "http://127.0.0.1:4040", NULL };

	fz_tunnel(data, size, config);
	return 0;
}
