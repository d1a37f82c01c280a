/* The runner's context: everything one process shares, owned by main. */
#ifndef SR_CORE_CTX_H
#define SR_CORE_CTX_H

#include <jansson.h>
#include <uv.h>

#include "core/host/conf.h"
#include "core/plugins/loader.h"

struct sr__http;

#define SR__SINK_PLUGINS 4

/* Where plugins' events go (host->event): each run adds one for itself
 * and removes it before it is freed. The event is borrowed. */
typedef struct sr__event_sink {
	void (*fn)(void *ud, json_t *event);
	void *ud;
	/* The plugins whose events it takes (NULL-terminated); only[0] NULL:
	 * every plugin's. A run takes those of the plugins it uses. */
	const sr__plugin *only[SR__SINK_PLUGINS];
	struct sr__event_sink *next;
} sr__event_sink;

typedef struct sr__ctx {
	uv_loop_t *loop;
	sr__config *config;
	char *config_file;     /* the file it was read from (or would be) */
	sr__runner_conf rc;
	sr__registry *reg;
	struct sr__http *http; /* created on first use */
	char *state_dir;       /* created (0700) on first use */
	char runner_id[48];    /* sr__ctx_runner_id(), once known */
	/* Where plugins' events go: the runs in progress (none: logged). */
	sr__event_sink *sinks;
	/* Configurations replaced by sr__ctx_reload, kept until cleanup:
	 * runs and plugins going on borrow their strings. */
	sr__config **retired;
	size_t n_retired;
	/* At cleanup, leave what the tunnel made in place (sandrun endpoint
	 * --keep); otherwise it is released then. */
	int keep_tunnels;
} sr__ctx;

/* Load the configuration (path NULL: the default file, absent is fine),
 * scan the plugin directories plus SANDRUN_PLUGIN_PATH, and warn about
 * unknown sections and keys. Returns SR_EINVAL on a bad configuration. */
int sr__ctx_init(sr__ctx *ctx, uv_loop_t *loop, const char *config_path);
/* Releases what the configured tunnel made (unless keep_tunnels), stops
 * the plugins, frees everything. */
void sr__ctx_cleanup(sr__ctx *ctx);
/* Read the configuration file again (sandrund's SIGHUP) for the runs that
 * start from now on. accept (may be NULL) sees the new configuration
 * first and may refuse it (a negative status), as a bad [runner] value
 * does: then nothing changes. The values a process fixes when it starts
 * (state_dir, plugin_dir, node_dir, id) and the plugins' sections (read
 * when each plugin starts) keep their old effect, with a warning naming
 * each that changed. SR_OK, or the error (logged) with the old
 * configuration kept. */
int sr__ctx_reload(sr__ctx *ctx, int (*accept)(const sr__config *next, void *ud),
		   void *ud);
/* The state directory, created with mode 0700; NULL after logging why. */
const char *sr__ctx_state_dir(sr__ctx *ctx);
/* This runner's id: [runner] id, or one made on first use and kept in
 * STATE_DIR/runner-id. Every sandbox the runner creates carries it as the
 * label sandrun.runner, so that listing and the janitor see only this
 * runner's own. NULL after logging why. */
const char *sr__ctx_runner_id(sr__ctx *ctx);

/* The runner's HTTP client, made on first use (with [runner] ca_file);
 * NULL when libcurl cannot be loaded. */
struct sr__http *sr__ctx_http(sr__ctx *ctx);

/* Add s (borrowed until removed) to the sinks of plugins' events. */
void sr__ctx_add_sink(sr__ctx *ctx, sr__event_sink *s);
void sr__ctx_remove_sink(sr__ctx *ctx, sr__event_sink *s);
/* Deliver plugin from's event (borrowed) to every sink that takes it; the
 * number of sinks that did. A sink may remove itself while it runs. */
int sr__ctx_emit(sr__ctx *ctx, const sr__plugin *from, json_t *ev);

#endif
