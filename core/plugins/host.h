/* The host table handed to each plugin. */
#ifndef SR_CORE_HOST_H
#define SR_CORE_HOST_H

#include "sandrun/plugin.h"

struct sr__ctx;
struct sr__plugin;

typedef struct sr__host_priv {
	sr_host pub;                /* first: &priv->pub is what plugins see */
	struct sr__ctx *ctx;
	struct sr__plugin *plugin;
	char *plugin_dir;
	struct proc_hold *procs;    /* its processes still running */
} sr__host_priv;

sr__host_priv *sr__host_new(struct sr__ctx *ctx, struct sr__plugin *p);
/* Free h. The plugin's processes still running are not its any more:
 * their output and exit, when they come, go nowhere. */
void sr__host_free(sr__host_priv *h);

#endif
