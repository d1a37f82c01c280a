/*
 * The local provider: a sandbox is a directory on the runner's host.
 *
 *   ROOT/.records/sb-<16 hex>.json  state, network mode, environment, labels:
 *                                the runner's record, out of the sandbox's reach
 *   ROOT/sb-<16 hex>/            mode 0700, the sandbox's own (its agent writes it)
 *       workspace/               the agent's working directory
 *       home/  tmp/              HOME and TMPDIR of its processes
 *
 * Processes get an environment reduced to an allowlist plus what the
 * sandbox and the exec set, and run confined by bubblewrap (exec.c): own
 * namespaces, the host read-only, nothing of the runner's state in sight;
 * network mode "off" adds a network namespace of their own. Without
 * bubblewrap, sandboxes are refused unless confinement = none. Secrets
 * cannot be hidden from a local sandbox: the capabilities say so.
 *
 * Everything that touches the file system runs on the host's thread pool
 * (files.c); paths are resolved below the sandbox's directory (host->open_beneath),
 * so neither ".." nor a symlink can reach outside it.
 */
#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "local.h"

static uint32_t l_capabilities(void *self)
{
	local *lp = self;

	return SR_CAP_PARK_STOPPED | (lp->bwrap ? SR_CAP_NETWORK_POLICY : 0);
}

/* The sandboxes are directories under root on this host: only a runner
 * on this host with the same root reaches them. */
static const char *l_locality(void *self)
{
	local *lp = self;
	char host[256] = "";

	if (!lp->locality) {
		if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
			snprintf(host, sizeof(host), "localhost");
		if (!(lp->locality = malloc(strlen(host) + strlen(lp->root) + 2)))
			return lp->root;
		sprintf(lp->locality, "%s:%s", host, lp->root);
	}
	return lp->locality;
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
	why = local__policy_unenforceable(lp, local__network_of(spec));
	if (!why)
		why = local__unconfinable(lp);
	if (why)
		return local__complete_now(lp, done, ud, SR_EUNSUPPORTED, why, NULL);
	if (lp->host->random_bytes(lp->host, rnd, sizeof(rnd)) != SR_OK)
		return SR_EIO;
	strcpy(id, ID_PREFIX);
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(id + strlen(ID_PREFIX) + 2 * i, 3, "%02x", rnd[i]);
	f = local__fop_new(lp, FOP_CREATE, id, done, ud);
	if (!f)
		return SR_ENOMEM;
	f->net_mode = local__network_of(spec) ? local__network_of(spec)->mode : SR_NET_OPEN;
	f->meta_env = local__pairs_object(spec->env, spec->n_env);
	/* Local sandboxes cannot hide credentials: they become plain env
	 * (the run reports that), but are not written to disk. Their values
	 * are the core's secrets while the run lives; none is kept here. */
	f->meta_labels = local__pairs_object(spec->labels, spec->n_labels);
	return local__fop_submit(f);
}

static int l_reconnect(void *self, uint64_t req, const char *id,
		       const sr_network_policy *policy, sr_done_fn done,
		       void *ud)
{
	local *lp = self;
	const char *why = local__policy_unenforceable(lp, policy);
	fop *f;
	int rc;

	(void)req;
	if (why)
		return local__complete_now(lp, done, ud, SR_EUNSUPPORTED, why, NULL);
	if (!(f = local__fop_for(lp, FOP_RECONNECT, id, done, ud, &rc)))
		return rc;
	f->net_mode = policy ? policy->mode : -1;
	return local__fop_submit(f);
}

static int l_park(void *self, uint64_t req, const char *id, int mode,
		  sr_done_fn done, void *ud)
{
	local *lp = self;
	fop *f;
	int rc;

	(void)req;
	if (!(f = local__fop_for(lp, FOP_PARK, id, done, ud, &rc)))
		return rc;
	f->mode = (uint32_t)mode;
	if (mode == SR_PARK_STOPPED) {
		local__kill_channels(lp, id, SIGKILL);
		local__forget_mounts(lp, id); /* parking stopped unmounts them */
	}
	return local__fop_submit(f);
}

static int l_destroy(void *self, uint64_t req, const char *id,
		     sr_done_fn done, void *ud)
{
	local *lp = self;
	fop *f;
	int rc;

	(void)req;
	if (!(f = local__fop_for(lp, FOP_DESTROY, id, done, ud, &rc)))
		return rc;
	local__kill_channels(lp, id, SIGKILL);
	local__forget_mounts(lp, id);
	return local__fop_submit(f);
}

