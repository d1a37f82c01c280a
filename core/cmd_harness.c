/* sandrun install-harness NAME: install an adapter's pinned npm packages
 * into the harness's install directory, showing npm's progress. */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli.h"
#include "core/harness.h"
#include "core/log.h"
#include "core/proc.h"

typedef struct job {
	int done, status, sig;
} job;

static void pass_out(void *ud, const void *data, size_t len)
{
	(void)ud;
	fwrite(data, 1, len, stderr);
}

static void on_exit_(void *ud, int status, int sig)
{
	job *j = ud;

	j->done = 1;
	j->status = status;
	j->sig = sig;
}

int sr__cmd_install_harness(int argc, char **argv, const char *config_path)
{
	sr__ctx ctx;
	sr__plugin *p;
	json_t *desc = NULL, *pkgs, *v;
	const char **args = NULL;
	sr_proc_callbacks cbs = { sizeof(cbs), pass_out, pass_out, on_exit_ };
	sr_proc_spec spec;
	sr_proc *proc;
	job j = { 0 };
	char err[512];
	const char *dir;
	size_t i, n = 0;
	int rc;

	if (argc != 2 || argv[1][0] == '-') {
		fprintf(argc == 2 && strcmp(argv[1], "--help") == 0 ? stdout : stderr,
			"Usage: sandrun install-harness NAME\n\n"
			"Install the harness's ACP adapter (its pinned npm packages) into its\n"
			"install directory ([harness.NAME] install_dir, default under the state\n"
			"directory). Needs node and npm.\n");
		return argc == 2 && strcmp(argv[1], "--help") == 0 ? SR_EXIT_OK : SR_EXIT_USAGE;
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
	pkgs = json_object_get(desc, "npm");
	dir = json_string_value(json_object_get(desc, "install_dir"));
	if (!json_array_size(pkgs) || !dir) {
		fprintf(stderr, "sandrun: harness '%s' names no npm packages to install\n", argv[1]);
		rc = SR_EXIT_UNAVAILABLE;
		goto out;
	}
	if (sr__mkdirs(dir, 0755) != SR_OK) {
		fprintf(stderr, "sandrun: cannot create %s\n", dir);
		rc = SR_EXIT_FAIL;
		goto out;
	}
	args = calloc(json_array_size(pkgs) + 10, sizeof(*args));
	if (!args) {
		rc = SR_EXIT_FAIL;
		goto out;
	}
	args[n++] = "npm";
	args[n++] = "install";
	args[n++] = "--prefix";
	args[n++] = dir;
	args[n++] = "--no-audit";
	args[n++] = "--no-fund";
	json_array_foreach(pkgs, i, v) {
		args[n++] = json_string_value(v);
		fprintf(stderr, "sandrun: installing %s into %s\n", json_string_value(v), dir);
	}
	memset(&spec, 0, sizeof(spec));
	spec.size = sizeof(spec);
	spec.argv = args;
	if (sr__proc_spawn(ctx.loop, &spec, &cbs, &j, &proc, err, sizeof(err)) != SR_OK) {
		fprintf(stderr, "sandrun: %s (is npm installed? apt-get install npm)\n", err);
		rc = SR_EXIT_FAIL;
		goto out;
	}
	while (!j.done && uv_run(ctx.loop, UV_RUN_ONCE))
		;
	rc = j.status == 0 && !j.sig ? SR_EXIT_OK : SR_EXIT_FAIL;
	fprintf(stderr, rc == SR_EXIT_OK ? "sandrun: harness '%s' is installed\n" :
		"sandrun: npm failed; harness '%s' is not installed\n", argv[1]);
out:
	free(args);
	json_decref(desc);
	sr__ctx_cleanup(&ctx);
	return rc;
}
