/*
 * The floor of the tool round trip on this machine: what its hops cost
 * with no work at all in them, for tests/bench/relay to set beside
 * sandrun's own figure. A tool call crosses six processes' boundaries:
 * client -> shim -> runner -> tool callback -> runner -> shim -> client.
 * Each mode times one kind of crossing, done by the cheapest means the
 * design allows, one call at a time, 50 uncounted warm-up calls first:
 *
 *   relay_floor stdio        an MCP stdio server that answers every
 *                            request at once, without parsing JSON (for
 *                            mcp_roundtrip.mjs: the client and its pipes)
 *   relay_floor files N DIR  the relay's file exchange between two
 *                            processes: the request published by rename
 *                            into DIR, seen through inotify, claimed by
 *                            rename into DIR.journal, read, answered in the
 *                            claim, renamed back as <id>.res, seen through
 *                            inotify and read (no JSON, no checks)
 *   relay_floor tcp N        an HTTP-sized request and answer over one
 *                            kept-alive loopback TCP connection, no HTTP
 *                            parsing (the callback)
 *
 * files and tcp print {"p50_ms":..,"p99_ms":..,"cpu_us":..,"calls":N}, as
 * mcp_roundtrip.mjs does; cpu_us is the CPU time both processes spent per
 * timed call (/proc/PID/schedstat, time on a CPU). Exit 1 on any failure,
 * 2 on bad usage.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WARMUP 50

static const char request[] =
	"{\"v\":1,\"id\":\"s0123456789abcdef-4242-1\",\"tool\":\"noop\",\"args\":{}}";
static const char response[] =
	"{\"v\":1,\"id\":\"s0123456789abcdef-4242-1\",\"status\":\"ok\",\"result\":"
	"{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}],\"isError\":false}}";

static void die(const char *what)
{
	fprintf(stderr, "relay_floor: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nanoseconds this process and the other side (pid) spent on a CPU. */
static double cpu_ns(pid_t pid)
{
	char path[64];
	double sum = 0, v;
	FILE *f;

	for (int i = 0; i < 2; i++) {
		if (i == 0)
			snprintf(path, sizeof(path), "/proc/self/schedstat");
		else
			snprintf(path, sizeof(path), "/proc/%ld/schedstat", (long)pid);
		f = fopen(path, "r");
		if (!f || fscanf(f, "%lf", &v) != 1)
			die(path);
		fclose(f);
		sum += v;
	}
	return sum;
}

/* Nearest rank, as mcp_roundtrip.mjs; cpu in ns over the n timed calls. */
static void report(double *lat, int n, double cpu)
{
	qsort(lat, (size_t)n, sizeof(*lat), by_value);
	printf("{\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"cpu_us\":%.1f,\"calls\":%d}\n",
	       lat[(n + 1) / 2 - 1] / 1e3, lat[(99 * n + 99) / 100 - 1] / 1e3,
	       cpu / 1e3 / n, n);
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			die("write");
		p += w;
		n -= (size_t)w;
	}
}

/* ------------------------------------------------------------- stdio */

/* Answer one line: a request (it has an id) gets a result at once. */
static void answer_line(const char *line)
{
	const char *id = strstr(line, "\"id\":"), *end;
	char out[512];
	int n;

	if (!id)
		return; /* a notification */
	id += 5;
	for (end = id; *end && *end != ',' && *end != '}'; end++)
		;
	if (strstr(line, "\"initialize\""))
		n = snprintf(out, sizeof(out),
			     "{\"jsonrpc\":\"2.0\",\"id\":%.*s,\"result\":{\"protocolVersion\":"
			     "\"2025-06-18\",\"capabilities\":{\"tools\":{}},\"serverInfo\":"
			     "{\"name\":\"relay_floor\",\"version\":\"1\"}}}\n",
			     (int)(end - id), id);
	else
		n = snprintf(out, sizeof(out),
			     "{\"jsonrpc\":\"2.0\",\"id\":%.*s,\"result\":{\"content\":"
			     "[{\"type\":\"text\",\"text\":\"ok\"}],\"isError\":false}}\n",
			     (int)(end - id), id);
	if (n > 0 && (size_t)n < sizeof(out))
		write_all(1, out, (size_t)n);
}

static int serve_stdio(void)
{
	static char buf[1 << 16];
	size_t len = 0;

	for (;;) {
		ssize_t n = read(0, buf + len, sizeof(buf) - 1 - len);
		char *line = buf, *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0;
		len += (size_t)n;
		buf[len] = 0;
		while ((nl = strchr(line, '\n'))) {
			*nl = 0;
			answer_line(line);
			line = nl + 1;
		}
		len -= (size_t)(line - buf);
		memmove(buf, line, len);
		if (len == sizeof(buf) - 1)
			len = 0; /* a line too long for a floor: dropped */
	}
}

/* ------------------------------------------------------------- files */

/* Wait until the watch names a file ending in suffix. */
static void wait_for(int watch, const char *suffix)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	size_t s = strlen(suffix);

	for (;;) {
		struct pollfd p = { watch, POLLIN, 0 };
		ssize_t n;

		if (poll(&p, 1, 10000) <= 0)
			die("no inotify event within 10 s");
		n = read(watch, buf, sizeof(buf));
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			die("read inotify");
		for (char *q = buf; n > 0 && q < buf + n;) {
			const struct inotify_event *e = (const void *)q;
			size_t l = e->len ? strlen(e->name) : 0;
			q += sizeof(*e) + e->len;
			if (l > s && strcmp(e->name + l - s, suffix) == 0)
				return;
		}
	}
}

static void read_file(int fd, char *buf, size_t n)
{
	if (pread(fd, buf, n, 0) < 0)
		die("read");
}

