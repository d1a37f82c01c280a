/*
 * provider-hello: the smallest third-party sandrun provider.
 *
 * It is built outside sandrun's tree with nothing but the installed
 * header (pkg-config sandrun-plugin). Its "sandboxes" are records in the
 * host's key-value area; it runs no processes. Everything it leaves out is
 * reported by sandrun as "operation not supported".
 */
#include <stdio.h>
#include <string.h>

#include <sandrun/plugin.h>

typedef struct hello {
	const sr_host *host;
	const char *greeting;
} hello;

/* Every answer here is known at once: the host delivers it on its next
 * loop iteration, as the completion rule wants (never from inside the
 * call that asked). */
static int reply(const hello *h, sr_done_fn done, void *ud, int status,
		 const char *msg, const char *json)
{
	sr_result r = { sizeof(r), status, msg, json, NULL, 0 };

	return h->host->complete(h->host, done, ud, &r);
}

static uint32_t h_capabilities(void *self)
{
	(void)self;
	return 0;
}

static int h_create(void *self, uint64_t req, const sr_sandbox_spec *spec,
		    sr_done_fn done, void *ud)
{
	hello *h = self;
	unsigned char rnd[4];
	char id[32], json[128];

	int rc;

	(void)req;
	(void)spec;
	rc = h->host->random_bytes(h->host, rnd, sizeof(rnd));
	if (rc != SR_OK)
		return rc; /* an error return: no callback */
	snprintf(id, sizeof(id), "hello-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
		 rnd[3]);
	rc = h->host->kv_put(h->host, id, h->greeting, strlen(h->greeting));
	if (rc != SR_OK)
		return rc;
	snprintf(json, sizeof(json), "{\"id\":\"%s\",\"workspace\":\"/\"}", id);
	return reply(h, done, ud, SR_OK, NULL, json);
}

static int h_destroy(void *self, uint64_t req, const char *id,
		     sr_done_fn done, void *ud)
{
	hello *h = self;
	int rc = h->host->kv_delete(h->host, id);

	(void)req;
	return reply(h, done, ud, rc, rc ? "hello: no such sandbox" : NULL, NULL);
}

static int h_doctor(void *self, sr_done_fn done, void *ud)
{
	hello *h = self;
	char json[256];

	snprintf(json, sizeof(json), "{\"ok\":true,\"detail\":\"%s\"}", h->greeting);
	return reply(h, done, ud, SR_OK, NULL, json);
}

static hello state;

static int h_init(const sr_host *host, void **self)
{
	const char *g = host->config_get(host, "greeting");

	state.host = host;
	state.greeting = g ? g : "hello from a third-party plugin";
	if (strchr(state.greeting, '"') || strchr(state.greeting, '\\'))
		return host->config_invalid(host, "greeting",
					    "no quotes or backslashes");
	*self = &state;
	return SR_OK;
}

/* Only the operations it has: the table is cut after destroy, so every
 * later slot reads as unsupported. */
static const sr_provider_ops ops = {
	.size = (uint32_t)SR_TABLE_HAS(sr_provider_ops, destroy),
	.capabilities = h_capabilities,
	.create = h_create,
	.destroy = h_destroy,
};

static const char *const keys[] = { "greeting", NULL };

static const sr_plugin_descriptor descriptor = {
	.abi_major = SR_ABI_MAJOR,
	.abi_minor = SR_ABI_MINOR,
	.size = sizeof(sr_plugin_descriptor),
	.kind = SR_PLUGIN_PROVIDER,
	.name = "hello",
	.version = "2.0.0",
	.description = "an example provider built out of tree",
	.ops = &ops,
	.config_keys = keys,
	.init = h_init,
	.fini = NULL,
	.doctor = h_doctor,
};

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &descriptor;
}
