/* Timing stamps of the tool round trip, for tests/bench/relay.
 *
 * With SANDRUN_TRACE_TIMING=FILE in its environment, the shim and the
 * runner's relay each append one line per call to FILE:
 *
 *   <side> <call id> <stage>=<ns> <stage>=<ns> ...
 *
 * the stamps being CLOCK_MONOTONIC nanoseconds (one clock for every
 * process on the host, so the two sides' lines can be joined by call id).
 * A line is one write() to an O_APPEND file, so lines of concurrent
 * writers do not interleave. The variable is read once, at start; without
 * it a stamp costs one branch and nothing is written.
 *
 * Header-only and dependency-free: the shim is linked statically. */
#ifndef SR_TRACE_TIMING_H
#define SR_TRACE_TIMING_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* The trace file's descriptor, or -1 when SANDRUN_TRACE_TIMING is unset
 * or its file cannot be opened (timing is never worth failing over). */
static inline int sr_timing_open(void)
{
	const char *path = getenv("SANDRUN_TRACE_TIMING");

	if (!path || !*path)
		return -1;
	return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
}

static inline uint64_t sr_timing_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Append one call's line: names[i]=stamps[i] for each stamp taken (a
 * stamp of 0 was not reached and is left out). */
static inline void sr_timing_write(int fd, const char *side, const char *id,
				   const char *const *names, const uint64_t *stamps,
				   size_t n)
{
	char line[1024];
	size_t len;

	if (fd < 0)
		return;
	len = (size_t)snprintf(line, sizeof(line) - 1, "%s %s", side, id);
	for (size_t i = 0; i < n && len < sizeof(line) - 1; i++)
		if (stamps[i])
			len += (size_t)snprintf(line + len, sizeof(line) - 1 - len, " %s=%llu",
						names[i], (unsigned long long)stamps[i]);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	(void)!write(fd, line, len);
}

#endif
