/* Starting and stopping a loaded plugin: its host table and init/fini. */
#ifndef SR_CORE_PLUGIN_H
#define SR_CORE_PLUGIN_H

#include "core/host/ctx.h"
#include "core/plugins/loader.h"

/* Create the plugin's host table and call its init (once). */
int sr__plugin_start(sr__ctx *ctx, sr__plugin *p);
/* Call the plugin's fini (when started) and free its host table. */
void sr__plugin_stop(sr__plugin *p);

#endif
