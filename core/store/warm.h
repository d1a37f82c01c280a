/* The warm pool's record (core/store/warm.c; table warm): which sandbox
 * each session has in a service's pool, running or parked stopped (with
 * when its TTL ends), so that the sandboxes a killed service kept are
 * found at the next start. Blocking calls: from a sr__dbq job, or before
 * the loop runs. */
#ifndef SR_CORE_STORE_WARM_H
#define SR_CORE_STORE_WARM_H

#include <jansson.h>
#include "core/store/db.h"
#include <stdint.h>

/* session's sandbox is in owner's pool (ttl_at: Unix ms, 0 for none). */
int sr__warm_record(sr__db *db, const char *session, const char *sandbox,
		    const char *provider, int running, int64_t ttl_at, const char *owner);
/* It is no longer (only while the record still names sandbox). */
int sr__warm_forget(sr__db *db, const char *session, const char *sandbox);
/* The records of services that no longer run, made owner's: a JSON
 * array of {"session", "sandbox", "provider", "running", "ttl_at"} (new
 * reference), or NULL (logged). reaches (may be NULL: all) says whether
 * this service reaches a record's sandbox, given the session's pointer
 * (NULL when there is none) and the provider's name; a record it does not
 * reach is left as it is, for a service that does. */
json_t *sr__warm_adopt(sr__db *db, const char *owner,
		       int (*reaches)(void *ud, const json_t *session, const char *provider),
		       void *ud);

#endif
