/* Processes in a sandbox: their channels, their reduced environment, and
 * the bubblewrap confinement every one of them runs in. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "local.h"

static const char *const base_env_allow[] = {
	"PATH", "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "TZ",
	"USER", "LOGNAME", "SHELL", NULL
};

void local__kill_channels(local *lp, const char *id, int signum)
{
	for (channel *c = lp->channels; c; c = c->next)
		if (strcmp(c->id, id) == 0)
			lp->host->proc_kill(c->proc, signum);
}

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

channel *local__find_channel(local *lp, uint64_t req)
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
	local__sandbox_dir(lp, id, dir, sizeof(dir));
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

void local__free_strv(char **v)
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

/* What others may not read under dir (depth-first, to max entries in
 * all): a file not readable by others ("f" and its path), a directory not
 * searchable by them ("d" and its path; not entered). A root runner's agent is
 * uid 0 without capabilities and would read each of them (/etc/shadow,
 * /etc/ssl/private, the service's tokens, ssh host keys). */
static void find_unreadable(const char *dir, char **out, size_t *n, size_t max, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	struct stat st;
	char path[4096];

	if (!d)
		return;
	while (*n < max && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path) ||
		    lstat(path, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode) && (st.st_mode & (S_IROTH | S_IXOTH)) != (S_IROTH | S_IXOTH)) {
			if ((out[*n] = malloc(strlen(path) + 2))) {
				sprintf(out[*n], "d%s", path);
				(*n)++;
			}
		} else if (S_ISDIR(st.st_mode) && depth < 8) {
			find_unreadable(path, out, n, max, depth + 1);
		} else if (S_ISREG(st.st_mode) && !(st.st_mode & S_IROTH)) {
			if ((out[*n] = malloc(strlen(path) + 2))) {
				sprintf(out[*n], "f%s", path);
				(*n)++;
			}
		}
	}
	closedir(d);
}

/* The host paths every sandbox has hidden, found at the first confined
 * exec (they change rarely; a restart finds them again). */
static char *const *hidden_paths(local *lp)
{
	/* Where a host keeps configuration and local software, readable as a
	 * rule, with its secrets among them. */
	static const char *const walked[] = { "/etc", "/opt", "/usr/local", NULL };
	size_t n = 0;

	if (!lp->hidden_found) {
		lp->hidden_found = 1;
		if ((lp->hidden = calloc(LOCAL_HIDDEN_MAX + 1, sizeof(*lp->hidden)))) {
			for (const char *const *w = walked; *w; w++)
				find_unreadable(*w, lp->hidden, &n, LOCAL_HIDDEN_MAX, 0);
			if (n == LOCAL_HIDDEN_MAX)
				lp->host->log(lp->host, SR_LOG_WARN, "local: more than %d files in "
					      "/etc, /opt and /usr/local are not readable by "
					      "others; sandboxes see those past the first %d",
					      LOCAL_HIDDEN_MAX, LOCAL_HIDDEN_MAX);
		}
	}
	return lp->hidden;
}

/* Under drop, the directories bubblewrap makes on the way to a path it
 * binds are its own (root's, mode 0700): each ancestor of path made first
 * with mode 0755 instead (where it exists already, nothing changes), so
 * that the agent's user reaches what is bound. The names are copied to
 * *arena. Returns how many arguments. */
static size_t reachable(const char *path, const char **argv, char **arena)
{
	size_t n = 0, depth = 0;

	for (const char *c = strchr(path + 1, '/'); c && depth < LOCAL_PATH_DEPTH;
	     c = strchr(c + 1, '/'), depth++) {
		size_t len = (size_t)(c - path);
		memcpy(*arena, path, len);
		(*arena)[len] = 0;
		argv[n++] = "--perms";
		argv[n++] = "0755";
		argv[n++] = "--dir";
		argv[n++] = *arena;
		*arena += len + 1;
	}
	return n;
}

/* The room reachable needs for path's ancestors' names. */
static size_t reachable_room(const char *path)
{
	size_t room = 0, depth = 0;

	for (const char *c = strchr(path + 1, '/'); c && depth < LOCAL_PATH_DEPTH;
	     c = strchr(c + 1, '/'), depth++)
		room += (size_t)(c - path) + 1;
	return room;
}

/* bubblewrap's arguments for a confined process, into argv (room for
 * LOCAL_CONFINE_ROOM + LOCAL_PATH_ROOM * n_paths); returns how many, and
 * in *mem what the caller frees once the process is spawned. The system is visible read-only; /tmp,
 * /var/tmp, /run (host sockets), /home and /root, the runner's state
 * directory (sessions, relay journals, plugin records) and the sandboxes'
 * root are each replaced by an empty tmpfs; then the host paths the
 * process needs are bound back read-only and its own sandbox read-write.
 * Own mount, pid, ipc and uts namespaces (and network, for 'off'), and,
 * under a root runner, no capability and agent_user's uid; it dies with the runner, and with
 * its pid namespace every process in it.
 * Killing the process group (SR_PROC_GROUP) also catches a child that
 * bwrap started but had not yet tied to its own death. */
