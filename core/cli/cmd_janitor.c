/* sandrun sandbox list and sandrun janitor: the runner's own sandboxes on
 * the configured provider, and the removal of those no session needs.
 *
 * "Own" means labelled sandrun.runner=<this runner's id> (every sandbox
 * the runner creates is). A sandbox is the janitor's to delete when it is
 * older than the grace period and either a run made it for a session
 * whose pointer does not name it (the run crashed before recording it, or
 * a later turn moved on), or `sandrun exec` made it and did not remove it.
 * Sandboxes made by hand (`sandrun sandbox create`) are never touched. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cli/cli.h"
#include "core/host/log.h"
#include "core/host/status.h"
#include "core/plugins/plugin.h"
#include "core/plugins/provider.h"
#include "core/plugins/tunnel.h"
#include "core/run/session.h"

#define DEFAULT_GRACE (2LL * 3600)

int sr__cli_own_sandboxes(sr__ctx *ctx, sr__plugin *p, const sr_pair *extra,
			  size_t n_extra, json_t **out)
{
	sr_pair labels[65];
	sr__wait w = { 0 };
	json_t *list;
	size_t n = 0;
	int rc;

	*out = NULL;
	if (n_extra > 64) {
		fprintf(stderr, "sandrun: too many labels (at most 64)\n");
		return SR_EXIT_USAGE;
	}
	labels[n].name = "sandrun.runner";
	if (!(labels[n++].value = sr__ctx_runner_id(ctx)))
		return SR_EXIT_FAIL;
	for (size_t i = 0; i < n_extra; i++)
		labels[n++] = extra[i];
	sr__wait_for(ctx, &w, sr__provider_list(p, sr__next_req(), labels, n, sr__wait_done,
						&w));
	if (w.status != SR_OK) {
		fprintf(stderr, "sandrun: cannot list the sandboxes of provider '%s': %s\n",
			p->desc->name, w.message ? w.message : sr__strerror(w.status));
		rc = w.status == SR_EUNSUPPORTED ? SR_EXIT_UNAVAILABLE : SR_EXIT_FAIL;
	} else if (!(list = json_loads(w.json ? w.json : "", 0, NULL)) ||
		   !json_is_array(list)) {
		json_decref(list);
		fprintf(stderr, "sandrun: provider '%s' answered its list with something "
			"other than a JSON array\n", p->desc->name);
		rc = SR_EXIT_FAIL;
	} else {
		*out = list;
		rc = SR_EXIT_OK;
	}
	sr__wait_clear(&w);
	return rc;
}

static const char *label(json_t *box, const char *name)
{
	return json_string_value(json_object_get(json_object_get(box, "labels"), name));
}

/* Age in seconds from the provider's "created" (Unix seconds); -1 unknown. */
static long long age_of(json_t *box, time_t now)
{
	json_t *c = json_object_get(box, "created");

	if (!json_is_integer(c) || json_integer_value(c) <= 0)
		return -1;
	return (long long)now - (long long)json_integer_value(c);
}

static void format_age(long long s, char *buf, size_t n)
{
	if (s < 0)
		snprintf(buf, n, "?");
	else if (s < 120)
		snprintf(buf, n, "%llds", s);
	else if (s < 7200)
		snprintf(buf, n, "%lldm", s / 60);
	else if (s < 172800)
		snprintf(buf, n, "%lldh", s / 3600);
	else
		snprintf(buf, n, "%lldd", s / 86400);
}

void sr__cli_print_sandboxes(json_t *list)
{
	time_t now = time(NULL);
	json_t *box;
	size_t i;

	printf("%-28s %-10s %-6s %-34s %s\n", "ID", "STATE", "AGE", "SESSION", "MADE BY");
	json_array_foreach(list, i, box) {
		const char *id = json_string_value(json_object_get(box, "id"));
		const char *state = json_string_value(json_object_get(box, "state"));
		const char *session = label(box, "sandrun.session");
		const char *kind = label(box, "sandrun.kind");
		char age[32];

		format_age(age_of(box, now), age, sizeof(age));
		printf("%-28s %-10s %-6s %-34s %s\n", id ? id : "?", state ? state : "?", age,
		       session ? session : "-",
		       session ? "run" : kind && strcmp(kind, "exec") == 0 ? "exec" : "hand");
	}
}

