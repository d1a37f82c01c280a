/* Child processes: uv_spawn with three pipes. The child's exit is
 * reported only after both of its output pipes reached end of file, so a
 * caller never loses the tail of the output. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host/proc.h"

struct sr_proc {
	uv_process_t proc;
	uv_pipe_t in, out, err;
	sr_proc_callbacks cbs;
	void *ud;
	int exited, exit_status, term_signal;
	int open_handles; /* handles still to be closed */
	int eofs;         /* output streams finished (of 2) */
	int stdin_closed;
	int reported;
	int group;        /* SR_PROC_GROUP: signals go to the process group */
};

typedef struct write_req {
	uv_write_t w;
	char data[];
} write_req;

static void on_closed(uv_handle_t *h)
{
	sr_proc *p = h->data;

	if (--p->open_handles == 0)
		free(p);
}

static void close_handle(sr_proc *p, uv_handle_t *h)
{
	if (!uv_is_closing(h))
		uv_close(h, on_closed);
	(void)p;
}

static void maybe_report(sr_proc *p)
{
	if (p->reported || !p->exited || p->eofs < 2)
		return;
	p->reported = 1;
	if (p->cbs.on_exit)
		p->cbs.on_exit(p->ud, p->exit_status, p->term_signal);
	close_handle(p, (uv_handle_t *)&p->in);
	close_handle(p, (uv_handle_t *)&p->out);
	close_handle(p, (uv_handle_t *)&p->err);
	close_handle(p, (uv_handle_t *)&p->proc);
}

static void on_exit_cb(uv_process_t *h, int64_t status, int signum)
{
	sr_proc *p = h->data;

	p->exited = 1;
	p->exit_status = (int)status;
	p->term_signal = signum;
	maybe_report(p);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char slab[65536];

	(void)h;
	(void)suggested;
	buf->base = slab; /* consumed synchronously by the read callback */
	buf->len = sizeof(slab);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	sr_proc *p = s->data;
	int is_err = s == (uv_stream_t *)&p->err;
	void (*cb)(void *, const void *, size_t) =
		is_err ? p->cbs.on_stderr : p->cbs.on_stdout;

	if (n > 0) {
		if (cb)
			cb(p->ud, buf->base, (size_t)n);
		return;
	}
	if (n == 0)
		return;
	uv_read_stop(s);
	p->eofs++;
	if (cb)
		cb(p->ud, "", 0);
	maybe_report(p);
}

int sr__proc_spawn(uv_loop_t *loop, const sr_proc_spec *spec,
		   const sr_proc_callbacks *cbs, void *ud, sr_proc **out,
		   char *err, size_t errlen)
{
	uv_process_options_t o;
	uv_stdio_container_t stdio[3];
	sr_proc *p;
	int rc;

	*out = NULL;
	if (!spec->argv || !spec->argv[0]) {
		snprintf(err, errlen, "no command given");
		return SR_EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return SR_ENOMEM;
	memcpy(&p->cbs, cbs, cbs->size < sizeof(p->cbs) ? cbs->size : sizeof(p->cbs));
	p->ud = ud;
	uv_pipe_init(loop, &p->in, 0);
	uv_pipe_init(loop, &p->out, 0);
	uv_pipe_init(loop, &p->err, 0);
	p->in.data = p->out.data = p->err.data = p->proc.data = p;
	p->open_handles = 3;

	memset(&o, 0, sizeof(o));
	stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
	stdio[0].data.stream = (uv_stream_t *)&p->in;
	stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[1].data.stream = (uv_stream_t *)&p->out;
	stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[2].data.stream = (uv_stream_t *)&p->err;
	o.file = spec->argv[0];
	o.args = (char **)spec->argv;
	o.env = (char **)spec->envp;
	o.cwd = spec->cwd;
	o.stdio = stdio;
	o.stdio_count = 3;
	o.exit_cb = on_exit_cb;
	if (spec->size >= SR_TABLE_HAS(sr_proc_spec, flags) && (spec->flags & SR_PROC_GROUP)) {
		o.flags |= UV_PROCESS_DETACHED; /* setsid(): a group of its own */
		p->group = 1;
	}
	rc = uv_spawn(loop, &p->proc, &o);
	if (rc != 0) {
		snprintf(err, errlen, "cannot run '%s': %s", spec->argv[0],
			 uv_strerror(rc));
		/* uv_spawn failed: the process handle still must be closed. */
		p->open_handles = 4;
		close_handle(p, (uv_handle_t *)&p->in);
		close_handle(p, (uv_handle_t *)&p->out);
		close_handle(p, (uv_handle_t *)&p->err);
		close_handle(p, (uv_handle_t *)&p->proc);
		return rc == UV_ENOENT ? SR_ENOTFOUND : SR_EIO;
	}
	p->open_handles = 4;
	uv_read_start((uv_stream_t *)&p->out, on_alloc, on_read);
	uv_read_start((uv_stream_t *)&p->err, on_alloc, on_read);
	*out = p;
	return SR_OK;
}

static void on_written(uv_write_t *w, int status)
{
	(void)status; /* EPIPE when the child is gone: nothing to do */
	free(w);
}

int sr__proc_write(sr_proc *p, const void *data, size_t len)
{
	write_req *w;
	uv_buf_t b;

	if (p->stdin_closed || p->reported)
		return SR_ESTATE;
	w = malloc(sizeof(*w) + len);
	if (!w)
		return SR_ENOMEM;
	memcpy(w->data, data, len);
	b = uv_buf_init(w->data, (unsigned)len);
	if (uv_write(&w->w, (uv_stream_t *)&p->in, &b, 1, on_written) != 0) {
		free(w);
		return SR_EIO;
	}
	return SR_OK;
}

static void on_shutdown(uv_shutdown_t *s, int status)
{
	(void)status;
	free(s);
}

int sr__proc_close_stdin(sr_proc *p)
{
	uv_shutdown_t *s;

	if (p->stdin_closed || p->reported)
		return SR_OK;
	p->stdin_closed = 1;
	s = malloc(sizeof(*s));
	if (!s)
		return SR_ENOMEM;
	if (uv_shutdown(s, (uv_stream_t *)&p->in, on_shutdown) != 0) {
		free(s);
		return SR_EIO;
	}
	return SR_OK;
}

int sr__proc_kill(sr_proc *p, int signum)
{
	/* A group outlives its leader: signal it even after the leader left
	 * (its id stays reserved while any member lives). */
	if (p->group)
		return kill(-(pid_t)p->proc.pid, signum) == 0 || errno == ESRCH ? SR_OK : SR_EIO;
	if (p->exited)
		return SR_OK;
	return uv_process_kill(&p->proc, signum) == 0 ? SR_OK : SR_EIO;
}

long sr__proc_pid(const sr_proc *p)
{
	return p->proc.pid;
}