static int l_cancel(void *self, uint64_t req)
{
	local *lp = self;
	channel *c = local__find_channel(lp, req);

	/* File work on the thread pool is short and runs to its end; a
	 * mounter may wait on a store for long. */
	return c ? lp->host->proc_kill(c->proc, SIGKILL) : local__cancel_mount(lp, req);
}

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

	local__text_append(p->err, sizeof(p->err), &p->err_len, data, len);
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
	else if (status == 0 && sig == 0 && geteuid() == 0 && p->lp->drop)
		snprintf(detail, sizeof(detail),
			 "sandboxes in %s; confined by bubblewrap %s (own mount, pid, ipc and uts "
			 "namespaces; the host and /proc/sys read-only; /var, /home, /root, /srv, "
			 "/mnt, /media, /boot, /run, /tmp and the files of /etc, /opt and /usr/local "
			 "others may not read hidden; network 'off' isolated); run as root, its agents "
			 "run as uid %u gid %u (agent_user) with no capability",
			 p->lp->root, p->lp->bwrap, (unsigned)p->lp->agent_uid,
			 (unsigned)p->lp->agent_gid);
	else if (status == 0 && sig == 0 && geteuid() == 0)
		snprintf(detail, sizeof(detail),
			 "sandboxes in %s; partly confined by bubblewrap %s: own mount, pid, ipc and "
			 "uts namespaces, no capability, the host and /proc/sys read-only, network "
			 "'off' isolated; "
			 "/var, /home, /root, /srv, /mnt, /media, /boot, /run, /tmp and the files of "
			 "/etc, /opt and /usr/local others may not read hidden; but run as root with "
			 "%s, the agent is uid 0 and reads the files only root may read anywhere "
			 "else (set [provider.local] agent_user, or run sandrun as an unprivileged "
			 "user)", p->lp->root, p->lp->bwrap,
			 p->lp->agent_root ? "agent_user = root" : "no setpriv (util-linux)");
	else if (status == 0 && sig == 0)
		snprintf(detail, sizeof(detail),
			 "sandboxes in %s; confined by bubblewrap %s (own mount, pid, ipc and uts "
			 "namespaces; the host and /proc/sys read-only; /var, /home, /root, /srv, "
			 "/mnt, /media, /boot, /run, /tmp and the files of /etc, /opt and /usr/local "
			 "others may not read hidden; network 'off' isolated)",
			 p->lp->root, p->lp->bwrap);
	else
		snprintf(detail, sizeof(detail),
			 "sandboxes in %s; bubblewrap %s cannot create its namespaces (exit %d): %s",
			 p->lp->root, p->lp->bwrap, status, p->err);
	j = json_pack("{s:b, s:s, s:b}", "ok", status == 0 && sig == 0, "detail", detail, "warn",
		      status == 0 && sig == 0 && !p->lp->unconfined && geteuid() == 0 &&
			      !p->lp->drop);
	s = json_dumps(j, JSON_COMPACT);
	local__done_status(p->done, p->ud, SR_OK, NULL, s);
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
	const char *argv[LOCAL_CONFINE_ROOM];
	sr_proc_spec ps = { sizeof(ps), argv, NULL, NULL, 0 };
	sr_proc_callbacks cb = { sizeof(cb), NULL, probe_stderr, probe_exit };
	char detail[600], *mem = NULL;
	sr_proc *proc;
	probe *p;
	json_t *j;
	char *s;
	int rc;

	if (local__mkdir_p(lp->root, 0700) != 0 || access(lp->root, W_OK) != 0) {
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
			size_t n = local__confine_args(lp, lp->root, "/", 1, NULL, 0, argv, &mem);
			argv[n++] = "true";
			argv[n] = NULL;
		}
		if (!(p = calloc(1, sizeof(*p)))) {
			free(mem);
			return SR_ENOMEM;
		}
		p->lp = lp;
		p->done = done;
		p->ud = ud;
		rc = lp->host->proc_spawn(lp->host, &ps, &cb, p, &proc);
		free(mem);
		/* Spawned, p belongs to the callbacks: probe_exit frees it. */
		if (rc == SR_OK)
			// cppcheck-suppress memleak
			return SR_OK;
		free(p);
		snprintf(detail, sizeof(detail), "cannot run %s", lp->bwrap);
		j = json_pack("{s:b, s:s}", "ok", 0, "detail", detail);
	}
	s = json_dumps(j, JSON_COMPACT);
	rc = s ? local__complete_now(lp, done, ud, SR_OK, NULL, s) : SR_ENOMEM;
	free(s);
	json_decref(j);
	return rc;
}

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
	local__forget_mounts(lp, NULL);
	free(lp->root);
	free(lp->locality);
	free(lp->bwrap);
	free(lp->setpriv);
	local__free_strv(lp->env_allow);
	local__free_strv(lp->hidden);
	free(lp);
}

