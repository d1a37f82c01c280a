/* Starting and stopping a loaded plugin: its host table and init/fini. */
#include "config.h"

#include "core/plugins/host.h"
#include "core/plugins/plugin.h"

int sr__plugin_start(sr__ctx *ctx, sr__plugin *p)
{
	if (p->started)
		return p->started > 0 ? SR_OK : p->started;
	p->host = sr__host_new(ctx, p);
	if (!p->host)
		return SR_ENOMEM;
	p->started = p->desc->init(&p->host->pub, &p->self);
	if (p->started == SR_OK)
		p->started = 1;
	else if (p->started > 0)
		p->started = SR_EIO;
	return p->started > 0 ? SR_OK : p->started;
}

void sr__plugin_stop(sr__plugin *p)
{
	if (p->started > 0 && p->desc->fini)
		p->desc->fini(p->self);
	p->started = 0;
	p->self = NULL;
	sr__host_free(p->host);
	p->host = NULL;
}
