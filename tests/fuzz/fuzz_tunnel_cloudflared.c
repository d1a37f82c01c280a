/* Fuzz target: the cloudflared tunnel plugin (plugins/tunnel/cloudflared.c) against a
 * control plane that answers from the fuzzer's input (fuzz_host.h): start,
 * resolve, enrol and release, probe, one operation left in flight at fini. */
#include "tests/fuzz/fuzz_plugin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const config[] = { "binary", "/bin/true", "start_timeout", "5", NULL };

	fz_tunnel(data, size, config);
	return 0;
}
