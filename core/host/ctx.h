/* The runner's context: everything one process shares, owned by main. */
#ifndef SR_CORE_CTX_H
#define SR_CORE_CTX_H

#include <jansson.h>
#include <uv.h>

#include "core/host/conf.h"
#include "core/plugins/loader.h"

struct sr__http;

typedef struct sr__ctx {
	uv_loop_t *loop;
	sr__config *config;
	sr__runner_conf rc;
	sr__registry *reg;
	struct sr__http *http; /* created on first use */
	char *state_dir;       /* created (0700) on first use */
	char runner_id[48];    /* sr__ctx_runner_id(), once known */
	/* Where plugins' events go (host->event): the run in progress. The
	 * event is borrowed. NULL: logged. */
	void (*event_sink)(void *ud, json_t *event);
	void *event_ud;
} sr__ctx;

/* Load the configuration (path NULL: the default file, absent is fine),
 * scan the plugin directories plus SANDRUN_PLUGIN_PATH, and warn about
 * unknown sections and keys. Returns SR_EINVAL on a bad configuration. */
int sr__ctx_init(sr__ctx *ctx, uv_loop_t *loop, const char *config_path);
void sr__ctx_cleanup(sr__ctx *ctx);
/* The state directory, created with mode 0700; NULL after logging why. */
const char *sr__ctx_state_dir(sr__ctx *ctx);
/* This runner's id: [runner] id, or one made on first use and kept in
 * STATE_DIR/runner-id. Every sandbox the runner creates carries it as the
 * label sandrun.runner, so that listing and the janitor see only this
 * runner's own. NULL after logging why. */
const char *sr__ctx_runner_id(sr__ctx *ctx);

#endif
