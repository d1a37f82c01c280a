/* File operations and sandbox records, on the host's thread pool: every
 * path is resolved below the sandbox's directory (host->open_beneath). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "local.h"

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

	local__sandbox_dir(f->lp, f->id, dir, sizeof(dir));
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
	local__sandbox_dir(f->lp, f->id, dir, sizeof(dir));
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
		fd = f->lp->host->open_beneath(f->lp->host, sfd, rel, O_RDONLY | O_DIRECTORY, 0, 0);
		*slash = '/';
	} else {
		fd = dup(sfd);
	}
	if (fd < 0) {
		rc = local__errno_status(errno);
		snprintf(f->message, sizeof(f->message), "local: %s: %s", path,
			 rc == SR_EPERM ? "resolves outside the sandbox" :
					  strerror(errno));
		return rc;
	}
	return fd;
}

/* Removes name below dirfd, never crossing into another file system (a
 * mount the sandbox still has: its files are not the sandbox's). */
static int rm_rf_at(int dirfd, const char *name, dev_t dev)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	DIR *d;
	struct dirent *e;

	if (fd < 0)
		return unlinkat(dirfd, name, 0) == 0 || errno == ENOENT ? 0 : -1;
	if (fstat(fd, &st) != 0 || st.st_dev != dev) {
		close(fd);
		errno = EBUSY;
		return -1;
	}
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			rm_rf_at(fd, e->d_name, dev);
	closedir(d);
	return unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
}

