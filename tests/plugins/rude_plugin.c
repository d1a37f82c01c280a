/* A provider that breaks the completion rule both ways (see
 * complete_test.c): the core's checked calls must still give their caller
 * exactly one callback after an SR_OK return and none after an error. */
#include <stddef.h>

#include "sandrun/plugin.h"

static int counter;

static void answer(sr_done_fn done, void *ud, int status, const char *json)
{
	sr_result r = { sizeof(r), status, status ? "rude: failed" : NULL, json, NULL, 0 };

	done(ud, &r);
}

static uint32_t r_capabilities(void *self)
{
	(void)self;
	return 0;
}

/* Calls back from inside the call, then returns SR_OK. */
static int r_create(void *self, uint64_t req, const sr_sandbox_spec *spec,
		    sr_done_fn done, void *ud)
{
	(void)self;
	(void)req;
	(void)spec;
	answer(done, ud, SR_OK, "{\"id\":\"rude-1\",\"workspace\":\"/\"}");
	return SR_OK;
}

/* Returns an error without a callback: as the rule wants. */
static int r_reconnect(void *self, uint64_t req, const char *id,
		       const sr_network_policy *policy, sr_done_fn done, void *ud)
{
	(void)self;
	(void)req;
	(void)id;
	(void)policy;
	(void)done;
	(void)ud;
	return SR_EINVAL;
}

/* Calls back twice from inside the call. */
static int r_park(void *self, uint64_t req, const char *id, int mode,
		  sr_done_fn done, void *ud)
{
	(void)self;
	(void)req;
	(void)id;
	(void)mode;
	answer(done, ud, SR_OK, "{\"n\":1}");
	answer(done, ud, SR_OK, "{\"n\":2}");
	return SR_OK;
}

/* Calls back with a failure and also returns an error. */
static int r_destroy(void *self, uint64_t req, const char *id,
		     sr_done_fn done, void *ud)
{
	(void)self;
	(void)req;
	(void)id;
	counter++;
	answer(done, ud, SR_EIO, NULL);
	return SR_EIO;
}

static int r_init(const sr_host *host, void **self)
{
	(void)host;
	*self = &counter;
	return SR_OK;
}

static const sr_provider_ops ops = {
	.size = sizeof(sr_provider_ops),
	.capabilities = r_capabilities,
	.create = r_create,
	.reconnect = r_reconnect,
	.park = r_park,
	.destroy = r_destroy,
};

static const sr_plugin_descriptor desc = {
	.abi_major = SR_ABI_MAJOR,
	.abi_minor = SR_ABI_MINOR,
	.size = sizeof(sr_plugin_descriptor),
	.kind = SR_PLUGIN_PROVIDER,
	.name = "rude",
	.version = "0.0.1",
	.description = "breaks the completion rule both ways",
	.ops = &ops,
	.config_keys = NULL,
	.init = r_init,
	.fini = NULL,
	.doctor = NULL,
};

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &desc;
}
