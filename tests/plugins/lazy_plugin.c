/* A provider whose park and destroy answer 200 ms later (through the
 * host's timer), as a remote provider's do: pool_test sees a teardown
 * that is on its way. Its other operations are not offered. */
#include <stddef.h>
#include <stdlib.h>

#include "sandrun/plugin.h"

static const sr_host *host;

typedef struct later {
	sr_done_fn done;
	void *ud;
	sr_timer *timer;
} later;

static void fire(void *arg)
{
	later *l = arg;
	sr_result r = { sizeof(r), SR_OK, NULL, "{}", NULL, 0 };

	host->timer_stop(l->timer);
	l->done(l->ud, &r);
	free(l);
}

static int answer_later(sr_done_fn done, void *ud)
{
	later *l = calloc(1, sizeof(*l));

	if (!l)
		return SR_ENOMEM;
	l->done = done;
	l->ud = ud;
	if (!(l->timer = host->timer_start(host, 200, 0, fire, l))) {
		free(l);
		return SR_ENOMEM;
	}
	return SR_OK;
}

static uint32_t l_capabilities(void *self)
{
	(void)self;
	return 0;
}

static int l_park(void *self, uint64_t req, const char *id, int mode, sr_done_fn done,
		  void *ud)
{
	(void)self;
	(void)req;
	(void)id;
	(void)mode;
	return answer_later(done, ud);
}

static int l_destroy(void *self, uint64_t req, const char *id, sr_done_fn done, void *ud)
{
	(void)self;
	(void)req;
	(void)id;
	return answer_later(done, ud);
}

static int l_init(const sr_host *h, void **self)
{
	host = h;
	*self = NULL;
	return SR_OK;
}

static const sr_provider_ops ops = {
	.size = sizeof(sr_provider_ops),
	.capabilities = l_capabilities,
	.park = l_park,
	.destroy = l_destroy,
};

static const sr_plugin_descriptor desc = {
	.abi_major = SR_ABI_MAJOR,
	.abi_minor = SR_ABI_MINOR,
	.size = sizeof(sr_plugin_descriptor),
	.kind = SR_PLUGIN_PROVIDER,
	.name = "lazy",
	.version = "0.0.1",
	.description = "parks and destroys 200 ms later",
	.ops = &ops,
	.config_keys = NULL,
	.init = l_init,
	.fini = NULL,
	.doctor = NULL,
};

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &desc;
}
