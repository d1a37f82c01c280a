/* sandrun sandbox ... and sandrun exec: drive the configured provider by
 * hand. Each invocation is a new runner process, so these commands also
 * show that sandboxes survive a restart of the runner. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli/cli.h"
#include "core/cli/input.h"
#include "core/host/log.h"
#include "core/plugins/provider.h"
#include "core/host/status.h"

#define MAX_PAIRS 64

typedef struct opts {
	const char *config;
	int network;     /* SR_NET_*, -1 unset */
	int json;
	int stopped;
	int keep;
	int interactive;
	const char *cwd;
	sr_pair env[MAX_PAIRS];
	size_t n_env;
	sr_pair labels[MAX_PAIRS + 2]; /* + the runner's own */
	size_t n_labels;
} opts;

static int parse_pair(const char *s, sr_pair *list, size_t *n,
		      const char *what)
{
	const char *eq = strchr(s, '=');
	char *name;

	if (!eq || eq == s || *n >= MAX_PAIRS) {
		fprintf(stderr, "sandrun: %s '%s': expected NAME=VALUE\n", what, s);
		return -1;
	}
	if (strcmp(what, "--label") == 0 && strncmp(s, "sandrun.", 8) == 0) {
		fprintf(stderr, "sandrun: --label '%s': labels starting with 'sandrun.' are "
			"the runner's own\n", s);
		return -1;
	}
	name = strndup(s, (size_t)(eq - s));
	list[*n].name = name;
	list[*n].value = eq + 1;
	(*n)++;
	return 0;
}

static void free_opts(opts *o)
{
	for (size_t i = 0; i < o->n_env; i++)
		free((char *)o->env[i].name);
	for (size_t i = 0; i < o->n_labels; i++)
		free((char *)o->labels[i].name);
}

static int parse_network(const char *s)
{
	if (strcmp(s, "open") == 0)
		return SR_NET_OPEN;
	if (strcmp(s, "off") == 0)
		return SR_NET_OFF;
	fprintf(stderr, "sandrun: --network '%s': expected 'open' or 'off'\n", s);
	return -2;
}