/* Whether the session named by box's label points at the sandbox. */
static int pointed_at(const char *state, const char *provider, json_t *box)
{
	const char *session = label(box, "sandrun.session");
	const char *id = json_string_value(json_object_get(box, "id"));
	json_t *rec = NULL;
	int yes;

	if (sr__session_load(state, session, &rec) != SR_OK)
		return 0;
	yes = id && json_is_string(json_object_get(rec, "sandbox")) &&
	      strcmp(json_string_value(json_object_get(rec, "sandbox")), id) == 0 &&
	      json_is_string(json_object_get(rec, "provider")) &&
	      strcmp(json_string_value(json_object_get(rec, "provider")), provider) == 0;
	json_decref(rec);
	return yes;
}

/* "90", "90s", "30m", "2h", "1d"; -1 when it is none of those. */
static long long parse_duration(const char *s)
{
	char *end = NULL;
	long long v = strtoll(s, &end, 10);

	if (end == s || v < 0 || v > 100LL * 365 * 86400)
		return -1;
	if (!*end || strcmp(end, "s") == 0)
		return v;
	if (strcmp(end, "m") == 0)
		return v * 60;
	if (strcmp(end, "h") == 0)
		return v * 3600;
	if (strcmp(end, "d") == 0)
		return v * 86400;
	return -1;
}

int sr__cli_maintain(sr__ctx *ctx, sr__plugin *p, int dry, long long grace,
		     json_t **items)
{
	sr__wait w = { 0 };
	json_t *params = json_pack("{s:b, s:I}", "dry_run", dry, "grace_s", (json_int_t)grace);
	char *text = params ? json_dumps(params, JSON_COMPACT) : NULL;
	json_t *res;
	int rc;

	*items = NULL;
	json_decref(params);
	if (!text)
		return SR_ENOMEM;
	sr__wait_for(ctx, &w, sr__provider_maintain(p, sr__next_req(), text, sr__wait_done, &w));
	free(text);
	rc = w.status;
	if (rc == SR_OK) {
		res = json_loads(w.json ? w.json : "", 0, NULL);
		if (json_is_array(json_object_get(res, "items")))
			*items = json_incref(json_object_get(res, "items"));
		else
			rc = SR_EPROTO;
		json_decref(res);
	} else if (rc != SR_EUNSUPPORTED) {
		fprintf(stderr, "sandrun: provider '%s': cannot clean up its secrets and leases: "
			"%s\n", p->desc->name, w.message ? w.message : sr__strerror(rc));
	}
	if (rc == SR_EPROTO)
		fprintf(stderr, "sandrun: provider '%s' answered maintain without an items "
			"array\n", p->desc->name);
	sr__wait_clear(&w);
	return rc;
}

/* What the provider made besides sandboxes (secrets, leases): its
 * maintain operation cleans it up, or reports it on a dry run. The number
 * of failures. */
static int maintain(sr__ctx *ctx, sr__plugin *p, int dry, long long grace, int as_json)
{
	json_t *items, *it;
	size_t i;
	int failed = 0, rc = sr__cli_maintain(ctx, p, dry, grace, &items);

	if (rc == SR_EUNSUPPORTED)
		return 0; /* nothing of the kind on this provider */
	if (rc != SR_OK)
		return 1;
	json_array_foreach(items, i, it) {
		const char *kind = json_string_value(json_object_get(it, "kind"));
		const char *name = json_string_value(json_object_get(it, "name"));
		const char *action = json_string_value(json_object_get(it, "action"));
		const char *reason = json_string_value(json_object_get(it, "reason"));
		const char *sandbox = json_string_value(json_object_get(it, "sandbox"));
		if (action && (strcmp(action, "failed") == 0 || strcmp(action, "pending") == 0))
			failed++;
		if (as_json) {
			json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s?}", "kind", kind ? kind : "?",
					      "name", name ? name : "?", "verdict",
					      action ? action : "?", "reason", reason ? reason : "",
					      "sandbox", sandbox);
			char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
			if (text)
				printf("%s\n", text);
			free(text);
			json_decref(o);
		} else {
			printf("%-12s %-6s %-28s %s%s%s\n", action ? action : "?", kind ? kind : "?",
			       name ? name : "?", reason ? reason : "", sandbox ? "; sandbox " : "",
			       sandbox ? sandbox : "");
		}
	}
	if (!as_json && json_array_size(items) == 0)
		printf("no secrets or leases of this runner on provider '%s'\n", p->desc->name);
	json_decref(items);
	return failed;
}

/* The configured tunnel's enrolments (NetBird: group, setup key, policy,
 * peer) of this runner whose sandbox is no longer among the kept ones
 * (alive: the ids of the sandboxes kept), older than the grace period:
 * released. The number of failures. */
