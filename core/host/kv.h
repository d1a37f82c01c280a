/* The durable key-value areas of the plugins (see sr_host.kv_*): rows of
 * the runner's database (core/store/kv.c, table kv), one area per plugin
 * (ns, its section: "provider.daytona"), so that services sharing a store
 * share them. state is the state directory (the database's place, and the
 * files of the areas before the database, imported once). */
#ifndef SR_CORE_KV_H
#define SR_CORE_KV_H

#include <stddef.h>

#include "sandrun/plugin.h"

int sr__kv_valid_key(const char *key);
int sr__kv_get(const char *state, const char *ns, const char *key, char **value,
	       size_t *len);
int sr__kv_put(const char *state, const char *ns, const char *key, const void *value,
	       size_t len);
int sr__kv_delete(const char *state, const char *ns, const char *key);
/* See sr_host.kv_cas. */
int sr__kv_cas(const char *state, const char *ns, const char *key, const void *expected,
	       size_t expected_len, const void *value, size_t len);
int sr__kv_list(const char *state, const char *ns, sr_kv_visit_fn visit, void *ud);

#endif
