/* Calls into the configured tunnel plugin, checked as core/plugins/provider.h
 * checks a provider's: a missing slot is a typed SR_EUNSUPPORTED naming
 * plugin and operation, and the completion rule holds for the caller
 * whatever the plugin does. */
#ifndef SR_CORE_TUNNEL_H
#define SR_CORE_TUNNEL_H

#include "core/plugins/loader.h"

int sr__tunnel_start(sr__plugin *p, uint64_t req, sr_done_fn done, void *ud);
int sr__tunnel_resolve(sr__plugin *p, uint64_t req, const char *local_url,
		       sr_done_fn done, void *ud);
int sr__tunnel_enrol(sr__plugin *p, uint64_t req, const char *sandbox_id,
		     const char *params_json, sr_done_fn done, void *ud);
/* Whether the plugin can enrol a sandbox (its enrol operation). */
int sr__tunnel_can_enrol(sr__plugin *p);
int sr__tunnel_release(sr__plugin *p, uint64_t req, const char *sandbox_id,
		       sr_done_fn done, void *ud);
int sr__tunnel_probe(sr__plugin *p, uint64_t req, const char *url,
		     sr_done_fn done, void *ud);
int sr__tunnel_enrolments(sr__plugin *p, uint64_t req, sr_done_fn done, void *ud);
int sr__tunnel_cancel(sr__plugin *p, uint64_t req);

#endif
