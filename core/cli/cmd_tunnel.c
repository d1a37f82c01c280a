/* sandrun tunnel: drive the configured tunnel plugin by hand (enrol a
 * sandbox, check its peer joined, release it, list the enrolments), for
 * operators and for the tests of tunnel plugins. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli/cli.h"
#include "core/host/status.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"
#include "core/plugins/tunnel.h"

static const char help[] =
	"Usage: sandrun tunnel enrol SANDBOX --port N [--port N]... --key-file FILE\n"
	"       sandrun tunnel verify SANDBOX\n"
	"       sandrun tunnel release SANDBOX|--all\n"
	"       sandrun tunnel list [--json]\n"
	"\n"
	"Drive the configured tunnel plugin ([runner] tunnel) by hand.\n"
	"\n"
	"  enrol    let SANDBOX reach the runner's ports N through the tunnel (NetBird:\n"
	"           a group, a one-off ephemeral setup key, a one-way policy). The\n"
	"           key is written to FILE, created with mode 0600; it is never\n"
	"           printed. The rest of the answer goes to standard output.\n"
	"  verify   check that SANDBOX's peer joined (by its exact name)\n"
	"  release  delete everything the tunnel made for SANDBOX (--all: for every\n"
	"           enrolment it holds a record of, whichever runner made it)\n"
	"  list     the enrolments the tunnel holds records of\n"
	"\n"
	"Options:\n"
	"  -c, --config FILE   configuration file\n"
	"  -h, --help          show this help\n"
	"\n"
	"Exit status: 0 done, 1 failed, 2 usage, 3 configuration, 4 no tunnel or the\n"
	"operation is not offered by it. See sandrun(1).\n";

static int report(sr__plugin *t, sr__wait *w, const char *what)
{
	if (w->status == SR_OK)
		return SR_EXIT_OK;
	fprintf(stderr, "sandrun: tunnel '%s': %s: %s\n", t->desc->name, what,
		w->message ? w->message : sr__strerror(w->status));
	return w->status == SR_EUNSUPPORTED ? SR_EXIT_UNAVAILABLE : SR_EXIT_FAIL;
}

/* Write the setup key to a new file of mode 0600 (never over another). */
static int write_key(const char *file, const char *key)
{
	int fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	size_t len = strlen(key);

	if (fd < 0) {
		fprintf(stderr, "sandrun: --key-file %s: %s\n", file, strerror(errno));
		return -1;
	}
	if (write(fd, key, len) != (ssize_t)len || write(fd, "\n", 1) != 1 || close(fd) != 0) {
		fprintf(stderr, "sandrun: --key-file %s: cannot write it\n", file);
		unlink(file);
		return -1;
	}
	return 0;
}

static int enrol(sr__ctx *ctx, sr__plugin *t, const char *sandbox, json_t *ports,
		 const char *key_file)
{
	json_t *params = json_pack("{s:O, s:s?}", "ports", ports, "runner", sr__ctx_runner_id(ctx)),
	       *ans, *v;
	size_t i;
	char *text = params ? json_dumps(params, JSON_COMPACT) : NULL;
	sr__wait w = { 0 };
	int rc;

	json_decref(params);
	if (!text)
		return SR_EXIT_FAIL;
	sr__wait_for(ctx, &w, sr__tunnel_enrol(t, sr__next_req(), sandbox, text, sr__wait_done,
					       &w));
	free(text);
	if ((rc = report(t, &w, "enrol")) == SR_EXIT_OK) {
		ans = json_loads(w.json ? w.json : "", 0, NULL);
		if (json_is_string(json_object_get(ans, "setup_key"))) {
			if (!key_file ||
			    write_key(key_file, json_string_value(json_object_get(ans, "setup_key"))) != 0) {
				if (!key_file)
					fprintf(stderr, "sandrun: the answer holds a key and no --key-file "
						"was given: releasing the enrolment\n");
				json_decref(ans);
				sr__wait_clear(&w);
				sr__wait_for(ctx, &w, sr__tunnel_release(t, sr__next_req(), sandbox,
									 sr__wait_done, &w));
				report(t, &w, "release");
				sr__wait_clear(&w);
				return SR_EXIT_FAIL;
			}
			json_object_del(ans, "setup_key");
			json_object_set_new(ans, "key_file", json_string(key_file));
			/* The command that joins, as it would be run with the file. */
			json_array_foreach(json_object_get(ans, "command"), i, v)
				if (json_is_string(v) &&
				    strcmp(json_string_value(v), "{setup_key_file}") == 0)
					json_array_set_new(json_object_get(ans, "command"), i,
							   json_string(key_file));
		}
		text = ans ? json_dumps(ans, JSON_COMPACT) : NULL;
		if (text)
			printf("%s\n", text);
		free(text);
		json_decref(ans);
	}
	sr__wait_clear(&w);
	return rc;
}