static int do_create(fop *f)
{
	char dir[4096], sub[4200];
	json_t *meta;
	int rc;

	if (local__mkdir_p(f->lp->root, 0700) != 0) {
		snprintf(f->message, sizeof(f->message), "local: cannot create %s: %s",
			 f->lp->root, strerror(errno));
		return SR_EIO;
	}
	local__sandbox_dir(f->lp, f->id, dir, sizeof(dir));
	if (mkdir(dir, 0700) != 0) {
		snprintf(f->message, sizeof(f->message), "local: cannot create %s: %s",
			 dir, strerror(errno));
		return local__errno_status(errno);
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
	/* Under a root runner, the agent's user owns the tree; ROOT (0700,
	 * the runner's) keeps every other user out. */
	if (f->lp->drop && local__give_tree(f->lp, dir) != 0) {
		snprintf(f->message, sizeof(f->message), "local: cannot give %s to uid %u: %s",
			 dir, (unsigned)f->lp->agent_uid, strerror(errno));
		return SR_EIO;
	}
	meta = json_pack("{s:s, s:s, s:s, s:I, s:O, s:O}", "id", f->id,
			 "state", "running", "network", local__net_name(f->net_mode),
			 "created", (json_int_t)time(NULL), "env", f->meta_env,
			 "labels", f->meta_labels);
	rc = meta ? local__meta_write(f->lp, f->id, meta) : SR_ENOMEM;
	json_decref(meta);
	if (rc != SR_OK)
		snprintf(f->message, sizeof(f->message), "local: cannot write the record of %s "
			 "(%s/" RECORDS_DIR ")", f->id, f->lp->root);
	return rc;
}

static int set_state(fop *f, const char *state)
{
	json_t *meta = local__meta_read(f->lp, f->id);
	int rc;

	if (!meta) {
		snprintf(f->message, sizeof(f->message),
			 "local: sandbox '%s' not found", f->id);
		return SR_ENOTFOUND;
	}
	json_object_set_new(meta, "state", json_string(state));
	if (f->net_mode >= 0)
		json_object_set_new(meta, "network", json_string(local__net_name(f->net_mode)));
	rc = local__meta_write(f->lp, f->id, meta);
	json_decref(meta);
	if (rc != SR_OK)
		snprintf(f->message, sizeof(f->message),
			 "local: sandbox '%s': cannot write its record", f->id);
	return rc;
}

/* A sandbox made while its agents ran as the runner's user (root) is
 * given to agent_user once, at its first reconnect since. */
static int reconnect(fop *f)
{
	char dir[4096];
	struct stat st;

	local__sandbox_dir(f->lp, f->id, dir, sizeof(dir));
	if (f->lp->drop && lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
	    st.st_uid != f->lp->agent_uid && local__give_tree(f->lp, dir) != 0)
		snprintf(f->message, sizeof(f->message), "local: %s: not all of it could be "
			 "given to uid %u (%s); its agent may not write there", dir,
			 (unsigned)f->lp->agent_uid, strerror(errno));
	return set_state(f, "running");
}

static int do_destroy(fop *f)
{
	char dir[4096];
	int rootfd = open(f->lp->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct stat st;
	int rc = SR_OK;

	local__sandbox_dir(f->lp, f->id, dir, sizeof(dir));
	if (rootfd < 0 || fstatat(rootfd, f->id, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		snprintf(f->message, sizeof(f->message),
			 "local: sandbox '%s' not found", f->id);
		rc = SR_ENOTFOUND;
	} else if (local__unmount_below(dir) != 0) {
		snprintf(f->message, sizeof(f->message),
			 "local: sandbox '%s': cannot unmount what is mounted in it", f->id);
		rc = SR_ESTATE;
	} else if (rm_rf_at(rootfd, f->id, st.st_dev) != 0) {
		snprintf(f->message, sizeof(f->message),
			 "local: sandbox '%s': cannot remove everything: %s", f->id,
			 strerror(errno));
		rc = SR_EIO;
	} else {
		local__meta_remove(f->lp, f->id);
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
		rc = local__errno_status(errno);
		goto out;
	}
	while (off < f->len) {
		ssize_t n = write(fd, (char *)f->data + off, f->len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = local__errno_status(errno);
			break;
		}
		off += (size_t)n;
	}
	if (rc == SR_OK && f->mode)
		fchmod(fd, f->mode);
	local__give_fd(f->lp, fd);
	close(fd);
	if (rc == SR_OK && renameat(dfd, tmp, dfd, base) != 0)
		rc = local__errno_status(errno);
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
	fd = f->lp->host->open_beneath(f->lp->host, sfd, rel, O_RDONLY, 0, 0);
	if (fd < 0) {
		rc = local__errno_status(errno);
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
	fd = f->lp->host->open_beneath(f->lp->host, sfd, rel, O_RDONLY | O_DIRECTORY, 0, 0);
	if (fd < 0 || !(d = fdopendir(fd))) {
		rc = local__errno_status(errno);
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
		rc = local__errno_status(errno);
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
		rc = local__errno_status(errno);
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
		rc = local__errno_status(errno);
		snprintf(f->message, sizeof(f->message),
			 "local: cannot create directory %s: %s", f->path,
			 strerror(errno));
	} else {
		local__give_at(f->lp, dfd, base);
	}
	close(dfd);
	return rc;
}

/* A sandbox's record as list and status give it. */
static json_t *describe_box(json_t *meta)
{
	const char *state = json_string_value(json_object_get(meta, "state"));
	int parked = state && strncmp(state, "parked-", 7) == 0;

	return json_pack("{s:O, s:s, s:b, s:O, s:O, s:O?}", "id", json_object_get(meta, "id"),
			 "state", state && strcmp(state, "parked-stopped") == 0 ? "stopped" :
				  "running",
			 "parked", parked, "labels", json_object_get(meta, "labels"),
			 "network", json_object_get(meta, "network"),
			 "created", json_object_get(meta, "created"));
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
		if (!local__valid_id(e->d_name) || !(meta = local__meta_read(f->lp, e->d_name)))
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
	json_t *meta = local__meta_read(f->lp, f->id), *j;

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
		return reconnect(f);
	case FOP_PARK:
		/* Stopped, its mounts' daemons would be all that still runs. */
		if (f->mode == SR_PARK_STOPPED) {
			char dir[4096];
			local__sandbox_dir(f->lp, f->id, dir, sizeof(dir));
			(void)local__unmount_below(dir);
		}
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
		/* A warning from the thread pool, logged here on the loop. */
		if (f->message[0])
			f->lp->host->log(f->lp->host, SR_LOG_WARN, "%s", f->message);
		r.json = json = local__result_json(f->lp, f->id);
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

fop *local__fop_new(local *lp, int kind, const char *id, sr_done_fn done,
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

int local__fop_submit(fop *f)
{
	int rc = f->lp->host->work(f->lp->host, fop_run, fop_done, f);

	if (rc != SR_OK)
		fop_free(f);
	return rc;
}

/* Common start of every operation on an existing sandbox. */
fop *local__fop_for(local *lp, int kind, const char *id, sr_done_fn done,
		    void *ud, int *rc)
{
	char msg[160];
	fop *f;

	if (!local__valid_id(id)) {
		snprintf(msg, sizeof(msg),
			 "local: invalid sandbox id (expected sb- and 16 hex digits)");
		*rc = local__complete_now(lp, done, ud, SR_EINVAL, msg, NULL);
		return NULL;
	}
	f = local__fop_new(lp, kind, id, done, ud);
	*rc = f ? SR_OK : SR_ENOMEM;
	return f;
}

static int start_path_op(local *lp, int kind, const char *id,
			 const char *path, const char *path2, sr_done_fn done,
			 void *ud, fop **out)
{
	int rc;
	fop *f = local__fop_for(lp, kind, id, done, ud, &rc);

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

int local__file_put(void *self, uint64_t req, const char *id,
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
	return local__fop_submit(f);
}

int local__file_get(void *self, uint64_t req, const char *id,
		      const char *path, size_t max_len, sr_done_fn done,
		      void *ud)
{
	fop *f;
	int rc = start_path_op(self, FOP_GET, id, path, NULL, done, ud, &f);

	(void)req;
	if (!f)
		return rc;
	f->max = max_len ? max_len : MAX_FILE_DEFAULT;
	return local__fop_submit(f);
}

int local__file_list(void *self, uint64_t req, const char *id,
		       const char *path, sr_done_fn done, void *ud)
{
	fop *f;
	int rc = start_path_op(self, FOP_LIST, id, path && *path ? path : ".",
			       NULL, done, ud, &f);

	(void)req;
	return f ? local__fop_submit(f) : rc;
}

int local__file_rename(void *self, uint64_t req, const char *id,
			 const char *from, const char *to, sr_done_fn done,
			 void *ud)
{
	fop *f;
	int rc = start_path_op(self, FOP_RENAME, id, from, to ? to : "", done,
			       ud, &f);

	(void)req;
	return f ? local__fop_submit(f) : rc;
}

int local__file_remove(void *self, uint64_t req, const char *id,
			 const char *path, sr_done_fn done, void *ud)
{
	fop *f;
	int rc = start_path_op(self, FOP_REMOVE, id, path, NULL, done, ud, &f);

	(void)req;
	return f ? local__fop_submit(f) : rc;
}

int local__file_mkdir(void *self, uint64_t req, const char *id,
			const char *path, uint32_t mode, sr_done_fn done,
			void *ud)
{
	fop *f;
	int rc = start_path_op(self, FOP_MKDIR, id, path, NULL, done, ud, &f);

	(void)req;
	if (!f)
		return rc;
	f->mode = mode & 07777;
	return local__fop_submit(f);
}

int local__list(void *self, uint64_t req, const sr_pair *labels,
		  size_t n_labels, sr_done_fn done, void *ud)
{
	fop *f = local__fop_new(self, FOP_SANDBOXES, NULL, done, ud);

	(void)req;
	if (!f)
		return SR_ENOMEM;
	f->meta_labels = local__pairs_object(labels, n_labels);
	return local__fop_submit(f);
}

int local__status(void *self, uint64_t req, const char *id,
		    sr_done_fn done, void *ud)
{
	fop *f;
	int rc;

	(void)req;
	if (!(f = local__fop_for(self, FOP_STATUS, id, done, ud, &rc)))
		return rc;
	return local__fop_submit(f);
}
