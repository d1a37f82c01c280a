/* Mounts (ABI 2.3). Each confined exec has a mount namespace of its own,
 * so a FUSE mounter run through exec would mount where nothing else
 * sees it. The mounter runs on the runner's host instead, outside
 * bubblewrap, onto a directory of the sandbox: every later exec binds the
 * sandbox's directory recursively, and sees the mount. Only directories
 * of the sandbox's workspace and home are mount points, never through a
 * symbolic link. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "local.h"

typedef struct mounter {
	local *lp;
	sr_done_fn done;
	void *ud;
	const char *what; /* "mounter" or "unmount" */
	char err[512];
	size_t err_len;
} mounter;

static void m_stderr(void *ud, const void *data, size_t len)
{
	mounter *m = ud;
	size_t room = sizeof(m->err) - 1 - m->err_len;

	if (len > room)
		len = room;
	memcpy(m->err + m->err_len, data, len);
	m->err_len += len;
	m->err[m->err_len] = 0;
}

static void m_exit(void *ud, int status, int sig)
{
	mounter *m = ud;
	char msg[700];

	while (m->err_len && (m->err[m->err_len - 1] == '\n' || m->err[m->err_len - 1] == ' '))
		m->err[--m->err_len] = 0;
	if (status == 0 && sig == 0) {
		local__done_status(m->done, m->ud, SR_OK, NULL, NULL);
	} else {
		if (sig)
			snprintf(msg, sizeof(msg), "local: the %s was killed by signal %d%s%s",
				 m->what, sig, m->err_len ? ": " : "", m->err);
		else
			snprintf(msg, sizeof(msg), "local: the %s exited with status %d%s%s",
				 m->what, status, m->err_len ? ": " : "", m->err);
		local__done_status(m->done, m->ud,
				   strcmp(m->what, "unmount") == 0 && status == 32 ?
				   SR_ENOTFOUND : SR_EIO, msg, NULL);
	}
	free(m);
}

/* path is below the sandbox's workspace or home, with no '.' or '..'
 * component: 1. */
static int in_box(const local *lp, const char *id, const char *path)
{
	char dir[4096];
	size_t n;

	if (!path || path[0] != '/' || strstr(path, "/../") || strstr(path, "/./") ||
	    strstr(path, "//"))
		return 0;
	n = strlen(path);
	if (n >= 3 && strcmp(path + n - 3, "/..") == 0)
		return 0;
	local__sandbox_dir(lp, id, dir, sizeof(dir));
	n = strlen(dir);
	return strncmp(path, dir, n) == 0 &&
	       (strncmp(path + n, "/workspace/", 11) == 0 || strncmp(path + n, "/home/", 6) == 0);
}

/* in_box, and a directory (made when missing) reached without a
 * symbolic link: 1. */
static int mount_point_ok(const local *lp, const char *id, const char *path)
{
	char real[PATH_MAX];

	return in_box(lp, id, path) && local__mkdir_p(path, 0755) == 0 && realpath(path, real) &&
	       strcmp(real, path) == 0;
}

static int spawn(local *lp, const char *const *argv, const char *what, sr_done_fn done,
		 void *ud)
{
	static const char *const envp[] = { "PATH=/usr/local/bin:/usr/bin:/bin",
					    "LANG=C.UTF-8", NULL };
	sr_proc_spec ps = { sizeof(ps), argv, envp, "/", SR_PROC_GROUP };
	sr_proc_callbacks cb = { sizeof(cb), NULL, m_stderr, m_exit };
	sr_proc *proc;
	mounter *m = calloc(1, sizeof(*m));
	int rc;

	if (!m)
		return SR_ENOMEM;
	m->lp = lp;
	m->done = done;
	m->ud = ud;
	m->what = what;
	rc = lp->host->proc_spawn(lp->host, &ps, &cb, m, &proc);
	if (rc != SR_OK)
		free(m);
	/* Spawned, m belongs to the callbacks: m_exit frees it. */
	// cppcheck-suppress memleak
	return rc;
}

int local__mount(void *self, uint64_t req, const char *id, const sr_mount_spec *spec,
		 sr_done_fn done, void *ud)
{
	local *lp = self;
	json_t *meta;

	(void)req;
	if (!local__valid_id(id) || !spec || spec->size < SR_TABLE_HAS(sr_mount_spec, path) ||
	    !spec->argv || !spec->argv[0])
		return SR_EINVAL;
	if (!(meta = local__meta_read(lp, id)))
		return SR_ENOTFOUND;
	json_decref(meta);
	if (!mount_point_ok(lp, id, spec->path)) {
		lp->host->log(lp->host, SR_LOG_ERROR,
			      "sandbox '%s': %s is not a directory of its workspace or home", id,
			      spec->path ? spec->path : "(none)");
		return SR_EPERM;
	}
	return spawn(lp, spec->argv, "mounter", done, ud);
}

int local__unmount(void *self, uint64_t req, const char *id, const char *path,
		   sr_done_fn done, void *ud)
{
	local *lp = self;
	/* fusermount for a FUSE mount of the runner's user; umount, for
	 * root, when there is no fusermount. 32: umount's "not mounted". */
	static const char script[] =
		"mountpoint -q \"$1\" || exit 32; "
		"fusermount -u -z \"$1\" 2>/dev/null || fusermount3 -u -z \"$1\" 2>/dev/null || "
		"umount -l \"$1\"";
	const char *argv[] = { "/bin/sh", "-c", script, "sh", path, NULL };

	(void)req;
	if (!local__valid_id(id) || !in_box(lp, id, path))
		return SR_EINVAL;
	return spawn(lp, argv, "unmount", done, ud);
}