size_t local__confine_args(local *lp, const char *dir, const char *cwd,
			   int net_off, const char *const *paths, size_t n_paths,
			   const char **argv, char **mem)
{
	static const char *const fixed[] = { "--ro-bind", "/", "/", "--dev", "/dev",
					     "--proc", "/proc", "--ro-bind", "/proc/sys",
					     "/proc/sys", NULL };
	/* The rest of /proc that writes to the host's kernel (as uid 0 no
	 * capability is needed for most of /proc/sys: a root runner's agent
	 * set kernel.randomize_va_space), read-only; what shows the host's
	 * kernel memory, keys or timers, hidden. Each only where the host
	 * has it (bwrap cannot make a file in /proc). */
	static const char *const proc_ro[] = { "/proc/sysrq-trigger", "/proc/irq",
					       "/proc/bus", "/proc/fs", NULL };
	static const char *const proc_hidden[] = { "/proc/kcore", "/proc/keys",
						   "/proc/timer_list", "/proc/sched_debug",
						   NULL };
	/* Deny by default where the host keeps what is not the agent's:
	 * the runner's and other users' files, sockets and services' data. */
	static const char *const hidden[] = { "/tmp", "/var", "/run", "/home", "/root",
					      "/srv", "/mnt", "/media", "/boot", NULL };
	/* No --new-session: the host already made the process a session of
	 * its own (SR_PROC_GROUP), and the children stay in its group. */
	static const char *const spaces[] = { "--unshare-pid", "--unshare-ipc",
					      "--unshare-uts", "--die-with-parent", NULL };
	const char *state = lp->host->state_dir(lp->host);
	size_t n = 0, room;
	char *arena = NULL;

	*mem = NULL;
	if (lp->drop) {
		room = reachable_room(dir);
		for (size_t i = 0; i < n_paths; i++)
			if (paths[i] && paths[i][0] == '/')
				room += reachable_room(paths[i]);
		/* Without the room (NULL), the agent may not reach what is
		 * bound: it fails then, saying so (permission denied). */
		*mem = arena = malloc(room + 1);
	}
	argv[n++] = lp->bwrap;
	for (const char *const *a = fixed; *a; a++)
		argv[n++] = *a;
	for (const char *const *p = proc_ro; *p; p++)
		if (access(*p, F_OK) == 0) {
			argv[n++] = "--ro-bind";
			argv[n++] = *p;
			argv[n++] = *p;
		}
	for (const char *const *p = proc_hidden; *p; p++)
		if (access(*p, F_OK) == 0) {
			argv[n++] = "--ro-bind";
			argv[n++] = "/dev/null";
			argv[n++] = *p;
		}
	for (const char *const *h = hidden; *h; h++)
		if (is_dir(*h)) {
			argv[n++] = "--tmpfs";
			argv[n++] = *h;
		}
	/* Before the state directory and the sandboxes' root are hidden
	 * (each a tmpfs made where the ancestors now are). */
	if (arena)
		n += reachable(dir, argv + n, &arena);
	for (char *const *h = hidden_paths(lp); h && *h; h++) {
		struct stat st;
		/* Found earlier; bwrap cannot make a mount point on the
		 * read-only host for one removed since. */
		if (lstat(*h + 1, &st) != 0)
			continue;
		if (**h == 'd') {
			argv[n++] = "--tmpfs";
		} else {
			argv[n++] = "--ro-bind";
			argv[n++] = "/dev/null";
		}
		argv[n++] = *h + 1;
	}
	if (state) {
		argv[n++] = "--tmpfs";
		argv[n++] = state;
	}
	argv[n++] = "--tmpfs";
	argv[n++] = lp->root;
	for (size_t i = 0; i < n_paths; i++)
		if (paths[i] && paths[i][0] == '/' && access(paths[i], F_OK) == 0) {
			if (arena)
				n += reachable(paths[i], argv + n, &arena);
			argv[n++] = "--ro-bind";
			argv[n++] = paths[i];
			argv[n++] = paths[i];
		}
	argv[n++] = "--bind";
	argv[n++] = dir;
	argv[n++] = dir;
	for (const char *const *a = spaces; *a; a++)
		argv[n++] = *a;
	/* A root runner's sandbox keeps no capability: with them the agent
	 * could lift the masks (umount /tmp, /proc) and remount / read-write.
	 * Its agent runs as agent_user: setpriv, with only what it needs to
	 * change user, drops to it and leaves no capability, even in the
	 * bounding set, and no way to gain one (no_new_privs: no setuid). */
	if (geteuid() == 0) {
		argv[n++] = "--cap-drop";
		argv[n++] = "ALL";
	}
	if (lp->drop) {
		static const char *const caps[] = { "--cap-add", "CAP_SETUID", "--cap-add",
						    "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
						    NULL };
		for (const char *const *a = caps; *a; a++)
			argv[n++] = *a;
	}
	if (net_off)
		argv[n++] = "--unshare-net";
	/* bwrap changes directory after dropping its capabilities, and as
	 * root without them cannot enter the agent's directories: the shell
	 * does it then, as the agent's user. */
	if (!lp->drop) {
		argv[n++] = "--chdir";
		argv[n++] = cwd;
	}
	argv[n++] = "--";
	if (lp->drop) {
		static const char *const drop[] = { "--clear-groups", "--inh-caps=-all",
						    "--bounding-set=-all", "--no-new-privs",
						    "--", NULL };
		argv[n++] = lp->setpriv;
		argv[n++] = lp->reuid;
		argv[n++] = lp->regid;
		for (const char *const *a = drop; *a; a++)
			argv[n++] = *a;
	}
	/* bwrap exits 1 when it cannot run the program; a shell's exec gives
	 * the usual 127 (not found) and 126 (not executable). */
	argv[n++] = "/bin/sh";
	argv[n++] = "-c";
	if (lp->drop) {
		argv[n++] = "cd \"$0\" || exit 1; exec \"$@\"";
		argv[n++] = cwd;
	} else {
		argv[n++] = "exec \"$@\"";
		argv[n++] = "sh";
	}
	return n;
}

