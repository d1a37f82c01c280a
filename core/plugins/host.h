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
} sr__host_priv;

sr__host_priv *sr__host_new(struct sr__ctx *ctx, struct sr__plugin *p);
void sr__host_free(sr__host_priv *h);

#endif
