/* Mounts (ABI 2.3). Each confined exec has a mount namespace of its own,
 * so a FUSE mounter run through exec would mount where nothing else
 * sees it. The mounter runs on the runner's host instead, outside
 * bubblewrap, onto a directory of the sandbox: every later exec binds the
 * sandbox's directory recursively, and sees the mount.
 *
 * The sandbox may have planted symbolic links, so the mount point is made
 * and checked one component at a time beneath the sandbox's directory
 * (never through a link), on the thread pool; the mounter's credentials
 * go to its environment, never into the sandbox. The core mounts before
 * the agent starts and stops a warm agent first, so that no process of
 * the sandbox runs while the mount point is made and mounted on.
 *
 * Each mount is remembered by its kernel mount id, so that unmount finds
 * it where it is now, even when the agent renamed a directory on the way;
 * an unmount touches only a FUSE mount below the sandbox's directory, and
 * never follows a link (umount2 with UMOUNT_NOFOLLOW; fusermount for a
 * runner that is not root). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "local.h"

#ifndef UMOUNT_NOFOLLOW
#define UMOUNT_NOFOLLOW 8
#endif

extern char **environ;

/* ----------------------------------------------------------- mountinfo */

typedef struct mnt {
	int id;
	char path[PATH_MAX];
	char type[64];
} mnt;

/* A mountinfo field with its octal escapes (\040) undone, in place. */
static char *unescape(char *s)
{
	char *w = s;

	for (const char *r = s; *r; r++)
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	*w = 0;
	return s;
}

/* Every mount this process sees, in the kernel's order (a mount after
 * the one it is on); *n of them in a malloc'd array, or NULL. */
static mnt *read_mounts(size_t *n)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, *save, *id, *mp, *dash, *type;
	size_t cap = 0, have = 0;
	mnt *all = NULL, *g;

	*n = 0;
	if (!f)
		return NULL;
	while (getline(&line, &cap, f) > 0) {
		/* id parent major:minor root mount-point ... - type source ... */
		if (!(dash = strstr(line, " - ")) || !(id = strtok_r(line, " ", &save)) ||
		    !strtok_r(NULL, " ", &save) || !strtok_r(NULL, " ", &save) ||
		    !strtok_r(NULL, " ", &save) || !(mp = strtok_r(NULL, " ", &save)) ||
		    !(type = strtok_r(dash + 3, " ", &save)))
			continue;
		if (*n == have) {
			if (!(g = realloc(all, (have = have ? have * 2 : 64) * sizeof(*g))))
				break;
			all = g;
		}
		all[*n].id = atoi(id);
		snprintf(all[*n].path, sizeof(all[*n].path), "%s", unescape(mp));
		snprintf(all[*n].type, sizeof(all[*n].type), "%s", type);
		(*n)++;
	}
	free(line);
	fclose(f);
	return all;
}

static int is_fuse(const mnt *m)
{
	return strcmp(m->type, "fuse") == 0 || strncmp(m->type, "fuse.", 5) == 0 ||
	       strcmp(m->type, "fuseblk") == 0;
}

static int below(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return strncmp(path, dir, n) == 0 && path[n] == '/';
}

/* fusermount -u [-z] path, for a FUSE mount of a runner that is not
 * root; 0 when it exits 0. Called on the thread pool. */
