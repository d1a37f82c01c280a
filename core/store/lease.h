/* Session leases (core/store/lease.c): which service holds a session, so
 * that two services on one database never run the same session at once.
 * A lease names its owner ("host:pid") and lasts until expires, pushed on
 * by the owner's heartbeats; once past, anyone may take it (a crashed
 * service's sessions are taken over). These calls wait for the database:
 * call them off the loop (a worker thread). Times are Unix milliseconds. */
#ifndef SR_CORE_STORE_LEASE_H
#define SR_CORE_STORE_LEASE_H

#include "core/store/db.h"
#include <stdint.h>

/* Take session's lease for owner (busy: for a turn): SR_OK when it was
 * free, expired or owner's already; SR_ESTATE when another holds it, who
 * (and until when, in ms from now) written into holder; SR_EIO. */
int sr__lease_acquire(sr__db *db, const char *session, const char *owner, int busy,
		      int64_t now, int64_t ttl, char *holder, size_t n);
/* The heartbeat: owner holds exactly the sessions of the JSON array held
 * (objects {"session", "busy", "pending"}): each is pushed on to now +
 * ttl, or taken when free or expired, but a pending one (being taken by
 * sr__lease_acquire) only kept; owner's other leases are released, but
 * not one taken since the list was made (its heartbeat since or later).
 * The number of
 * sessions another holds now (taken over while owner did not beat), each
 * logged; or SR_EIO. */
int sr__lease_beat(sr__db *db, const char *owner, const char *held, int64_t now,
		   int64_t since, int64_t ttl);
/* Release every lease of owner (a clean stop). */
int sr__lease_release_all(sr__db *db, const char *owner);

#endif