static int list(sr__ctx *ctx, sr__plugin *t, int as_json)
{
	sr__wait w = { 0 };
	json_t *ans, *e;
	size_t i;
	int rc;

	sr__wait_for(ctx, &w, sr__tunnel_enrolments(t, sr__next_req(), sr__wait_done, &w));
	if ((rc = report(t, &w, "enrolments")) == SR_EXIT_OK) {
		ans = json_loads(w.json ? w.json : "", 0, NULL);
		if (as_json) {
			printf("%s\n", w.json ? w.json : "{}");
		} else {
			printf("%-40s %-48s %s\n", "SANDBOX", "NAME", "CREATED");
			json_array_foreach(json_object_get(ans, "items"), i, e)
				printf("%-40s %-48s %lld\n",
				       json_string_value(json_object_get(e, "sandbox")),
				       json_string_value(json_object_get(e, "name")),
				       (long long)json_integer_value(json_object_get(e, "created")));
		}
		json_decref(ans);
	}
	sr__wait_clear(&w);
	return rc;
}

/* Every enrolment the tunnel holds a record of, one after the other. */
static int release_all(sr__ctx *ctx, sr__plugin *t)
{
	sr__wait w = { 0 };
	json_t *ans, *e;
	size_t i;
	int rc;

	sr__wait_for(ctx, &w, sr__tunnel_enrolments(t, sr__next_req(), sr__wait_done, &w));
	if ((rc = report(t, &w, "enrolments")) != SR_EXIT_OK) {
		sr__wait_clear(&w);
		return rc;
	}
	ans = json_loads(w.json ? w.json : "", 0, NULL);
	sr__wait_clear(&w);
	json_array_foreach(json_object_get(ans, "items"), i, e) {
		const char *sbx = json_string_value(json_object_get(e, "sandbox"));
		if (!sbx)
			continue;
		sr__wait_for(ctx, &w, sr__tunnel_release(t, sr__next_req(), sbx, sr__wait_done, &w));
		if (report(t, &w, "release") != SR_EXIT_OK)
			rc = SR_EXIT_FAIL;
		else
			printf("released %s\n", sbx);
		sr__wait_clear(&w);
	}
	json_decref(ans);
	return rc;
}