static int fusermount(const char *path, int lazy)
{
	const char *argv[] = { "fusermount", lazy ? "-uz" : "-u", path, NULL };
	pid_t pid;
	int status;

	if (posix_spawnp(&pid, "fusermount", NULL, NULL, (char *const *)argv, environ) != 0)
		return -1;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Unmount path, whatever mounted it: plainly first (a FUSE daemon writes
 * back what it holds), lazily when it is busy. 0 or -1. */
static int unmount_path(const char *path)
{
	if (umount2(path, UMOUNT_NOFOLLOW) == 0)
		return 0;
	if (errno == EBUSY && umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
		return 0;
	if (errno == EPERM)
		return fusermount(path, 0) == 0 || fusermount(path, 1) == 0 ? 0 : -1;
	return -1;
}

int local__unmount_below(const char *dir)
{
	char canon[PATH_MAX];
	size_t n;
	mnt *all;
	int rc = 0;

	if (!realpath(dir, canon))
		return errno == ENOENT ? 0 : -1;
	if (!(all = read_mounts(&n)))
		return 0;
	/* The deepest first: the kernel lists a mount after its parent. */
	for (size_t i = n; i-- > 0;)
		if (below(all[i].path, canon) && unmount_path(all[i].path) != 0 && errno != EINVAL &&
		    errno != ENOENT)
			rc = -1;
	free(all);
	return rc;
}

/* ------------------------------------------------------ the operations */

/* What the local provider mounted, by sandbox and path (relative to the
 * sandbox's directory), with the kernel's mount id. */
typedef struct lmount {
	char id[ID_HEX + 8];
	char *rel;
	int mnt_id;
	struct lmount *next;
} lmount;

static lmount **find_mount(local *lp, const char *id, const char *rel)
{
	lmount **pp = &lp->mounts;

	for (; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->id, id) == 0 && strcmp((*pp)->rel, rel) == 0)
			return pp;
	return NULL;
}

static void forget_mount(local *lp, const char *id, const char *rel)
{
	lmount **pp = find_mount(lp, id, rel), *m;

	if (!pp)
		return;
	m = *pp;
	*pp = m->next;
	free(m->rel);
	free(m);
}

void local__forget_mounts(local *lp, const char *id)
{
	lmount **pp = &lp->mounts, *m;

	while ((m = *pp)) {
		if (!id || strcmp(m->id, id) == 0) {
			*pp = m->next;
			free(m->rel);
			free(m);
		} else {
			pp = &m->next;
		}
	}
}

typedef struct mop {
	local *lp;
	uint64_t req;
	char id[ID_HEX + 8];
	char rel[PATH_MAX];      /* below the sandbox's directory */
	char path[PATH_MAX];     /* as the core named it */
	char canon[PATH_MAX];    /* the sandbox's directory, resolved */
	int mnt_id;              /* found, or to look for */
	char **argv, **envp;     /* mount: the mounter's */
	sr_proc *proc;           /* the mounter, while it runs */
	int cancelled;
	struct mop *next;        /* in lp->mops */
	char err[512];
	size_t err_len;
	char message[700];
	sr_done_fn done;
	void *ud;
} mop;

static void mop_free(mop *m)
{
	for (mop **pp = &m->lp->mops; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	local__free_strv(m->argv);
	if (m->envp)
		for (char **e = m->envp; *e; e++)
			memset(*e, 0, strlen(*e)); /* credentials */
	local__free_strv(m->envp);
	free(m);
}

static void mop_done(mop *m, int status, const char *message)
{
	local__done_status(m->done, m->ud, status, message, NULL);
	mop_free(m);
}

/* path as below the sandbox's workspace or home, relative to the
 * sandbox's directory, into m->rel; 0 when it is not. */
static int relative(const local *lp, mop *m, const char *path)
{
	char dir[4096];
	size_t n;

	local__sandbox_dir(lp, m->id, dir, sizeof(dir));
	n = strlen(dir);
	if (!path || strncmp(path, dir, n) != 0 || path[n] != '/' ||
	    (strncmp(path + n, "/workspace/", 11) != 0 && strncmp(path + n, "/home/", 6) != 0) ||
	    strstr(path, "/../") || strstr(path, "/./") || strstr(path, "//") ||
	    (strlen(path) >= 3 && strcmp(path + strlen(path) - 3, "/..") == 0) ||
	    (strlen(path) >= 2 && strcmp(path + strlen(path) - 2, "/.") == 0))
		return 0;
	snprintf(m->path, sizeof(m->path), "%s", path);
	snprintf(m->rel, sizeof(m->rel), "%s", path + n + 1);
	while (strlen(m->rel) > 1 && m->rel[strlen(m->rel) - 1] == '/')
		m->rel[strlen(m->rel) - 1] = 0;
	return 1;
}

/* Thread pool: the mount point made one component at a time beneath the
 * sandbox's directory (never through a link), and it empty. */
static int prepare_point(mop *m)
{
	char dir[4096], *copy, *comp, *save = NULL;
	int fd, nfd;
	struct stat st;
	json_t *meta;

	/* A sandbox is one with its record (read here, off the loop). */
	local__sandbox_dir(m->lp, m->id, dir, sizeof(dir));
	if (!(meta = local__meta_read(m->lp, m->id)) ||
	    (fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		json_decref(meta);
		snprintf(m->message, sizeof(m->message), "local: sandbox '%s' not found", m->id);
		return SR_ENOTFOUND;
	}
	json_decref(meta);
	if (!(copy = strdup(m->rel))) {
		close(fd);
		return SR_ENOMEM;
	}
	for (comp = strtok_r(copy, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
		if (mkdirat(fd, comp, 0755) == 0)
			local__give_at(m->lp, fd, comp);
		else if (errno != EEXIST)
			break;
		nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		if ((fd = nfd) < 0)
			break;
	}
	free(copy);
	if (fd < 0) {
		snprintf(m->message, sizeof(m->message), "local: %s is not a directory of the "
			 "sandbox reached without a symbolic link", m->path);
		return SR_EPERM;
	}
	if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
		close(fd);
		return SR_EIO;
	}
	close(fd);
	return SR_OK;
}

/* Thread pool: the kernel's mount at the mount point (by the id recorded
 * when mounting, wherever it is now; else by the path), a FUSE mount
 * below the sandbox's directory, unmounted. */
static int do_unmount(mop *m)
{
	char dir[4096], want[PATH_MAX + 8];
	const mnt *hit = NULL;
	size_t n;
	mnt *all;
	int rc;

	local__sandbox_dir(m->lp, m->id, dir, sizeof(dir));
	if (!realpath(dir, m->canon)) {
		snprintf(m->message, sizeof(m->message), "local: sandbox '%s' not found", m->id);
		return SR_ENOTFOUND;
	}
	snprintf(want, sizeof(want), "%s/%s", m->canon, m->rel);
	if (!(all = read_mounts(&n)))
		return SR_EIO;
	for (size_t i = n; i-- > 0 && !hit;)
		if (m->mnt_id ? all[i].id == m->mnt_id : strcmp(all[i].path, want) == 0)
			hit = &all[i];
	if (!hit || !is_fuse(hit) || !below(hit->path, m->canon)) {
		snprintf(m->message, sizeof(m->message), "local: nothing the provider mounted is at %s",
			 m->path);
		free(all);
		return SR_ENOTFOUND;
	}
	rc = unmount_path(hit->path);
	if (rc != 0)
		snprintf(m->message, sizeof(m->message), "local: cannot unmount %s: %s", hit->path,
			 strerror(errno));
	free(all);
	return rc == 0 ? SR_OK : SR_EIO;
}

/* Thread pool: the kernel's id of the mount now at the mount point. */
static int find_id(mop *m)
{
	char dir[4096], want[PATH_MAX + 8];
	size_t n;
	mnt *all;

	local__sandbox_dir(m->lp, m->id, dir, sizeof(dir));
	if (!realpath(dir, m->canon))
		return SR_ENOTFOUND;
	snprintf(want, sizeof(want), "%s/%s", m->canon, m->rel);
	all = read_mounts(&n);
	m->mnt_id = 0;
	for (size_t i = n; i-- > 0 && all && !m->mnt_id;)
		if (strcmp(all[i].path, want) == 0 && is_fuse(&all[i]))
			m->mnt_id = all[i].id;
	free(all);
	if (!m->mnt_id) {
		snprintf(m->message, sizeof(m->message), "local: the mounter exited 0, but no FUSE "
			 "mount is at %s", m->path);
		return SR_EIO;
	}
	return SR_OK;
}

enum { M_PREPARE, M_FIND, M_UNMOUNT };

typedef struct mwork {
	mop *m;
	int what;
} mwork;

static int mwork_run(void *ud)
{
	mwork *w = ud;

	return w->what == M_PREPARE ? prepare_point(w->m) :
	       w->what == M_FIND ? find_id(w->m) : do_unmount(w->m);
}

static void spawn_mounter(mop *m);

static void mwork_done(void *ud, int status)
{
	mwork *w = ud;
	mop *m = w->m;
	lmount *rec;

	switch (w->what) {
	case M_PREPARE:
		if (status == SR_OK && m->cancelled)
			status = SR_ECANCELED;
		if (status != SR_OK) {
			mop_done(m, status, status == SR_ECANCELED ? "local: the mount was cancelled" :
					    m->message[0] ? m->message : NULL);
			break;
		}
		spawn_mounter(m);
		break;
	case M_FIND:
		if (status == SR_OK && (rec = calloc(1, sizeof(*rec))) && (rec->rel = strdup(m->rel))) {
			forget_mount(m->lp, m->id, m->rel);
			snprintf(rec->id, sizeof(rec->id), "%s", m->id);
			rec->mnt_id = m->mnt_id;
			rec->next = m->lp->mounts;
			m->lp->mounts = rec;
		} else if (status == SR_OK) {
			free(rec);
		}
		mop_done(m, status, status == SR_OK ? NULL : m->message);
		break;
	default:
		if (status == SR_OK || status == SR_ENOTFOUND)
			forget_mount(m->lp, m->id, m->rel);
		mop_done(m, status, status == SR_OK ? NULL : m->message);
		break;
	}
	free(w);
}

static int submit(mop *m, int what)
{
	mwork *w = calloc(1, sizeof(*w));
	int rc;

	if (!w)
		return SR_ENOMEM;
	w->m = m;
	w->what = what;
	rc = m->lp->host->work(m->lp->host, mwork_run, mwork_done, w);
	if (rc != SR_OK)
		free(w);
	return rc;
}

static void m_stderr(void *ud, const void *data, size_t len)
{
	mop *m = ud;

	local__text_append(m->err, sizeof(m->err), &m->err_len, data, len);
}

static void m_exit(void *ud, int status, int sig)
{
	mop *m = ud;

	m->proc = NULL;
	if (m->cancelled) {
		/* Killed before it was done: whatever it made is the caller's
		 * to unmount (it asked for the path). */
		mop_done(m, SR_ECANCELED, "local: the mount was cancelled");
		return;
	}

	for (size_t i = 0; i < m->err_len; i++)
		if (m->err[i] == '\n')
			m->err[i] = ' ';
	while (m->err_len && m->err[m->err_len - 1] == ' ')
		m->err[--m->err_len] = 0;
	if (status == 0 && sig == 0) {
		int rc = submit(m, M_FIND);
		if (rc != SR_OK)
			mop_done(m, rc, "local: out of memory");
		return;
	}
	snprintf(m->message, sizeof(m->message), "local: the mounter %s %d%s%s",
		 sig ? "was killed by signal" : "exited with status", sig ? sig : status,
		 m->err_len ? ": " : "", m->err);
	mop_done(m, SR_EIO, m->message);
}

static void spawn_mounter(mop *m)
{
	sr_proc_spec ps = { sizeof(ps), (const char *const *)m->argv,
			    (const char *const *)m->envp, "/", SR_PROC_GROUP };
	sr_proc_callbacks cb = { sizeof(cb), NULL, m_stderr, m_exit };
	sr_proc *proc;
	int rc = m->lp->host->proc_spawn(m->lp->host, &ps, &cb, m, &proc);

	/* Spawned, m belongs to the callbacks: m_exit ends it. */
	if (rc != SR_OK)
		mop_done(m, rc, "local: cannot start the mounter");
	else
		m->proc = proc;
}

int local__cancel_mount(local *lp, uint64_t req)
{
	mop *m = lp->mops;

	while (m && m->req != req)
		m = m->next;
	if (!m)
		return SR_ENOTFOUND;
	m->cancelled = 1;
	/* Only while the mounter runs: once it has exited, its group may
	 * be the FUSE daemon it left mounted. */
	if (m->proc)
		return lp->host->proc_kill(m->proc, SIGKILL);
	return SR_OK;
}

static char **copy_strv(const char *const *v, size_t extra)
{
	size_t n = 0;
	char **out;

	while (v && v[n])
		n++;
	if (!(out = calloc(n + extra + 1, sizeof(*out))))
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (!(out[i] = strdup(v[i]))) {
			local__free_strv(out);
			return NULL;
		}
	return out;
}

int local__mount(void *self, uint64_t req, const char *id, const sr_mount_spec *spec,
		 sr_done_fn done, void *ud)
{
	static const char *const base_env[] = { "PATH=/usr/local/bin:/usr/bin:/bin",
						"LANG=C.UTF-8", NULL };
	local *lp = self;
	mop *m;
	int rc;

	if (!local__valid_id(id) || !spec || spec->size < SR_TABLE_HAS(sr_mount_spec, path) ||
	    !spec->argv || !spec->argv[0])
		return SR_EINVAL;
	if (!(m = calloc(1, sizeof(*m))))
		return SR_ENOMEM;
	m->lp = lp;
	m->req = req;
	m->next = lp->mops;
	lp->mops = m;
	snprintf(m->id, sizeof(m->id), "%s", id);
	m->done = done;
	m->ud = ud;
	if (!relative(lp, m, spec->path)) {
		lp->host->log(lp->host, SR_LOG_ERROR,
			      "sandbox '%s': %s is not a directory of its workspace or home", id,
			      spec->path ? spec->path : "(none)");
		mop_free(m);
		return SR_EPERM;
	}
	m->argv = copy_strv(spec->argv, 2);
	/* The agent runs as agent_user: the mount is its, and open to it (a
	 * FUSE mount is its mounter's user's alone otherwise), in libfuse's
	 * -o, last (s3fs takes options after the mount point). */
	if (m->argv && lp->drop) {
		size_t n = 0;
		char opt[96];
		while (m->argv[n])
			n++;
		snprintf(opt, sizeof(opt), "allow_other,uid=%u,gid=%u", (unsigned)lp->agent_uid,
			 (unsigned)lp->agent_gid);
		if (!(m->argv[n] = strdup("-o")) || !(m->argv[n + 1] = strdup(opt))) {
			local__free_strv(m->argv);
			m->argv = NULL;
		}
	}
	m->envp = copy_strv(base_env, spec->size >= SR_TABLE_HAS(sr_mount_spec, n_env) ?
				      spec->n_env : 0);
	if (m->envp && spec->size >= SR_TABLE_HAS(sr_mount_spec, n_env))
		for (size_t i = 0, k = 2; i < spec->n_env; i++) {
			const sr_pair *p = &spec->env[i];
			if (!p->name || !p->value || !(m->envp[k] = malloc(strlen(p->name) +
									  strlen(p->value) + 2)))
				continue;
			sprintf(m->envp[k++], "%s=%s", p->name, p->value);
		}
	if (!m->argv || !m->envp) {
		mop_free(m);
		return SR_ENOMEM;
	}
	if ((rc = submit(m, M_PREPARE)) != SR_OK)
		mop_free(m);
	return rc;
}

int local__unmount(void *self, uint64_t req, const char *id, const char *path,
		   sr_done_fn done, void *ud)
{
	local *lp = self;
	lmount **rec;
	mop *m;
	int rc;

	(void)req;
	if (!local__valid_id(id) || !(m = calloc(1, sizeof(*m))))
		return local__valid_id(id) ? SR_ENOMEM : SR_EINVAL;
	m->lp = lp;
	snprintf(m->id, sizeof(m->id), "%s", id);
	m->done = done;
	m->ud = ud;
	if (!relative(lp, m, path)) {
		mop_free(m);
		return SR_EINVAL;
	}
	if ((rec = find_mount(lp, id, m->rel)))
		m->mnt_id = (*rec)->mnt_id;
	if ((rc = submit(m, M_UNMOUNT)) != SR_OK)
		mop_free(m);
	return rc;
}
