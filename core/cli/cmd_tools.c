/* sandrun tools serve: run the relay loop (and optionally the loopback MCP
 * server) for a tools file until SIGTERM, printing events as NDJSON.
 * Answers to permission requests come in on standard input, one JSON
 * object a line: {"type":"permission.response","call_id":ID,"allow":BOOL}. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli/cli.h"
#include "core/host/fsutil.h"
#include "core/cli/input.h"
#include "core/host/log.h"
#include "core/host/status.h"
#include "core/tools/mcp_http.h"
#include "core/plugins/provider.h"
#include "core/tools/relay.h"
#include "core/tools/relay_bridge.h"
#include "core/run/plan.h"
#include "core/tools/tools.h"

static const char tools_help[] =
	"Usage: sandrun tools serve --tools FILE --relay-dir DIR [--mcp-http]\n"
	"                           [--specs-out FILE] [--journal DIR] [--sweep]\n"
	"                           [--default-permission MODE] [--rule GLOB=PERM]...\n"
	"                           [--approve-all | --deny-all]\n"
	"                           [--sandbox ID [--shim PATH]]\n"
	"       sandrun tools check --tools FILE\n"
	"\n"
	"'serve' answers tool calls published in DIR (by sandrun-shim) until SIGTERM\n"
	"or SIGINT, printing one JSON event a line on standard output. With\n"
	"--mcp-http it also serves the tools over MCP Streamable HTTP on 127.0.0.1;\n"
	"its first line is then {\"type\":\"mcp.http\",\"url\":...,\"token\":...}.\n"
	"--specs-out writes the tool specs the sandbox may see (for sandrun-shim\n"
	"--specs). Claims are kept in --journal (default: under the state\n"
	"directory), outside the sandbox; --sweep removes stale relay files first.\n"
	"\n"
	"With --sandbox, DIR is a path inside that sandbox of the configured\n"
	"provider (a remote one, say), reached only through the provider: requests\n"
	"are taken and answered with its file operations, and picked up as\n"
	"'sandrun-shim watch DIR' (--shim: the shim's path in the sandbox) reports\n"
	"them over an exec channel; without --shim, by listing DIR every second.\n"
	"--sweep then answers what an earlier runner left there (never running a\n"
	"tool twice).\n"
	"\n"
	"Permissions: each tool's own 'permission', then the first --rule whose\n"
	"glob matches the tool name, then --default-permission: allow, ask, deny,\n"
	"or allow_reads (the default: read-only tools allowed, others asked).\n"
	"An 'ask' prints a permission.request event and waits for a line\n"
	"{\"type\":\"permission.response\",\"call_id\":ID,\"allow\":true|false} on\n"
	"standard input; when standard input ends, asks are denied. --approve-all\n"
	"and --deny-all answer every ask at once.\n"
	"\n"
	"'check' validates a tools file and prints its specs.\n";

typedef struct serve {
	sr__ctx ctx;
	sr__toolset *tools;
	sr__guard guard;
	sr__relay *relay;
	sr__bridge *bridge;
	sr__mcp_http *http;
	uv_signal_t sigterm, sigint;
	sr__input *input;
	char *line;
	size_t line_len;
	int stopping;
} serve;

static void print_event(void *ud, json_t *ev)
{
	/* Secrets (callback credentials) never reach the output; they are
	 * redacted in the string values, never in the serialized text. */
	json_t *clean = sr__redact_json(ev);
	char *text = clean ? json_dumps(clean, JSON_COMPACT) : NULL;

	(void)ud;
	json_decref(clean);
	if (!text)
		return;
	fputs(text, stdout);
	fputc('\n', stdout);
	fflush(stdout);
	free(text);
}

