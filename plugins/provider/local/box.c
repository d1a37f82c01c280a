/* A sandbox on disk: its id, directory and record (ROOT/.records/ID.json,
 * out of the sandbox's reach), the
 * network policy it can have, and small helpers the other files share. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

void local__give_fd(const local *lp, int fd)
{
	if (lp->drop && fd >= 0)
		(void)fchown(fd, lp->agent_uid, lp->agent_gid);
}

void local__give_at(const local *lp, int dirfd, const char *name)
{
	if (lp->drop)
		(void)fchownat(dirfd, name, lp->agent_uid, lp->agent_gid, AT_SYMLINK_NOFOLLOW);
}

/* Below dirfd (on device dev): each entry given, each directory walked,
 * at most depth levels further. */
static int give_below(const local *lp, int dirfd, dev_t dev, int depth)
{
	int fd = dup(dirfd), rc = 0;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	struct stat st;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	while ((e = readdir(d))) {
		int sub;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != dev)
			continue;
		local__give_at(lp, dirfd, e->d_name);
		if (!S_ISDIR(st.st_mode))
			continue;
		if (depth <= 0) {
			rc = -1;
			continue;
		}
		sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0) {
			if (give_below(lp, sub, dev, depth - 1) != 0)
				rc = -1;
			close(sub);
		}
	}
	closedir(d);
	return rc;
}

int local__give_tree(const local *lp, const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), rc;
	struct stat st;

	if (fd < 0 || fstat(fd, &st) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	local__give_fd(lp, fd);
	rc = give_below(lp, fd, st.st_dev, 64);
	close(fd);
	return rc;
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

/* The records live beside the sandboxes, not in them: a sandbox's
 * directory is its agent's to write (a record there could be rewritten:
 * another sandbox's id and labels for the janitor to delete it, network
 * "open" for a sandbox made "off", a .tmp link for a write through it).
 * ROOT/.records is the runner's alone (mode 0700, masked in the sandbox
 * with the rest of ROOT), and nothing in it is followed. */
static int records_dir(const local *lp, int create)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/" RECORDS_DIR, lp->root);
	if (create && mkdir(path, 0700) != 0 && errno != EEXIST)
		return -1;
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd;
}

json_t *local__meta_read(const local *lp, const char *id)
{
	char name[128];
	json_t *j = NULL;
	FILE *f;
	int dfd, fd;

	if (!local__valid_id(id) || (dfd = records_dir(lp, 0)) < 0)
		return NULL;
	snprintf(name, sizeof(name), "%s.json", id);
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	close(dfd);
	if (fd < 0 || !(f = fdopen(fd, "r"))) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	j = json_loadf(f, JSON_REJECT_DUPLICATES, NULL);
	fclose(f);
	return j;
}

int local__meta_write(const local *lp, const char *id, json_t *meta)
{
	char name[128], tmp[160], *text;
	size_t len, off = 0;
	int dfd, fd, rc = SR_OK;

	if (!local__valid_id(id) || !(text = json_dumps(meta, JSON_COMPACT)))
		return SR_EIO;
	if ((dfd = records_dir(lp, 1)) < 0) {
		free(text);
		return SR_EIO;
	}
	snprintf(name, sizeof(name), "%s.json", id);
	snprintf(tmp, sizeof(tmp), ".%s.json.tmp", id);
	(void)unlinkat(dfd, tmp, 0); /* one a crash left */
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	len = strlen(text);
	while (fd >= 0 && off < len) {
		ssize_t n = write(fd, text + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	if (fd < 0 || off < len || fsync(fd) != 0)
		rc = SR_EIO;
	if (fd >= 0)
		close(fd);
	if (rc == SR_OK && renameat(dfd, tmp, dfd, name) != 0)
		rc = SR_EIO;
	if (rc != SR_OK)
		(void)unlinkat(dfd, tmp, 0);
	close(dfd);
	free(text);
	return rc;
}

void local__meta_remove(const local *lp, const char *id)
{
	char name[128];
	int dfd;

	if (!local__valid_id(id) || (dfd = records_dir(lp, 0)) < 0)
		return;
	snprintf(name, sizeof(name), "%s.json", id);
	(void)unlinkat(dfd, name, 0);
	close(dfd);
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
