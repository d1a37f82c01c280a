/* Checked calls into tunnel plugins. */
#include "config.h"

#include "core/plugins/complete.h"
#include "core/host/log.h"
#include "core/plugins/tunnel.h"

#define OP(slot) SR__OP(p, sr_tunnel_ops, slot)
#define ASYNC(slot, ...) SR__ASYNC_CALL(p, sr_tunnel_ops, slot, __VA_ARGS__)

int sr__tunnel_start(sr__plugin *p, uint64_t req, sr_done_fn done, void *ud)
{
	ASYNC(start, req);
}

int sr__tunnel_resolve(sr__plugin *p, uint64_t req, const char *local_url,
		       sr_done_fn done, void *ud)
{
	ASYNC(resolve, req, local_url);
}

int sr__tunnel_can_enrol(sr__plugin *p)
{
	return OP(enrol) != NULL;
}

int sr__tunnel_enrol(sr__plugin *p, uint64_t req, const char *sandbox_id,
		     const char *params_json, sr_done_fn done, void *ud)
{
	ASYNC(enrol, req, sandbox_id, params_json);
}

int sr__tunnel_release(sr__plugin *p, uint64_t req, const char *sandbox_id,
		       sr_done_fn done, void *ud)
{
	ASYNC(release, req, sandbox_id);
}

int sr__tunnel_probe(sr__plugin *p, uint64_t req, const char *url,
		     sr_done_fn done, void *ud)
{
	ASYNC(probe, req, url);
}

int sr__tunnel_enrolments(sr__plugin *p, uint64_t req, sr_done_fn done, void *ud)
{
	ASYNC(enrolments, req);
}

int sr__tunnel_cancel(sr__plugin *p, uint64_t req)
{
	char msg[160];

	if (OP(cancel))
		return OP(cancel)(p->self, req);
	sr__unsupported(p, "cancel", msg, sizeof(msg));
	sr__log(SR_LOG_DEBUG, p->section, "%s", msg);
	return SR_EUNSUPPORTED;
}
