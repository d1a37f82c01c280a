/* Fuzz target: the configuration parser and the [runner] validation. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/host/conf.h"
#include "core/host/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int fd = memfd_create("sandrun-fuzz-conf", 0);

	(void)argc;
	(void)argv;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	sr__log_set_stream(fopen("/dev/null", "w")); /* errors are expected */
	return fd < 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const known[] = { "root", "bwrap", NULL };
	sr__config *c = sr__config_new();
	sr__runner_conf rc;
	FILE *f = fopen(path, "w");

	fwrite(data, 1, size, f);
	fclose(f);
	if (sr__config_load(c, path) == 0) {
		sr__config_runner(c, &rc);
		sr__config_warn_unknown(c, "provider.local", known);
		sr__config_get(c, "provider.local", "root");
	}
	sr__config_free(c);
	return 0;
}
