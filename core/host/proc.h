/* Child processes with duplex pipes on the libuv loop. */
#ifndef SR_CORE_PROC_H
#define SR_CORE_PROC_H

#include <uv.h>

#include "sandrun/plugin.h"

/* See sr_host.proc_spawn. On success *out is valid until on_exit returns. */
int sr__proc_spawn(uv_loop_t *loop, const sr_proc_spec *spec,
		   const sr_proc_callbacks *cbs, void *ud, sr_proc **out,
		   char *err, size_t errlen);
int sr__proc_write(sr_proc *p, const void *data, size_t len);
int sr__proc_close_stdin(sr_proc *p);
int sr__proc_kill(sr_proc *p, int signum);
long sr__proc_pid(const sr_proc *p);

#endif