static int tunnel_orphans(sr__ctx *ctx, json_t *alive, int dry, long long grace,
			  int as_json)
{
	sr__plugin *t;
	sr__wait w = { 0 };
	json_t *ans, *e;
	const char *me = sr__ctx_runner_id(ctx);
	time_t now = time(NULL);
	size_t i;
	int failed = 0;

	if (!ctx->rc.tunnel)
		return 0;
	if (!(t = sr__registry_find(ctx->reg, SR_PLUGIN_TUNNEL, ctx->rc.tunnel)) ||
	    sr__plugin_start(ctx, t) != SR_OK) {
		fprintf(stderr, "sandrun janitor: tunnel '%s' is not available\n", ctx->rc.tunnel);
		return 1;
	}
	sr__wait_for(ctx, &w, sr__tunnel_enrolments(t, sr__next_req(), sr__wait_done, &w));
	if (w.status == SR_EUNSUPPORTED) {
		sr__wait_clear(&w);
		return 0; /* a tunnel without enrolments */
	}
	if (w.status != SR_OK) {
		fprintf(stderr, "sandrun janitor: tunnel '%s': cannot list its enrolments: %s\n",
			t->desc->name, w.message ? w.message : sr__strerror(w.status));
		sr__wait_clear(&w);
		return 1;
	}
	ans = json_loads(w.json ? w.json : "", 0, NULL);
	sr__wait_clear(&w);
	json_array_foreach(json_object_get(ans, "items"), i, e) {
		const char *sbx = json_string_value(json_object_get(e, "sandbox"));
		const char *runner = json_string_value(json_object_get(e, "runner"));
		long long age = (long long)(now - (time_t)json_integer_value(json_object_get(e, "created")));
		const char *verdict, *why;
		int live = 0;
		size_t k;
		json_t *id;

		if (!sbx)
			continue;
		json_array_foreach(alive, k, id)
			if (strcmp(json_string_value(id), sbx) == 0)
				live = 1;
		if (!runner || !me || strcmp(runner, me) != 0) {
			verdict = "kept", why = "another runner's enrolment";
		} else if (live) {
			verdict = "kept", why = "its sandbox exists";
		} else if (age < grace) {
			verdict = "kept", why = "younger than the grace period";
		} else if (dry) {
			verdict = "would delete", why = "its sandbox is gone";
		} else {
			sr__wait_for(ctx, &w, sr__tunnel_release(t, sr__next_req(), sbx, sr__wait_done,
								 &w));
			if (w.status == SR_OK) {
				verdict = "deleted", why = "its sandbox is gone";
			} else {
				verdict = "failed", why = w.message ? w.message : sr__strerror(w.status);
				failed++;
			}
		}
		if (as_json) {
			json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", "enrolment", "sandbox",
					      sbx, "tunnel", t->desc->name, "verdict", verdict, "reason",
					      why);
			char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
			if (text)
				printf("%s\n", text);
			free(text);
			json_decref(o);
		} else {
			printf("%-12s %-6s %-28s %s (tunnel %s)\n", verdict, "enrol", sbx, why,
			       t->desc->name);
		}
		sr__wait_clear(&w);
	}
	json_decref(ans);
	return failed;
}

static const char janitor_help[] =
	"Usage: sandrun janitor [--dry-run] [--grace DURATION] [--json]\n"
	"\n"
	"Delete this runner's sandboxes on the configured provider that no session\n"
	"needs: made by a run for a session whose pointer names another sandbox or\n"
	"none (a crashed run, an abandoned turn), or by 'sandrun exec' and left\n"
	"behind; and older than the grace period (DURATION: 90s, 30m, 2h, 1d;\n"
	"default 2h, so that turns in progress, which record their pointer at the\n"
	"end, are left alone). Sandboxes made with 'sandrun sandbox create' and\n"
	"those of other runners are never touched.\n"
	"\n"
	"Then what the provider made for its sandboxes besides them (on Daytona, the\n"
	"secrets of credential bindings and their leases): kept while their sandbox\n"
	"exists (archived counts), deleted once it is gone and the grace period is\n"
	"over, retried when an earlier deletion failed. Secrets that no lease of this\n"
	"runner names are reported as foreign and never touched. Safe to run at any\n"
	"time, and twice at once.\n"
	"\n"
	"Then the configured tunnel's enrolments of this runner (NetBird: the peer,\n"
	"policy, setup key and group of a sandbox) whose sandbox is gone, after the\n"
	"grace period.\n"
	"\n"
	"  -n, --dry-run   say what would be deleted, delete nothing\n"
	"  -g, --grace D   minimum age of a sandbox to delete\n"
	"  -j, --json      one JSON object per sandbox considered\n"
	"\n"
	"Exit status: 0 when everything due was deleted, 1 when a deletion failed\n"
	"(or a cleanup is still pending).\n";

