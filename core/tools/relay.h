/* The runner side of the relay protocol (doc/relay-protocol.md). */
#ifndef SR_CORE_RELAY_H
#define SR_CORE_RELAY_H

#include <jansson.h>
#include <uv.h>

#include "core/host/ctx.h"
#include "core/tools/tools.h"

typedef struct sr__relay sr__relay;

/* How long the CPU latency request outlives the last call in flight: the
 * next call of a burst finds the CPUs still polling. */
#define SR__RELAY_CPU_LINGER_MS 50
/* Linux's PM QoS CPU latency request (writable by root). */
#define SR__CPU_LATENCY_DEVICE "/dev/cpu_dma_latency"

enum sr__ask_policy {
	SR_ASK_WAIT = 0,    /* emit permission.request, wait for an answer */
	SR_ASK_APPROVE = 1, /* answer every ask with allow */
	SR_ASK_DENY = 2     /* answer every ask with deny */
};

typedef struct sr__relay_opts {
	const char *dir;          /* the relay directory (created 0700) */
	const char *journal;      /* runner-side claims, outside the sandbox */
	const sr__toolset *tools; /* borrowed */
	const sr__guard *guard;   /* borrowed */
	int ask_policy;
	uint64_t ask_timeout_ms;  /* 0: 10 minutes */
	uint64_t poll_ms;         /* safety poll; 0: 2000 */
	unsigned publish_attempts; /* writing a response; 0: 10 */
	unsigned max_per_endpoint; /* callbacks at once per host:port; 0: 16 */
	/* A PM QoS CPU latency device (/dev/cpu_dma_latency) on which to
	 * request zero wakeup latency while calls are in flight and for
	 * SR__RELAY_CPU_LINGER_MS after the last; NULL: never. */
	const char *cpu_latency_device;
	/* Every event (tool.call, tool.result, permission.request, ...),
	 * borrowed for the call. */
	void (*event)(void *ud, json_t *event);
	void *ud;
} sr__relay_opts;

/* Create the relay (the directories too). */
int sr__relay_new(sr__ctx *ctx, const sr__relay_opts *opts, sr__relay **out,
		  char *err, size_t errlen);
/* Answer interrupted claims of an earlier runner with an error, then pick
 * up what is waiting and watch for more. */
int sr__relay_start(sr__relay *r);
/* Remove every protocol file (stale requests, responses, temporaries) and
 * claims: before a turn starts, when nothing is in flight. */
int sr__relay_sweep(sr__relay *r);
/* Answer a pending permission request. SR_ENOTFOUND if none is waiting. */
int sr__relay_permission(sr__relay *r, const char *call_id, int allow);
/* Stop asking: pending and later asks are answered as policy says. */
void sr__relay_set_ask_policy(sr__relay *r, int policy);
/* Stop watching; calls in flight are abandoned (their claims remain, so a
 * restarted relay answers them as interrupted). Frees r after close. */
void sr__relay_free(sr__relay *r);
size_t sr__relay_in_flight(const sr__relay *r);
/* Handle DIR/name now if it is a request (what the watch does when it sees
 * the name appear). For tests and fuzzing. */
int sr__relay_take(sr__relay *r, const char *name);

/* A call made in-process (the loopback MCP server): the same claim,
 * validation, guard and execution as a request file; done receives the
 * response object ({"v","id","status",...}), borrowed. */
typedef void (*sr__relay_done_fn)(void *ud, json_t *response);
int sr__relay_call(sr__relay *r, const char *tool, json_t *args,
		   sr__relay_done_fn done, void *ud);

/* The MCP tool result for a callback's HTTP answer: MCP-shaped bodies pass
 * through, anything else is one text item; text capped at 100,000 bytes
 * with a note. New reference. Exposed for tests. */
json_t *sr__relay_callback_result(int http_status, const char *body,
				  size_t len);

#endif
