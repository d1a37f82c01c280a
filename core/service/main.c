/* sandrund: the runner as a service (sandrund(8)). */
#include "config.h"

#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/host/ctx.h"
#include "core/host/log.h"
#include "core/service/service.h"

/* Exit codes, documented in sandrund(8). */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_CONFIG = 3 };

/* After the runs were cancelled, how long their teardown may take. */
#define CANCEL_DEADLINE_MS 60000

typedef struct daemon_state {
	sr__ctx ctx;
	sr__svc *svc;
	uv_signal_t sigterm, sigint, sighup;
	uv_timer_t deadline;
	int stopping;
	int drained;
	int forced;
} daemon_state;

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: sandrund [--config FILE]\n"
		"\n"
		"Serve sandrun's HTTP API: start agent runs, stream and replay their\n"
		"events, answer their permission requests, cancel them, manage sessions.\n"
		"\n"
		"  -c, --config FILE  configuration file (default %s/sandrun/sandrun.conf)\n"
		"  -h, --help         show this help\n"
		"  -V, --version      show the version\n"
		"\n"
		"The [service] section says where it listens and who may call it; see\n"
		"sandrund(8), sandrun.conf(5) and doc/api.yaml. SIGTERM or SIGINT stops it:\n"
		"no new runs; the runs going on may finish within [service] drain_timeout,\n"
		"then they are cancelled and their sandboxes released (a second signal\n"
		"cancels them at once, a third exits). SIGHUP reads the configuration\n"
		"again for the runs that start next.\n",
		SR_SYSCONFDIR);
}

static void on_drained(void *ud)
{
	daemon_state *d = ud;

	d->drained = 1;
	uv_stop(d->ctx.loop);
}

static void on_deadline(uv_timer_t *t)
{
	daemon_state *d = t->data;

	sr__log(SR_LOG_ERROR, "service", "runs still going %d s after they were cancelled; "
		"exiting without them (sandrun janitor cleans up what they leave)",
		CANCEL_DEADLINE_MS / 1000);
	d->forced = 1;
	uv_stop(d->ctx.loop);
}

/* The service cancelled the runs going on (drain_timeout over, or a second
 * signal): their teardown has a deadline. */
static void on_cancelling(void *ud)
{
	daemon_state *d = ud;

	uv_timer_start(&d->deadline, on_deadline, CANCEL_DEADLINE_MS, 0);
}

static int accept_reload(const sr__config *next, void *ud)
{
	daemon_state *d = ud;
	sr__service_conf conf;
	char err[1024];
	int rc;

	if ((rc = sr__config_service(next, &conf)) != SR_OK)
		return rc;
	if ((rc = sr__svc_reload(d->svc, &conf, err, sizeof(err))) != SR_OK)
		sr__log(SR_LOG_ERROR, "service", "%s", err);
	return rc;
}

static void on_signal(uv_signal_t *sig, int signum)
{
	daemon_state *d = sig->data;

	if (signum == SIGHUP) {
		if (d->stopping)
			sr__log(SR_LOG_WARN, "service", "SIGHUP while stopping: ignored");
		else
			sr__ctx_reload(&d->ctx, accept_reload, d);
		return;
	}
	if (d->stopping && !uv_is_active((uv_handle_t *)&d->deadline)) {
		sr__log(SR_LOG_WARN, "service", "second stop signal: cancelling the runs now");
		sr__svc_cancel_now(d->svc);
		return;
	}
	if (d->stopping) {
		sr__log(SR_LOG_WARN, "service", "another stop signal: exiting now");
		d->forced = 1;
		uv_stop(d->ctx.loop);
		return;
	}
	d->stopping = 1;
	sr__svc_shutdown(d->svc, on_cancelling, on_drained, d);
}

static int serve(daemon_state *d, const char *config_path)
{
	sr__service_conf conf;
	sr__svc_opts o;
	const char *env;
	char err[1024], *shim;
	int rc;

	rc = sr__ctx_init(&d->ctx, uv_default_loop(), config_path);
	if (rc != SR_OK)
		return rc == SR_ENOMEM ? EXIT_FAIL : EXIT_CONFIG;
	if (sr__config_service(d->ctx.config, &conf) != SR_OK)
		return EXIT_CONFIG;
	if (!sr__ctx_state_dir(&d->ctx))
		return EXIT_FAIL;
	memset(&o, 0, sizeof(o));
	env = getenv("SANDRUN_SHIM");
	shim = strdup(env && *env ? env : SR_LIBEXECDIR "/sandrun-shim");
	o.shim_path = shim;
	if (shim && access(shim, X_OK) != 0)
		sr__log(SR_LOG_WARN, "service", "sandrun-shim is not at %s: runs with platform tools "
			"will be refused (set SANDRUN_SHIM)", shim);
	if ((env = getenv("SANDRUN_ACP_TIMEOUT_MS")))
		o.acp_timeout_ms = strtoull(env, NULL, 10);
	rc = sr__svc_start(&d->ctx, &conf, &o, &d->svc, err, sizeof(err));
	if (rc != SR_OK) {
		sr__log(SR_LOG_ERROR, "service", "%s", err);
		free(shim);
		return rc == SR_EINVAL ? EXIT_CONFIG : EXIT_FAIL;
	}
	sr__log(SR_LOG_INFO, "service", "sandrund %s listening on %s (config %s)",
		PACKAGE_VERSION, sr__svc_where(d->svc), sr__config_path(d->ctx.config));
	uv_signal_init(d->ctx.loop, &d->sigterm);
	uv_signal_init(d->ctx.loop, &d->sigint);
	uv_signal_init(d->ctx.loop, &d->sighup);
	uv_timer_init(d->ctx.loop, &d->deadline);
	d->sigterm.data = d->sigint.data = d->sighup.data = d->deadline.data = d;
	uv_signal_start(&d->sigterm, on_signal, SIGTERM);
	uv_signal_start(&d->sigint, on_signal, SIGINT);
	uv_signal_start(&d->sighup, on_signal, SIGHUP);
	uv_run(d->ctx.loop, UV_RUN_DEFAULT);
	uv_close((uv_handle_t *)&d->sigterm, NULL);
	uv_close((uv_handle_t *)&d->sigint, NULL);
	uv_close((uv_handle_t *)&d->sighup, NULL);
	uv_close((uv_handle_t *)&d->deadline, NULL);
	if (d->forced) {
		free(shim);
		return EXIT_FAIL; /* the runs still hold the loop: no clean free */
	}
	sr__svc_free(d->svc);
	d->svc = NULL;
	uv_run(d->ctx.loop, UV_RUN_NOWAIT);
	sr__log(SR_LOG_INFO, "service", "stopped");
	free(shim);
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	const char *config_path = NULL;
	daemon_state *d;
	int c, rc;

	/* A closed standard descriptor would be taken by the next file (see
	 * core/cli/main.c). */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
			return EXIT_FAIL;
	while ((c = getopt_long(argc, argv, "c:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		case 'V':
			printf("sandrund %s\n", PACKAGE_VERSION);
			return EXIT_OK;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "sandrund: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return EXIT_USAGE;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!(d = calloc(1, sizeof(*d))))
		return EXIT_FAIL;
	rc = serve(d, config_path);
	if (!d->forced) {
		sr__ctx_cleanup(&d->ctx);
		free(d);
	}
	return rc;
}
