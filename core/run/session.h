/* Session pointers: which sandbox and ACP session a sandrun session is
 * on, and how many turns it has had. Durable, in the store (core/store:
 * <state>/sandrun.db, or the PostgreSQL server of [store] url; the files
 * of the earlier store, <state>/sessions, are imported once), written with
 * a compare-and-set on the turn index that the database does. The calls
 * wait for the database, on the process's kept connection; the _async
 * ones do it on libuv's thread pool. */
#ifndef SR_CORE_SESSION_H
#define SR_CORE_SESSION_H

#include <jansson.h>
#include <uv.h>

/* A new id, "ses-" and 16 hex digits. */
void sr__session_new_id(char *buf, size_t n);
int sr__session_valid_id(const char *id);
/* SR_ENOTFOUND when there is none, SR_EIO when it cannot be read. *out is
 * a new reference. */
int sr__session_load(const char *state_dir, const char *id, json_t **out);
/* Write rec (its "turn" must be expected_turn + 1, else SR_EINVAL) only if
 * the stored record's turn is expected_turn (0: no record yet); SR_ESTATE
 * if another writer got there first; SR_EIO if the stored record cannot be
 * read (it is left as it is) or the database cannot be used (logged). */
int sr__session_store(const char *state_dir, const char *id, json_t *rec,
		      int expected_turn);
int sr__session_remove(const char *state_dir, const char *id);
/* Remove id's pointer only if it still names sandbox (which is gone):
 * SR_OK, or SR_ENOTFOUND when it names another or there is none. */
int sr__session_forget_sandbox(const char *state_dir, const char *id,
			       const char *sandbox);

/* sr__session_store off the loop: rec is taken over; done(ud, rc) on the
 * loop afterwards. SR_OK, or SR_ENOMEM (rec released, done not called). */
int sr__session_store_async(uv_loop_t *loop, const char *state_dir, const char *id,
			    json_t *rec, int expected_turn, void (*done)(void *ud, int rc),
			    void *ud);
/* sr__session_remove (sandbox NULL) or sr__session_forget_sandbox off the
 * loop, the same way. */
int sr__session_remove_async(uv_loop_t *loop, const char *state_dir, const char *id,
			     const char *sandbox, void (*done)(void *ud, int rc), void *ud);

/* Where a session's sandbox lives, recorded with each turn's pointer
 * ("home"): {"runner": the runner's id, "locality": the provider's
 * ops->locality when it has one}, beside the record's "provider". */
json_t *sr__session_home(const char *runner, const char *locality);
/* Whether this runner (its provider's name, whether it is SR_CAP_REMOTE,
 * its ops->locality, its runner id) reaches the sandbox of session record
 * rec: 0 when it does (or the record is older than "home");
 * SR__SESSION_PROVIDER_CHANGED when the record names another provider
 * (the configuration's provider changed: no runner of this one continues
 * it); SR__SESSION_ELSEWHERE when it lives with another runner, *retryable
 * then set (the owner, back or alive, continues it). A message naming
 * where in msg. Deciding nothing gone: such a sandbox is neither
 * reconnected nor forgotten. */
#define SR__SESSION_ELSEWHERE 1
#define SR__SESSION_PROVIDER_CHANGED 2
/* The API's and events' code for each ("session_elsewhere", ...). */
const char *sr__session_elsewhere_code(int why);
int sr__session_elsewhere(const json_t *rec, const char *provider, int remote,
			  const char *locality, const char *runner, char *msg, size_t n,
			  int *retryable);
/* sr__session_elsewhere for this runner: provider's name, capabilities
 * and locality, and ctx's runner id. */
struct sr__ctx;
struct sr__plugin;
int sr__session_elsewhere_here(struct sr__ctx *ctx, struct sr__plugin *provider,
			       const json_t *rec, char *msg, size_t n, int *retryable);

#endif
