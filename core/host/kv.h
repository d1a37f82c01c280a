/* The durable key-value area (see sr_host.kv_*), under a directory. */
#ifndef SR_CORE_KV_H
#define SR_CORE_KV_H

#include <stddef.h>

#include "sandrun/plugin.h"

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
