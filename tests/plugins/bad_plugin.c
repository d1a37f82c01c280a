/* One source, many broken plugins: each -D builds a descriptor that breaks
 * one loader rule (see loader_test.c). Without any, a valid tunnel.
 * FAILING builds a valid provider ("failing") whose create returns an
 * error at once, without calling back, as the ABI allows. */
#include <stddef.h>

#include "sandrun/plugin.h"

static const sr_host *t_host;

__attribute__((unused)) static int t_init(const sr_host *host, void **self)
{
	t_host = host;
	*self = NULL;
	return SR_OK;
}

__attribute__((unused)) static int t_start(void *self, uint64_t req, sr_done_fn done, void *ud)
{
	sr_result r = { sizeof(r), SR_OK, NULL, "{}", NULL, 0 };

	(void)self;
	(void)req;
	return t_host->complete(t_host, done, ud, &r);
}

/* Lies past a descriptor that ends at fini: the core must not call it. */
__attribute__((unused)) static int t_doctor(void *self, sr_done_fn done, void *ud)
{
	sr_result r = { sizeof(r), SR_OK, NULL,
			"{\"ok\":false,\"detail\":\"read past the descriptor\"}", NULL, 0 };

	(void)self;
	return t_host->complete(t_host, done, ud, &r);
}

#if defined(FAILING)
static int f_create(void *self, uint64_t req, const sr_sandbox_spec *spec,
		    sr_done_fn done, void *ud)
{
	(void)self; (void)req; (void)spec; (void)done; (void)ud;
	return SR_EIO;
}

static const sr_provider_ops ops = { .size = sizeof(sr_provider_ops),
				     .create = f_create };
#elif defined(SMALL_OPS)
/* Declares a table too small to hold even its first operation. */
static const sr_tunnel_ops ops = { .size = sizeof(uint32_t) };
#elif defined(NULL_OPS)
/* A valid table of the current size whose every slot but start is NULL,
 * and a provider declared with a short table: see loader_test. */
static const sr_provider_ops ops = {
	.size = (uint32_t)SR_TABLE_HAS(sr_provider_ops, reconnect),
	.capabilities = NULL,
	.create = NULL,
};
#else
static const sr_tunnel_ops ops = { .size = sizeof(sr_tunnel_ops),
				   .start = t_start };
#endif

static const sr_plugin_descriptor desc = {
#ifdef BAD_MAJOR
	.abi_major = SR_ABI_MAJOR + 1,
#else
	.abi_major = SR_ABI_MAJOR,
#endif
#if defined(BAD_MINOR)
	.abi_minor = SR_ABI_MINOR + 1,
#elif defined(BAD_MAJOR)
	.abi_minor = 0, /* "declares ABI 3.0", whatever the core's minor */
#else
	.abi_minor = SR_ABI_MINOR,
#endif
#if defined(SMALL_DESC)
	.size = (uint32_t)offsetof(sr_plugin_descriptor, ops),
#elif defined(SHORT_DESC)
	.size = (uint32_t)SR_TABLE_HAS(sr_plugin_descriptor, fini),
#else
	.size = sizeof(sr_plugin_descriptor),
#endif
#if defined(BAD_KIND)
	.kind = 9,
#elif defined(NULL_OPS) || defined(FAILING)
	.kind = SR_PLUGIN_PROVIDER,
#else
	.kind = SR_PLUGIN_TUNNEL,
#endif
#if defined(BAD_NAME)
	.name = "Bad Name!",
#elif defined(DUP)
	.name = "twin",
#elif defined(NULL_OPS)
	.name = "hollow",
#elif defined(SHORT_DESC)
	.name = "short",
#elif defined(FAILING)
	.name = "failing",
#else
	.name = "broken",
#endif
	.version = "0.0.1",
	.description = "a plugin that breaks one loader rule",
	.ops = &ops,
	.config_keys = NULL,
#ifdef NO_INIT
	.init = NULL,
#else
	.init = t_init,
#endif
	.fini = NULL,
#ifdef SHORT_DESC
	.doctor = t_doctor,
#else
	.doctor = NULL,
#endif
};

#ifdef NO_ENTRY
/* Exports a symbol, but not the entry point. */
SR_PLUGIN_EXPORT const sr_plugin_descriptor *not_the_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *not_the_entry(void)
{
	return &desc;
}
#else
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &desc;
}
#endif
