/* Fuzz target: a tools file as `sandrun run --tools` and `sandrun tools
 * serve` read it (core/tools/tools.c: sr__tools_load), from a memory file:
 * any bytes, a clear error or a tool set, never a crash; the specs the
 * sandbox would see are made from a set that loads. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/host/log.h"
#include "core/tools/tools.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int fd = memfd_create("sandrun-fuzz-tools", 0);

	(void)argc;
	(void)argv;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	sr__log_set_stream(fopen("/dev/null", "w"));
	return fd < 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sr__toolset *set = NULL;
	char err[1024];
	FILE *f = fopen(path, "w");

	fwrite(data, 1, size, f);
	fclose(f);
	if (sr__tools_load(path, &set, err, sizeof(err)) == 0) {
		json_decref(sr__tools_specs(set));
		if (set->n)
			sr__tools_find(set, set->tools[0].name);
		sr__tools_free(set);
	}
	return 0;
}
