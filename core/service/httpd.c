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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/host/log.h"
#include "core/service/httpd.h"

/* A connection, from its accept: when the request it waits for began,
 * and whether that request's headers have all come. */
typedef struct conn {
	struct conn *next, **prev;
	struct MHD_Connection *mhd;
	int fd;
	uint64_t since;     /* uv_now at the accept, or at the last request's end */
	int headers;        /* the handler was called for the request */
	int cut;            /* shut down for its slow headers */
} conn;

struct sr__httpd {
	struct MHD_Daemon *daemon;
	uv_loop_t *loop;
	uv_poll_t poll;
	uv_timer_t timer;
	uv_timer_t sweep;   /* once a second: the connections past header_timeout */
	conn *conns;
	unsigned header_timeout_s;
	unsigned max_connections;
	MHD_AccessHandlerCallback handler;
	MHD_RequestCompletedCallback completed;
	void *cls;
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

/* ----------------------------------------------- slow connections */

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	sr__httpd *h = cls;
	const union MHD_ConnectionInfo *info;
	conn *c = *socket_context;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		if (!(c = calloc(1, sizeof(*c))))
			return; /* not watched: the idle timeout still applies */
		info = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
		c->mhd = mc;
		c->fd = info ? info->connect_fd : -1;
		c->since = uv_now(h->loop);
		if ((c->next = h->conns))
			c->next->prev = &c->next;
		c->prev = &h->conns;
		h->conns = c;
		*socket_context = c;
	} else if (code == MHD_CONNECTION_NOTIFY_CLOSED && c) {
		if (c->next)
			c->next->prev = c->prev;
		*c->prev = c->next;
		free(c);
		*socket_context = NULL;
	}
}

static conn *conn_of(struct MHD_Connection *mc)
{
	const union MHD_ConnectionInfo *info =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return info ? info->socket_context : NULL;
}

/* The request's headers are in: its connection is no longer slow. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size,
				  void **con_cls)
{
	sr__httpd *h = cls;
	conn *c = conn_of(mc);

	if (c)
		c->headers = 1;
	return h->handler(h->cls, mc, url, method, version, upload_data, upload_data_size,
			  con_cls);
}

/* A request answered: the next one on the connection has its own time. */
static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	sr__httpd *h = cls;
	conn *c = conn_of(mc);

	if (c) {
		c->headers = 0;
		c->since = uv_now(h->loop);
	}
	if (h->completed)
		h->completed(h->cls, mc, con_cls, toe);
}

/* A connection whose request's headers have not all come within
 * header_timeout (one byte a second keeps MHD's idle timeout away) is
 * shut down: MHD sees its end and closes it (the descriptor stays MHD's
 * until then, so no other connection can be hit). */
static void on_sweep(uv_timer_t *t)
{
	sr__httpd *h = t->data;
	uint64_t now = uv_now(h->loop), limit = (uint64_t)h->header_timeout_s * 1000;
	unsigned cut = 0;

	for (conn *c = h->conns; c; c = c->next)
		if (!c->headers && !c->cut && c->fd >= 0 && now - c->since >= limit) {
			shutdown(c->fd, SHUT_RDWR);
			c->cut = 1;
			cut++;
		}
	if (cut) {
		sr__log(SR_LOG_DEBUG, "httpd", "%u connections closed: no whole request "
			"within %u s", cut, h->header_timeout_s);
		run_mhd(h);
	}
}

/* As many descriptors as the hard limit allows (connections are one
 * each); the connection limit then leaves room for everything else the
 * service opens (sandboxes, agents, the store), so that a flood of
 * connections is refused at accept instead of starving the runs. */
static unsigned connection_room(void)
{
	struct rlimit rl;
	rlim_t want;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 512;
	want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 1048576 ? 1048576 : rl.rlim_max;
	if (rl.rlim_cur < want) {
		rl.rlim_cur = want;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1048576)
		rl.rlim_cur = 1048576;
	/* A quarter (at least 256) for the rest. */
	return rl.rlim_cur > 1024 ? (unsigned)(rl.rlim_cur - rl.rlim_cur / 4) :
	       rl.rlim_cur > 320 ? (unsigned)(rl.rlim_cur - 256) : 64;
}

unsigned sr__httpd_max_connections(const sr__httpd *h)
{
	return h->max_connections;
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
	h->loop = loop;
	h->handler = o->handler;
	h->completed = o->completed;
	h->cls = o->cls;
	h->header_timeout_s = o->header_timeout ? o->header_timeout : 10u;
	h->max_connections = connection_room();
	h->daemon = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
		0, NULL, NULL, on_request, h,
		MHD_OPTION_LISTEN_SOCKET, h->fd,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
		MHD_OPTION_CONNECTION_TIMEOUT,
		o->connection_timeout ? o->connection_timeout : 60u,
		MHD_OPTION_CONNECTION_LIMIT, h->max_connections,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT,
		o->per_client_limit ? o->per_client_limit : 256u,
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
	uv_timer_init(loop, &h->sweep);
	h->poll.data = h->timer.data = h->sweep.data = h;
	h->handles = 3;
	uv_poll_start(&h->poll, UV_READABLE, on_poll);
	uv_timer_start(&h->sweep, on_sweep, 1000, 1000);
	uv_unref((uv_handle_t *)&h->sweep);
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
	uv_timer_stop(&h->sweep);
	uv_close((uv_handle_t *)&h->poll, on_closed);
	uv_close((uv_handle_t *)&h->timer, on_closed);
	uv_close((uv_handle_t *)&h->sweep, on_closed);
}
