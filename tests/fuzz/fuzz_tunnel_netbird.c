/* Fuzz target: the netbird tunnel plugin (plugins/tunnel/netbird.c)
 * against a management API that answers from the fuzzer's input
 * (fuzz_host.h): start, resolve, enrol (and verify) and release, the
 * enrolments, one operation left in flight at fini. */
#include "tests/fuzz/fuzz_plugin.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char token_file[80];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	FILE *f;

	(void)argc;
	(void)argv;
	snprintf(token_file, sizeof(token_file), "/tmp/sandrun-fuzz-nb-%ld", (long)getpid());
	f = fopen(token_file, "w");
	if (!f)
		return 1;
	fputs("nbp_0123456789abcdefghijklmnopqrstuvwxyz\n", f);
	fclose(f);
	chmod(token_file, 0600);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *const config[] = { "api_url", "http://127.0.0.1:33073", "token_file",
				       token_file, "runner_group", "sandrun-runners",
				       "runner_peer", "runner-host", NULL };

	fz_tunnel(data, size, config);
	return 0;
}
