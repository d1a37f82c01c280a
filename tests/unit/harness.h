/* Shared helpers for unit tests that need a runner context. */
#ifndef SR_TEST_HARNESS_H
#define SR_TEST_HARNESS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli/cli.h"
#include "core/host/ctx.h"
#include "core/host/log.h"
#include "core/store/db.h"

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

/* SANDRUN_TEST_STORE_URL (tests/integration/store_pg_test.sh): the store
 * is that PostgreSQL database, emptied here (with psql: sandrun refuses a
 * database it cannot migrate). Returns the URL, or NULL for SQLite in each
 * test's state directory. */
static inline const char *t_store(void)
{
	const char *url = getenv("SANDRUN_TEST_STORE_URL");
	char cmd[1024];

	if (!url || !*url)
		return NULL;
	snprintf(cmd, sizeof(cmd), "psql -qX -v ON_ERROR_STOP=1 -d '%s' -c 'SET "
		 "client_min_messages = warning' -c 'DROP TABLE IF EXISTS sessions, runs, "
		 "run_events, leases, warm, kv, sandrun_schema' >/dev/null", url);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	sr__db_use(url);
	return url;
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

/* ctx on the default loop with state under dir and the test plugins
 * (tests/plugins) as its plugin directory; the log captured. */
static inline void t_ctx_with_test_plugins(sr__ctx *ctx, const char *dir)
{
	char conf[1024];

	cr_assert_not_null(getenv("SANDRUN_TEST_PLUGINS"), "run under make check");
	t_log_capture();
	snprintf(conf, sizeof(conf), "[runner]\nstate_dir = %s/state\nplugin_dir = %s\n", dir,
		 getenv("SANDRUN_TEST_PLUGINS"));
	cr_assert_eq(sr__ctx_init(ctx, uv_default_loop(), t_write(dir, "sandrun.conf", conf)),
		     SR_OK);
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

/* Start tests/helpers/callback_server logging calls to log; its URL goes
 * into url. Returns its pid (kill it with SIGTERM). */
#include <signal.h>
#include <sys/wait.h>

static inline pid_t t_callback_server(const char *log, char *url, size_t n)
{
	const char *bin = getenv("SANDRUN_CALLBACK_SERVER");
	char line[256] = "";
	int fds[2];
	FILE *f;
	pid_t pid;
	char *p, *q;

	cr_assert_not_null(bin, "SANDRUN_CALLBACK_SERVER is not set (run under make check)");
	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		execl(bin, "callback_server", "--log", log, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	cr_assert(fgets(line, sizeof(line), f), "callback server did not start");
	fclose(f);
	p = strstr(line, "http://");
	q = p ? strchr(p, '"') : NULL;
	cr_assert(p && q);
	snprintf(url, n, "%.*s", (int)(q - p), p);
	return pid;
}

/* Lines in a file (0 when it does not exist). */
static inline int t_count_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	int n = 0, c;

	if (!f)
		return 0;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

#endif