static void control_line(serve *s, const char *line)
{
	json_t *msg = json_loads(line, 0, NULL);
	const char *type = json_string_value(json_object_get(msg, "type"));
	const char *id = json_string_value(json_object_get(msg, "call_id"));
	json_t *allow = json_object_get(msg, "allow");

	if (!type || strcmp(type, "permission.response") != 0 || !id ||
	    !json_is_boolean(allow)) {
		sr__log(SR_LOG_WARN, "tools",
			"ignored control line (expected {\"type\":\"permission.response\",\"call_id\":...,\"allow\":true|false})");
	} else if (sr__relay_permission(s->relay, id, json_is_true(allow)) != SR_OK) {
		sr__log(SR_LOG_WARN, "tools", "no permission request '%s' is waiting", id);
	}
	json_decref(msg);
}

static void on_stdin(void *ud, const char *data, size_t n)
{
	serve *s = ud;

	if (s->stopping)
		return;
	if (n == 0) {
		json_t *ev = json_pack("{s:s}", "type", "control.closed");
		s->input = NULL; /* the reader frees itself at the end */
		print_event(s, ev);
		json_decref(ev);
		sr__relay_set_ask_policy(s->relay, SR_ASK_DENY);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char ch = data[i];
		if (ch == '\n') {
			if (s->line_len) {
				s->line[s->line_len] = 0;
				control_line(s, s->line);
			}
			s->line_len = 0;
			continue;
		}
		if (s->line_len < 1 << 20) {
			char *g = realloc(s->line, s->line_len + 2);
			if (!g)
				continue;
			s->line = g;
			s->line[s->line_len++] = ch;
		}
	}
}

static void on_signal(uv_signal_t *h, int signum)
{
	serve *s = h->data;

	(void)signum;
	s->stopping = 1;
	sr__input_stop(s->input);
	s->input = NULL;
	uv_signal_stop(&s->sigterm);
	uv_signal_stop(&s->sigint);
	sr__bridge_free(s->bridge, NULL, NULL);
	s->bridge = NULL;
	sr__relay_free(s->relay);
	s->relay = NULL;
	sr__mcp_http_stop(s->http);
	s->http = NULL;
	uv_close((uv_handle_t *)&s->sigterm, NULL);
	uv_close((uv_handle_t *)&s->sigint, NULL);
	uv_stop(s->ctx.loop);
}

