/* sandrun image-recipe DIR: a build context for the sandbox image of a
 * remote provider (a Daytona snapshot, say): a Dockerfile that installs
 * sandrun's pinned Node.js and the harnesses' pinned ACP adapters in the
 * layout `sandrun install-harness` uses, under one prefix, plus the shim
 * binary it copies in. Nothing is built or pushed here. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cli/cli.h"
#include "core/host/fsutil.h"
#include "core/host/node.h"
#include "core/host/semver.h"
#include "core/plugins/harness.h"
#include "core/plugins/plugin.h"

#define PREFIX "/opt/sandrun"

static const char image_help[] =
	"Usage: sandrun image-recipe [--harness NAMES] [--base IMAGE] [--shim FILE] DIR\n"
	"\n"
	"Write a container build context into DIR (created if missing): a Dockerfile\n"
	"and the sandrun-shim binary it copies in. The image holds, under " PREFIX ":\n"
	"  bin/sandrun-shim            the in-sandbox tool relay\n"
	"  harness/node/               Node.js " SR__NODE_VERSION " (the npm package node-linux-*)\n"
	"  harness/NAME/               each harness's pinned ACP adapter packages\n"
	"Build and publish it with your provider's tools, e.g. for Daytona:\n"
	"  daytona snapshot create NAME --dockerfile DIR/Dockerfile --context DIR\n"
	"then set [provider.daytona] snapshot = NAME.\n"
	"\n"
	"  -H, --harness NAMES  comma-separated harnesses (default: [runner] harnesses)\n"
	"  -b, --base IMAGE     base image (default debian:12-slim)\n"
	"  -s, --shim FILE      the shim to copy (default: the installed one, or\n"
	"                       $SANDRUN_SHIM); its machine, x86_64 or aarch64,\n"
	"                       is the image's\n";

/* Append the npm install line of one harness to f; an exit code. */
static int harness_lines(sr__ctx *ctx, FILE *f, const char *name)
{
	sr__plugin *p = sr__registry_find(ctx->reg, SR_PLUGIN_HARNESS, name);
	json_t *desc, *pkgs, *v;
	const char *node;
	size_t i;

	if (!p || sr__plugin_start(ctx, p) != SR_OK) {
		fprintf(stderr, "sandrun: no usable harness plugin '%s' (see 'sandrun plugins')\n",
			name);
		return SR_EXIT_UNAVAILABLE;
	}
	desc = sr__harness_describe(p);
	pkgs = json_object_get(desc, "npm");
	node = json_string_value(json_object_get(desc, "node"));
	if (!json_array_size(pkgs)) {
		fprintf(stderr, "sandrun: harness '%s' names no npm packages to install\n", name);
		json_decref(desc);
		return SR_EXIT_UNAVAILABLE;
	}
	if (node && sr__semver_satisfies(node, SR__NODE_VERSION) != 1) {
		fprintf(stderr, "sandrun: harness '%s' needs Node.js '%s', which sandrun's "
			"Node.js %s does not satisfy\n", name, node, SR__NODE_VERSION);
		json_decref(desc);
		return SR_EXIT_FAIL;
	}
	fprintf(f, "# harness %s (adapter needs Node.js %s)\n", name, node ? node : "any");
	fprintf(f, "RUN npm install --prefix " PREFIX "/harness/%s --no-audit --no-fund "
		"--loglevel=error", name);
	json_array_foreach(pkgs, i, v)
		fprintf(f, " '%s'", json_string_value(v));
	fprintf(f, "\n");
	json_decref(desc);
	return SR_EXIT_OK;
}

static int copy_file(const char *from, const char *to, char *err, size_t n)
{
	char buf[65536];
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1;
	ssize_t r = 0;

	if (in >= 0)
		out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	while (out >= 0 && (r = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)r) != r) {
			r = -1;
			break;
		}
	if (in < 0 || out < 0 || r < 0) {
		snprintf(err, n, "cannot copy %s to %s: %s", from, to, strerror(errno));
		r = -1;
	}
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) != 0 && r == 0) {
		snprintf(err, n, "cannot write %s: %s", to, strerror(errno));
		r = -1;
	}
	return r < 0 ? -1 : 0;
}