/* The runner's side: claim, read, answer in the claim, publish. */
static void files_runner(const char *dir, const char *journal, int calls)
{
	int watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	char req[4096], claim[4096], res[4096], buf[4096];

	if (watch < 0 || inotify_add_watch(watch, dir, IN_MOVED_TO | IN_CREATE) < 0)
		die("inotify");
	for (int i = 0; i < calls; i++) {
		int fd;

		wait_for(watch, ".req");
		snprintf(req, sizeof(req), "%s/c%d.req", dir, i);
		snprintf(claim, sizeof(claim), "%s/c%d.claim", journal, i);
		snprintf(res, sizeof(res), "%s/c%d.res", dir, i);
		if (rename(req, claim) != 0 || (fd = open(claim, O_RDWR | O_CLOEXEC)) < 0)
			die("claim");
		read_file(fd, buf, sizeof(buf));
		if (pwrite(fd, response, sizeof(response) - 1, 0) < 0 || close(fd) != 0 ||
		    rename(claim, res) != 0)
			die("publish the response");
	}
	exit(0);
}

static int bench_files(int n, const char *dir)
{
	char journal[4096], spare[4096], name[4096], buf[4096];
	int watch, fd, status, calls = n + WARMUP;
	double cpu = 0, *lat = calloc((size_t)n, sizeof(*lat));
	pid_t pid;

	snprintf(journal, sizeof(journal), "%s.journal", dir);
	snprintf(spare, sizeof(spare), "%s/.spare", dir);
	if (!lat || mkdir(journal, 0700) != 0 || mkdir(spare, 0700) != 0)
		die("setup");
	watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (watch < 0 || inotify_add_watch(watch, dir, IN_MOVED_TO) < 0)
		die("inotify");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0)
		files_runner(dir, journal, calls);
	snprintf(spare, sizeof(spare), "%s/.spare/kept", dir);
	fd = open(spare, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		die("spare");
	usleep(100000); /* the runner's watch is set */
	for (int i = 0; i < calls; i++) {
		double t;

		if (i == WARMUP)
			cpu = cpu_ns(pid);
		t = now_us();
		/* The shim's publication from a kept spare, never replacing. */
		snprintf(name, sizeof(name), "%s/c%d.req", dir, i);
		if (pwrite(fd, request, sizeof(request) - 1, 0) < 0 ||
		    ftruncate(fd, sizeof(request) - 1) != 0 ||
		    renameat2(AT_FDCWD, spare, AT_FDCWD, name, RENAME_NOREPLACE) != 0)
			die("publish the request");
		close(fd);
		wait_for(watch, ".res");
		/* Read, then kept as the spare of the next call. */
		snprintf(name, sizeof(name), "%s/c%d.res", dir, i);
		fd = open(name, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			die("open the response");
		read_file(fd, buf, sizeof(buf));
		if (rename(name, spare) != 0)
			die("keep the spare");
		if (i >= WARMUP)
			lat[i - WARMUP] = now_us() - t;
	}
	cpu = cpu_ns(pid) - cpu;
	close(fd);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		die("the runner's side failed");
	report(lat, n, cpu);
	free(lat);
	return 0;
}

/* --------------------------------------------------------------- tcp */

static const char http_request[] =
	"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: relay_floor\r\n"
	"Accept: */*\r\nContent-Type: application/json\r\nContent-Length: 67\r\n\r\n"
	"{\"tool\":\"noop\",\"call_id\":\"s0123456789abcdef-4242-1\",\"arguments\":{}}";
static const char http_response[] =
	"HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n"
	"Content-Type: text/plain\r\n\r\nok";

static void no_delay(int s)
{
	int one = 1;

	if (setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
		die("TCP_NODELAY");
}

/* Read one message of the known length (the floor does not parse). */
static int read_message(int s, size_t len)
{
	char buf[4096];
	size_t got = 0;

	while (got < len) {
		ssize_t r = read(s, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static int bench_tcp(int n)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), s, status;
	int calls = n + WARMUP;
	double cpu = 0, *lat = calloc((size_t)n, sizeof(*lat));
	pid_t pid;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!lat || ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    listen(ls, 1) != 0 || getsockname(ls, (struct sockaddr *)&a, &alen) != 0)
		die("listen on 127.0.0.1");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		int c = accept(ls, NULL, NULL);
		if (c < 0)
			die("accept");
		no_delay(c);
		while (read_message(c, sizeof(http_request) - 1) == 0)
			write_all(c, http_response, sizeof(http_response) - 1);
		exit(0);
	}
	close(ls);
	s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) != 0)
		die("connect to 127.0.0.1");
	no_delay(s);
	for (int i = 0; i < calls; i++) {
		double t;

		if (i == WARMUP)
			cpu = cpu_ns(pid);
		t = now_us();
		write_all(s, http_request, sizeof(http_request) - 1);
		if (read_message(s, sizeof(http_response) - 1) != 0)
			die("read the answer");
		if (i >= WARMUP)
			lat[i - WARMUP] = now_us() - t;
	}
	cpu = cpu_ns(pid) - cpu;
	close(s);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		die("the server's side failed");
	report(lat, n, cpu);
	free(lat);
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 2 ? atoi(argv[2]) : 0;

	signal(SIGPIPE, SIG_IGN);
	if (argc == 2 && strcmp(argv[1], "stdio") == 0)
		return serve_stdio();
	if (argc == 4 && strcmp(argv[1], "files") == 0 && n > 0)
		return bench_files(n, argv[3]);
	if (argc == 3 && strcmp(argv[1], "tcp") == 0 && n > 0)
		return bench_tcp(n);
	fprintf(stderr, "usage: relay_floor stdio | files N DIR | tcp N\n");
	return 2;
}
