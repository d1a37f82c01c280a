/* Driving a plugin through its operations against tests/fuzz/fuzz_host.h,
 * whose control plane answers from the fuzzer's input: each operation in
 * turn, the host pumped until it answers (or a step limit), then fini.
 * Nothing a control plane answers may crash the runner, leak, or make an
 * operation complete twice. */
#ifndef SR_FUZZ_PLUGIN_H
#define SR_FUZZ_PLUGIN_H

#include "tests/fuzz/fuzz_host.h"

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);

static int fz_done_count;

static void fz_done(void *ud, const sr_result *r)
{
	(void)ud;
	(void)r;
	fz_done_count++;
}

/* An operation, pumped until it answers: its done runs at most once when
 * it returned SR_OK (a control plane that never answers leaves it
 * pending), never when it returned an error (the completion rule). */
#define fz_settle(call)                                                  \
	do {                                                             \
		int before_ = fz_done_count, rc_ = (call);               \
		fz_pump(200);                                            \
		if (fz_done_count - before_ > (rc_ == SR_OK ? 1 : 0))    \
			abort();                                         \
	} while (0)

static __attribute__((unused)) void fz_tunnel(const uint8_t *data, size_t size,
					     const char *const *config)
{
	const sr_plugin_descriptor *d = sandrun_plugin_entry();
	const sr_tunnel_ops *ops = d->ops;
	void *self = NULL;
	uint64_t req = 0;

	fz_init(data, size, config);
	fz_done_count = 0;
	if (d->init(&fz.pub, &self) != SR_OK) {
		fz_reset();
		return;
	}
	fz_settle(ops->start(self, ++req, fz_done, NULL));
	fz_settle(ops->resolve(self, ++req, "http://127.0.0.1:8080/mcp?x=1", fz_done, NULL));
	if (ops->enrol) {
		fz_settle(ops->enrol(self, ++req, "sb-0123456789abcdef",
				     "{\"ports\":[8080],\"runner\":\"r1\"}", fz_done, NULL));
		fz_settle(ops->enrol(self, ++req, "sb-0123456789abcdef", "{\"verify\":true}",
				     fz_done, NULL));
	}
	if (ops->probe)
		fz_settle(ops->probe(self, ++req, "https://x.example/mcp", fz_done, NULL));
	if (ops->enrolments)
		fz_settle(ops->enrolments(self, ++req, fz_done, NULL));
	if (ops->release)
		fz_settle(ops->release(self, ++req, "sb-0123456789abcdef", fz_done, NULL));
	/* One left in flight when the plugin goes. */
	if (ops->resolve(self, ++req, "http://127.0.0.1:9090/", fz_done, NULL) == SR_OK)
		fz_pump(1);
	d->fini(self);
	fz_pump(50);
	fz_reset();
}

#endif
