/* sandrun install-harness NAME: make sure the node the adapter will run
 * with satisfies the adapter's requirement (installing sandrun's pinned
 * Node.js runtime when it does not), then install the adapter's pinned
 * npm packages into the harness's install directory. */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli/cli.h"
#include "core/host/fsutil.h"
#include "core/plugins/harness.h"
#include "core/host/log.h"
#include "core/host/node.h"
#include "core/plugins/plugin.h"
#include "core/host/semver.h"

/* Is "name@range" installed under dir/node_modules in a matching version? */
static int installed(const char *dir, const char *spec)
{
	const char *at = strrchr(spec, '@');
	char path[4200];
	json_t *pkg;
	int ok;

	if (!at || at == spec)
		return 0;
	snprintf(path, sizeof(path), "%s/node_modules/%.*s/package.json", dir,
		 (int)(at - spec), spec);
	pkg = json_load_file(path, 0, NULL);
	ok = sr__semver_satisfies(at + 1,
				  json_string_value(json_object_get(pkg, "version"))) == 1;
	json_decref(pkg);
	return ok;
}

/* The adapter's node: checked, and the runtime installed when needed. */
static int ensure_node(sr__ctx *ctx, const char *name, const char *requirement)
{
	char detail[1024], err[512];

	if (sr__node_check(ctx, requirement, detail, sizeof(detail))) {
		fprintf(stderr, "sandrun: %s\n", detail);
		return SR_EXIT_OK;
	}
	fprintf(stderr, "sandrun: harness '%s': %s\n", name, detail);
	if (sr__semver_satisfies(requirement, SR__NODE_VERSION) != 1) {
		fprintf(stderr, "sandrun: sandrun's Node.js %s does not satisfy '%s' either; "
			"install a Node.js that does\n", SR__NODE_VERSION, requirement);
		return SR_EXIT_FAIL;
	}
	if (sr__node_install(ctx, err, sizeof(err)) != SR_OK) {
		fprintf(stderr, "sandrun: %s\n", err);
		return SR_EXIT_FAIL;
	}
	if (!sr__node_check(ctx, requirement, detail, sizeof(detail))) {
		fprintf(stderr, "sandrun: %s\n", detail);
		return SR_EXIT_FAIL;
	}
	fprintf(stderr, "sandrun: %s\n", detail);
	return SR_EXIT_OK;
}

static int install(sr__ctx *ctx, const char *name, json_t *desc)
{
	json_t *pkgs = json_object_get(desc, "npm"), *v;
	const char *dir = json_string_value(json_object_get(desc, "install_dir"));
	const char *node = json_string_value(json_object_get(desc, "node"));
	const char *cmd = json_string_value(json_array_get(json_object_get(desc, "command"), 0));
	const char *list[32];
	char err[512];
	size_t i, n = 0;
	int rc;

	if (!json_array_size(pkgs) || !dir || json_array_size(pkgs) >= 32) {
		fprintf(stderr, "sandrun: harness '%s' names no npm packages to install\n", name);
		return SR_EXIT_UNAVAILABLE;
	}
	if (node && (rc = ensure_node(ctx, name, node)) != SR_EXIT_OK) {
		fprintf(stderr, "sandrun: harness '%s' is not installed: its adapter needs "
			"Node.js '%s'\n", name, node);
		return rc;
	}
	json_array_foreach(pkgs, i, v)
		if (!installed(dir, json_string_value(v)))
			list[n++] = json_string_value(v);
	if (n == 0 && cmd && access(cmd, X_OK) == 0) {
		fprintf(stderr, "sandrun: harness '%s' is already installed in %s\n", name, dir);
		return SR_EXIT_OK;
	}
	if (n == 0) /* the versions match but the adapter is gone: all again */
		json_array_foreach(pkgs, i, v)
			list[n++] = json_string_value(v);
	list[n] = NULL;
	if (sr__mkdirs(dir, 0755) != SR_OK) {
		fprintf(stderr, "sandrun: cannot create %s\n", dir);
		return SR_EXIT_FAIL;
	}
	for (i = 0; i < n; i++)
		fprintf(stderr, "sandrun: installing %s into %s\n", list[i], dir);
	if (sr__npm_install(ctx, dir, list, err, sizeof(err)) != SR_OK) {
		fprintf(stderr, "sandrun: %s (is npm installed? apt-get install npm); "
			"harness '%s' is not installed\n", err, name);
		return SR_EXIT_FAIL;
	}
	if (cmd && access(cmd, X_OK) != 0) {
		fprintf(stderr, "sandrun: npm finished but %s is missing; harness '%s' is not installed\n",
			cmd, name);
		return SR_EXIT_FAIL;
	}
	fprintf(stderr, "sandrun: harness '%s' is installed\n", name);
	return SR_EXIT_OK;
}

int sr__cmd_install_harness(int argc, char **argv, const char *config_path)
{
	int help = argc == 2 && strcmp(argv[1], "--help") == 0;
	sr__ctx ctx;
	sr__plugin *p;
	json_t *desc = NULL;
	int rc;

	if (argc != 2 || argv[1][0] == '-') {
		fprintf(help ? stdout : stderr,
			"Usage: sandrun install-harness NAME\n\n"
			"Install the harness's ACP adapter (its pinned npm packages) into its\n"
			"install directory ([harness.NAME] install_dir, default under the state\n"
			"directory). When the node on PATH does not satisfy the adapter's\n"
			"requirement, first install sandrun's own Node.js %s from the npm\n"
			"registry into [runner] node_dir; the adapters then run with it.\n"
			"Packages already installed in their pinned versions are kept. Needs npm.\n",
			SR__NODE_VERSION);
		return help ? SR_EXIT_OK : SR_EXIT_USAGE;
	}
	rc = sr__cli_setup(&ctx, config_path);
	if (rc != SR_EXIT_OK)
		goto out;
	p = sr__registry_find(ctx.reg, SR_PLUGIN_HARNESS, argv[1]);
	if (!p || sr__plugin_start(&ctx, p) != SR_OK) {
		fprintf(stderr, "sandrun: no usable harness plugin '%s' (see 'sandrun plugins')\n", argv[1]);
		rc = SR_EXIT_UNAVAILABLE;
		goto out;
	}
	desc = sr__harness_describe(p);
	rc = install(&ctx, argv[1], desc);
out:
	json_decref(desc);
	sr__ctx_cleanup(&ctx);
	return rc;
}
