/* Fuzz target: the relay's reading and validation of a request file (the
 * bytes a sandbox can put in DIR/<id>.req), through to the guard and a
 * client tool's pause. No network: the tools are client or denied. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ctx.h"
#include "core/log.h"
#include "core/relay.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sr__ctx ctx;
static sr__toolset *tools;
static sr__guard guard;
static sr__relay *relay;
static char dir[64], req[128], res[128];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char base[] = "/tmp/sandrun-fuzz-XXXXXX", err[300], journal[128];
	sr__relay_opts o = { 0 };
	json_t *arr = json_loads("[{\"name\":\"pick\",\"kind\":\"client\",\"permission\":\"allow\","
				 "\"input_schema\":{\"type\":\"object\",\"required\":[\"x\"]}},"
				 "{\"name\":\"blocked\",\"kind\":\"client\",\"permission\":\"deny\"}]",
				 0, NULL);

	(void)argc;
	(void)argv;
	sr__log_set_stream(fopen("/dev/null", "w")); /* rejections are expected */
	if (!mkdtemp(base))
		abort();
	snprintf(dir, sizeof(dir), "%s/relay", base);
	snprintf(journal, sizeof(journal), "%s/journal", base);
	snprintf(req, sizeof(req), "%s/f1.req", dir);
	snprintf(res, sizeof(res), "%s/f1.res", dir);
	if (sr__tools_parse(arr, "fuzz", &tools, err, sizeof(err)) != SR_OK)
		abort();
	json_decref(arr);
	ctx.loop = uv_default_loop();
	o.dir = dir;
	o.journal = journal;
	o.tools = tools;
	o.guard = &guard;
	o.ask_policy = SR_ASK_DENY;
	if (sr__relay_new(&ctx, &o, &relay, err, sizeof(err)) != SR_OK)
		abort();
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
