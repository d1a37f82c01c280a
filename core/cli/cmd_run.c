/* sandrun run: one agent turn from the command line, in this process or,
 * with --server, on sandrund (run_server.c). NDJSON events with --json or
 * when standard output is not a terminal; otherwise the agent's text as
 * it streams, tool calls, permission prompts at the keyboard, and a
 * summary (the shared part: sr__run_ui). */
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
#include "core/cli/run_ui.h"
#include "core/host/log.h"
#include "core/tools/relay.h"
#include "core/run/run.h"

static const char run_help[] =
	"Usage: sandrun run [--config FILE] [--harness NAME] [--session ID]\n"
	"                   [--tools FILE] [--mcp-servers FILE] [--model-url URL]\n"
	"                   [--network open|off] [--network-enforcement strict|best_effort]\n"
	"                   [--json] [--approve-all | --deny-all] [--endpoint NAME]...\n"
	"                   [--mount s3://BUCKET/PREFIX:PATH]...\n"
	"                   [--server URL [--token-file FILE]] PROMPT\n"
	"\n"
	"Run one turn of a coding agent in a sandbox of the configured provider.\n"
	"--session resumes an earlier run's session (its id is printed at the end\n"
	"and in run.started). --tools gives the agent platform tools (a tools file,\n"
	"see 'sandrun tools --help'); --mcp-servers adds the user's MCP servers (a\n"
	"JSON array of ACP mcpServers entries). --model-url points the agent at a\n"
	"model endpoint; credentials come from the runner's environment\n"
	"(ANTHROPIC_API_KEY, OPENAI_API_KEY, ...). --endpoint NAME (up to 8) gives the\n"
	"agent a runner-side service of the configuration ([endpoint.NAME]) as\n"
	"SANDRUN_ENDPOINT_NAME, at the URL a sandbox of the provider reaches it by\n"
	"(see 'sandrun endpoint --help'); a service it cannot reach fails the run.\n"
	"--mount s3://BUCKET/PREFIX:PATH (up to 8) mounts that prefix of the S3 store\n"
	"([mount] endpoint, default [endpoint.s3]) at PATH in the sandbox (relative\n"
	"to the workspace) before the agent starts, with credentials from [mount]\n"
	"credentials_command, and unmounts it when the turn ends (sandrun.conf(5)).\n"
	"\n"
	"With --json, or when standard output is not a terminal, events are printed\n"
	"as NDJSON, and permission requests are answered by lines on standard\n"
	"input: {\"type\":\"permission.response\",\"request_id\":ID,\"allow\":true}.\n"
	"On a terminal they are asked at the keyboard. --approve-all and --deny-all\n"
	"answer them all. Ctrl-C cancels the turn cleanly.\n"
	"\n"
	"--server URL runs the turn on sandrund (http://HOST:PORT or unix:PATH) rather\n"
	"than in this process: the same events, answers and exit codes; the service's\n"
	"configuration and credentials apply. Its bearer token comes from the first\n"
	"line of --token-file or from SANDRUN_TOKEN. Failures to reach or use the\n"
	"service: 4 unreachable, 3 token refused, 2 request refused, 75 busy (try\n"
	"again).\n"
	"\n"
	"Exit codes: 0 the turn ended; 5 refused before any sandbox existed (a plan\n"
	"gate: see run.failed's code); 6 the run failed; 75 it failed on something\n"
	"transient (the provider timed out or answered 5xx: the session is kept, try\n"
	"the turn again; run.failed has \"retryable\":true); 130 cancelled; 2 usage;\n"
	"3 configuration.\n";

typedef struct ui {
	sr__run_ui view;       /* first: the hooks get it */
	sr__ctx *ctx;
	sr__run *run;
	uv_signal_t sigint, sigterm;
} ui;

/* ---------------------------------------------------------- rendering */

/* Secrets are redacted in the string values, never in the serialized
 * text (which a short secret would corrupt). */