int sr__cmd_tunnel(int argc, char **argv, const char *config_path)
{
	static const struct option lopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "port", required_argument, NULL, 'p' },
		{ "key-file", required_argument, NULL, 'k' },
		{ "all", no_argument, NULL, 'a' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	json_t *ports = json_array();
	const char *key_file = NULL, *sub, *sandbox = NULL;
	int c, all = 0, as_json = 0, rc;
	sr__plugin *t;
	sr__wait w = { 0 };
	sr__ctx ctx;
	char *end;

	/* Options before or after the operands (getopt permutes them). */
	while ((c = getopt_long(argc, argv, "c:h", lopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'p': {
			long v = strtol(optarg, &end, 10);
			if (*end || !*optarg || v < 1 || v > 65535) {
				fprintf(stderr, "sandrun: --port '%s': a port from 1 to 65535\n", optarg);
				json_decref(ports);
				return SR_EXIT_USAGE;
			}
			json_array_append_new(ports, json_integer(v));
			break;
		}
		case 'k':
			key_file = optarg;
			break;
		case 'a':
			all = 1;
			break;
		case 'j':
			as_json = 1;
			break;
		case 'h':
			fputs(help, stdout);
			json_decref(ports);
			return SR_EXIT_OK;
		default:
			fputs(help, stderr);
			json_decref(ports);
			return SR_EXIT_USAGE;
		}
	}
	sub = optind < argc ? argv[optind++] : NULL;
	if (optind < argc)
		sandbox = argv[optind++];
	if (!sub || optind < argc ||
	    (strcmp(sub, "enrol") == 0 && (!sandbox || !json_array_size(ports) || !key_file)) ||
	    (strcmp(sub, "verify") == 0 && !sandbox) ||
	    (strcmp(sub, "release") == 0 && !sandbox == !all) ||
	    (strcmp(sub, "list") == 0 && sandbox) ||
	    (strcmp(sub, "enrol") != 0 && strcmp(sub, "verify") != 0 &&
	     strcmp(sub, "release") != 0 && strcmp(sub, "list") != 0)) {
		fputs(help, stderr);
		json_decref(ports);
		return SR_EXIT_USAGE;
	}
	if ((rc = sr__cli_setup(&ctx, config_path)) != SR_EXIT_OK) {
		sr__ctx_cleanup(&ctx);
		json_decref(ports);
		return rc;
	}
	if (!ctx.rc.tunnel) {
		fprintf(stderr, "sandrun: no tunnel is configured ([runner] tunnel)\n");
		rc = SR_EXIT_UNAVAILABLE;
	} else if (!(t = sr__registry_find(ctx.reg, SR_PLUGIN_TUNNEL, ctx.rc.tunnel))) {
		fprintf(stderr, "sandrun: tunnel '%s' is configured but no such plugin was found "
			"(see 'sandrun plugins')\n", ctx.rc.tunnel);
		rc = SR_EXIT_UNAVAILABLE;
	} else if (sr__plugin_start(&ctx, t) != SR_OK) {
		fprintf(stderr, "sandrun: tunnel '%s' failed to start\n", ctx.rc.tunnel);
		rc = SR_EXIT_CONFIG;
	} else if (strcmp(sub, "list") == 0) {
		rc = list(&ctx, t, as_json);
	} else {
		/* enrol, verify and release follow the tunnel's start (NetBird:
		 * the Default policy checked, the runner's group found). */
		sr__wait_for(&ctx, &w, sr__tunnel_start(t, sr__next_req(), sr__wait_done, &w));
		rc = report(t, &w, "start");
		sr__wait_clear(&w);
		if (rc != SR_EXIT_OK) {
			;
		} else if (strcmp(sub, "enrol") == 0) {
			rc = enrol(&ctx, t, sandbox, ports, key_file);
		} else if (strcmp(sub, "verify") == 0) {
			sr__wait_for(&ctx, &w, sr__tunnel_enrol(t, sr__next_req(), sandbox,
								"{\"verify\":true}", sr__wait_done, &w));
			if ((rc = report(t, &w, "verify")) == SR_EXIT_OK)
				printf("%s\n", w.json ? w.json : "{}");
			sr__wait_clear(&w);
		} else if (sandbox) {
			sr__wait_for(&ctx, &w, sr__tunnel_release(t, sr__next_req(), sandbox,
								  sr__wait_done, &w));
			rc = report(t, &w, "release");
			sr__wait_clear(&w);
		} else {
			rc = release_all(&ctx, t);
		}
	}
	json_decref(ports);
	sr__ctx_cleanup(&ctx);
	return rc;
}