int local__exec(void *self, uint64_t req, const char *id,
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
	char **envp = NULL, *mem = NULL;
	channel *c = NULL;
	int off, rc;

	if (!local__valid_id(id) || !spec->argv || !spec->argv[0])
		return SR_EINVAL;
	if (local__find_channel(lp, req))
		return SR_EEXIST;
	meta = local__meta_read(lp, id);
	if (!meta) {
		lp->host->log(lp->host, SR_LOG_WARN, "sandbox '%s' not found", id);
		return SR_ENOTFOUND;
	}
	off = strcmp(json_string_value(json_object_get(meta, "network")) ?
		     json_string_value(json_object_get(meta, "network")) : "open",
		     "off") == 0;
	if ((off && !lp->bwrap) || local__unconfinable(lp)) {
		json_decref(meta);
		lp->host->log(lp->host, SR_LOG_ERROR, "sandbox '%s': refusing to run: %s", id,
			      off && !lp->bwrap && lp->unconfined ?
			      "it has network 'off' but bubblewrap is missing" : NO_BWRAP);
		return SR_EPERM;
	}
	local__sandbox_dir(lp, id, dir, sizeof(dir));
	snprintf(ws, sizeof(ws), "%s/workspace", dir);
	while (spec->argv[argc])
		argc++;
	if (spec->size >= SR_TABLE_HAS(sr_exec_spec, n_host_paths))
		n_paths = spec->n_host_paths;
	argv = calloc(argc + LOCAL_CONFINE_ROOM + LOCAL_PATH_ROOM * n_paths, sizeof(*argv));
	envp = build_env(lp, id, meta, spec);
	c = calloc(1, sizeof(*c));
	rc = SR_ENOMEM;
	if (!argv || !envp || !c)
		goto out;
	if (!lp->unconfined) {
		pre = local__confine_args(lp, dir, spec->cwd ? spec->cwd : ws, off,
				   n_paths ? spec->host_paths : NULL, n_paths, argv, &mem);
	} else if (off && !local__program_exists(spec->argv[0], envp, spec->cwd ? spec->cwd : ws)) {
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
	free(mem);
	local__free_strv(envp);
	json_decref(meta);
	return rc;
}

int local__channel_write(void *self, uint64_t req, const void *data,
			   size_t len)
{
	local *lp = self;
	channel *c = local__find_channel(lp, req);

	return c ? lp->host->proc_write(c->proc, data, len) : SR_ENOTFOUND;
}

int local__channel_close_input(void *self, uint64_t req)
{
	local *lp = self;
	channel *c = local__find_channel(lp, req);

	return c ? lp->host->proc_close_stdin(c->proc) : SR_ENOTFOUND;
}

int local__channel_signal(void *self, uint64_t req, int signum)
{
	local *lp = self;
	channel *c = local__find_channel(lp, req);

	return c ? lp->host->proc_kill(c->proc, signum) : SR_ENOTFOUND;
}
