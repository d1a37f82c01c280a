/* The warm pool's record in the runner's database (warm.h; table warm,
 * schema version 4 of core/store/db.c). */
#include "config.h"

#include <sys/time.h>

#include "core/store/db.h"
#include "core/store/warm.h"
#include "sandrun/plugin.h"

int sr__warm_record(sr__db *db, const char *session, const char *sandbox,
		    const char *provider, int running, int64_t ttl_at, const char *owner)
{
	if (!db)
		return SR_EIO;
	if (sr__db_exec(db, NULL, "INSERT INTO warm (session, sandbox, provider, running, "
			"ttl_at, owner) VALUES ($1, $2, $3, $4, NULLIF($5, 0), $6) ON CONFLICT "
			"(session) DO UPDATE SET sandbox = excluded.sandbox, provider = "
			"excluded.provider, running = excluded.running, ttl_at = excluded.ttl_at, "
			"owner = excluded.owner", "tttiit", session, sandbox, provider,
			(int64_t)running, ttl_at, owner) < 0)
		return sr__db_error(db, "pool", "cannot record a warm sandbox");
	return SR_OK;
}

int sr__warm_forget(sr__db *db, const char *session, const char *sandbox)
{
	if (!db)
		return SR_EIO;
	if (sr__db_exec(db, NULL, "DELETE FROM warm WHERE session = $1 AND sandbox = $2", "tt",
			session, sandbox) < 0)
		return sr__db_error(db, "pool", "cannot forget a warm sandbox");
	return SR_OK;
}

static int64_t now_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

json_t *sr__warm_adopt(sr__db *db, const char *owner,
		       int (*reaches)(void *ud, const json_t *session, const char *provider),
		       void *ud)
{
	json_t *out = json_array();
	sr__db_rows *r = NULL;
	int rc = SR_OK;

	if (!out || sr__db_begin(db) != SR_OK) {
		json_decref(out);
		sr__db_error(db, "pool", "cannot read the warm sandboxes");
		return NULL;
	}
	/* With each record: who took its session over since (a lease of
	 * another owner), and whether its owner still holds the session's
	 * lease (how a service of another host is known to run). */
	if (sr__db_exec(db, &r, "SELECT session, sandbox, provider, running, COALESCE(ttl_at, "
			"0), owner, (SELECT l.owner FROM leases l WHERE l.session = warm.session "
			"AND l.owner != warm.owner AND l.expires >= $2), (SELECT COUNT(*) FROM leases l WHERE "
			"l.session = warm.session AND l.owner = warm.owner AND l.expires >= $2), "
			"(SELECT s.record FROM sessions s WHERE s.id = warm.session) "
			"FROM warm WHERE owner != $1", "ti", owner, now_ms()) < 0)
		rc = SR_EIO;
	for (size_t i = 0; rc == SR_OK && i < sr__db_nrows(r); i++) {
		const char *session = sr__db_text(r, i, 0);
		const char *was = sr__db_text(r, i, 5);
		const char *taker = sr__db_text(r, i, 6);
		int n;
		if (sr__db_owner_here(was) ? sr__db_owner_alive(was) : sr__db_int(r, i, 7) > 0)
			continue; /* another service's, running */
		if (taker && (!sr__db_owner_here(taker) || sr__db_owner_alive(taker))) {
			/* A running service took the session over since (its
			 * lease): the sandbox is that service's business. */
			if (sr__db_exec(db, NULL, "DELETE FROM warm WHERE session = $1 AND owner = $2",
					"tt", session, was) < 0)
				rc = SR_EIO;
			continue;
		}
		if (reaches) {
			const char *text = sr__db_text(r, i, 8);
			json_t *rec = text ? json_loads(text, 0, NULL) : NULL;
			int yes = reaches(ud, rec, sr__db_text(r, i, 2));
			json_decref(rec);
			if (!yes)
				continue; /* another runner's sandbox: for it */
		}
		/* Only while it is still the dead owner's (another service
		 * starting at once adopts it, or this one). */
		n = sr__db_exec(db, NULL, "UPDATE warm SET owner = $1 WHERE session = $2 AND "
				"owner = $3", "ttt", owner, session, was);
		if (n < 0)
			rc = SR_EIO;
		else if (n == 1)
			json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:b, s:I}", "session",
				session, "sandbox", sr__db_text(r, i, 1), "provider",
				sr__db_text(r, i, 2), "running", (int)sr__db_int(r, i, 3),
				"ttl_at", (json_int_t)sr__db_int(r, i, 4)));
	}
	sr__db_rows_free(r);
	if (rc != SR_OK || sr__db_end(db, rc == SR_OK) != SR_OK) {
		sr__db_error(db, "pool", "cannot read the warm sandboxes");
		if (rc != SR_OK)
			sr__db_end(db, 0);
		json_decref(out);
		return NULL;
	}
	return out;
}