/* STATE/<kind>/<FNV-1a of key>, or NULL. */
static char *state_path(sr__ctx *ctx, const char *kind, const char *key)
{
	const char *state = sr__ctx_state_dir(ctx);
	uint64_t h = 1469598103934665603ULL;
	char *out;

	if (!state)
		return NULL;
	for (const char *p = key; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	out = malloc(strlen(state) + strlen(kind) + 40);
	if (out)
		sprintf(out, "%s/%s/%016llx", state, kind, (unsigned long long)h);
	return out;
}

static char *default_journal(sr__ctx *ctx, const char *relay_dir)
{
	char abs[4096];

	if (!realpath(relay_dir, abs))
		return NULL;
	return state_path(ctx, "relay", abs);
}

/* ----------------------------------------------- a sandbox's directory */

typedef struct remote {
	sr__ctx *ctx;
	sr__plugin *p;
	const char *sandbox, *dir, *shim;
	char *mirror, *journal;
} remote;

static void on_swept(void *ud, int status, const char *message)
{
	sr__wait *w = ud;
	sr_result r = { sizeof(r), status, message, NULL, NULL, 0 };

	sr__wait_done(w, &r);
}

/* The bridge between the sandbox's DIR and a runner-side mirror that the
 * relay serves; an exit code. */
static int start_bridge(serve *s, remote *m, int sweep)
{
	sr__bridge_opts bo;
	sr__wait w = { 0 };
	char err[600], key[4400];
	int rc;

	snprintf(key, sizeof(key), "%s:%s", m->sandbox, m->dir);
	m->mirror = state_path(&s->ctx, "relay-mirror", key);
	if (!m->journal)
		m->journal = state_path(&s->ctx, "relay", key);
	if (!m->mirror || !m->journal || sr__mkdirs(m->mirror, 0700) != SR_OK ||
	    sr__mkdirs(m->journal, 0700) != SR_OK) {
		fprintf(stderr, "sandrun tools: cannot make the relay's mirror and journal "
			"under the state directory\n");
		return SR_EXIT_FAIL;
	}
	sr__wait_for(&s->ctx, &w, sr__provider_file_mkdir(m->p, sr__next_req(), m->sandbox,
							 m->dir, 0700, sr__wait_done, &w));
	if ((rc = w.status) != SR_OK && rc != SR_EEXIST) {
		fprintf(stderr, "sandrun tools: cannot make %s in sandbox %s: %s\n", m->dir,
			m->sandbox, w.message ? w.message : sr__strerror(rc));
		sr__wait_clear(&w);
		return rc == SR_ENOTFOUND ? SR_EXIT_UNAVAILABLE : SR_EXIT_FAIL;
	}
	sr__wait_clear(&w);
	memset(&bo, 0, sizeof(bo));
	bo.provider = m->p;
	bo.sandbox = m->sandbox;
	bo.remote_dir = m->dir;
	bo.local_dir = m->mirror;
	bo.journal = m->journal;
	bo.shim = m->shim;
	bo.event = print_event;
	bo.ud = s;
	if (sr__bridge_new(&s->ctx, &bo, &s->bridge, err, sizeof(err)) != SR_OK) {
		fprintf(stderr, "sandrun tools: %s\n", err);
		return SR_EXIT_FAIL;
	}
	if (sweep) {
		rc = sr__bridge_sweep(s->bridge, on_swept, &w);
		sr__wait_for(&s->ctx, &w, rc);
		if (w.status != SR_OK) {
			fprintf(stderr, "sandrun tools: %s\n",
				w.message ? w.message : sr__strerror(w.status));
			sr__wait_clear(&w);
			return SR_EXIT_FAIL;
		}
		sr__wait_clear(&w);
	}
	return SR_EXIT_OK;
}

static int write_specs(const sr__toolset *tools, const char *path)
{
	json_t *specs = sr__tools_specs(tools);
	int rc = json_dump_file(specs, path, JSON_INDENT(2));

	json_decref(specs);
	if (rc != 0)
		fprintf(stderr, "sandrun tools: cannot write %s\n", path);
	return rc == 0 ? SR_OK : SR_EIO;
}

static int run_serve(serve *s, const char *relay_dir, const char *journal,
		     int http, int sweep, int ask_policy, remote *m)
{
	sr__relay_opts o;
	char err[512], *own_journal = NULL;
	const char *shown = relay_dir;
	json_t *ev;
	int rc;

	memset(&o, 0, sizeof(o));
	if (m) {
		m->journal = journal ? strdup(journal) : NULL;
		if (!(m->p = sr__cli_provider(&s->ctx)))
			return SR_EXIT_UNAVAILABLE;
		if ((rc = start_bridge(s, m, sweep)) != SR_EXIT_OK)
			return rc;
		relay_dir = m->mirror;
		journal = m->journal;
	}
	if (sr__mkdirs(relay_dir, 0700) != SR_OK) {
		fprintf(stderr, "sandrun tools: cannot create relay directory %s\n", relay_dir);
		return SR_EXIT_FAIL;
	}
	if (!journal && !(journal = own_journal = default_journal(&s->ctx, relay_dir))) {
		fprintf(stderr, "sandrun tools: no journal directory (state directory unusable)\n");
		return SR_EXIT_FAIL;
	}
	o.dir = relay_dir;
	o.journal = journal;
	o.tools = s->tools;
	o.guard = &s->guard;
	o.ask_policy = ask_policy;
	o.max_per_endpoint = s->ctx.rc.callback_concurrency;
	o.cpu_latency_device = s->ctx.rc.tool_latency_low ? SR__CPU_LATENCY_DEVICE : NULL;
	o.event = print_event;
	o.ud = s;
	if (sr__relay_new(&s->ctx, &o, &s->relay, err, sizeof(err)) != SR_OK) {
		fprintf(stderr, "sandrun tools: %s\n", err);
		free(own_journal);
		return SR_EXIT_FAIL;
	}
	if (sweep)
		sr__relay_sweep(s->relay);
	if (http) {
		if (sr__mcp_http_start(s->ctx.loop, s->relay, s->tools, &s->http, err,
				       sizeof(err)) != SR_OK) {
			fprintf(stderr, "sandrun tools: %s\n", err);
			sr__relay_free(s->relay);
			free(own_journal);
			return SR_EXIT_FAIL;
		}
		/* The token is a secret for logs, but this line exists to hand
		 * it to the operator: printed directly, not redacted. */
		ev = json_pack("{s:s, s:s, s:s}", "type", "mcp.http", "url",
			       sr__mcp_http_url(s->http), "token", sr__mcp_http_token(s->http));
		{
			char *text = json_dumps(ev, JSON_COMPACT);
			printf("%s\n", text);
			fflush(stdout);
			free(text);
		}
		json_decref(ev);
	}
	ev = json_pack("{s:s, s:s, s:s, s:i}", "type", "relay.ready", "dir", shown,
		       "journal", journal, "tools", (int)s->tools->n);
	if (m) {
		json_object_set_new(ev, "sandbox", json_string(m->sandbox));
		json_object_set_new(ev, "mirror", json_string(m->mirror));
	}
	print_event(s, ev);
	json_decref(ev);
	free(own_journal);
	sr__relay_start(s->relay);
	if (s->bridge)
		sr__bridge_start(s->bridge);
	uv_signal_init(s->ctx.loop, &s->sigterm);
	uv_signal_init(s->ctx.loop, &s->sigint);
	s->sigterm.data = s->sigint.data = s;
	uv_signal_start(&s->sigterm, on_signal, SIGTERM);
	uv_signal_start(&s->sigint, on_signal, SIGINT);
	sr__input_start(s->ctx.loop, 0, on_stdin, s, &s->input);
	uv_run(s->ctx.loop, UV_RUN_DEFAULT);
	return SR_EXIT_OK;
}

int sr__cmd_tools(int argc, char **argv, const char *config_path)
{
	static const struct option opts[] = {
		{ "tools", required_argument, NULL, 't' },
		{ "relay-dir", required_argument, NULL, 'r' },
		{ "journal", required_argument, NULL, 'J' },
		{ "mcp-http", no_argument, NULL, 'H' },
		{ "specs-out", required_argument, NULL, 'o' },
		{ "sweep", no_argument, NULL, 'S' },
		{ "default-permission", required_argument, NULL, 'd' },
		{ "rule", required_argument, NULL, 'R' },
		{ "approve-all", no_argument, NULL, 'A' },
		{ "deny-all", no_argument, NULL, 'D' },
		{ "config", required_argument, NULL, 'c' },
		{ "sandbox", required_argument, NULL, 'X' },
		{ "shim", required_argument, NULL, 'M' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *tools_path = NULL, *relay_dir = NULL, *journal = NULL,
		   *specs_out = NULL, *sub, *sandbox = NULL, *shim = NULL;
	remote m;
	int http = 0, sweep = 0, ask_policy = SR_ASK_WAIT, c, rc;
	char err[600];
	serve *s;

	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(tools_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? SR_EXIT_USAGE : SR_EXIT_OK;
	}
	sub = argv[1];
	if (strcmp(sub, "serve") != 0 && strcmp(sub, "check") != 0) {
		fprintf(stderr, "sandrun tools: unknown subcommand '%s'\n", sub);
		return SR_EXIT_USAGE;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return SR_EXIT_FAIL;
	s->guard.default_mode = SR_PERM_ALLOW_READS;
	optind = 0;
	argc--;
	argv++;
	memset(&m, 0, sizeof(m));
	while ((c = getopt_long(argc, argv, "t:r:J:Ho:Sd:R:ADc:X:M:h", opts, NULL)) != -1) {
		switch (c) {
		case 'X': sandbox = optarg; break;
		case 'M': shim = optarg; break;
		case 't': tools_path = optarg; break;
		case 'r': relay_dir = optarg; break;
		case 'J': journal = optarg; break;
		case 'H': http = 1; break;
		case 'o': specs_out = optarg; break;
		case 'S': sweep = 1; break;
		case 'A': ask_policy = SR_ASK_APPROVE; break;
		case 'D': ask_policy = SR_ASK_DENY; break;
		case 'c': config_path = optarg; break;
		case 'd':
			s->guard.default_mode = sr__perm_parse(optarg);
			if (s->guard.default_mode == SR_PERM_UNSET) {
				fprintf(stderr, "sandrun tools: --default-permission '%s': expected allow, ask, deny or allow_reads\n",
					optarg);
				rc = SR_EXIT_USAGE;
				goto out;
			}
			break;
		case 'R':
			if (sr__guard_add_rule(&s->guard, optarg) != SR_OK) {
				fprintf(stderr, "sandrun tools: --rule '%s': expected GLOB=allow|ask|deny\n",
					optarg);
				rc = SR_EXIT_USAGE;
				goto out;
			}
			break;
		case 'h':
			fputs(tools_help, stdout);
			rc = SR_EXIT_OK;
			goto out;
		default:
			rc = SR_EXIT_USAGE;
			goto out;
		}
	}
	rc = SR_EXIT_USAGE;
	if (!tools_path) {
		fprintf(stderr, "sandrun tools %s: --tools FILE is required\n", sub);
		goto out;
	}
	if (strcmp(sub, "serve") == 0 && !relay_dir) {
		fprintf(stderr, "sandrun tools serve: --relay-dir DIR is required\n");
		goto out;
	}
	if (optind < argc) {
		fprintf(stderr, "sandrun tools: unexpected argument '%s'\n", argv[optind]);
		goto out;
	}
	if (sandbox && (!relay_dir || relay_dir[0] != '/' || http)) {
		fprintf(stderr, "sandrun tools serve: --sandbox needs an absolute --relay-dir "
			"(a path in the sandbox) and no --mcp-http\n");
		goto out;
	}
	if (shim && !sandbox) {
		fprintf(stderr, "sandrun tools serve: --shim is the shim's path in a "
			"--sandbox\n");
		goto out;
	}
	if (sr__tools_load(tools_path, &s->tools, err, sizeof(err)) != SR_OK) {
		fprintf(stderr, "sandrun tools: %s\n", err);
		rc = SR_EXIT_CONFIG;
		goto out;
	}
	if (strcmp(sub, "check") == 0) {
		json_t *specs = sr__tools_specs(s->tools);
		json_dumpf(specs, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(specs);
		rc = specs_out ? (write_specs(s->tools, specs_out) == SR_OK ? 0 : 1) : 0;
		goto out;
	}
	if (specs_out && write_specs(s->tools, specs_out) != SR_OK) {
		rc = SR_EXIT_FAIL;
		goto out;
	}
	rc = sr__cli_setup(&s->ctx, config_path);
	if (rc == SR_EXIT_OK &&
	    sr__plan_callbacks_ok(s->tools, s->ctx.rc.callback_allow_hosts, err, sizeof(err)) != SR_OK) {
		fprintf(stderr, "sandrun tools: %s\n", err);
		rc = SR_EXIT_CONFIG;
	}
	m.sandbox = sandbox;
	m.dir = relay_dir;
	m.shim = shim;
	if (rc == SR_EXIT_OK)
		rc = run_serve(s, relay_dir, journal, http, sweep, ask_policy,
			       sandbox ? &m : NULL);
	if (s->bridge) { /* never started: nothing in flight */
		sr__bridge_free(s->bridge, NULL, NULL);
		s->bridge = NULL;
		uv_run(s->ctx.loop, UV_RUN_NOWAIT);
	}
	sr__ctx_cleanup(&s->ctx);
	free(m.mirror);
	free(m.journal);
out:
	sr__tools_free(s->tools);
	sr__guard_clear(&s->guard);
	free(s->line);
	free(s);
	return rc;
}
