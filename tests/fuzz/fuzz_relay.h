/* The relay the fuzz targets drive: client tools only (one allowed, one
 * denied), asks denied, logging off; so no input reaches the network. */
#ifndef SR_FUZZ_RELAY_H
#define SR_FUZZ_RELAY_H

#include <stdio.h>
#include <stdlib.h>

#include "core/host/ctx.h"
#include "core/host/log.h"
#include "core/tools/relay.h"

/* Sets *dir to the relay directory (a new temporary); aborts on failure. */
static inline sr__relay *fuzz_relay(sr__ctx *ctx, sr__toolset **tools,
				    sr__guard *guard, char *dir, size_t n)
{
	static const char spec[] =
		"[{\"name\":\"pick\",\"kind\":\"client\",\"permission\":\"allow\","
		"\"input_schema\":{\"type\":\"object\",\"required\":[\"x\"]}},"
		"{\"name\":\"blocked\",\"kind\":\"client\",\"permission\":\"deny\"}]";
	char base[] = "/tmp/sandrun-fuzz-XXXXXX", err[300], journal[128];
	sr__relay_opts o = { 0 };
	json_t *arr = json_loads(spec, 0, NULL);
	sr__relay *relay;

	sr__log_set_stream(fopen("/dev/null", "w")); /* rejections are expected */
	if (!mkdtemp(base))
		abort();
	snprintf(dir, n, "%s/relay", base);
	snprintf(journal, sizeof(journal), "%s/journal", base);
	if (sr__tools_parse(arr, "fuzz", tools, err, sizeof(err)) != SR_OK)
		abort();
	json_decref(arr);
	ctx->loop = uv_default_loop();
	o.dir = dir;
	o.journal = journal;
	o.tools = *tools;
	o.guard = guard;
	o.ask_policy = SR_ASK_DENY;
	if (sr__relay_new(ctx, &o, &relay, err, sizeof(err)) != SR_OK)
		abort();
	return relay;
}

#endif
