/* Checked calls into provider plugins. */
#include "config.h"

#include "core/plugins/complete.h"
#include "core/host/log.h"
#include "core/plugins/provider.h"

static int unsupported_sync(sr__plugin *p, const char *op)
{
	char msg[160];

	sr__unsupported(p, op, msg, sizeof(msg));
	sr__log(SR_LOG_ERROR, p->section, "%s", msg);
	return SR_EUNSUPPORTED;
}

#define OP(slot) SR__OP(p, sr_provider_ops, slot)
#define ASYNC(slot, ...) SR__ASYNC_CALL(p, sr_provider_ops, slot, __VA_ARGS__)
#define SYNC(slot, ...)                                                   \
	do {                                                              \
		__typeof__(OP(slot)) fn_ = OP(slot);                      \
		if (!fn_)                                                 \
			return unsupported_sync(p, #slot);                \
		return fn_(p->self, __VA_ARGS__);                         \
	} while (0)

uint64_t sr__next_req(void)
{
	static uint64_t next;

	return ++next;
}

uint32_t sr__provider_capabilities(sr__plugin *p)
{
	return OP(capabilities) ? OP(capabilities)(p->self) : 0;
}

const char *sr__provider_locality(sr__plugin *p)
{
	return OP(locality) ? OP(locality)(p->self) : NULL;
}

int sr__provider_create(sr__plugin *p, uint64_t req,
			const sr_sandbox_spec *spec, sr_done_fn done, void *ud)
{
	ASYNC(create, req, spec);
}

int sr__provider_reconnect(sr__plugin *p, uint64_t req, const char *id,
			   const sr_network_policy *policy, sr_done_fn done,
			   void *ud)
{
	ASYNC(reconnect, req, id, policy);
}

int sr__provider_park(sr__plugin *p, uint64_t req, const char *id, int mode,
		      sr_done_fn done, void *ud)
{
	ASYNC(park, req, id, mode);
}

int sr__provider_destroy(sr__plugin *p, uint64_t req, const char *id,
			 sr_done_fn done, void *ud)
{
	ASYNC(destroy, req, id);
}

int sr__provider_exec(sr__plugin *p, uint64_t req, const char *id,
		      const sr_exec_spec *spec,
		      const sr_channel_callbacks *cbs, void *ud)
{
	SYNC(exec, req, id, spec, cbs, ud);
}

int sr__provider_channel_write(sr__plugin *p, uint64_t req,
			       const void *data, size_t len)
{
	SYNC(channel_write, req, data, len);
}

int sr__provider_channel_close_input(sr__plugin *p, uint64_t req)
{
	SYNC(channel_close_input, req);
}

int sr__provider_channel_signal(sr__plugin *p, uint64_t req, int signum)
{
	SYNC(channel_signal, req, signum);
}

int sr__provider_file_put(sr__plugin *p, uint64_t req, const char *id,
			  const char *path, const void *data, size_t len,
			  uint32_t mode, sr_done_fn done, void *ud)
{
	ASYNC(file_put, req, id, path, data, len, mode);
}

int sr__provider_file_get(sr__plugin *p, uint64_t req, const char *id,
			  const char *path, size_t max, sr_done_fn done,
			  void *ud)
{
	ASYNC(file_get, req, id, path, max);
}

int sr__provider_file_list(sr__plugin *p, uint64_t req, const char *id,
			   const char *path, sr_done_fn done, void *ud)
{
	ASYNC(file_list, req, id, path);
}

int sr__provider_file_rename(sr__plugin *p, uint64_t req, const char *id,
			     const char *from, const char *to,
			     sr_done_fn done, void *ud)
{
	ASYNC(file_rename, req, id, from, to);
}

int sr__provider_file_remove(sr__plugin *p, uint64_t req, const char *id,
			     const char *path, sr_done_fn done, void *ud)
{
	ASYNC(file_remove, req, id, path);
}

int sr__provider_file_mkdir(sr__plugin *p, uint64_t req, const char *id,
			    const char *path, uint32_t mode, sr_done_fn done,
			    void *ud)
{
	ASYNC(file_mkdir, req, id, path, mode);
}

int sr__provider_watch(sr__plugin *p, uint64_t req, const char *id,
		       const char *path, const sr_watch_callbacks *cbs, void *ud,
		       char *err, size_t errlen)
{
	if (!OP(watch))
		return sr__unsupported(p, "watch", err, errlen);
	return OP(watch)(p->self, req, id, path, cbs, ud);
}

int sr__provider_list(sr__plugin *p, uint64_t req, const sr_pair *labels,
		      size_t n_labels, sr_done_fn done, void *ud)
{
	ASYNC(list, req, labels, n_labels);
}

int sr__provider_status(sr__plugin *p, uint64_t req, const char *id,
			sr_done_fn done, void *ud)
{
	ASYNC(status, req, id);
}

int sr__provider_maintain(sr__plugin *p, uint64_t req, const char *params_json,
			  sr_done_fn done, void *ud)
{
	ASYNC(maintain, req, params_json);
}

int sr__provider_has_mount(sr__plugin *p)
{
	return SR__OP(p, sr_provider_ops, mount) && SR__OP(p, sr_provider_ops, unmount);
}

int sr__provider_mount(sr__plugin *p, uint64_t req, const char *id,
		       const sr_mount_spec *spec, sr_done_fn done, void *ud)
{
	ASYNC(mount, req, id, spec);
}

int sr__provider_unmount(sr__plugin *p, uint64_t req, const char *id,
			 const char *path, sr_done_fn done, void *ud)
{
	ASYNC(unmount, req, id, path);
}

int sr__provider_cancel(sr__plugin *p, uint64_t req)
{
	SYNC(cancel, req);
}
