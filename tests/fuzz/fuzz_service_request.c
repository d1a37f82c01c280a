/* Fuzz target: what a token holder sends sandrund (core/service/
 * request.c): a POST /v1/runs body, parsed and checked; when it passes,
 * its tools as the run takes them (core/tools/tools.c), their callback
 * URLs through the plan's rule (core/run/plan.c), and each tool's
 * arguments check against the body's own "args" if it has one. Nothing
 * may crash or leak, whatever the body. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host/log.h"
#include "core/run/plan.h"
#include "core/service/request.h"
#include "core/tools/tools.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	sr__log_set_stream(fopen("/dev/null", "w")); /* refusals are expected */
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sr__svc_request q;
	sr__toolset *set = NULL;
	const char *code;
	char msg[1024];

	if (sr__svc_request_parse((const char *)data, size, &q, &code, msg, sizeof(msg)) != 0)
		return 0;
	if (q.tools && sr__tools_parse(q.tools, "tools", &set, msg, sizeof(msg)) == 0) {
		json_t *empty = json_object(), *args = json_object_get(q.root, "args");
		sr__plan_callbacks_ok(set, "10.0.0.1,metadata.example", msg, sizeof(msg));
		for (size_t i = 0; i < set->n; i++)
			sr__tools_check_args(&set->tools[i], args ? args : empty, msg, sizeof(msg));
		json_decref(empty);
		sr__tools_free(set);
	}
	sr__svc_request_clear(&q);
	return 0;
}
