/* A sandbox on disk: its id, directory and record (meta.json), the
 * network policy it can have, and small helpers the other files share. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "local.h"

int local__valid_id(const char *id)
{
	size_t n = strlen(ID_PREFIX);

	if (!id || strncmp(id, ID_PREFIX, n) != 0 || strlen(id) != n + ID_HEX)
		return 0;
	for (const char *p = id + n; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

void local__done_status(sr_done_fn done, void *ud, int status,
			const char *message, const char *json)
{
	sr_result r = { sizeof(r), status, message, json, NULL, 0 };

	if (done)
		done(ud, &r);
}

/* An outcome known at once, delivered later (the completion rule). */
int local__complete_now(const local *lp, sr_done_fn done, void *ud, int status,
			const char *message, const char *json)
{
	sr_result r = { sizeof(r), status, message, json, NULL, 0 };

	return lp->host->complete(lp->host, done, ud, &r);
}

char *local__find_in_path(const char *name)
{
	const char *path = getenv("PATH");
	char buf[4096], *copy, *dir, *save, *found = NULL;

	if (strchr(name, '/'))
		return access(name, X_OK) == 0 ? strdup(name) : NULL;
	if (!path || !(copy = strdup(path)))
		return NULL;
	for (dir = strtok_r(copy, ":", &save); dir && !found;
	     dir = strtok_r(NULL, ":", &save)) {
		snprintf(buf, sizeof(buf), "%s/%s", dir, name);
		if (access(buf, X_OK) == 0)
			found = strdup(buf);
	}
	free(copy);
	return found;
}

/* Whether execvp would find name with the PATH of envp, from cwd: under
 * bubblewrap a missing program is only bwrap's exit status 1, so it is
 * looked for first, to fail as a direct spawn does (SR_ENOTFOUND, which
 * sandrun exec reports as 127). */
int local__program_exists(const char *name, char *const *envp, const char *cwd)
{
	const char *path = "/bin:/usr/bin";
	char buf[4096], *copy, *dir, *save;
	int found = 0;

	if (strchr(name, '/')) {
		if (name[0] != '/' && cwd)
			snprintf(buf, sizeof(buf), "%s/%s", cwd, name);
		else
			snprintf(buf, sizeof(buf), "%s", name);
		return access(buf, X_OK) == 0;
	}
	for (size_t i = 0; envp && envp[i]; i++)
		if (strncmp(envp[i], "PATH=", 5) == 0)
			path = envp[i] + 5;
	if (!(copy = strdup(path)))
		return 1; /* let the spawn decide */
	for (dir = strtok_r(copy, ":", &save); dir && !found;
	     dir = strtok_r(NULL, ":", &save)) {
		snprintf(buf, sizeof(buf), "%s/%s", *dir ? dir : ".", name);
		found = access(buf, X_OK) == 0;
	}
	free(copy);
	return found;
}

void local__text_append(char *buf, size_t cap, size_t *len, const void *data, size_t n)
{
	size_t room = *len + 1 < cap ? cap - 1 - *len : 0;

	if (!data || !n || !room)
		return;
	if (n > room)
		n = room;
	memcpy(buf + *len, data, n);
	*len += n;
	buf[*len] = 0;
}

int local__mkdir_p(const char *path, mode_t mode)
{
	char buf[4096];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(buf))
		return -1;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, mode) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(buf, mode) != 0 && errno != EEXIST ? -1 : 0;
}

int local__errno_status(int e)
{
	switch (e) {
	case ENOENT:
	case ENOTDIR:
		return SR_ENOTFOUND;
	case EEXIST:
	case ENOTEMPTY:
		return SR_EEXIST;
	case EXDEV:
	case ELOOP:
	case EACCES:
	case EPERM:
		return SR_EPERM;
	case EFBIG:
		return SR_ETOOBIG;
	case ENOMEM:
		return SR_ENOMEM;
	default:
		return SR_EIO;
	}
}

void local__sandbox_dir(const local *lp, const char *id, char *buf, size_t n)
{
	snprintf(buf, n, "%s/%s", lp->root, id);
}

json_t *local__meta_read(const local *lp, const char *id)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s/meta.json", lp->root, id);
	return json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
}

int local__meta_write(const local *lp, const char *id, json_t *meta)
{
	char path[4096], tmp[4200];

	snprintf(path, sizeof(path), "%s/%s/meta.json", lp->root, id);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (json_dump_file(meta, tmp, JSON_COMPACT) != 0)
		return SR_EIO;
	if (rename(tmp, path) != 0) {
		unlink(tmp);
		return SR_EIO;
	}
	return SR_OK;
}

const char *local__net_name(int mode)
{
	return mode == SR_NET_OFF ? "off" :
	       mode == SR_NET_ALLOWLIST ? "allowlist" : "open";
}

/* The spec's network policy, when it carries one we can read. */
const sr_network_policy *local__network_of(const sr_sandbox_spec *spec)
{
	const sr_network_policy *np = spec->network;

	return np && np->size >= SR_TABLE_HAS(sr_network_policy, mode) ? np : NULL;
}

/* Can this host enforce the policy? Returns NULL or the reason not. */
const char *local__policy_unenforceable(const local *lp,
					const sr_network_policy *np)
{
	if (np && np->size < SR_TABLE_HAS(sr_network_policy, mode))
		return "the network policy is too small to read";
	if (!np || np->mode == SR_NET_OPEN)
		return NULL;
	if (np->mode == SR_NET_ALLOWLIST)
		return "the local provider cannot enforce a network allowlist (only 'off')";
	if (np->mode == SR_NET_OFF && !lp->bwrap)
		return "network 'off' needs bubblewrap (bwrap), which is not installed";
	if (np->mode != SR_NET_OFF)
		return "unknown network mode";
	return NULL;
}

/* Can sandboxes run here? NULL, or the reason not. */
const char *local__unconfinable(const local *lp)
{
	return lp->bwrap || lp->unconfined ? NULL : NO_BWRAP;
}

/* "root" is where the sandbox lives on the runner's host: the core puts the
 * relay directory and tool specs there (outside the workspace). */
char *local__result_json(const local *lp, const char *id)
{
	char dir[4096], ws[4200], home[4200];
	json_t *j;
	char *s;

	local__sandbox_dir(lp, id, dir, sizeof(dir));
	snprintf(ws, sizeof(ws), "%s/workspace", dir);
	snprintf(home, sizeof(home), "%s/home", dir);
	j = json_pack("{s:s, s:s, s:s, s:s}", "id", id, "workspace", ws, "home", home,
		      "root", dir);
	s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return s;
}

json_t *local__pairs_object(const sr_pair *p, size_t n)
{
	json_t *o = json_object();

	for (size_t i = 0; i < n; i++)
		if (p[i].name && p[i].value)
			json_object_set_new(o, p[i].name, json_string(p[i].value));
	return o;
}
