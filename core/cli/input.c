/* Non-blocking reads of an input descriptor on the loop. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/cli/input.h"
#include "sandrun/plugin.h"

struct sr__input {
	uv_poll_t poll;
	int fd;
	int old_flags;
	int polling;
	int stopped;
	int in_callback;
	sr__input_fn fn;
	void *ud;
};

static void on_closed(uv_handle_t *h)
{
	free(h->data);
}

static void release(sr__input *in)
{
	if (in->old_flags >= 0)
		fcntl(in->fd, F_SETFL, in->old_flags);
	if (in->polling)
		uv_close((uv_handle_t *)&in->poll, on_closed);
	else
		free(in);
}

/* Read what is there; 1 when the input ended. */
static int drain(sr__input *in)
{
	char buf[65536];

	for (;;) {
		ssize_t n = read(in->fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		in->in_callback = 1;
		in->fn(in->ud, buf, n > 0 ? (size_t)n : 0);
		in->in_callback = 0;
		if (in->stopped)
			return 1;
		if (n <= 0)
			return 1;
	}
}

static void on_readable(uv_poll_t *p, int status, int events)
{
	sr__input *in = p->data;

	(void)events;
	if (status < 0 || drain(in)) {
		uv_poll_stop(&in->poll);
		if (!in->stopped) {
			in->stopped = 1;
			if (status < 0)
				in->fn(in->ud, "", 0);
		}
		release(in);
	}
}

int sr__input_start(uv_loop_t *loop, int fd, sr__input_fn fn, void *ud,
		    sr__input **out)
{
	sr__input *in = calloc(1, sizeof(*in));

	*out = NULL;
	if (!in)
		return SR_ENOMEM;
	in->fd = fd;
	in->fn = fn;
	in->ud = ud;
	in->old_flags = fcntl(fd, F_GETFL);
	if (in->old_flags >= 0)
		fcntl(fd, F_SETFL, in->old_flags | O_NONBLOCK);
	if (uv_poll_init(loop, &in->poll, fd) == 0) {
		in->polling = 1;
		in->poll.data = in;
		uv_poll_start(&in->poll, UV_READABLE, on_readable);
		*out = in;
		return SR_OK;
	}
	/* A regular file or /dev/null: epoll refuses it, and it never
	 * blocks, so it is read to its end now. */
	drain(in);
	release(in);
	return SR_OK;
}

void sr__input_stop(sr__input *in)
{
	if (!in || in->stopped)
		return;
	in->stopped = 1;
	if (in->in_callback)
		return; /* drain() sees stopped and release follows */
	if (in->polling)
		uv_poll_stop(&in->poll);
	release(in);
}
