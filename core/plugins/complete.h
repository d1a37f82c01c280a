/* The completion rule's tools (include/sandrun/plugin.h): results
 * delivered on the next loop iteration, and the wrapper every checked call
 * into a plugin goes through, so that a plugin breaking the rule cannot
 * break its caller. */
#ifndef SR_CORE_COMPLETE_H
#define SR_CORE_COMPLETE_H

#include <uv.h>

#include "core/plugins/loader.h"

/* Copy result and deliver it to done on the next loop iteration. SR_OK,
 * or SR_ENOMEM (done is then never called). */
int sr__complete_later(uv_loop_t *loop, sr_done_fn done, void *ud,
		       const sr_result *result);

/* A checked asynchronous call into plugin p's operation op:
 *
 *	sr__call *g = sr__call_new(p, "create", done, ud);
 *	if (!g)
 *		return SR_ENOMEM;
 *	return sr__call_end(g, ops->create(self, ..., sr__call_done, g));
 *
 * The caller's done runs exactly once when the call returned SR_OK, and
 * never when it returned an error, whatever the plugin did: a callback
 * from inside the call is held and delivered on the next loop iteration;
 * a callback as well as an error return is dropped (and logged). */
typedef struct sr__call sr__call;

sr__call *sr__call_new(sr__plugin *p, const char *op, sr_done_fn done,
			 void *ud);
void sr__call_done(void *ud, const sr_result *result);
int sr__call_end(sr__call *g, int rc);

/* The body of a checked asynchronous call into slot of plugin p's ops
 * table of type type, with done and ud in scope: unsupported, or under
 * the completion rule whatever the plugin does. */
#define SR__ASYNC_CALL(p, type, slot, ...)                                  \
	do {                                                                \
		__typeof__(SR__OP(p, type, slot)) fn_ = SR__OP(p, type, slot); \
		sr__call *g_;                                               \
		if (!fn_)                                                   \
			return sr__complete_unsupported(p, #slot, done, ud); \
		if (!(g_ = sr__call_new(p, #slot, done, ud)))               \
			return SR_ENOMEM;                                   \
		return sr__call_end(g_, fn_(p->self, __VA_ARGS__,           \
					    sr__call_done, g_));            \
	} while (0)

/* The plugin's doctor operation, checked like the others; SR_EUNSUPPORTED
 * (no callback) when it offers none. */
int sr__plugin_doctor(sr__plugin *p, sr_done_fn done, void *ud);

/* An unsupported operation under the rule: the typed SR_EUNSUPPORTED
 * naming plugin and operation, delivered to done later. */
int sr__complete_unsupported(sr__plugin *p, const char *op, sr_done_fn done,
			     void *ud);

#endif