/* agent_user: who a root runner's agents run as. "auto" (the default):
 * nobody; "root" keeps uid 0 (partly confined, as doctor says). Only a
 * confined root runner changes user; another runner's agents are its own
 * user. SR_OK, or the config error. */
static int agent_user(local *lp, const char *user)
{
	const sr_host *host = lp->host;
	const struct passwd *pw;
	char *end;

	if (user && strcmp(user, "auto") != 0 && geteuid() != 0)
		return host->config_invalid(host, "agent_user", "'auto' when sandrun does not run "
					    "as root (its agents run as its own user)");
	if (user && (strcmp(user, "root") == 0 || strcmp(user, "0") == 0))
		lp->agent_root = 1;
	if (geteuid() != 0 || lp->unconfined || lp->agent_root)
		return SR_OK;
	if (!user || strcmp(user, "auto") == 0)
		user = "nobody";
	errno = 0;
	pw = getpwnam(user);
	if (pw) {
		lp->agent_uid = pw->pw_uid;
		lp->agent_gid = pw->pw_gid;
	} else {
		unsigned long id = strtoul(user, &end, 10);
		if (!*user || *end || id == 0 || id >= 0xffffffffUL)
			return host->config_invalid(host, "agent_user", "a user name this host knows, "
						    "a uid other than 0, 'root' or 'auto'");
		lp->agent_uid = (uid_t)id;
		lp->agent_gid = (gid_t)id;
	}
	if (lp->agent_uid == 0) {
		lp->agent_root = 1;
		return SR_OK;
	}
	if (!lp->bwrap)
		return SR_OK; /* refused at create, as every confined sandbox is */
	if (!(lp->setpriv = local__find_in_path("setpriv"))) {
		host->log(host, SR_LOG_WARN, "local: setpriv (util-linux) is not installed: a root "
			  "runner's agents run as uid 0");
		return SR_OK;
	}
	snprintf(lp->reuid, sizeof(lp->reuid), "--reuid=%u", (unsigned)lp->agent_uid);
	snprintf(lp->regid, sizeof(lp->regid), "--regid=%u", (unsigned)lp->agent_gid);
	lp->drop = 1;
	return SR_OK;
}

static int l_init(const sr_host *host, void **self)
{
	local *lp = calloc(1, sizeof(*lp));
	const char *root = host->config_get(host, "root");
	const char *bwrap = host->config_get(host, "bwrap");
	const char *allow = host->config_get(host, "env_allow");
	const char *confine = host->config_get(host, "confinement");
	const char *pdir;
	int rc;

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
	/* One spelling of it: paths given back are compared with it. */
	while (lp->root && strlen(lp->root) > 1 && lp->root[strlen(lp->root) - 1] == '/')
		lp->root[strlen(lp->root) - 1] = 0;
	if (!bwrap || strcmp(bwrap, "auto") == 0) {
		lp->bwrap = local__find_in_path("bwrap");
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
	if ((rc = agent_user(lp, host->config_get(host, "agent_user"))) != SR_OK) {
		l_fini(lp);
		return rc;
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
	.exec = local__exec,
	.channel_write = local__channel_write,
	.channel_close_input = local__channel_close_input,
	.channel_signal = local__channel_signal,
	.file_put = local__file_put,
	.file_get = local__file_get,
	.file_list = local__file_list,
	.file_rename = local__file_rename,
	.file_remove = local__file_remove,
	.file_mkdir = local__file_mkdir,
	.watch = NULL, /* the relay watches local directories itself */
	.cancel = l_cancel,
	.list = local__list,
	.status = local__status,
	.maintain = NULL,
	.mount = local__mount,
	.unmount = local__unmount,
	.locality = l_locality,
};

static const char *const local_keys[] = { "root", "bwrap", "env_allow", "confinement",
					  "agent_user", NULL };

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