static void print_json(json_t *ev)
{
	json_t *clean = sr__redact_json(ev);
	char *text = clean ? json_dumps(clean, JSON_COMPACT) : NULL;

	json_decref(clean);
	if (text) {
		fputs(text, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	free(text);
}

static const char *str(json_t *ev, const char *key)
{
	const char *s = json_string_value(json_object_get(ev, key));

	return s ? s : "";
}

static void newline(sr__run_ui *u)
{
	if (!u->at_line_start)
		fputc('\n', stdout);
	u->at_line_start = 1;
}

static void render(sr__run_ui *u, json_t *ev)
{
	const char *type = str(ev, "type");

	if (strcmp(type, "agent.message") == 0) {
		const char *t = str(ev, "text");
		fputs(t, stdout);
		if (*t)
			u->at_line_start = t[strlen(t) - 1] == '\n';
	} else if (strcmp(type, "run.started") == 0) {
		fprintf(stderr, "sandrun: %s turn %lld of session %s on %s\n", str(ev, "harness"),
			(long long)json_integer_value(json_object_get(ev, "turn")), str(ev, "session"),
			str(ev, "provider"));
		fprintf(stderr, "sandrun: starting the sandbox...\n");
	} else if (strcmp(type, "sandbox.acquired") == 0) {
		fprintf(stderr, "sandrun: sandbox %s %s; starting the agent...\n", str(ev, "sandbox"),
			str(ev, "how"));
	} else if (strcmp(type, "agent.prompt_sent") == 0) {
		fprintf(stderr, "sandrun: the agent is working\n");
	} else if (strcmp(type, "agent.tool_call") == 0) {
		newline(u);
		printf("[tool] %s (%s)\n", str(ev, "title"), str(ev, "status"));
		if (json_is_string(json_object_get(ev, "id")))
			json_object_set(u->titles, str(ev, "id"), json_object_get(ev, "title"));
		u->tools_seen++;
	} else if (strcmp(type, "agent.tool_update") == 0 && *str(ev, "status")) {
		const char *title = *str(ev, "title") ? str(ev, "title") :
			json_string_value(json_object_get(u->titles, str(ev, "id")));
		newline(u);
		printf("[tool] %s%s%s\n", title ? title : "", title ? ": " : "", str(ev, "status"));
	} else if (strcmp(type, "tool.result") == 0) {
		newline(u);
		printf("[platform tool] %s: %s%s\n", str(ev, "tool"), str(ev, "status"),
		       json_is_true(json_object_get(ev, "is_error")) ? " (error)" : "");
	} else if (strcmp(type, "permission.request") == 0) {
		newline(u);
		printf("[permission] allow %s? [y/N] ", *str(ev, "tool") ? str(ev, "tool") : "this call");
		fflush(stdout);
		snprintf(u->asking, sizeof(u->asking), "%s", str(ev, "request_id"));
		u->at_line_start = 0;
	} else if (strcmp(type, "credentials.exposed") == 0) {
		fprintf(stderr, "sandrun: note: %s\n", str(ev, "reason"));
	} else if (strcmp(type, "timing") == 0) {
		json_object_set(u->timings, str(ev, "stage"), json_object_get(ev, "ms"));
	} else if (strcmp(type, "run.finished") == 0) {
		const char *k;
		json_t *v;
		newline(u);
		fprintf(stderr, "sandrun: turn ended: %s; %d tool call%s; %lld ms", str(ev, "stop_reason"),
			u->tools_seen, u->tools_seen == 1 ? "" : "s",
			(long long)json_integer_value(json_object_get(ev, "ms")));
		json_object_foreach(u->timings, k, v)
			fprintf(stderr, "%s%s %lld ms", strcmp(k, "sandbox_start") == 0 ? " (" : ", ",
				k, (long long)json_integer_value(v));
		fprintf(stderr, "%s\nsandrun: resume with: sandrun run --session %s PROMPT\n",
			json_object_size(u->timings) ? ")" : "", str(ev, "session"));
	} else if (strcmp(type, "run.failed") == 0) {
		newline(u);
		fprintf(stderr, "sandrun: run failed [%s]: %s\n", str(ev, "code"), str(ev, "message"));
		if (*str(ev, "stderr_tail"))
			fprintf(stderr, "sandrun: the agent's last words:\n%s\n", str(ev, "stderr_tail"));
	}
	fflush(stdout);
}

void sr__run_ui_event(sr__run_ui *u, json_t *ev)
{
	if (u->json)
		print_json(ev);
	else
		render(u, ev);
}

static void on_event(void *ud, json_t *ev)
{
	ui *u = ud;

	sr__run_ui_event(&u->view, ev);
}

/* ------------------------------------------------------------- input */

static void control_line(sr__run_ui *u, const char *line)
{
	json_t *msg;
	const char *id;

	if (u->interactive) {
		if (!u->asking[0])
			return;
		u->answer(u, u->asking, line[0] == 'y' || line[0] == 'Y');
		u->asking[0] = 0;
		u->at_line_start = 1;
		return;
	}
	msg = json_loads(line, 0, NULL);
	id = json_string_value(json_object_get(msg, "request_id"));
	if (!id)
		id = json_string_value(json_object_get(msg, "call_id"));
	if (strcmp(str(msg, "type"), "permission.response") != 0 || !id ||
	    !json_is_boolean(json_object_get(msg, "allow")))
		sr__log(SR_LOG_WARN, "run", "ignored control line (expected {\"type\":\"permission.response\",\"request_id\":...,\"allow\":true|false})");
	else if (u->answer(u, id, json_is_true(json_object_get(msg, "allow"))) != SR_OK)
		sr__log(SR_LOG_WARN, "run", "no permission request '%s' is waiting", id);
	json_decref(msg);
}

static void on_input(void *ud, const char *data, size_t n)
{
	sr__run_ui *u = ud;

	if (!u->answer)
		return;
	if (n == 0) {
		u->input = NULL;
		u->deny_all(u); /* nobody is left to answer */
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (data[i] != '\n') {
			if (u->line_len < sizeof(u->line) - 1)
				u->line[u->line_len++] = data[i];
			continue;
		}
		u->line[u->line_len] = 0;
		if (u->line_len)
			control_line(u, u->line);
		u->line_len = 0;
	}
}

void sr__run_ui_init(sr__run_ui *u, int json)
{
	memset(u, 0, sizeof(*u));
	u->json = json || !isatty(1);
	u->interactive = !u->json && isatty(0);
	u->at_line_start = 1;
	u->timings = json_object();
	u->titles = json_object();
}

void sr__run_ui_clear(sr__run_ui *u)
{
	sr__run_ui_stop_input(u);
	json_decref(u->timings);
	json_decref(u->titles);
	u->timings = u->titles = NULL;
}

void sr__run_ui_start_input(sr__run_ui *u, uv_loop_t *loop)
{
	sr__input_start(loop, 0, on_input, u, &u->input);
}

void sr__run_ui_stop_input(sr__run_ui *u)
{
	sr__input_stop(u->input);
	u->input = NULL;
}

/* The in-process run's answers. */
static int answer_here(sr__run_ui *v, const char *id, int allow)
{
	ui *u = (ui *)v;

	return u->run ? sr__run_permission(u->run, id, allow) : SR_ENOTFOUND;
}

static void deny_here(sr__run_ui *v)
{
	ui *u = (ui *)v;

	if (u->run)
		sr__run_deny_asks(u->run);
}

static void on_signal(uv_signal_t *s, int signum)
{
	ui *u = s->data;

	(void)signum;
	if (u->run)
		sr__run_cancel(u->run);
}

/* ------------------------------------------------------------ command */

static char *default_shim(void)
{
	const char *env = getenv("SANDRUN_SHIM");

	return strdup(env && *env ? env : SR_LIBEXECDIR "/sandrun-shim");
}

/* The turn in this process, with a copy of opts (it gets pointers to
 * this frame). */
static int run_here(const sr__run_opts *opts, int json, const char *config_path)
{
	sr__run_opts ro = *opts, *o = &ro;
	ui u;
	char *shim;
	const char *env;
	int rc, exit_code;

	memset(&u, 0, sizeof(u));
	sr__run_ui_init(&u.view, json);
	u.view.answer = answer_here;
	u.view.deny_all = deny_here;
	if ((env = getenv("SANDRUN_ACP_TIMEOUT_MS")))
		o->acp_timeout_ms = strtoull(env, NULL, 10);
	shim = default_shim();
	o->shim_path = shim;
	o->event = on_event;
	o->ud = &u;
	u.ctx = calloc(1, sizeof(*u.ctx));
	if (!u.ctx) {
		exit_code = SR_EXIT_FAIL;
		goto out;
	}
	rc = sr__cli_setup(u.ctx, config_path);
	if (rc != SR_EXIT_OK) {
		exit_code = rc;
		goto out;
	}
	if (o->tools_path && access(shim, X_OK) != 0) {
		fprintf(stderr, "sandrun run: platform tools need sandrun-shim, not found at %s (set SANDRUN_SHIM)\n",
			shim);
		exit_code = SR_EXIT_CONFIG;
		goto out;
	}
	uv_signal_init(u.ctx->loop, &u.sigint);
	uv_signal_init(u.ctx->loop, &u.sigterm);
	u.sigint.data = u.sigterm.data = &u;
	uv_signal_start(&u.sigint, on_signal, SIGINT);
	uv_signal_start(&u.sigterm, on_signal, SIGTERM);
	if (sr__run_start(u.ctx, o, &u.run, &exit_code) == SR_OK) {
		if (o->ask_policy == SR_ASK_WAIT)
			sr__run_ui_start_input(&u.view, u.ctx->loop);
		while (!sr__run_done(u.run) && uv_run(u.ctx->loop, UV_RUN_ONCE))
			;
		exit_code = sr__run_finish(u.run);
		u.run = NULL;
	}
	sr__run_ui_stop_input(&u.view);
	uv_close((uv_handle_t *)&u.sigint, NULL);
	uv_close((uv_handle_t *)&u.sigterm, NULL);
	uv_run(u.ctx->loop, UV_RUN_NOWAIT);
out:
	if (u.ctx)
		sr__ctx_cleanup(u.ctx);
	free(u.ctx);
	free(shim);
	sr__run_ui_clear(&u.view);
	return exit_code;
}

/* A JSON array from file (--tools, --mcp-servers), for the service. */
static json_t *array_file(const char *opt, const char *path)
{
	json_error_t err;
	json_t *a = json_load_file(path, 0, &err);

	if (json_is_array(a))
		return a;
	fprintf(stderr, "sandrun run: %s %s: %s\n", opt, path,
		a ? "expected a JSON array" : err.text);
	json_decref(a);
	return NULL;
}

/* body's key as an array of the n strings v, when there are any. */
static void add_strings(json_t *body, const char *key, const char *const *v, size_t n)
{
	json_t *a = n ? json_array() : NULL;

	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	if (a)
		json_object_set_new(body, key, a);
}

/* The request sandrund takes (doc/api.yaml) for the same options. */
static json_t *server_body(const sr__run_opts *o)
{
	static const char *const modes[] = { "ask", "approve_all", "deny_all" };
	json_t *body = json_pack("{s:s, s:s, s:{s:s, s:s}}", "prompt", o->prompt,
				 "permission_mode", modes[o->ask_policy % 3], "network", "mode",
				 o->network == SR_NET_OFF ? "off" : "open", "enforcement",
				 o->enforcement_strict ? "strict" : "best_effort");
	json_t *a;

	if (!body)
		return NULL;
	if (o->harness)
		json_object_set_new(body, "harness", json_string(o->harness));
	if (o->session)
		json_object_set_new(body, "session", json_string(o->session));
	if (o->model_url)
		json_object_set_new(body, "model", json_pack("{s:s}", "url", o->model_url));
	if (o->tools_path) {
		if (!(a = array_file("--tools", o->tools_path)))
			goto fail;
		json_object_set_new(body, "tools", a);
	}
	if (o->mcp_path) {
		if (!(a = array_file("--mcp-servers", o->mcp_path)))
			goto fail;
		json_object_set_new(body, "mcp_servers", a);
	}
	add_strings(body, "endpoints", o->endpoints, o->n_endpoints);
	add_strings(body, "mounts", o->mounts, o->n_mounts);
	return body;
fail:
	json_decref(body);
	return NULL;
}

int sr__cmd_run(int argc, char **argv, const char *config_path)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "harness", required_argument, NULL, 'H' },
		{ "session", required_argument, NULL, 's' },
		{ "tools", required_argument, NULL, 't' },
		{ "mcp-servers", required_argument, NULL, 'm' },
		{ "model-url", required_argument, NULL, 'u' },
		{ "network", required_argument, NULL, 'n' },
		{ "network-enforcement", required_argument, NULL, 'E' },
		{ "json", no_argument, NULL, 'j' },
		{ "approve-all", no_argument, NULL, 'A' },
		{ "deny-all", no_argument, NULL, 'D' },
		{ "server", required_argument, NULL, 'S' },
		{ "token-file", required_argument, NULL, 'T' },
		{ "endpoint", required_argument, NULL, 'P' },
		{ "mount", required_argument, NULL, 'M' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *server = NULL, *token_file = NULL;
	sr__run_opts o;
	json_t *body;
	int c, json = 0, rc;

	memset(&o, 0, sizeof(o));
	o.enforcement_strict = 1;
	o.ask_policy = SR_ASK_WAIT;
	while ((c = getopt_long(argc, argv, "c:H:s:t:m:u:n:E:jADS:T:P:M:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config_path = optarg; break;
		case 'H': o.harness = optarg; break;
		case 's': o.session = optarg; break;
		case 't': o.tools_path = optarg; break;
		case 'm': o.mcp_path = optarg; break;
		case 'u': o.model_url = optarg; break;
		case 'j': json = 1; break;
		case 'A': o.ask_policy = SR_ASK_APPROVE; break;
		case 'D': o.ask_policy = SR_ASK_DENY; break;
		case 'S': server = optarg; break;
		case 'T': token_file = optarg; break;
		case 'P':
		case 'M': {
			const char **v = c == 'P' ? o.endpoints : o.mounts;
			size_t *n = c == 'P' ? &o.n_endpoints : &o.n_mounts;
			if (*n >= SR__RUN_MAX_ENDPOINTS) {
				fprintf(stderr, "sandrun run: at most %d --%s\n",
					SR__RUN_MAX_ENDPOINTS, c == 'P' ? "endpoint" : "mount");
				return SR_EXIT_USAGE;
			}
			v[(*n)++] = optarg;
			break;
		}
		case 'n':
			if (strcmp(optarg, "open") != 0 && strcmp(optarg, "off") != 0) {
				fprintf(stderr, "sandrun run: --network '%s': expected open or off\n", optarg);
				return SR_EXIT_USAGE;
			}
			o.network = strcmp(optarg, "off") == 0 ? SR_NET_OFF : SR_NET_OPEN;
			break;
		case 'E':
			if (strcmp(optarg, "strict") != 0 && strcmp(optarg, "best_effort") != 0) {
				fprintf(stderr, "sandrun run: --network-enforcement '%s': expected strict or best_effort\n",
					optarg);
				return SR_EXIT_USAGE;
			}
			o.enforcement_strict = strcmp(optarg, "strict") == 0;
			break;
		case 'h':
			fputs(run_help, stdout);
			return SR_EXIT_OK;
		default:
			return SR_EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, optind >= argc ? "sandrun run: no prompt (see 'sandrun run --help')\n" :
			"sandrun run: give the prompt as one argument (quote it)\n");
		return SR_EXIT_USAGE;
	}
	o.prompt = argv[optind];
	if (token_file && !server) {
		fprintf(stderr, "sandrun run: --token-file goes with --server\n");
		return SR_EXIT_USAGE;
	}
	if (!server)
		return run_here(&o, json, config_path);
	if (!(body = server_body(&o)))
		return SR_EXIT_USAGE;
	rc = sr__run_on_server(server, token_file, body, json);
	json_decref(body);
	return rc;
}
