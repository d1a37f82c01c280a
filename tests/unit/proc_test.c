/* core/host/proc.c: duplex pipes, large output, a child that dies. */
#include <signal.h>

#include "harness.h"
#include "core/host/proc.h"

typedef struct result {
	size_t out_bytes, err_bytes;
	char out[256];
	int out_eof, err_eof;
	int exited, status, sig;
	int eof_before_exit;
} result;

static void on_out(void *ud, const void *d, size_t n)
{
	result *r = ud;

	if (n == 0) {
		r->out_eof = 1;
		return;
	}
	if (r->out_bytes + n < sizeof(r->out))
		memcpy(r->out + r->out_bytes, d, n);
	r->out_bytes += n;
}

static void on_err(void *ud, const void *d, size_t n)
{
	result *r = ud;

	(void)d;
	if (n == 0)
		r->err_eof = 1;
	r->err_bytes += n;
}

static void on_exit_(void *ud, int status, int sig)
{
	result *r = ud;

	r->exited++;
	r->status = status;
	r->sig = sig;
	r->eof_before_exit = r->out_eof && r->err_eof;
}

static const sr_proc_callbacks cbs = { sizeof(cbs), on_out, on_err, on_exit_ };

static sr_proc *spawn(const char *const *argv, result *r)
{
	sr_proc_spec spec = { sizeof(spec), argv, NULL, NULL, 0 };
	sr_proc *p = NULL;
	char err[256];

	memset(r, 0, sizeof(*r));
	cr_assert_eq(sr__proc_spawn(uv_default_loop(), &spec, &cbs, r, &p, err,
				    sizeof(err)), SR_OK, "%s", err);
	return p;
}

static void run_until_exit(result *r)
{
	while (!r->exited && uv_run(uv_default_loop(), UV_RUN_ONCE))
		;
	uv_run(uv_default_loop(), UV_RUN_NOWAIT);
}

TestSuite(proc, .timeout = 20);

Test(proc, large_output_arrives_whole_before_exit)
{
	const char *argv[] = { "head", "-c", "8388608", "/dev/zero", NULL };
	result r;

	spawn(argv, &r);
	run_until_exit(&r);
	cr_assert_eq(r.out_bytes, 8388608);
	cr_assert_eq(r.status, 0);
	cr_assert(r.eof_before_exit, "exit was reported before the output ended");
	cr_assert_eq(r.exited, 1);
}

Test(proc, stdin_reaches_the_child_and_close_ends_it)
{
	const char *argv[] = { "cat", NULL };
	result r;
	sr_proc *p = spawn(argv, &r);

	cr_assert_eq(sr__proc_write(p, "ping\n", 5), SR_OK);
	cr_assert_eq(sr__proc_close_stdin(p), SR_OK);
	run_until_exit(&r);
	cr_assert_eq(r.out_bytes, 5);
	cr_assert_str_eq(r.out, "ping\n");
	cr_assert_eq(r.status, 0);
}

Test(proc, child_killed_by_a_signal_reports_it)
{
	const char *argv[] = { "sh", "-c", "echo partial; kill -9 $$", NULL };
	result r;

	spawn(argv, &r);
	run_until_exit(&r);
	cr_assert_eq(r.sig, SIGKILL);
	cr_assert_str_eq(r.out, "partial\n");
}

Test(proc, kill_from_the_parent_ends_the_child)
{
	const char *argv[] = { "sleep", "30", NULL };
	result r;
	sr_proc *p = spawn(argv, &r);

	cr_assert(sr__proc_pid(p) > 0);
	cr_assert_eq(sr__proc_kill(p, SIGTERM), SR_OK);
	run_until_exit(&r);
	cr_assert_eq(r.sig, SIGTERM);
}

Test(proc, exit_code_and_stderr_are_reported)
{
	const char *argv[] = { "sh", "-c", "echo oops >&2; exit 7", NULL };
	result r;

	spawn(argv, &r);
	run_until_exit(&r);
	cr_assert_eq(r.status, 7);
	cr_assert_eq(r.err_bytes, 5);
}

Test(proc, missing_program_is_not_found)
{
	const char *argv[] = { "/nonexistent/program", NULL };
	sr_proc_spec spec = { sizeof(spec), argv, NULL, NULL, 0 };
	sr_proc *p = (sr_proc *)1;
	char err[256];

	cr_assert_eq(sr__proc_spawn(uv_default_loop(), &spec, &cbs, NULL, &p, err,
				    sizeof(err)), SR_ENOTFOUND);
	cr_assert_null(p);
	cr_assert(strstr(err, "/nonexistent/program"), "%s", err);
	uv_run(uv_default_loop(), UV_RUN_NOWAIT);
}

Test(proc, write_after_exit_is_refused)
{
	const char *argv[] = { "true", NULL };
	result r;
	sr_proc *p = spawn(argv, &r);

	sr__proc_close_stdin(p);
	cr_assert_eq(sr__proc_write(p, "x", 1), SR_ESTATE);
	run_until_exit(&r);
}

/* Running, and not a zombie waiting for its new parent to reap it. */
static int alive(long pid)
{
	char path[64], buf[512], *close_paren;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if (!(f = fopen(path, "r")))
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	close_paren = strrchr(buf, ')');
	return close_paren && close_paren[1] == ' ' && close_paren[2] != 'Z';
}

/* SR_PROC_GROUP: killing the process also kills what it started, and the
 * child has no controlling terminal of the runner's. */
Test(proc, group_kill_reaches_grandchildren)
{
	const char *argv[] = { "sh", "-c", "sleep 30 & echo $!; wait", NULL };
	sr_proc_spec spec = { sizeof(spec), argv, NULL, NULL, SR_PROC_GROUP };
	sr_proc *p = NULL;
	char err[256];
	result r;
	long grandchild;

	memset(&r, 0, sizeof(r));
	cr_assert_eq(sr__proc_spawn(uv_default_loop(), &spec, &cbs, &r, &p, err,
				    sizeof(err)), SR_OK, "%s", err);
	while (!memchr(r.out, '\n', r.out_bytes) && uv_run(uv_default_loop(), UV_RUN_ONCE))
		;
	grandchild = strtol(r.out, NULL, 10);
	cr_assert_gt(grandchild, 1);
	cr_assert_eq(getpgid((pid_t)grandchild), (pid_t)sr__proc_pid(p),
		     "the grandchild is in the child's group");
	cr_assert_eq(getsid((pid_t)sr__proc_pid(p)), (pid_t)sr__proc_pid(p),
		     "the child leads a session of its own");
	cr_assert_eq(sr__proc_kill(p, SIGKILL), SR_OK);
	/* The grandchild held stdout: exit is reported only once it died. */
	run_until_exit(&r);
	cr_assert_eq(r.sig, SIGKILL);
	/* Its pipes close early in its exit: give it a moment to finish. */
	for (int i = 0; i < 200 && alive(grandchild); i++)
		usleep(10000);
	cr_assert(!alive(grandchild), "the grandchild %ld survived", grandchild);
}
