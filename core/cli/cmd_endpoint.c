/* sandrun endpoint: resolve a runner-side service as a run would for the
 * configured provider and tunnel (core/run/endpoint.h), show every
 * decision, and print the URL a sandbox would use. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli/cli.h"
#include "core/host/log.h"
#include "core/host/status.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"
#include "core/plugins/tunnel.h"
#include "core/run/endpoint.h"

static const char help[] =
	"Usage: sandrun endpoint [OPTIONS] NAME|URL\n"
	"\n"
	"Resolve how a sandbox of the configured provider reaches a runner-side\n"
	"service, as a run does: the configured URL when such a sandbox can reach\n"
	"it, then the operator's public override, then the configured tunnel,\n"
	"each checked with a route probe (retried with a growing delay). Every\n"
	"decision is shown on standard error; the URL found goes to standard\n"
	"output. NAME is an [endpoint.NAME] section of the configuration (url,\n"
	"public_url); a URL is resolved as a service without an override.\n"
	"\n"
	"Options:\n"
	"  -c, --config FILE   configuration file\n"
	"      --json          the decisions as NDJSON events on standard output\n"
	"      --keep          leave a tunnel this resolution created in place (it is\n"
	"                      removed at exit otherwise)\n"
	"      --attempts N    tries per source (default 4, 1 to 20)\n"
	"  -h, --help          show this help\n"
	"\n"
	"Exit status: 0 resolved, 1 no route (the message names every\n"
	"source tried), 2 usage, 3 configuration, 4 the tunnel or provider is\n"
	"unavailable. See sandrun-endpoint(1).\n";

typedef struct job {
	int json;
	int done;
	int status;
	char *url;
	char *source;
	char *message;
} job;

static void on_event(void *ud, json_t *ev)
{
	job *j = ud;
	const char *type = json_string_value(json_object_get(ev, "type"));
	const char *src = json_string_value(json_object_get(ev, "source"));
	const char *svc = json_string_value(json_object_get(ev, "service"));

	if (j->json) {
		char *s = json_dumps(ev, JSON_COMPACT);
		if (s)
			printf("%s\n", s), fflush(stdout);
		free(s);
		return;
	}
	if (strcmp(type, "endpoint.skipped") == 0)
		fprintf(stderr, "endpoint %s: %s: not used: %s\n", svc, src,
			json_string_value(json_object_get(ev, "reason")));
	else if (strcmp(type, "endpoint.retry") == 0)
		fprintf(stderr, "endpoint %s: %s: try %lld of %lld failed (%s); again in %lld ms\n",
			svc, src, (long long)json_integer_value(json_object_get(ev, "attempt")),
			(long long)json_integer_value(json_object_get(ev, "of")),
			json_string_value(json_object_get(ev, "reason")),
			(long long)json_integer_value(json_object_get(ev, "delay_ms")));
	else if (strcmp(type, "endpoint.resolved") == 0)
		fprintf(stderr, "endpoint %s: %s: %s answers%s%s%s\n", svc, src,
			json_string_value(json_object_get(ev, "url")),
			json_is_true(json_object_get(ev, "enrolment")) ?
			" (from a sandbox enrolled in tunnel '" : "",
			json_is_true(json_object_get(ev, "enrolment")) ?
			json_string_value(json_object_get(ev, "via")) : "",
			json_is_true(json_object_get(ev, "enrolment")) ? "': sandrun tunnel enrol)" : "");
}

static void on_done(void *ud, int status, const char *url, const char *source,
		    const char *message)
{
	job *j = ud;

	uv_stop(uv_default_loop());
	j->done = 1;
	j->status = status;
	j->url = url ? strdup(url) : NULL;
	j->source = source ? strdup(source) : NULL;
	j->message = message ? strdup(message) : NULL;
}

int sr__cmd_endpoint(int argc, char **argv, const char *config_path)
{
	static const struct option lopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "keep", no_argument, NULL, 'k' },
		{ "attempts", required_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	sr__endpoint_spec spec;
	sr__endpoint_job *ej;
	sr__plugin *prov, *tun = NULL;
	sr__ctx ctx;
	job j = { 0 };
	int c, keep = 0, rc;
	unsigned attempts = 0;
	char why[600], *end;
	const char *arg;

	while ((c = getopt_long(argc, argv, "+c:h", lopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'j':
			j.json = 1;
			break;
		case 'k':
			keep = 1;
			break;
		case 'a':
			attempts = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !*optarg || attempts < 1 || attempts > 20) {
				fprintf(stderr, "sandrun: --attempts '%s': a whole number from 1 to 20\n",
					optarg);
				return SR_EXIT_USAGE;
			}
			break;
		case 'h':
			fputs(help, stdout);
			return SR_EXIT_OK;
		default:
			fputs(help, stderr);
			return SR_EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		fputs(help, stderr);
		return SR_EXIT_USAGE;
	}
	if ((rc = sr__cli_setup(&ctx, config_path)) != SR_EXIT_OK) {
		sr__ctx_cleanup(&ctx);
		return rc;
	}
	if (ctx.rc.tunnel) {
		if (!(tun = sr__registry_find(ctx.reg, SR_PLUGIN_TUNNEL, ctx.rc.tunnel))) {
			fprintf(stderr, "sandrun: tunnel '%s' is configured but no such plugin was "
				"found (see 'sandrun plugins')\n", ctx.rc.tunnel);
			sr__ctx_cleanup(&ctx);
			return SR_EXIT_UNAVAILABLE;
		}
		if (sr__plugin_start(&ctx, tun) != SR_OK) {
			fprintf(stderr, "sandrun: tunnel '%s' failed to start\n", ctx.rc.tunnel);
			sr__ctx_cleanup(&ctx);
			return SR_EXIT_CONFIG;
		}
	}
	arg = argv[optind];
	if (strstr(arg, "://") && sr__endpoint_has_userinfo(arg)) {
		fprintf(stderr, "sandrun: a URL that carries credentials (user:password@) is "
			"refused: they would reach logs and events\n");
		sr__ctx_cleanup(&ctx);
		return SR_EXIT_USAGE;
	} else if (strstr(arg, "://")) {
		memset(&spec, 0, sizeof(spec));
		spec.url = arg;
	} else if (sr__endpoint_config(&ctx, arg, &spec, why, sizeof(why)) != SR_OK) {
		fprintf(stderr, "sandrun: %s\n", why);
		sr__ctx_cleanup(&ctx);
		return SR_EXIT_CONFIG;
	}
	if (!(prov = sr__cli_provider(&ctx))) {
		sr__ctx_cleanup(&ctx);
		return SR_EXIT_UNAVAILABLE;
	}
	spec.host_network = !(sr__provider_capabilities(prov) & SR_CAP_REMOTE);
	spec.tunnel = tun;
	spec.attempts = attempts;
	/* The answer is for a sandbox as the tunnel would have it: enrolled,
	 * when the tunnel enrols (NetBird: sandrun tunnel enrol). */
	spec.enrolled = 1;
	spec.keep = keep;
	if (!(ej = sr__endpoint_resolve(&ctx, &spec, on_event, on_done, &j))) {
		fprintf(stderr, "sandrun: out of memory\n");
		sr__ctx_cleanup(&ctx);
		return SR_EXIT_FAIL;
	}
	while (!j.done && uv_run(ctx.loop, UV_RUN_ONCE))
		;
	if (!j.done) { /* cannot happen: the job's timer keeps the loop */
		sr__endpoint_cancel(ej);
	}
	if (j.status == SR_OK) {
		if (!j.json)
			printf("%s\n", j.url);
		rc = SR_EXIT_OK;
	} else {
		fprintf(stderr, "sandrun: %s\n", j.message ? j.message : sr__strerror(j.status));
		rc = SR_EXIT_FAIL;
	}
	fflush(stdout);
	/* A tunnel this resolution made goes at cleanup, unless --keep. */
	ctx.keep_tunnels = keep;
	free(j.url);
	free(j.source);
	free(j.message);
	sr__ctx_cleanup(&ctx);
	return rc;
}