int sr__cmd_janitor(int argc, char **argv, const char *config_path)
{
	static const struct option lopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "grace", required_argument, NULL, 'g' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	long long grace = DEFAULT_GRACE;
	int dry = 0, as_json = 0, c, rc, failed = 0;
	const char *state;
	time_t now = time(NULL);
	sr__ctx ctx;
	sr__plugin *p;
	json_t *list = NULL, *box, *alive = NULL;
	size_t i;

	while ((c = getopt_long(argc, argv, "c:ng:jh", lopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'n':
			dry = 1;
			break;
		case 'g':
			if ((grace = parse_duration(optarg)) < 0) {
				fprintf(stderr, "sandrun janitor: --grace '%s': expected a "
					"duration such as 90s, 30m, 2h or 1d\n", optarg);
				return SR_EXIT_USAGE;
			}
			break;
		case 'j':
			as_json = 1;
			break;
		case 'h':
			fputs(janitor_help, stdout);
			return SR_EXIT_OK;
		default:
			fputs(janitor_help, stderr);
			return SR_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sandrun janitor: unexpected argument '%s'\n", argv[optind]);
		return SR_EXIT_USAGE;
	}
	alive = json_array();
	rc = sr__cli_setup(&ctx, config_path);
	if (rc != SR_EXIT_OK || !(p = sr__cli_provider(&ctx)) ||
	    !(state = sr__ctx_state_dir(&ctx))) {
		rc = rc != SR_EXIT_OK ? rc : SR_EXIT_UNAVAILABLE;
		goto out;
	}
	if ((rc = sr__cli_own_sandboxes(&ctx, p, NULL, 0, &list)) != SR_EXIT_OK)
		goto out;
	json_array_foreach(list, i, box) {
		const char *id = json_string_value(json_object_get(box, "id"));
		const char *session = label(box, "sandrun.session");
		const char *kind = label(box, "sandrun.kind");
		long long age = age_of(box, now);
		const char *verdict, *why;
		char agebuf[32];
		sr__wait w = { 0 };

		if (!id)
			continue;
		if (session && sr__session_valid_id(session) && pointed_at(state, p->desc->name,
									  box)) {
			verdict = "kept", why = "its session points at it";
		} else if (!session && !(kind && strcmp(kind, "exec") == 0)) {
			verdict = "kept", why = "made by hand (sandrun sandbox create)";
		} else if (age < 0) {
			verdict = "kept", why = "the provider does not say when it was made";
		} else if (age < grace) {
			verdict = "kept", why = "younger than the grace period";
		} else if (dry) {
			verdict = "would delete", why = session ? "no session points at it" :
								  "left behind by sandrun exec";
		} else {
			sr__wait_for(&ctx, &w, sr__provider_destroy(p, sr__next_req(), id,
								    sr__wait_done, &w));
			if (w.status == SR_OK || w.status == SR_ENOTFOUND) {
				verdict = "deleted", why = session ? "no session points at it" :
								     "left behind by sandrun exec";
			} else {
				verdict = "failed";
				why = w.message ? w.message : sr__strerror(w.status);
				failed++;
			}
		}
		if (strcmp(verdict, "kept") == 0 || strcmp(verdict, "would delete") == 0 ||
		    strcmp(verdict, "failed") == 0)
			json_array_append_new(alive, json_string(id));
		format_age(age, agebuf, sizeof(agebuf));
		if (as_json) {
			json_t *o = json_pack("{s:s, s:s, s:s, s:s?, s:I}", "id", id, "verdict",
					      verdict, "reason", why, "session", session,
					      "age_s", (json_int_t)age);
			char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
			if (text)
				printf("%s\n", text);
			free(text);
			json_decref(o);
		} else {
			printf("%-12s %-28s age %-6s %s\n", verdict, id, agebuf, why);
		}
		sr__wait_clear(&w);
	}
	if (!as_json && json_array_size(list) == 0)
		printf("no sandboxes of this runner on provider '%s'\n", p->desc->name);
	failed += maintain(&ctx, p, dry, grace, as_json);
	failed += tunnel_orphans(&ctx, alive, dry, grace, as_json);
	rc = failed ? SR_EXIT_FAIL : SR_EXIT_OK;
out:
	json_decref(alive);
	json_decref(list);
	sr__ctx_cleanup(&ctx);
	return rc;
}
