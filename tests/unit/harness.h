/* Shared helpers for unit tests that need a runner context. */
#ifndef SR_TEST_HARNESS_H
#define SR_TEST_HARNESS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/ctx.h"
#include "core/log.h"

/* A fresh temporary directory (the caller frees the string). */
static inline char *t_tmpdir(void)
{
	char *d = strdup("/tmp/sandrun-test-XXXXXX");

	cr_assert_not_null(mkdtemp(d));
	return d;
}

/* Write text to DIR/name; returns the path (static buffer). */
static inline const char *t_write(const char *dir, const char *name,
				  const char *text)
{
	static char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

/* Capture log lines into a memory stream; t_log_text() reads them. */
static char *t_log_buf;
static size_t t_log_len;
static FILE *t_log_file;

static inline void t_log_capture(void)
{
	t_log_file = open_memstream(&t_log_buf, &t_log_len);
	sr__log_set_stream(t_log_file);
}

static inline const char *t_log_text(void)
{
	fflush(t_log_file);
	return t_log_buf ? t_log_buf : "";
}

static inline void t_guard_fired(uv_timer_t *t)
{
	(void)t;
	cr_assert_fail("timed out waiting for an operation");
}

/* Run the loop until w is done, with a 10 s guard. */
static inline void t_wait(sr__ctx *ctx, sr__wait *w)
{
	uv_timer_t guard;

	uv_timer_init(ctx->loop, &guard);
	uv_timer_start(&guard, t_guard_fired, 10000, 0);
	sr__wait_run(ctx, w);
	uv_timer_stop(&guard);
	uv_close((uv_handle_t *)&guard, NULL);
	uv_run(ctx->loop, UV_RUN_NOWAIT);
	cr_assert(w->done, "operation never completed");
}

#endif
