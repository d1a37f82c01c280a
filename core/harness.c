/* Checked calls into harness plugins. */
#include "config.h"

#include "core/cli.h"
#include "core/harness.h"

json_t *sr__harness_describe(sr__plugin *p)
{
	int (*fn)(void *, sr_done_fn, void *) = SR__OP(p, sr_harness_ops, describe);
	sr__wait w = { 0 };
	json_t *desc = NULL;

	if (fn)
		fn(p->self, sr__wait_done, &w); /* synchronous by contract */
	if (w.status == SR_OK && w.json)
		desc = json_loads(w.json, 0, NULL);
	sr__wait_clear(&w);
	if (!json_is_object(desc)) {
		json_decref(desc);
		desc = json_object();
	}
	return desc;
}
