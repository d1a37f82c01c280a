/* The relay bridge: serves a relay directory that lives inside a sandbox
 * the runner reaches only through its provider (a remote sandbox), by
 * mirroring it into a runner-side relay directory that the ordinary relay
 * loop (core/tools/relay.c) serves. doc/relay-protocol.md, "Remote
 * sandboxes", states the order of operations and what holds across a
 * restart. */
#ifndef SR_CORE_RELAY_BRIDGE_H
#define SR_CORE_RELAY_BRIDGE_H

#include <jansson.h>

#include "core/host/ctx.h"
#include "core/plugins/loader.h"

typedef struct sr__bridge sr__bridge;

typedef struct sr__bridge_opts {
	sr__plugin *provider;   /* borrowed */
	const char *sandbox;    /* the sandbox's id */
	const char *remote_dir; /* the relay directory, a path in the sandbox */
	const char *local_dir;  /* the runner-side relay directory */
	const char *journal;    /* runner-side markers (the relay's journal) */
	/* The shim's path in the sandbox, for `sandrun-shim watch` over an
	 * exec channel when the provider has no watch of its own; NULL:
	 * polling only. */
	const char *shim;
	int no_provider_watch;  /* use the shim's watch even with SR_CAP_WATCH */
	uint64_t poll_ms;       /* listing while a watch works; 0: 10000 */
	uint64_t lost_poll_ms;  /* listing while none does; 0: 1000 */
	unsigned attempts;      /* tries of one provider operation; 0: 8 */
	/* Events (relay.bridge.watch, relay.bridge.failed, ...), borrowed. */
	void (*event)(void *ud, json_t *event);
	void *ud;
} sr__bridge_opts;

int sr__bridge_new(sr__ctx *ctx, const sr__bridge_opts *o, sr__bridge **out,
		   char *err, size_t errlen);
/* Before a turn: answer what an earlier runner left in the sandbox's
 * directory (requests never run get an error; a call that was running
 * gets an error unless its answer was already delivered; stale answers and
 * temporaries go), then remove the bridge's markers. done(ud, status,
 * message) once, later (SR_OK, or the first failure). */
int sr__bridge_sweep(sr__bridge *b, void (*done)(void *ud, int status,
						 const char *message),
		     void *ud);
/* Watch (and poll) the sandbox's directory and the local one. */
int sr__bridge_start(sr__bridge *b);
size_t sr__bridge_in_flight(const sr__bridge *b);
/* Stop; operations in flight finish into nothing. Frees b once the last
 * of them came back, then calls closed(ud) when it is not NULL (an owner
 * that must not end before the provider answered, say). */
void sr__bridge_free(sr__bridge *b, void (*closed)(void *ud), void *ud);

#endif
