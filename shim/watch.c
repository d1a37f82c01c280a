/*
 * sandrun-shim watch [--for SECONDS] DIR: the names of relay requests in
 * DIR, one a line on standard output, as they appear; for a runner that
 * holds a connection to the sandbox (a remote provider's exec channel)
 * and otherwise could only poll.
 *
 * The watch is added before DIR is listed, so no request can fall between
 * the listing and the first event. Every "<id>.req" seen is printed (a
 * name can be printed twice: the runner's take decides). A line "#" is
 * printed when nothing else was for HEARTBEAT_S seconds, so the runner can
 * tell a live watch from a stalled stream. When the kernel's event queue
 * overflows, DIR is listed again. Standard input is not read (a provider
 * may give none). The watch ends with status 0 after SECONDS (so that one
 * a runner lost cannot outlive it for long; the runner starts another), 1
 * when DIR cannot be watched or goes away, 3 when standard output is gone.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "relay_proto.h"
#include "watch.h"

#define HEARTBEAT_S 5

static int say(const char *line, size_t len)
{
	char buf[SR_RELAY_ID_MAX + 16];
	size_t off = 0;

	if (len + 1 > sizeof(buf))
		return 0;
	memcpy(buf, line, len);
	buf[len++] = '\n';
	while (off < len) {
		ssize_t w = write(1, buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		off += (size_t)w;
	}
	return 0;
}

/* Print name if it is a request's. */
static int offer(const char *name)
{
	if (!sr_relay_id_of(name, SR_RELAY_REQ_SUFFIX))
		return 0;
	return say(name, strlen(name));
}

static int list_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int rc = 0;

	if (!d)
		return -2;
	while (rc == 0 && (e = readdir(d)))
		rc = offer(e->d_name);
	closedir(d);
	return rc;
}

static long now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec;
}

static int shim_watch(const char *dir, long seconds)
{
	long end = now_s() + seconds;
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
	int ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK), rc;

	if (ifd < 0 || inotify_add_watch(ifd, dir, IN_CREATE | IN_MOVED_TO | IN_ONLYDIR) < 0) {
		fprintf(stderr, "sandrun-shim: cannot watch %s: %s\n", dir, strerror(errno));
		return 1;
	}
	if ((rc = list_dir(dir)) != 0) {
		if (rc == -2)
			fprintf(stderr, "sandrun-shim: cannot list %s: %s\n", dir, strerror(errno));
		return rc == -2 ? 1 : 3;
	}
	for (;;) {
		struct pollfd p = { ifd, POLLIN, 0 };
		long left = end - now_s();
		int n;
		ssize_t got;

		if (left <= 0)
			return 0;
		n = poll(&p, 1, (int)(left < HEARTBEAT_S ? left : HEARTBEAT_S) * 1000);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return 1;
		if (n == 0) {
			if (say("#", 1) != 0)
				return 3;
			continue;
		}
		while ((got = read(ifd, buf, sizeof(buf))) > 0) {
			for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= got;) {
				const struct inotify_event *ev = (const void *)(buf + off);
				if (ev->mask & IN_Q_OVERFLOW)
					rc = list_dir(dir);
				else if (ev->len)
					rc = offer(ev->name);
				if (ev->mask & IN_IGNORED) {
					fprintf(stderr, "sandrun-shim: %s is gone\n", dir);
					return 1;
				}
				if (rc != 0)
					return rc == -2 ? 1 : 3;
				off += (ssize_t)sizeof(*ev) + ev->len;
			}
		}
	}
}

int shim_watch_main(int argc, char **argv)
{
	long seconds = 3600;
	char *end = NULL;
	int i = 2;

	if (argc > i + 1 && strcmp(argv[i], "--for") == 0) {
		seconds = strtol(argv[i + 1], &end, 10);
		if (!*argv[i + 1] || *end || seconds < 1 || seconds > 86400) {
			fprintf(stderr, "sandrun-shim watch: --for '%s': expected 1 to 86400 "
				"seconds\n", argv[i + 1]);
			return 2;
		}
		i += 2;
	}
	if (argc != i + 1 || argv[i][0] == '-') {
		fprintf(stderr, "Usage: sandrun-shim watch [--for SECONDS] DIR\n");
		return 2;
	}
	return shim_watch(argv[i], seconds);
}
