/* Session pointers: which sandbox and ACP session a sandrun session is
 * on, and how many turns it has had. Durable, in the SQLite database
 * <state>/sandrun.db (the files of the earlier store, <state>/sessions,
 * are imported once), written with a compare-and-set on the turn index
 * that the database does. Each call opens its own connection: several
 * processes may share a state directory. */
#ifndef SR_CORE_SESSION_H
#define SR_CORE_SESSION_H

#include <jansson.h>

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

#endif