/* Parse the options every sandbox command shares; returns optind or -1. */
static int parse_opts(int argc, char **argv, opts *o, const char *help)
{
	static const struct option lopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "network", required_argument, NULL, 'n' },
		{ "env", required_argument, NULL, 'e' },
		{ "label", required_argument, NULL, 'l' },
		{ "cwd", required_argument, NULL, 'C' },
		{ "json", no_argument, NULL, 'j' },
		{ "stopped", no_argument, NULL, 's' },
		{ "keep", no_argument, NULL, 'k' },
		{ "interactive", no_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int c;

	while ((c = getopt_long(argc, argv, "+c:n:e:l:C:jskih", lopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			o->config = optarg;
			break;
		case 'n':
			if ((o->network = parse_network(optarg)) == -2)
				return -1;
			break;
		case 'e':
			if (parse_pair(optarg, o->env, &o->n_env, "--env") != 0)
				return -1;
			break;
		case 'l':
			if (parse_pair(optarg, o->labels, &o->n_labels, "--label") != 0)
				return -1;
			break;
		case 'C':
			o->cwd = optarg;
			break;
		case 'j':
			o->json = 1;
			break;
		case 's':
			o->stopped = 1;
			break;
		case 'k':
			o->keep = 1;
			break;
		case 'i':
			o->interactive = 1;
			break;
		case 'h':
			fputs(help, stdout);
			exit(SR_EXIT_OK);
		default:
			return -1;
		}
	}
	return optind;
}

static int report(sr__wait *w, const char *what)
{
	if (w->status == SR_OK)
		return SR_EXIT_OK;
	fprintf(stderr, "sandrun: %s: %s\n", what,
		w->message ? w->message : sr__strerror(w->status));
	return w->status == SR_EUNSUPPORTED ? SR_EXIT_UNAVAILABLE : SR_EXIT_FAIL;
}

/* kind: NULL for a sandbox made by hand, "exec" for sandrun exec's. */
static int create(sr__ctx *ctx, sr__plugin *p, opts *o, const char *kind, char **id_out)
{
	sr_network_policy np = { sizeof(np), o->network < 0 ? SR_NET_OPEN : o->network,
				 NULL, 0 };
	sr_sandbox_spec spec = { sizeof(spec), NULL, o->env, o->n_env, NULL, 0, &np,
				 o->labels, o->n_labels };
	sr__wait w = { 0 };
	json_t *j;
	int rc;

	/* The runner's labels after the user's (room was kept for them). */
	o->labels[o->n_labels].name = "sandrun.runner";
	if (!(o->labels[o->n_labels].value = sr__ctx_runner_id(ctx)))
		return SR_EXIT_FAIL;
	spec.n_labels++;
	if (kind) {
		o->labels[spec.n_labels].name = "sandrun.kind";
		o->labels[spec.n_labels].value = kind;
		spec.n_labels++;
	}
	sr__wait_for(ctx, &w, sr__provider_create(p, sr__next_req(), &spec, sr__wait_done, &w));
	rc = report(&w, "create");
	if (rc == SR_EXIT_OK) {
		const char *id;
		j = json_loads(w.json ? w.json : "", 0, NULL);
		id = json_string_value(json_object_get(j, "id"));
		if (!id || !*id || !(*id_out = strdup(id))) {
			fprintf(stderr, "sandrun: create: provider '%s' answered without a sandbox id\n",
				p->desc->name);
			rc = SR_EXIT_FAIL;
		} else if (o->json) {
			printf("%s\n", w.json);
		}
		json_decref(j);
	}
	sr__wait_clear(&w);
	return rc;
}

/* ----------------------------------------------------------------- exec */

typedef struct run {
	sr__ctx *ctx;
	sr__plugin *p;
	uint64_t req;
	int exited;
	int code;
	uv_signal_t sigint, sigterm;
	sr__input *input;
} run;

static void out_chunk(void *ud, const void *data, size_t len)
{
	(void)ud;
	if (len)
		fwrite(data, 1, len, stdout), fflush(stdout);
}

static void err_chunk(void *ud, const void *data, size_t len)
{
	(void)ud;
	if (len)
		fwrite(data, 1, len, stderr), fflush(stderr);
}

static void on_exit_ch(void *ud, int status, int sig)
{
	run *r = ud;

	/* The wait for it ends even when other handles stay open. */
	uv_stop(r->sigint.loop);
	r->exited = 1;
	r->code = sig ? 128 + sig : status;
	uv_signal_stop(&r->sigint);
	uv_signal_stop(&r->sigterm);
	sr__input_stop(r->input);
	r->input = NULL;
}

static void on_failed_ch(void *ud, int status, const char *message)
{
	run *r = ud;

	fprintf(stderr, "sandrun: the process failed: %s\n",
		message ? message : sr__strerror(status));
	on_exit_ch(r, SR_EXIT_FAIL, 0);
}

static void on_signal(uv_signal_t *s, int signum)
{
	run *r = s->data;

	if (sr__provider_channel_signal(r->p, r->req, signum) != SR_OK)
		fprintf(stderr, "sandrun: cannot pass signal %d on to the process\n", signum);
}

static void on_stdin(void *ud, const char *data, size_t n)
{
	run *r = ud;
	int rc;

	if (r->exited)
		return;
	if (n == 0) {
		r->input = NULL; /* the reader frees itself at the end */
		(void)sr__provider_channel_close_input(r->p, r->req); /* gone: nothing to close */
		return;
	}
	if ((rc = sr__provider_channel_write(r->p, r->req, data, n)) != SR_OK) {
		/* The process no longer reads: stop reading for it. */
		sr__input_stop(r->input);
		r->input = NULL;
		if (rc == SR_EINVAL) {
			/* Input the provider cannot carry (Daytona: text only):
			 * the process would wait for it for ever. */
			fprintf(stderr, "sandrun: standard input cannot be passed to the process "
				"(this provider carries text only); ending it\n");
			(void)sr__provider_channel_signal(r->p, r->req, SIGTERM);
		}
	}
}

static int exec_in(sr__ctx *ctx, sr__plugin *p, const char *id, opts *o,
		   char **cmd)
{
	sr_channel_callbacks cbs = { sizeof(cbs), out_chunk, err_chunk, on_exit_ch,
				     on_failed_ch };
	sr_exec_spec spec = { sizeof(spec), (const char *const *)cmd, o->env,
			      o->n_env, o->cwd, NULL, 0 };
	run r;
	int rc;

	memset(&r, 0, sizeof(r));
	r.ctx = ctx;
	r.p = p;
	r.req = sr__next_req();
	rc = sr__provider_exec(p, r.req, id, &spec, &cbs, &r);
	if (rc != SR_OK) {
		fprintf(stderr, "sandrun: exec in '%s': %s: %s\n", id, cmd[0],
			sr__strerror(rc));
		return rc == SR_ENOTFOUND ? 127 : SR_EXIT_FAIL;
	}
	uv_signal_init(ctx->loop, &r.sigint);
	uv_signal_init(ctx->loop, &r.sigterm);
	r.sigint.data = r.sigterm.data = &r;
	uv_signal_start(&r.sigint, on_signal, SIGINT);
	uv_signal_start(&r.sigterm, on_signal, SIGTERM);
	if (o->interactive)
		sr__input_start(ctx->loop, 0, on_stdin, &r, &r.input);
	else
		sr__provider_channel_close_input(p, r.req);
	while (!r.exited && uv_run(ctx->loop, UV_RUN_ONCE))
		;
	sr__input_stop(r.input);
	uv_close((uv_handle_t *)&r.sigint, NULL);
	uv_close((uv_handle_t *)&r.sigterm, NULL);
	uv_run(ctx->loop, UV_RUN_NOWAIT);
	return r.exited ? r.code : SR_EXIT_FAIL;
}

/* ----------------------------------------------------------- commands */

static const char sandbox_help[] =
	"Usage: sandrun sandbox list [--label NAME=VALUE]... [--json]\n"
	"       sandrun sandbox create [--network open|off] [--env NAME=VALUE]...\n"
	"                              [--label NAME=VALUE]... [--json]\n"
	"       sandrun sandbox exec ID [--env NAME=VALUE]... [--cwd DIR] [-i] -- CMD [ARG]...\n"
	"       sandrun sandbox park ID [--stopped]\n"
	"       sandrun sandbox reconnect ID [--network open|off] [--json]\n"
	"       sandrun sandbox destroy ID\n"
	"\n"
	"Drive the configured provider by hand. 'list' shows this runner's own\n"
	"sandboxes (every sandbox it creates is labelled sandrun.runner=ID) and who\n"
	"made each: a run (with its session), sandrun exec, or by hand. 'create'\n"
	"prints the new sandbox's id; the others take it. A sandbox outlives the\n"
	"runner process: reconnect, exec and destroy work from a later invocation.\n"
	"'exec' exits with the command's exit code (128+N when killed by signal N);\n"
	"-i forwards standard input. Labels starting with 'sandrun.' are the runner's.\n";

static const char exec_help[] =
	"Usage: sandrun exec [--network open|off] [--env NAME=VALUE]... [--keep] [-i]\n"
	"                    -- CMD [ARG]...\n"
	"\n"
	"Create a sandbox with the configured provider, run one command in its\n"
	"workspace, and remove the sandbox (keep it with --keep: its id is printed on\n"
	"standard error). Exits with the command's exit code.\n";

static int need_id(int argc, char **argv, int i, const char *sub)
{
	if (i >= argc) {
		fprintf(stderr, "sandrun sandbox %s: missing sandbox ID\n", sub);
		return 0;
	}
	return 1;
}

int sr__cmd_sandbox(int argc, char **argv, const char *config_path)
{
	opts o;
	sr__ctx ctx;
	sr__plugin *p;
	sr__wait w = { 0 };
	const char *sub, *id = NULL;
	char *new_id = NULL;
	int i, rc;

	memset(&o, 0, sizeof(o));
	o.network = -1;
	o.config = config_path;
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(sandbox_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? SR_EXIT_USAGE : SR_EXIT_OK;
	}
	sub = argv[1];
	if (strcmp(sub, "create") != 0 && strcmp(sub, "exec") != 0 && strcmp(sub, "list") != 0 &&
	    strcmp(sub, "park") != 0 && strcmp(sub, "reconnect") != 0 &&
	    strcmp(sub, "destroy") != 0) {
		fprintf(stderr, "sandrun sandbox: unknown subcommand '%s'\n", sub);
		return SR_EXIT_USAGE;
	}
	i = 2;
	if (strcmp(sub, "create") != 0 && strcmp(sub, "list") != 0) {
		if (!need_id(argc, argv, i, sub))
			return SR_EXIT_USAGE;
		id = argv[i++];
	}
	/* argv[i - 1] stands in for argv[0] of the option parser. */
	optind = 0;
	rc = parse_opts(argc - (i - 1), argv + (i - 1), &o, sandbox_help);
	if (rc < 0) {
		free_opts(&o);
		return SR_EXIT_USAGE;
	}
	i = (i - 1) + rc;
	if (strcmp(sub, "exec") == 0 && i >= argc) {
		fprintf(stderr, "sandrun sandbox exec: missing command (after --)\n");
		free_opts(&o);
		return SR_EXIT_USAGE;
	}
	if (strcmp(sub, "exec") != 0 && i < argc) {
		fprintf(stderr, "sandrun sandbox %s: unexpected argument '%s'\n", sub,
			argv[i]);
		free_opts(&o);
		return SR_EXIT_USAGE;
	}
	rc = sr__cli_setup(&ctx, o.config);
	if (rc != SR_EXIT_OK || !(p = sr__cli_provider(&ctx))) {
		rc = rc != SR_EXIT_OK ? rc : SR_EXIT_UNAVAILABLE;
		goto out;
	}
	if (strcmp(sub, "list") == 0) {
		json_t *list = NULL;
		rc = sr__cli_own_sandboxes(&ctx, p, o.labels, o.n_labels, &list);
		if (rc == SR_EXIT_OK && o.json) {
			char *text = json_dumps(list, JSON_COMPACT);
			printf("%s\n", text ? text : "[]");
			free(text);
		} else if (rc == SR_EXIT_OK) {
			sr__cli_print_sandboxes(list);
		}
		json_decref(list);
	} else if (strcmp(sub, "create") == 0) {
		rc = create(&ctx, p, &o, NULL, &new_id);
		if (rc == SR_EXIT_OK && !o.json)
			printf("%s\n", new_id);
	} else if (strcmp(sub, "exec") == 0) {
		rc = exec_in(&ctx, p, id, &o, argv + i);
	} else {
		sr_network_policy np = { sizeof(np), o.network, NULL, 0 };
		uint64_t req = sr__next_req();
		if (strcmp(sub, "park") == 0)
			rc = sr__provider_park(p, req, id, o.stopped ? SR_PARK_STOPPED :
					       SR_PARK_RUNNING, sr__wait_done, &w);
		else if (strcmp(sub, "reconnect") == 0)
			rc = sr__provider_reconnect(p, req, id, o.network < 0 ? NULL : &np,
						    sr__wait_done, &w);
		else
			rc = sr__provider_destroy(p, req, id, sr__wait_done, &w);
		sr__wait_for(&ctx, &w, rc);
		rc = report(&w, sub);
		if (rc == SR_EXIT_OK && w.json)
			printf("%s\n", o.json ? w.json : id);
		sr__wait_clear(&w);
	}
out:
	free(new_id);
	sr__ctx_cleanup(&ctx);
	free_opts(&o);
	return rc;
}

int sr__cmd_exec(int argc, char **argv, const char *config_path)
{
	opts o;
	sr__ctx ctx;
	sr__plugin *p;
	sr__wait w = { 0 };
	char *id = NULL;
	int i, rc;

	memset(&o, 0, sizeof(o));
	o.network = -1;
	o.config = config_path;
	i = parse_opts(argc, argv, &o, exec_help);
	if (i < 0 || i >= argc) {
		if (i >= 0)
			fprintf(stderr, "sandrun exec: missing command (after --)\n");
		free_opts(&o);
		return SR_EXIT_USAGE;
	}
	rc = sr__cli_setup(&ctx, o.config);
	if (rc != SR_EXIT_OK || !(p = sr__cli_provider(&ctx))) {
		rc = rc != SR_EXIT_OK ? rc : SR_EXIT_UNAVAILABLE;
		goto out;
	}
	o.json = 0;
	rc = create(&ctx, p, &o, "exec", &id);
	if (rc != SR_EXIT_OK)
		goto out;
	rc = exec_in(&ctx, p, id, &o, argv + i);
	if (o.keep) {
		fprintf(stderr, "sandrun: kept sandbox %s\n", id);
		goto out;
	}
	sr__wait_for(&ctx, &w, sr__provider_destroy(p, sr__next_req(), id, sr__wait_done, &w));
	if (report(&w, "destroy") != SR_EXIT_OK && rc == SR_EXIT_OK)
		rc = SR_EXIT_FAIL;
	sr__wait_clear(&w);
out:
	free(id);
	sr__ctx_cleanup(&ctx);
	free_opts(&o);
	return rc;
}
