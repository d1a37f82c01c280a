/* Calls into the configured provider plugin: every slot checked, a
 * missing one turned into a typed SR_EUNSUPPORTED naming plugin and op.
 * The asynchronous ones keep the completion rule for their caller even
 * when the plugin does not (core/plugins/complete.h): SR_OK, then done exactly
 * once, later; or a negative status and no done. */
#ifndef SR_CORE_PROVIDER_H
#define SR_CORE_PROVIDER_H

#include "core/plugins/loader.h"

uint32_t sr__provider_capabilities(sr__plugin *p);
/* Where the provider's sandboxes live (ops->locality), or NULL: every
 * runner with its configuration reaches them. */
const char *sr__provider_locality(sr__plugin *p);
int sr__provider_create(sr__plugin *p, uint64_t req,
			const sr_sandbox_spec *spec, sr_done_fn done, void *ud);
int sr__provider_reconnect(sr__plugin *p, uint64_t req, const char *id,
			   const sr_network_policy *policy, sr_done_fn done,
			   void *ud);
int sr__provider_park(sr__plugin *p, uint64_t req, const char *id, int mode,
		      sr_done_fn done, void *ud);
int sr__provider_destroy(sr__plugin *p, uint64_t req, const char *id,
			 sr_done_fn done, void *ud);
/* Synchronous failures of exec are returned (and logged), not passed to a
 * callback. */
int sr__provider_exec(sr__plugin *p, uint64_t req, const char *id,
		      const sr_exec_spec *spec,
		      const sr_channel_callbacks *cbs, void *ud);
int sr__provider_channel_write(sr__plugin *p, uint64_t req,
			       const void *data, size_t len);
int sr__provider_channel_close_input(sr__plugin *p, uint64_t req);
int sr__provider_channel_signal(sr__plugin *p, uint64_t req, int signum);
int sr__provider_file_put(sr__plugin *p, uint64_t req, const char *id,
			  const char *path, const void *data, size_t len,
			  uint32_t mode, sr_done_fn done, void *ud);
int sr__provider_file_get(sr__plugin *p, uint64_t req, const char *id,
			  const char *path, size_t max, sr_done_fn done,
			  void *ud);
int sr__provider_file_list(sr__plugin *p, uint64_t req, const char *id,
			   const char *path, sr_done_fn done, void *ud);
int sr__provider_file_rename(sr__plugin *p, uint64_t req, const char *id,
			     const char *from, const char *to,
			     sr_done_fn done, void *ud);
int sr__provider_file_remove(sr__plugin *p, uint64_t req, const char *id,
			     const char *path, sr_done_fn done, void *ud);
int sr__provider_file_mkdir(sr__plugin *p, uint64_t req, const char *id,
			    const char *path, uint32_t mode, sr_done_fn done,
			    void *ud);
int sr__provider_watch(sr__plugin *p, uint64_t req, const char *id,
		       const char *path, const sr_watch_callbacks *cbs, void *ud,
		       char *err, size_t errlen);
int sr__provider_list(sr__plugin *p, uint64_t req, const sr_pair *labels,
		      size_t n_labels, sr_done_fn done, void *ud);
int sr__provider_status(sr__plugin *p, uint64_t req, const char *id,
			sr_done_fn done, void *ud);
int sr__provider_maintain(sr__plugin *p, uint64_t req, const char *params_json,
			  sr_done_fn done, void *ud);
/* Whether the provider mounts itself (ABI 2.3), or the core mounts
 * through exec. */
int sr__provider_has_mount(sr__plugin *p);
int sr__provider_mount(sr__plugin *p, uint64_t req, const char *id,
		       const sr_mount_spec *spec, sr_done_fn done, void *ud);
int sr__provider_unmount(sr__plugin *p, uint64_t req, const char *id,
			 const char *path, sr_done_fn done, void *ud);
int sr__provider_cancel(sr__plugin *p, uint64_t req);

/* A process-unique request token. */
uint64_t sr__next_req(void);

#endif