int sr__cmd_image_recipe(int argc, char **argv, const char *config_path)
{
	static const struct option lopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "harness", required_argument, NULL, 'H' },
		{ "base", required_argument, NULL, 'b' },
		{ "shim", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *harnesses = NULL, *base = "debian:12-slim", *shim = NULL, *machine;
	const char *env_shim = getenv("SANDRUN_SHIM");
	char path[4200], tmp[4300], err[600], *list = NULL, *save = NULL, *name;
	char *text = NULL;
	size_t len = 0;
	FILE *f = NULL;
	sr__ctx ctx;
	int c, rc, is_static;

	while ((c = getopt_long(argc, argv, "c:H:b:s:h", lopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config_path = optarg;
			break;
		case 'H':
			harnesses = optarg;
			break;
		case 'b':
			base = optarg;
			break;
		case 's':
			shim = optarg;
			break;
		case 'h':
			fputs(image_help, stdout);
			return SR_EXIT_OK;
		default:
			fputs(image_help, stderr);
			return SR_EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "sandrun image-recipe: expected one directory (see --help)\n");
		return SR_EXIT_USAGE;
	}
	if (!*base || strpbrk(base, " \t\n\\'\"$")) {
		fprintf(stderr, "sandrun image-recipe: --base '%s' is not an image name\n", base);
		return SR_EXIT_USAGE;
	}
	if (!shim)
		shim = env_shim && *env_shim ? env_shim : SR_LIBEXECDIR "/sandrun-shim";
	machine = sr__elf_machine(shim, &is_static);
	if (!machine || (strcmp(machine, "x86_64") != 0 && strcmp(machine, "aarch64") != 0)) {
		fprintf(stderr, "sandrun image-recipe: %s is not an x86_64 or aarch64 "
			"executable (Node.js is packaged for those only); give the shim with "
			"--shim\n", shim);
		return SR_EXIT_FAIL;
	}
	if (!is_static) {
		fprintf(stderr, "sandrun image-recipe: %s is linked dynamically; the shim "
			"copied into an image must be static (configure builds it so)\n", shim);
		return SR_EXIT_FAIL;
	}
	rc = sr__cli_setup(&ctx, config_path);
	if (rc != SR_EXIT_OK)
		goto out;
	/* The whole Dockerfile first: nothing is written when a harness
	 * cannot be part of it. */
	if (!(f = open_memstream(&text, &len))) {
		rc = SR_EXIT_FAIL;
		goto out;
	}
	fprintf(f,
		"# A sandbox image for sandrun on a remote provider, made by\n"
		"# 'sandrun image-recipe' (sandrun %s, plugin ABI %d.%d), for %s.\n"
		"# The layout under " PREFIX " is what the runner expects there.\n"
		"FROM %s\n"
		"RUN apt-get update \\\n"
		" && apt-get install -y --no-install-recommends ca-certificates git npm \\\n"
		" && rm -rf /var/lib/apt/lists/*\n"
		"# Debian's npm only fetches packages; the adapters run on this Node.js.\n"
		"RUN npm install --prefix " PREFIX "/harness/node --no-audit --no-fund "
		"--loglevel=error 'node-linux-%s@%s'\n",
		PACKAGE_VERSION, SR_ABI_MAJOR, SR_ABI_MINOR, machine, base,
		strcmp(machine, "x86_64") == 0 ? "x64" : "arm64", SR__NODE_VERSION);
	list = strdup(harnesses ? harnesses : ctx.rc.harnesses);
	for (name = list ? strtok_r(list, ", ", &save) : NULL; name;
	     name = strtok_r(NULL, ", ", &save))
		if ((rc = harness_lines(&ctx, f, name)) != SR_EXIT_OK)
			goto out;
	fprintf(f,
		"COPY sandrun-shim " PREFIX "/bin/sandrun-shim\n"
		"ENV PATH=" PREFIX "/harness/node/node_modules/.bin:" PREFIX "/bin:$PATH\n");
	if (fclose(f) != 0) {
		f = NULL;
		rc = SR_EXIT_FAIL;
		goto out;
	}
	f = NULL;
	rc = SR_EXIT_FAIL;
	if (sr__mkdirs(argv[optind], 0755) != SR_OK) {
		fprintf(stderr, "sandrun image-recipe: cannot create %s: %s\n", argv[optind],
			strerror(errno));
		goto out;
	}
	snprintf(path, sizeof(path), "%s/sandrun-shim", argv[optind]);
	if (copy_file(shim, path, err, sizeof(err)) != 0) {
		fprintf(stderr, "sandrun image-recipe: %s\n", err);
		goto out;
	}
	snprintf(path, sizeof(path), "%s/Dockerfile", argv[optind]);
	snprintf(tmp, sizeof(tmp), "%s/.Dockerfile.tmp", argv[optind]);
	if (!(f = fopen(tmp, "we")) || fwrite(text, 1, len, f) != len || fclose(f) != 0 ||
	    rename(tmp, path) != 0) {
		fprintf(stderr, "sandrun image-recipe: cannot write %s: %s\n", path,
			strerror(errno));
		f = NULL;
		unlink(tmp);
		goto out;
	}
	f = NULL;
	printf("%s\n", path);
	rc = SR_EXIT_OK;
out:
	if (f)
		fclose(f);
	free(text);
	free(list);
	sr__ctx_cleanup(&ctx);
	return rc;
}
