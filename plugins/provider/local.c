/*
 * The local provider: a sandbox is a directory on the runner's host.
 *
 *   ROOT/sb-<16 hex>/            mode 0700
 *       meta.json                state, network mode, environment, labels
 *       workspace/               the agent's working directory
 *       home/  tmp/              HOME and TMPDIR of its processes
 *
 * Processes get an environment reduced to an allowlist plus what the
 * sandbox and the exec set. With bubblewrap present, network mode "off"
 * runs them in a fresh network namespace (only a loopback device), and
 * the capabilities say the network policy is enforced; without it they do
 * not, so the plan can refuse a restricted-network run. Secrets cannot be
 * hidden from a local sandbox: the capabilities say so.
 *
 * Everything that touches the file system runs on the host's thread pool;
 * paths are resolved with openat2(RESOLVE_BENEATH) below the sandbox's
 * directory, so neither ".." nor a symlink can reach outside it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sandrun/plugin.h"

#define ID_PREFIX "sb-"
#define ID_HEX 16
#define MAX_FILE_DEFAULT (64u << 20)

static const char *const base_env_allow[] = {
	"PATH", "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "TZ",
	"USER", "LOGNAME", "SHELL", NULL
};

typedef struct channel {
	struct local *lp;
	uint64_t req;
	char id[ID_HEX + 8];
	sr_proc *proc;
	sr_channel_callbacks cbs;
	void *ud;
	struct channel *next;
} channel;

typedef struct local {
	const sr_host *host;
	char *root;
	char *bwrap;       /* path of bwrap, or NULL */
	int unconfined;    /* [provider.local] confinement = none */
	char **env_allow;  /* extra names from the config */
	channel *channels;
} local;

/* ------------------------------------------------------------ helpers */

static int valid_id(const char *id)
{
	size_t n = strlen(ID_PREFIX);

	if (!id || strncmp(id, ID_PREFIX, n) != 0 || strlen(id) != n + ID_HEX)
		return 0;
	for (const char *p = id + n; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

static void done_status(sr_done_fn done, void *ud, int status,
			const char *message, const char *json)
{
	sr_result r = { sizeof(r), status, message, json, NULL, 0 };

	if (done)
		done(ud, &r);
}

/* An outcome known at once, delivered later (the completion rule). */
static int complete_now(const local *lp, sr_done_fn done, void *ud, int status,
			const char *message, const char *json)
{
	sr_result r = { sizeof(r), status, message, json, NULL, 0 };

	return lp->host->complete(lp->host, done, ud, &r);
}

static char *find_in_path(const char *name)
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
static int program_exists(const char *name, char *const *envp, const char *cwd)
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

static int mkdir_p(const char *path, mode_t mode)
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

/* Without openat2 (kernels before 5.6, valgrind): walk the path one
 * component at a time, never following a symlink and refusing "..". This
 * is stricter than RESOLVE_BENEATH (no symlink at all) and as confined. */
static int open_by_components(int dirfd, const char *path, int flags,
			      mode_t mode)
{
	char *copy = strdup(path), *comp, *next, *save = NULL;
	int fd = dup(dirfd), nfd;

	if (!copy || fd < 0) {
		free(copy);
		if (fd >= 0)
			close(fd);
		errno = ENOMEM;
		return -1;
	}
	comp = strtok_r(copy, "/", &save);
	while (comp) {
		next = strtok_r(NULL, "/", &save);
		if (strcmp(comp, "..") == 0) {
			close(fd);
			free(copy);
			errno = EXDEV;
			return -1;
		}
		if (strcmp(comp, ".") == 0 && next) {
			comp = next;
			continue;
		}
		nfd = next ? openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) :
			     openat(fd, comp, flags | O_NOFOLLOW | O_CLOEXEC, mode);
		close(fd);
		if (nfd < 0) {
			if (errno == ELOOP || errno == ENOTDIR)
				errno = EXDEV; /* a symlink on the way */
			free(copy);
			return -1;
		}
		fd = nfd;
		comp = next;
	}
	free(copy);
	return fd;
}

static int open_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
	static int no_openat2;
	struct open_how how;
	int fd;

	if (!no_openat2) {
		memset(&how, 0, sizeof(how));
		how.flags = (uint64_t)(flags | O_CLOEXEC);
		how.mode = (flags & O_CREAT) ? mode : 0;
		how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		if (fd >= 0 || errno != ENOSYS)
			return fd;
		no_openat2 = 1;
	}
	return open_by_components(dirfd, path, flags, mode);
}

static int errno_status(int e)
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

/* ----------------------------------------------------------- metadata */

static void sandbox_dir(const local *lp, const char *id, char *buf, size_t n)
{
	snprintf(buf, n, "%s/%s", lp->root, id);
}

static json_t *meta_read(const local *lp, const char *id)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s/meta.json", lp->root, id);
	return json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
}

static int meta_write(const local *lp, const char *id, json_t *meta)
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

static const char *net_name(int mode)
{
	return mode == SR_NET_OFF ? "off" :
	       mode == SR_NET_ALLOWLIST ? "allowlist" : "open";
}

/* The spec's network policy, when it carries one we can read. */
static const sr_network_policy *network_of(const sr_sandbox_spec *spec)
{
	const sr_network_policy *np = spec->network;

	return np && np->size >= SR_TABLE_HAS(sr_network_policy, mode) ? np : NULL;
}

