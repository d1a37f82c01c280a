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

/* The durable key-value area under dir (one file per key, replaced by
 * rename). Also used directly by tests. */
int sr__kv_valid_key(const char *key);
int sr__kv_get(const char *dir, const char *key, char **value, size_t *len);
int sr__kv_put(const char *dir, const char *key, const void *value,
	       size_t len);
int sr__kv_delete(const char *dir, const char *key);
/* See sr_host.kv_cas. */
int sr__kv_cas(const char *dir, const char *key, const void *expected,
	       size_t expected_len, const void *value, size_t len);
int sr__kv_list(const char *dir, sr_kv_visit_fn visit, void *ud);

#endif
