/* Helpers shared by the commands. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli/cli.h"
#include "core/host/log.h"
#include "core/plugins/plugin.h"

void sr__wait_done(void *ud, const sr_result *r)
{
	sr__wait *w = ud;

	/* An answer that lands in the timers' phase must not leave uv_run
	 * to block in poll on the handles still open (an idle connection). */
	if (w->loop)
		uv_stop(w->loop);
	w->done = 1;
	w->status = r->status;
	w->message = r->message ? strdup(r->message) : NULL;
	w->json = r->json ? strdup(r->json) : NULL;
	if (r->data && (w->data = malloc(r->len + 1))) {
		memcpy(w->data, r->data, r->len);
		((char *)w->data)[r->len] = 0;
		w->len = r->len;
	}
}

void sr__wait_run(sr__ctx *ctx, sr__wait *w)
{
	w->loop = ctx->loop;
	while (!w->done && uv_run(ctx->loop, UV_RUN_ONCE))
		;
	w->loop = NULL;
	/* Nothing left to run and no answer: never a success. */
	if (!w->done) {
		w->done = 1;
		w->status = SR_ESTATE;
		free(w->message);
		w->message = strdup("the operation ended without a result");
	}
}

void sr__wait_for(sr__ctx *ctx, sr__wait *w, int rc)
{
	if (rc == SR_OK) {
		sr__wait_run(ctx, w);
		return;
	}
	w->done = 1;
	w->status = rc;
}

void sr__wait_clear(sr__wait *w)
{
	free(w->message);
	free(w->json);
	free(w->data);
	memset(w, 0, sizeof(*w));
}

int sr__cli_setup(sr__ctx *ctx, const char *config_path)
{
	int rc = sr__ctx_init(ctx, uv_default_loop(), config_path);

	if (rc == SR_EINVAL || rc == SR_ENOTFOUND || rc == SR_EIO)
		return SR_EXIT_CONFIG;
	return rc == SR_OK ? SR_EXIT_OK : SR_EXIT_FAIL;
}

sr__plugin *sr__cli_provider(sr__ctx *ctx)
{
	sr__plugin *p = sr__registry_find(ctx->reg, SR_PLUGIN_PROVIDER,
					  ctx->rc.provider);

	if (!p) {
		fprintf(stderr,
			"sandrun: provider '%s' is configured but no such plugin was found (see 'sandrun plugins')\n",
			ctx->rc.provider);
		return NULL;
	}
	if (sr__plugin_start(ctx, p) != SR_OK) {
		fprintf(stderr, "sandrun: provider '%s' failed to start\n",
			ctx->rc.provider);
		return NULL;
	}
	return p;
}