/* Can this host enforce the policy? Returns NULL or the reason not. */
static const char *policy_unenforceable(const local *lp,
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

#define NO_BWRAP "local sandboxes run confined by bubblewrap, which is not installed " \
	"(apt-get install bubblewrap); [provider.local] confinement = none runs them " \
	"unconfined, as the runner's user with a view of the whole host"

/* Can sandboxes run here? NULL, or the reason not. */
static const char *unconfinable(const local *lp)
{
	return lp->bwrap || lp->unconfined ? NULL : NO_BWRAP;
}

/* "root" is where the sandbox lives on the runner's host: the core puts the
 * relay directory and tool specs there (outside the workspace). */
static char *result_json(const local *lp, const char *id)
{
	char dir[4096], ws[4200], home[4200];
	json_t *j;
	char *s;

	sandbox_dir(lp, id, dir, sizeof(dir));
	snprintf(ws, sizeof(ws), "%s/workspace", dir);
	snprintf(home, sizeof(home), "%s/home", dir);
	j = json_pack("{s:s, s:s, s:s, s:s}", "id", id, "workspace", ws, "home", home,
		      "root", dir);
	s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return s;
}

/* --------------------------------------------------------------- work */

enum fop_kind {
	FOP_CREATE, FOP_RECONNECT, FOP_PARK, FOP_DESTROY, FOP_PUT, FOP_GET,
	FOP_LIST, FOP_RENAME, FOP_REMOVE, FOP_MKDIR, FOP_SANDBOXES, FOP_STATUS
};

typedef struct fop {
	local *lp;
	int kind;
	char id[ID_HEX + 8];
	char *path, *path2;
	void *data;        /* put: copy of the contents; get: result */
	size_t len, max;
	uint32_t mode;
	int net_mode;      /* create/reconnect; -1: leave */
	json_t *meta_env;  /* create: env and labels to record */
	json_t *meta_labels;
	char *out_json;
	char message[512];
	sr_done_fn done;
	void *ud;
} fop;

static void fop_free(fop *f)
{
	free(f->path);
	free(f->path2);
	free(f->data);
	free(f->out_json);
	json_decref(f->meta_env);
	json_decref(f->meta_labels);
	free(f);
}

static int sandbox_fd(fop *f)
{
	char dir[4096];
	int fd;

	sandbox_dir(f->lp, f->id, dir, sizeof(dir));
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		snprintf(f->message, sizeof(f->message), "local: sandbox '%s' not found",
			 f->id);
	return fd;
}

/* Turn a sandbox path into one relative to the sandbox directory: a
 * relative path is under workspace/, an absolute one must name a place
 * inside the sandbox's directory. */
static int relative_path(fop *f, const char *path, char *out, size_t n)
{
	char dir[4096];
	size_t dl;

	if (!path || !*path) {
		snprintf(f->message, sizeof(f->message), "local: empty path");
		return SR_EINVAL;
	}
	if (path[0] != '/') {
		snprintf(out, n, "workspace/%s", path);
		return SR_OK;
	}
	sandbox_dir(f->lp, f->id, dir, sizeof(dir));
	dl = strlen(dir);
	if (strncmp(path, dir, dl) != 0 || (path[dl] != '/' && path[dl] != 0) ||
	    !path[dl] || !path[dl + 1]) {
		snprintf(f->message, sizeof(f->message),
			 "local: path '%s' is outside sandbox '%s'", path, f->id);
		return SR_EPERM;
	}
	snprintf(out, n, "%s", path + dl + 1);
	return SR_OK;
}

/* Open the parent directory of path beneath the sandbox; *base gets the
 * last component (never "", "." or ".."). */
static int open_parent(fop *f, int sfd, const char *path, char *rel,
		       size_t reln, const char **base)
{
	char *slash;
	int fd, rc;

	rc = relative_path(f, path, rel, reln);
	if (rc != SR_OK)
		return rc;
	while (strlen(rel) > 1 && rel[strlen(rel) - 1] == '/')
		rel[strlen(rel) - 1] = 0;
	slash = strrchr(rel, '/');
	*base = slash ? slash + 1 : rel;
	if (!**base || strcmp(*base, ".") == 0 || strcmp(*base, "..") == 0) {
		snprintf(f->message, sizeof(f->message), "local: invalid path '%s'",
			 path);
		return SR_EINVAL;
	}
	if (slash) {
		*slash = 0;
		fd = open_beneath(sfd, rel, O_RDONLY | O_DIRECTORY, 0);
		*slash = '/';
	} else {
		fd = dup(sfd);
	}
	if (fd < 0) {
		rc = errno_status(errno);
		snprintf(f->message, sizeof(f->message), "local: %s: %s", path,
			 rc == SR_EPERM ? "resolves outside the sandbox" :
					  strerror(errno));
		return rc;
	}
	return fd;
}

static int rm_rf_at(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d;
	struct dirent *e;

	if (fd < 0)
		return unlinkat(dirfd, name, 0) == 0 || errno == ENOENT ? 0 : -1;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			rm_rf_at(fd, e->d_name);
	closedir(d);
	return unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
}

static int do_create(fop *f)
{
	char dir[4096], sub[4200];
	json_t *meta;
	int rc;

	if (mkdir_p(f->lp->root, 0700) != 0) {
		snprintf(f->message, sizeof(f->message), "local: cannot create %s: %s",
			 f->lp->root, strerror(errno));
		return SR_EIO;
	}
	sandbox_dir(f->lp, f->id, dir, sizeof(dir));
	if (mkdir(dir, 0700) != 0) {
		snprintf(f->message, sizeof(f->message), "local: cannot create %s: %s",
			 dir, strerror(errno));
		return errno_status(errno);
	}
	static const char *const subdirs[] = { "workspace", "home", "tmp" };
	for (size_t i = 0; i < 3; i++) {
		snprintf(sub, sizeof(sub), "%s/%s", dir, subdirs[i]);
		if (mkdir(sub, 0700) != 0) {
			snprintf(f->message, sizeof(f->message),
				 "local: cannot create %s: %s", sub, strerror(errno));
			return SR_EIO;
		}
	}
	meta = json_pack("{s:s, s:s, s:s, s:I, s:O, s:O}", "id", f->id,
			 "state", "running", "network", net_name(f->net_mode),
			 "created", (json_int_t)time(NULL), "env", f->meta_env,
			 "labels", f->meta_labels);
	rc = meta ? meta_write(f->lp, f->id, meta) : SR_ENOMEM;
	json_decref(meta);
	if (rc != SR_OK)
		snprintf(f->message, sizeof(f->message), "local: cannot write %s/meta.json",
			 dir);
	return rc;
}

static int set_state(fop *f, const char *state)
{
	json_t *meta = meta_read(f->lp, f->id);
	int rc;

	if (!meta) {
		snprintf(f->message, sizeof(f->message),
			 "local: sandbox '%s' not found", f->id);
		return SR_ENOTFOUND;
	}
	json_object_set_new(meta, "state", json_string(state));
	if (f->net_mode >= 0)
		json_object_set_new(meta, "network", json_string(net_name(f->net_mode)));
	rc = meta_write(f->lp, f->id, meta);
	json_decref(meta);
	if (rc != SR_OK)
		snprintf(f->message, sizeof(f->message),
			 "local: sandbox '%s': cannot write meta.json", f->id);
	return rc;
}

static int do_destroy(fop *f)
{
	int rootfd = open(f->lp->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct stat st;
	int rc = SR_OK;

	if (rootfd < 0 || fstatat(rootfd, f->id, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		snprintf(f->message, sizeof(f->message),
			 "local: sandbox '%s' not found", f->id);
		rc = SR_ENOTFOUND;
	} else if (rm_rf_at(rootfd, f->id) != 0) {
		snprintf(f->message, sizeof(f->message),
			 "local: sandbox '%s': cannot remove everything: %s", f->id,
			 strerror(errno));
		rc = SR_EIO;
	}
	if (rootfd >= 0)
		close(rootfd);
	return rc;
}

static int do_put(fop *f, int sfd)
{
	char rel[4096], tmp[300];
	const char *base;
	unsigned char rnd[6];
	int dfd, fd, rc = SR_OK;
	size_t off = 0;

	dfd = open_parent(f, sfd, f->path, rel, sizeof(rel), &base);
	if (dfd < 0)
		return dfd;
	if (getentropy(rnd, sizeof(rnd)) != 0)
		memset(rnd, 0, sizeof(rnd));
	snprintf(tmp, sizeof(tmp), ".%.200s.tmp.%02x%02x%02x%02x%02x%02x", base,
		 rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		    f->mode ? f->mode : 0644);
	if (fd < 0) {
		rc = errno_status(errno);
		goto out;
	}
	while (off < f->len) {
		ssize_t n = write(fd, (char *)f->data + off, f->len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = errno_status(errno);
			break;
		}
		off += (size_t)n;
	}
	if (rc == SR_OK && f->mode)
		fchmod(fd, f->mode);
	close(fd);
	if (rc == SR_OK && renameat(dfd, tmp, dfd, base) != 0)
		rc = errno_status(errno);
	if (rc != SR_OK)
		unlinkat(dfd, tmp, 0);
out:
	if (rc != SR_OK)
		snprintf(f->message, sizeof(f->message), "local: cannot write %s: %s",
			 f->path, strerror(errno));
	close(dfd);
	return rc;
}

static int do_get(fop *f, int sfd)
{
	char rel[4096];
	struct stat st;
	ssize_t n;
	int fd, rc;

	rc = relative_path(f, f->path, rel, sizeof(rel));
	if (rc != SR_OK)
		return rc;
	fd = open_beneath(sfd, rel, O_RDONLY | O_NOFOLLOW, 0);
	if (fd < 0) {
		rc = errno_status(errno);
		snprintf(f->message, sizeof(f->message), "local: cannot read %s: %s",
			 f->path, rc == SR_EPERM ? "resolves outside the sandbox" :
						   strerror(errno));
		return rc;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(f->message, sizeof(f->message),
			 "local: %s is not a regular file", f->path);
		return SR_EINVAL;
	}
	if ((size_t)st.st_size > f->max) {
		close(fd);
		snprintf(f->message, sizeof(f->message),
			 "local: %s is %lld bytes, over the limit of %zu", f->path,
			 (long long)st.st_size, f->max);
		return SR_ETOOBIG;
	}
	f->data = malloc((size_t)st.st_size + 1);
	if (!f->data) {
		close(fd);
		return SR_ENOMEM;
	}
	n = read(fd, f->data, (size_t)st.st_size);
	close(fd);
	if (n < 0) {
		snprintf(f->message, sizeof(f->message), "local: cannot read %s: %s",
			 f->path, strerror(errno));
		return SR_EIO;
	}
	f->len = (size_t)n;
	((char *)f->data)[n] = 0;
	return SR_OK;
}

static int do_list(fop *f, int sfd)
{
	char rel[4096];
	json_t *arr;
	DIR *d;
	struct dirent *e;
	int fd, rc;

	rc = relative_path(f, f->path, rel, sizeof(rel));
	if (rc != SR_OK)
		return rc;
	fd = open_beneath(sfd, rel, O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0 || !(d = fdopendir(fd))) {
		rc = errno_status(errno);
		snprintf(f->message, sizeof(f->message), "local: cannot list %s: %s",
			 f->path, rc == SR_EPERM ? "resolves outside the sandbox" :
						   strerror(errno));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	arr = json_array();
	while ((e = readdir(d))) {
		struct stat st;
		const char *type = "other";
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		if (S_ISREG(st.st_mode))
			type = "file";
		else if (S_ISDIR(st.st_mode))
			type = "dir";
		else if (S_ISLNK(st.st_mode))
			type = "link";
		json_array_append_new(arr, json_pack("{s:s, s:s, s:I}", "name",
						     e->d_name, "type", type, "size",
						     (json_int_t)st.st_size));
	}
	closedir(d);
	f->out_json = json_dumps(arr, JSON_COMPACT);
	json_decref(arr);
	return f->out_json ? SR_OK : SR_ENOMEM;
}

static int do_rename(fop *f, int sfd)
{
	char rel1[4096], rel2[4096];
	const char *b1, *b2;
	int d1, d2, rc = SR_OK;

	d1 = open_parent(f, sfd, f->path, rel1, sizeof(rel1), &b1);
	if (d1 < 0)
		return d1;
	d2 = open_parent(f, sfd, f->path2, rel2, sizeof(rel2), &b2);
	if (d2 < 0) {
		close(d1);
		return d2;
	}
	if (renameat(d1, b1, d2, b2) != 0) {
		rc = errno_status(errno);
		snprintf(f->message, sizeof(f->message),
			 "local: cannot rename %s to %s: %s", f->path, f->path2,
			 strerror(errno));
	}
	close(d1);
	close(d2);
	return rc;
}

static int do_remove(fop *f, int sfd)
{
	char rel[4096];
	const char *base;
	int dfd, rc = SR_OK;

	dfd = open_parent(f, sfd, f->path, rel, sizeof(rel), &base);
	if (dfd < 0)
		return dfd;
	if (unlinkat(dfd, base, 0) != 0 &&
	    (errno != EISDIR || unlinkat(dfd, base, AT_REMOVEDIR) != 0)) {
		rc = errno_status(errno);
		snprintf(f->message, sizeof(f->message), "local: cannot remove %s: %s",
			 f->path, strerror(errno));
	}
	close(dfd);
	return rc;
}

static int do_mkdir(fop *f, int sfd)
{
	char rel[4096];
	const char *base;
	int dfd, rc = SR_OK;

	dfd = open_parent(f, sfd, f->path, rel, sizeof(rel), &base);
	if (dfd < 0)
		return dfd;
	if (mkdirat(dfd, base, f->mode ? f->mode : 0755) != 0) {
		rc = errno_status(errno);
		snprintf(f->message, sizeof(f->message),
			 "local: cannot create directory %s: %s", f->path,
			 strerror(errno));
	}
	close(dfd);
	return rc;
}

/* A sandbox's record as list and status give it. */
static json_t *describe_box(json_t *meta)
{
	const char *state = json_string_value(json_object_get(meta, "state"));
	int parked = state && strncmp(state, "parked-", 7) == 0;

	return json_pack("{s:O, s:s, s:b, s:O, s:O}", "id", json_object_get(meta, "id"),
			 "state", state && strcmp(state, "parked-stopped") == 0 ? "stopped" :
				  "running",
			 "parked", parked, "labels", json_object_get(meta, "labels"),
			 "network", json_object_get(meta, "network"));
}

/* Every sandbox under the root whose labels hold all of f->meta_labels. */
static int do_sandboxes(fop *f)
{
	DIR *d = opendir(f->lp->root);
	json_t *all = json_array(), *meta, *want;
	struct dirent *e;
	const char *k;

	if (!d && errno != ENOENT) {
		json_decref(all);
		snprintf(f->message, sizeof(f->message), "local: cannot read %s: %s",
			 f->lp->root, strerror(errno));
		return SR_EIO;
	}
	while (d && (e = readdir(d))) {
		int match = 1;
		if (!valid_id(e->d_name) || !(meta = meta_read(f->lp, e->d_name)))
			continue;
		json_object_foreach(f->meta_labels, k, want)
			match &= json_equal(json_object_get(json_object_get(meta, "labels"), k),
					    want);
		if (match)
			json_array_append_new(all, describe_box(meta));
		json_decref(meta);
	}
	if (d)
		closedir(d);
	f->out_json = json_dumps(all, JSON_COMPACT);
	json_decref(all);
	return f->out_json ? SR_OK : SR_ENOMEM;
}

static int do_status(fop *f)
{
	json_t *meta = meta_read(f->lp, f->id), *j;

	if (!meta) {
		snprintf(f->message, sizeof(f->message), "local: sandbox '%s' not found", f->id);
		return SR_ENOTFOUND;
	}
	j = describe_box(meta);
	f->out_json = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	json_decref(meta);
	return f->out_json ? SR_OK : SR_ENOMEM;
}

static int fop_run(void *ud)
{
	fop *f = ud;
	int sfd, rc;

	switch (f->kind) {
	case FOP_CREATE:
		return do_create(f);
	case FOP_RECONNECT:
		return set_state(f, "running");
	case FOP_PARK:
		return set_state(f, f->mode == SR_PARK_STOPPED ? "parked-stopped" :
								 "parked-running");
	case FOP_DESTROY:
		return do_destroy(f);
	case FOP_SANDBOXES:
		return do_sandboxes(f);
	case FOP_STATUS:
		return do_status(f);
	default:
		break;
	}
	sfd = sandbox_fd(f);
	if (sfd < 0)
		return SR_ENOTFOUND;
	switch (f->kind) {
	case FOP_PUT:
		rc = do_put(f, sfd);
		break;
	case FOP_GET:
		rc = do_get(f, sfd);
		break;
	case FOP_LIST:
		rc = do_list(f, sfd);
		break;
	case FOP_RENAME:
		rc = do_rename(f, sfd);
		break;
	case FOP_REMOVE:
		rc = do_remove(f, sfd);
		break;
	default:
		rc = do_mkdir(f, sfd);
		break;
	}
	close(sfd);
	return rc;
}

static void fop_done(void *ud, int status)
{
	fop *f = ud;
	sr_result r = { sizeof(r), status, NULL, NULL, NULL, 0 };
	char *json = NULL;

	if (status != SR_OK) {
		r.message = f->message[0] ? f->message : f->lp->host->strerror(status);
	} else if (f->kind == FOP_CREATE || f->kind == FOP_RECONNECT) {
		r.json = json = result_json(f->lp, f->id);
	} else if (f->kind == FOP_GET) {
		r.data = f->data;
		r.len = f->len;
	} else if (f->kind == FOP_LIST || f->kind == FOP_SANDBOXES || f->kind == FOP_STATUS) {
		r.json = f->out_json;
	}
	if (f->done)
		f->done(f->ud, &r);
	free(json);
	fop_free(f);
}

static fop *fop_new(local *lp, int kind, const char *id, sr_done_fn done,
		    void *ud)
{
	fop *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->lp = lp;
	f->kind = kind;
	f->net_mode = -1;
	f->done = done;
	f->ud = ud;
	if (id)
		snprintf(f->id, sizeof(f->id), "%s", id);
	return f;
}

static int fop_submit(fop *f)
{
	int rc = f->lp->host->work(f->lp->host, fop_run, fop_done, f);

	if (rc != SR_OK)
		fop_free(f);
	return rc;
}

/* Common start of every operation on an existing sandbox. */
static fop *fop_for(local *lp, int kind, const char *id, sr_done_fn done,
		    void *ud, int *rc)
{
	char msg[160];
	fop *f;

	if (!valid_id(id)) {
		snprintf(msg, sizeof(msg),
			 "local: invalid sandbox id (expected sb- and 16 hex digits)");
		*rc = complete_now(lp, done, ud, SR_EINVAL, msg, NULL);
		return NULL;
	}
	f = fop_new(lp, kind, id, done, ud);
	*rc = f ? SR_OK : SR_ENOMEM;
	return f;
}

/* ---------------------------------------------------------- lifecycle */

static json_t *pairs_object(const sr_pair *p, size_t n)
{
	json_t *o = json_object();

	for (size_t i = 0; i < n; i++)
		if (p[i].name && p[i].value)
			json_object_set_new(o, p[i].name, json_string(p[i].value));
	return o;
}

static uint32_t l_capabilities(void *self)
{
	local *lp = self;

	return SR_CAP_PARK_STOPPED | (lp->bwrap ? SR_CAP_NETWORK_POLICY : 0);
}

static int l_create(void *self, uint64_t req, const sr_sandbox_spec *spec,
		    sr_done_fn done, void *ud)
{
	local *lp = self;
	unsigned char rnd[ID_HEX / 2];
	const char *why;
	char id[ID_HEX + 8];
	fop *f;

	(void)req;
	why = policy_unenforceable(lp, network_of(spec));
	if (!why)
		why = unconfinable(lp);
	if (why)
		return complete_now(lp, done, ud, SR_EUNSUPPORTED, why, NULL);
	if (lp->host->random_bytes(lp->host, rnd, sizeof(rnd)) != SR_OK)
		return SR_EIO;
	strcpy(id, ID_PREFIX);
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(id + strlen(ID_PREFIX) + 2 * i, 3, "%02x", rnd[i]);
	f = fop_new(lp, FOP_CREATE, id, done, ud);
	if (!f)
		return SR_ENOMEM;
	f->net_mode = network_of(spec) ? network_of(spec)->mode : SR_NET_OPEN;
	f->meta_env = pairs_object(spec->env, spec->n_env);
	/* Local sandboxes cannot hide credentials: they become plain env
	 * (the run reports that), but are not written to disk. */
	f->meta_labels = pairs_object(spec->labels, spec->n_labels);
	for (size_t i = 0; i < spec->n_credentials; i++)
		if (spec->credentials[i] &&
		    spec->credentials[i]->size >= SR_TABLE_HAS(sr_credential, value))
			lp->host->secret_register(lp->host, spec->credentials[i]->value);
	return fop_submit(f);
}

static int l_reconnect(void *self, uint64_t req, const char *id,
		       const sr_network_policy *policy, sr_done_fn done,
		       void *ud)
{
	local *lp = self;
	const char *why = policy_unenforceable(lp, policy);
	fop *f;
	int rc;

	(void)req;
	if (why)
		return complete_now(lp, done, ud, SR_EUNSUPPORTED, why, NULL);
	if (!(f = fop_for(lp, FOP_RECONNECT, id, done, ud, &rc)))
		return rc;
	f->net_mode = policy ? policy->mode : -1;
	return fop_submit(f);
}

static void kill_channels(local *lp, const char *id, int signum)
{
	for (channel *c = lp->channels; c; c = c->next)
		if (strcmp(c->id, id) == 0)
			lp->host->proc_kill(c->proc, signum);
}

static int l_park(void *self, uint64_t req, const char *id, int mode,
		  sr_done_fn done, void *ud)
{
	local *lp = self;
	fop *f;
	int rc;

	(void)req;
	if (!(f = fop_for(lp, FOP_PARK, id, done, ud, &rc)))
		return rc;
	f->mode = (uint32_t)mode;
	if (mode == SR_PARK_STOPPED)
		kill_channels(lp, id, SIGKILL);
	return fop_submit(f);
}

static int l_destroy(void *self, uint64_t req, const char *id,
		     sr_done_fn done, void *ud)
{
	local *lp = self;
	fop *f;
	int rc;

	(void)req;
	if (!(f = fop_for(lp, FOP_DESTROY, id, done, ud, &rc)))
		return rc;
	kill_channels(lp, id, SIGKILL);
	return fop_submit(f);
}

/* --------------------------------------------------------------- exec */

static void ch_stdout(void *ud, const void *data, size_t len)
{
	channel *c = ud;

	if (c->cbs.on_stdout)
		c->cbs.on_stdout(c->ud, data, len);
}

static void ch_stderr(void *ud, const void *data, size_t len)
{
	channel *c = ud;

	if (c->cbs.on_stderr)
		c->cbs.on_stderr(c->ud, data, len);
}

static void ch_exit(void *ud, int status, int sig)
{
	channel *c = ud;
	local *lp = c->lp;

	if (!lp) { /* orphaned by fini */
		free(c);
		return;
	}
	for (channel **pp = &lp->channels; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	if (c->cbs.on_exit)
		c->cbs.on_exit(c->ud, status, sig);
	free(c);
}

static channel *find_channel(local *lp, uint64_t req)
{
	for (channel *c = lp->channels; c; c = c->next)
		if (c->req == req)
			return c;
	return NULL;
}

static int allowed_name(const local *lp, const char *name, size_t n)
{
	for (const char *const *a = base_env_allow; *a; a++)
		if (strlen(*a) == n && strncmp(*a, name, n) == 0)
			return 1;
	for (char **a = lp->env_allow; a && *a; a++)
		if (strlen(*a) == n && strncmp(*a, name, n) == 0)
			return 1;
	return 0;
}

/* envp: allowed runner variables, then HOME/TMPDIR, the sandbox's
 * recorded env, then the exec's; later entries replace earlier ones. */
static char **build_env(local *lp, const char *id, json_t *meta,
			const sr_exec_spec *spec)
{
	extern char **environ;
	json_t *senv = json_object_get(meta, "env");
	char dir[4096], buf[4200];
	json_t *all = json_object();
	const char *k;
	json_t *v;
	char **envp;
	size_t i = 0;

	for (char **e = environ; *e; e++) {
		const char *eq = strchr(*e, '=');
		if (eq && allowed_name(lp, *e, (size_t)(eq - *e))) {
			char name[256];
			snprintf(name, sizeof(name), "%.*s", (int)(eq - *e), *e);
			json_object_set_new(all, name, json_string(eq + 1));
		}
	}
	sandbox_dir(lp, id, dir, sizeof(dir));
	snprintf(buf, sizeof(buf), "%s/home", dir);
	json_object_set_new(all, "HOME", json_string(buf));
	snprintf(buf, sizeof(buf), "%s/tmp", dir);
	json_object_set_new(all, "TMPDIR", json_string(buf));
	json_object_foreach(senv, k, v)
		json_object_set(all, k, v);
	for (size_t j = 0; j < spec->n_env; j++)
		if (spec->env[j].name && spec->env[j].value)
			json_object_set_new(all, spec->env[j].name,
					    json_string(spec->env[j].value));
	envp = calloc(json_object_size(all) + 1, sizeof(*envp));
	if (envp)
		json_object_foreach(all, k, v) {
			size_t n = strlen(k) + strlen(json_string_value(v)) + 2;
			if ((envp[i] = malloc(n)))
				snprintf(envp[i++], n, "%s=%s", k, json_string_value(v));
		}
	json_decref(all);
	return envp;
}

static void free_strv(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

static int is_dir(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* bubblewrap's arguments for a confined process, into argv (room for 40 +
 * 3 * n_paths); returns how many. The system is visible read-only; /tmp,
 * /var/tmp, /run (host sockets), /home and /root, the runner's state
 * directory (sessions, relay journals, plugin records) and the sandboxes'
 * root are each replaced by an empty tmpfs; then the host paths the
 * process needs are bound back read-only and its own sandbox read-write.
 * Own mount, pid, ipc and uts namespaces (and network, for 'off'); it
 * dies with the runner, and with its pid namespace every process in it.
 * Killing the process group (SR_PROC_GROUP) also catches a child that
 * bwrap started but had not yet tied to its own death. */
static size_t confine_args(const local *lp, const char *dir, const char *cwd,
			   int net_off, const char *const *paths, size_t n_paths,
			   const char **argv)
{
	static const char *const fixed[] = { "--ro-bind", "/", "/", "--dev", "/dev",
					     "--proc", "/proc", NULL };
	static const char *const hidden[] = { "/tmp", "/var/tmp", "/run", "/home",
					      "/root", NULL };
	/* No --new-session: the host already made the process a session of
	 * its own (SR_PROC_GROUP), and the children stay in its group. */
	static const char *const spaces[] = { "--unshare-pid", "--unshare-ipc",
					      "--unshare-uts", "--die-with-parent", NULL };
	const char *state = lp->host->state_dir(lp->host);
	size_t n = 0;

	argv[n++] = lp->bwrap;
	for (const char *const *a = fixed; *a; a++)
		argv[n++] = *a;
	for (const char *const *h = hidden; *h; h++)
		if (is_dir(*h)) {
			argv[n++] = "--tmpfs";
			argv[n++] = *h;
		}
	if (state) {
		argv[n++] = "--tmpfs";
		argv[n++] = state;
	}
	argv[n++] = "--tmpfs";
	argv[n++] = lp->root;
	for (size_t i = 0; i < n_paths; i++)
		if (paths[i] && paths[i][0] == '/' && access(paths[i], F_OK) == 0) {
			argv[n++] = "--ro-bind";
			argv[n++] = paths[i];
			argv[n++] = paths[i];
		}
	argv[n++] = "--bind";
	argv[n++] = dir;
	argv[n++] = dir;
	for (const char *const *a = spaces; *a; a++)
		argv[n++] = *a;
	if (net_off)
		argv[n++] = "--unshare-net";
	argv[n++] = "--chdir";
	argv[n++] = cwd;
	/* bwrap exits 1 when it cannot run the program; a shell's exec gives
	 * the usual 127 (not found) and 126 (not executable). */
	argv[n++] = "--";
	argv[n++] = "/bin/sh";
	argv[n++] = "-c";
	argv[n++] = "exec \"$@\"";
	argv[n++] = "sh";
	return n;
}

static int l_exec(void *self, uint64_t req, const char *id,
		  const sr_exec_spec *spec, const sr_channel_callbacks *cbs,
		  void *ud)
{
	local *lp = self;
	sr_proc_callbacks pc = { sizeof(pc), ch_stdout, ch_stderr, ch_exit };
	sr_proc_spec ps = { sizeof(ps), NULL, NULL, NULL, SR_PROC_GROUP };
	char dir[4096], ws[4200];
	const char **argv = NULL;
	size_t argc = 0, pre = 0, n_paths = 0;
	json_t *meta;
	char **envp = NULL;
	channel *c = NULL;
	int off, rc;

	if (!valid_id(id) || !spec->argv || !spec->argv[0])
		return SR_EINVAL;
	if (find_channel(lp, req))
		return SR_EEXIST;
	meta = meta_read(lp, id);
	if (!meta) {
		lp->host->log(lp->host, SR_LOG_WARN, "sandbox '%s' not found", id);
		return SR_ENOTFOUND;
	}
	off = strcmp(json_string_value(json_object_get(meta, "network")) ?
		     json_string_value(json_object_get(meta, "network")) : "open",
		     "off") == 0;
	if ((off && !lp->bwrap) || unconfinable(lp)) {
		json_decref(meta);
		lp->host->log(lp->host, SR_LOG_ERROR, "sandbox '%s': refusing to run: %s", id,
			      off && !lp->bwrap && lp->unconfined ?
			      "it has network 'off' but bubblewrap is missing" : NO_BWRAP);
		return SR_EPERM;
	}
	sandbox_dir(lp, id, dir, sizeof(dir));
	snprintf(ws, sizeof(ws), "%s/workspace", dir);
	while (spec->argv[argc])
		argc++;
	if (spec->size >= SR_TABLE_HAS(sr_exec_spec, n_host_paths))
		n_paths = spec->n_host_paths;
	argv = calloc(argc + 48 + 3 * n_paths, sizeof(*argv));
	envp = build_env(lp, id, meta, spec);
	c = calloc(1, sizeof(*c));
	rc = SR_ENOMEM;
	if (!argv || !envp || !c)
		goto out;
	if (!lp->unconfined) {
		pre = confine_args(lp, dir, spec->cwd ? spec->cwd : ws, off,
				   n_paths ? spec->host_paths : NULL, n_paths, argv);
	} else if (off && !program_exists(spec->argv[0], envp, spec->cwd ? spec->cwd : ws)) {
		rc = SR_ENOTFOUND;
		goto out;
	} else if (off) {
		argv[pre++] = lp->bwrap;
		argv[pre++] = "--dev-bind";
		argv[pre++] = "/";
		argv[pre++] = "/";
		argv[pre++] = "--unshare-net";
		argv[pre++] = "--die-with-parent";
		argv[pre++] = "--";
	}
	memcpy(argv + pre, spec->argv, argc * sizeof(*argv));
	ps.argv = argv;
	ps.envp = (const char *const *)envp;
	ps.cwd = spec->cwd ? spec->cwd : ws;
	c->lp = lp;
	c->req = req;
	snprintf(c->id, sizeof(c->id), "%s", id);
	memcpy(&c->cbs, cbs, cbs->size < sizeof(c->cbs) ? cbs->size : sizeof(c->cbs));
	c->ud = ud;
	rc = lp->host->proc_spawn(lp->host, &ps, &pc, c, &c->proc);
	if (rc == SR_OK) {
		c->next = lp->channels;
		lp->channels = c;
		c = NULL;
	}
out:
	free(c);
	free(argv);
	free_strv(envp);
	json_decref(meta);
	return rc;
}

static int l_channel_write(void *self, uint64_t req, const void *data,
			   size_t len)
{
	local *lp = self;
	channel *c = find_channel(lp, req);

	return c ? lp->host->proc_write(c->proc, data, len) : SR_ENOTFOUND;
}

static int l_channel_close_input(void *self, uint64_t req)
{
	local *lp = self;
	channel *c = find_channel(lp, req);

	return c ? lp->host->proc_close_stdin(c->proc) : SR_ENOTFOUND;
}

static int l_channel_signal(void *self, uint64_t req, int signum)
{
	local *lp = self;
	channel *c = find_channel(lp, req);

	return c ? lp->host->proc_kill(c->proc, signum) : SR_ENOTFOUND;
}

/* -------------------------------------------------------------- files */

static int start_path_op(local *lp, int kind, const char *id,
			 const char *path, const char *path2, sr_done_fn done,
			 void *ud, fop **out)
{
	int rc;
	fop *f = fop_for(lp, kind, id, done, ud, &rc);

	*out = NULL;
	if (!f)
		return rc;
	f->path = strdup(path ? path : "");
	f->path2 = path2 ? strdup(path2) : NULL;
	if (!f->path || (path2 && !f->path2)) {
		fop_free(f);
		return SR_ENOMEM;
	}
	*out = f;
	return SR_OK;
}

static int l_file_put(void *self, uint64_t req, const char *id,
		      const char *path, const void *data, size_t len,
		      uint32_t mode, sr_done_fn done, void *ud)
{
	fop *f;
	int rc = start_path_op(self, FOP_PUT, id, path, NULL, done, ud, &f);

	(void)req;
	if (!f)
		return rc;
	f->data = malloc(len ? len : 1);
	if (!f->data) {
		fop_free(f);
		return SR_ENOMEM;
	}
	memcpy(f->data, data, len);
	f->len = len;
	f->mode = mode & 07777;
	return fop_submit(f);
}

static int l_file_get(void *self, uint64_t req, const char *id,
		      const char *path, size_t max_len, sr_done_fn done,
		      void *ud)
{
	fop *f;
	int rc = start_path_op(self, FOP_GET, id, path, NULL, done, ud, &f);

	(void)req;
	if (!f)
		return rc;
	f->max = max_len ? max_len : MAX_FILE_DEFAULT;
	return fop_submit(f);
}

static int l_file_list(void *self, uint64_t req, const char *id,
		       const char *path, sr_done_fn done, void *ud)
{
	fop *f;
	int rc = start_path_op(self, FOP_LIST, id, path && *path ? path : ".",
			       NULL, done, ud, &f);

	(void)req;
	return f ? fop_submit(f) : rc;
}

static int l_file_rename(void *self, uint64_t req, const char *id,
			 const char *from, const char *to, sr_done_fn done,
			 void *ud)
{
	fop *f;
	int rc = start_path_op(self, FOP_RENAME, id, from, to ? to : "", done,
			       ud, &f);

	(void)req;
	return f ? fop_submit(f) : rc;
}

static int l_file_remove(void *self, uint64_t req, const char *id,
			 const char *path, sr_done_fn done, void *ud)
{
	fop *f;
	int rc = start_path_op(self, FOP_REMOVE, id, path, NULL, done, ud, &f);

	(void)req;
	return f ? fop_submit(f) : rc;
}

static int l_file_mkdir(void *self, uint64_t req, const char *id,
			const char *path, uint32_t mode, sr_done_fn done,
			void *ud)
{
	fop *f;
	int rc = start_path_op(self, FOP_MKDIR, id, path, NULL, done, ud, &f);

	(void)req;
	if (!f)
		return rc;
	f->mode = mode & 07777;
	return fop_submit(f);
}

static int l_list(void *self, uint64_t req, const sr_pair *labels,
		  size_t n_labels, sr_done_fn done, void *ud)
{
	fop *f = fop_new(self, FOP_SANDBOXES, NULL, done, ud);

	(void)req;
	if (!f)
		return SR_ENOMEM;
	f->meta_labels = pairs_object(labels, n_labels);
	return fop_submit(f);
}

static int l_status(void *self, uint64_t req, const char *id,
		    sr_done_fn done, void *ud)
{
	fop *f;
	int rc;

	(void)req;
	if (!(f = fop_for(self, FOP_STATUS, id, done, ud, &rc)))
		return rc;
	return fop_submit(f);
}

static int l_cancel(void *self, uint64_t req)
{
	local *lp = self;
	channel *c = find_channel(lp, req);

	/* File work on the thread pool is short and runs to its end. */
	return c ? lp->host->proc_kill(c->proc, SIGKILL) : SR_ENOTFOUND;
}

/* ------------------------------------------------------------- doctor */

typedef struct probe {
	local *lp;
	sr_done_fn done;
	void *ud;
	char err[256];
	size_t err_len;
} probe;

static void probe_stderr(void *ud, const void *data, size_t len)
{
	probe *p = ud;
	size_t room = sizeof(p->err) - 1 - p->err_len;

	if (len > room)
		len = room;
	memcpy(p->err + p->err_len, data, len);
	p->err_len += len;
	p->err[p->err_len] = 0;
}

static void probe_exit(void *ud, int status, int sig)
{
	probe *p = ud;
	char detail[900];
	json_t *j;
	char *s;

	if (status == 0 && sig == 0 && p->lp->unconfined)
		snprintf(detail, sizeof(detail),
			 "sandboxes in %s; confinement = none: they run unconfined, as the runner's "
			 "user with a view of the whole host; bubblewrap %s isolates network 'off'",
			 p->lp->root, p->lp->bwrap);
	else if (status == 0 && sig == 0)
		snprintf(detail, sizeof(detail),
			 "sandboxes in %s; confined by bubblewrap %s (own mount, pid, ipc and uts "
			 "namespaces; the host read-only; network 'off' isolated)",
			 p->lp->root, p->lp->bwrap);
	else
		snprintf(detail, sizeof(detail),
			 "sandboxes in %s; bubblewrap %s cannot create its namespaces (exit %d): %s",
			 p->lp->root, p->lp->bwrap, status, p->err);
	j = json_pack("{s:b, s:s}", "ok", status == 0 && sig == 0, "detail", detail);
	s = json_dumps(j, JSON_COMPACT);
	done_status(p->done, p->ud, SR_OK, NULL, s);
	free(s);
	json_decref(j);
	free(p);
}

static int l_doctor(void *self, sr_done_fn done, void *ud)
{
	local *lp = self;
	static const char *const argv_tmpl[] = { NULL, "--dev-bind", "/", "/",
						 "--unshare-net", "--", "true",
						 NULL };
	const char *argv[48];
	sr_proc_spec ps = { sizeof(ps), argv, NULL, NULL, 0 };
	sr_proc_callbacks cb = { sizeof(cb), NULL, probe_stderr, probe_exit };
	char detail[600];
	sr_proc *proc;
	probe *p;
	json_t *j;
	char *s;
	int rc;

	if (mkdir_p(lp->root, 0700) != 0 || access(lp->root, W_OK) != 0) {
		snprintf(detail, sizeof(detail), "cannot create or write %s: %s",
			 lp->root, strerror(errno));
		j = json_pack("{s:b, s:s}", "ok", 0, "detail", detail);
	} else if (!lp->bwrap && lp->unconfined) {
		snprintf(detail, sizeof(detail),
			 "sandboxes in %s; confinement = none: they run unconfined, as the runner's "
			 "user with a view of the whole host; no bubblewrap: network policy is not "
			 "enforced (apt-get install bubblewrap)", lp->root);
		j = json_pack("{s:b, s:s}", "ok", 1, "detail", detail);
	} else if (!lp->bwrap) {
		snprintf(detail, sizeof(detail), "%s", NO_BWRAP);
		j = json_pack("{s:b, s:s}", "ok", 0, "detail", detail);
	} else {
		if (lp->unconfined) {
			memcpy(argv, argv_tmpl, sizeof(argv_tmpl));
			argv[0] = lp->bwrap;
		} else {
			size_t n = confine_args(lp, lp->root, "/", 1, NULL, 0, argv);
			argv[n++] = "true";
			argv[n] = NULL;
		}
		if (!(p = calloc(1, sizeof(*p))))
			return SR_ENOMEM;
		p->lp = lp;
		p->done = done;
		p->ud = ud;
		/* Spawned, p belongs to the callbacks: probe_exit frees it. */
		if (lp->host->proc_spawn(lp->host, &ps, &cb, p, &proc) == SR_OK)
			// cppcheck-suppress memleak
			return SR_OK;
		free(p);
		snprintf(detail, sizeof(detail), "cannot run %s", lp->bwrap);
		j = json_pack("{s:b, s:s}", "ok", 0, "detail", detail);
	}
	s = json_dumps(j, JSON_COMPACT);
	rc = s ? complete_now(lp, done, ud, SR_OK, NULL, s) : SR_ENOMEM;
	free(s);
	json_decref(j);
	return rc;
}

/* --------------------------------------------------------------- init */

static char **split_names(const char *s)
{
	char *copy = strdup(s), *tok, *save;
	char **v = calloc(strlen(s) / 2 + 2, sizeof(*v));
	size_t n = 0;

	if (!copy || !v) {
		free(copy);
		free(v);
		return NULL;
	}
	for (tok = strtok_r(copy, ", ", &save); tok;
	     tok = strtok_r(NULL, ", ", &save))
		v[n++] = strdup(tok);
	free(copy);
	return v;
}

static void l_fini(void *self)
{
	local *lp = self;

	while (lp->channels) {
		channel *c = lp->channels;
		lp->channels = c->next;
		lp->host->proc_kill(c->proc, SIGKILL);
		/* The host still reports the exit: the record is freed then. */
		memset(&c->cbs, 0, sizeof(c->cbs));
		c->lp = NULL;
	}
	free(lp->root);
	free(lp->bwrap);
	free_strv(lp->env_allow);
	free(lp);
}

static int l_init(const sr_host *host, void **self)
{
	local *lp = calloc(1, sizeof(*lp));
	const char *root = host->config_get(host, "root");
	const char *bwrap = host->config_get(host, "bwrap");
	const char *allow = host->config_get(host, "env_allow");
	const char *confine = host->config_get(host, "confinement");
	const char *pdir;

	if (!lp)
		return SR_ENOMEM;
	lp->host = host;
	if (root && root[0] != '/') {
		free(lp);
		return host->config_invalid(host, "root", "an absolute directory");
	}
	if (!root) {
		pdir = host->plugin_dir(host);
		if (!pdir) {
			free(lp);
			return SR_EIO;
		}
		lp->root = malloc(strlen(pdir) + 16);
		if (lp->root)
			sprintf(lp->root, "%s/sandboxes", pdir);
	} else {
		lp->root = strdup(root);
	}
	if (!bwrap || strcmp(bwrap, "auto") == 0) {
		lp->bwrap = find_in_path("bwrap");
	} else if (strcmp(bwrap, "off") != 0) {
		if (bwrap[0] != '/' || access(bwrap, X_OK) != 0) {
			l_fini(lp);
			return host->config_invalid(host, "bwrap",
				"'auto', 'off' or the absolute path of an executable bwrap");
		}
		lp->bwrap = strdup(bwrap);
	}
	if (confine && strcmp(confine, "none") == 0) {
		lp->unconfined = 1;
	} else if (confine && strcmp(confine, "bwrap") != 0) {
		l_fini(lp);
		return host->config_invalid(host, "confinement", "'bwrap' or 'none'");
	}
	if (allow && !(lp->env_allow = split_names(allow))) {
		l_fini(lp);
		return SR_ENOMEM;
	}
	if (!lp->root) {
		l_fini(lp);
		return SR_ENOMEM;
	}
	*self = lp;
	return SR_OK;
}

static const sr_provider_ops local_ops = {
	.size = sizeof(sr_provider_ops),
	.capabilities = l_capabilities,
	.create = l_create,
	.reconnect = l_reconnect,
	.park = l_park,
	.destroy = l_destroy,
	.exec = l_exec,
	.channel_write = l_channel_write,
	.channel_close_input = l_channel_close_input,
	.channel_signal = l_channel_signal,
	.file_put = l_file_put,
	.file_get = l_file_get,
	.file_list = l_file_list,
	.file_rename = l_file_rename,
	.file_remove = l_file_remove,
	.file_mkdir = l_file_mkdir,
	.watch = NULL, /* the relay watches local directories itself */
	.cancel = l_cancel,
	.list = l_list,
	.status = l_status,
};

static const char *const local_keys[] = { "root", "bwrap", "env_allow", "confinement",
					  NULL };

static const sr_plugin_descriptor local_descriptor = {
	.abi_major = SR_ABI_MAJOR,
	.abi_minor = SR_ABI_MINOR,
	.size = sizeof(sr_plugin_descriptor),
	.kind = SR_PLUGIN_PROVIDER,
	.name = "local",
	.version = "0.1.0",
	.description = "sandboxes as private directories on the runner's host",
	.ops = &local_ops,
	.config_keys = local_keys,
	.init = l_init,
	.fini = l_fini,
	.doctor = l_doctor,
};

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &local_descriptor;
}
