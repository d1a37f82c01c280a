/* libmicrohttpd on the libuv loop (httpd.h). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/host/log.h"
#include "core/service/httpd.h"

struct sr__httpd {
	struct MHD_Daemon *daemon;
	uv_poll_t poll;
	uv_timer_t timer;
	int handles;
	int stopping;
	int fd;                  /* the listening socket */
	char unix_path[108];     /* "" for TCP */
	char where[160];
};

static void rearm(sr__httpd *h);

static void run_mhd(sr__httpd *h)
{
	if (h->stopping)
		return;
	MHD_run(h->daemon);
	rearm(h);
}

static void on_timer(uv_timer_t *t)
{
	run_mhd(t->data);
}

static void on_poll(uv_poll_t *p, int status, int events)
{
	(void)status;
	(void)events;
	run_mhd(p->data);
}

static void rearm(sr__httpd *h)
{
	MHD_UNSIGNED_LONG_LONG ms;

	if (h->stopping)
		return;
	if (MHD_get_timeout(h->daemon, &ms) != MHD_YES || ms > 1000)
		ms = 1000;
	uv_timer_start(&h->timer, on_timer, ms, 0);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = 0;
	sr__log(SR_LOG_DEBUG, "httpd", "%s", line);
}

static int listen_unix(sr__httpd *h, const char *path, char *err, size_t n)
{
	struct sockaddr_un sa;
	struct stat st;
	mode_t old;
	int fd, probe;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, n, "unix:%s: the path is too long for a socket", path);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, n, "unix:%s exists and is not a socket", path);
			return -1;
		}
		/* Someone listening there keeps it; a stale socket goes. */
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			snprintf(err, n, "unix:%s: another process listens there", path);
			return -1;
		}
		if (probe >= 0)
			close(probe);
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, n, "socket: %s", strerror(errno));
		return -1;
	}
	old = umask(0177); /* 0600: the owner alone may connect */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		umask(old);
		snprintf(err, n, "cannot listen on unix:%s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	umask(old);
	snprintf(h->unix_path, sizeof(h->unix_path), "%s", path);
	snprintf(h->where, sizeof(h->where), "unix:%s", path);
	return fd;
}

static int listen_tcp(sr__httpd *h, const char *spec, char *err, size_t n)
{
	char host[256], port[8], addr[INET6_ADDRSTRLEN];
	const char *colon = strrchr(spec, ':');
	struct addrinfo hints, *res = NULL;
	struct sockaddr_storage ss = { 0 };
	socklen_t len = sizeof(ss);
	size_t hl = colon ? (size_t)(colon - spec) : 0;
	int fd = -1, one = 1, rc;

	if (!colon || hl >= sizeof(host) || strlen(colon + 1) >= sizeof(port)) {
		snprintf(err, n, "'%s' is not HOST:PORT", spec);
		return -1;
	}
	memcpy(host, spec, hl);
	host[hl] = 0;
	if (host[0] == '[' && hl > 2) { /* [::1] */
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = 0;
	}
	snprintf(port, sizeof(port), "%s", colon + 1);
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	/* At start, before the loop runs: a blocking lookup is fine here. */
	if ((rc = getaddrinfo(host, port, &hints, &res)) != 0) {
		snprintf(err, n, "cannot resolve '%s': %s", host, gai_strerror(rc));
		return -1;
	}
	fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
		    res->ai_protocol);
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, res->ai_addr, res->ai_addrlen) != 0) {
			snprintf(err, n, "cannot listen on %s: %s", spec, strerror(errno));
			close(fd);
			fd = -1;
		}
	} else {
		snprintf(err, n, "socket: %s", strerror(errno));
	}
	freeaddrinfo(res);
	if (fd < 0)
		return -1;
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		ss.ss_family = AF_UNSPEC;
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &s6->sin6_addr, addr, sizeof(addr));
		snprintf(h->where, sizeof(h->where), "http://[%s]:%u", addr, ntohs(s6->sin6_port));
	} else if (ss.ss_family == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &s4->sin_addr, addr, sizeof(addr));
		snprintf(h->where, sizeof(h->where), "http://%s:%u", addr, ntohs(s4->sin_port));
	}
	return fd;
}

int sr__httpd_start(uv_loop_t *loop, const sr__httpd_opts *o, sr__httpd **out,
		    char *err, size_t n)
{
	const union MHD_DaemonInfo *info;
	sr__httpd *h;

	*out = NULL;
	if (!(h = calloc(1, sizeof(*h))))
		return SR_ENOMEM;
	h->fd = strncmp(o->listen, "unix:", 5) == 0 ? listen_unix(h, o->listen + 5, err, n) :
						       listen_tcp(h, o->listen, err, n);
	if (h->fd < 0) {
		free(h);
		return SR_EIO;
	}
	if (listen(h->fd, 128) != 0) {
		snprintf(err, n, "cannot listen on %s: %s", o->listen, strerror(errno));
		goto fail;
	}
	h->daemon = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
		0, NULL, NULL, o->handler, o->cls,
		MHD_OPTION_LISTEN_SOCKET, h->fd,
		MHD_OPTION_NOTIFY_COMPLETED, o->completed, o->cls,
		MHD_OPTION_CONNECTION_TIMEOUT,
		o->connection_timeout ? o->connection_timeout : 60u,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
		MHD_OPTION_END);
	if (!h->daemon) {
		snprintf(err, n, "cannot start the HTTP server on %s", o->listen);
		goto fail;
	}
	info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_EPOLL_FD);
	uv_poll_init(loop, &h->poll, info->epoll_fd);
	uv_timer_init(loop, &h->timer);
	h->poll.data = h->timer.data = h;
	h->handles = 2;
	uv_poll_start(&h->poll, UV_READABLE, on_poll);
	rearm(h);
	*out = h;
	return SR_OK;
fail:
	close(h->fd);
	if (h->unix_path[0])
		unlink(h->unix_path);
	free(h);
	return SR_EIO;
}

const char *sr__httpd_where(const sr__httpd *h)
{
	return h->where;
}

int sr__httpd_is_unix(const sr__httpd *h)
{
	return h->unix_path[0] != 0;
}

void sr__httpd_kick(sr__httpd *h)
{
	if (h && !h->stopping)
		uv_timer_start(&h->timer, on_timer, 0, 0);
}

void sr__httpd_quiesce(sr__httpd *h)
{
	int fd;

	if (!h || h->fd < 0)
		return;
	fd = MHD_quiesce_daemon(h->daemon);
	if (fd >= 0)
		close(fd);
	h->fd = -1;
	if (h->unix_path[0])
		unlink(h->unix_path);
}

static void on_closed(uv_handle_t *uh)
{
	sr__httpd *h = uh->data;

	if (--h->handles == 0)
		free(h);
}

void sr__httpd_stop(sr__httpd *h)
{
	if (!h)
		return;
	h->stopping = 1;
	MHD_stop_daemon(h->daemon);
	if (h->fd >= 0) {
		/* Given with MHD_OPTION_LISTEN_SOCKET: MHD closes it. */
		h->fd = -1;
		if (h->unix_path[0])
			unlink(h->unix_path);
	}
	uv_poll_stop(&h->poll);
	uv_timer_stop(&h->timer);
	uv_close((uv_handle_t *)&h->poll, on_closed);
	uv_close((uv_handle_t *)&h->timer, on_closed);
}
