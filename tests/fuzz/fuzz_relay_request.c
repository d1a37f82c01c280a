/* Fuzz target: the relay's reading and validation of a request file (the
 * bytes a sandbox can put in DIR/<id>.req), through to the guard and a
 * client tool's pause. No network: the tools are client or denied. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_relay.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sr__ctx ctx;
static sr__toolset *tools;
static sr__guard guard;
static sr__relay *relay;
static char dir[64], req[128], res[128];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	relay = fuzz_relay(&ctx, &tools, &guard, dir, sizeof(dir));
	snprintf(req, sizeof(req), "%s/f1.req", dir);
	snprintf(res, sizeof(res), "%s/f1.res", dir);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FILE *f = fopen(req, "w");

	if (!f)
		abort();
	fwrite(data, 1, size, f);
	fclose(f);
	sr__relay_take(relay, "f1.req");
	uv_run(ctx.loop, UV_RUN_NOWAIT);
	if (access(req, F_OK) == 0 || access(res, F_OK) != 0)
		abort(); /* every request is consumed and answered */
	unlink(res);
	return 0;
}
