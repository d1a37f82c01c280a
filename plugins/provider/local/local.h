/* The local provider's insides, shared by its files: local.c (the
 * lifecycle, doctor and init), box.c (a sandbox's directory and record),
 * files.c (file operations on the thread pool), exec.c (processes,
 * confinement), mount.c (FUSE mounts). Paths below a sandbox's directory
 * are opened with the host's open_beneath. */
#ifndef SR_LOCAL_H
#define SR_LOCAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandrun/plugin.h"

#define ID_PREFIX "sb-"
#define ID_HEX 16
#define MAX_FILE_DEFAULT (64u << 20)

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
	char *locality;    /* "HOST:ROOT", made at the first ops->locality */
	char *bwrap;       /* path of bwrap, or NULL */
	int unconfined;    /* [provider.local] confinement = none */
	/* A root runner's agents run as another user (agent_user): setpriv,
	 * inside bubblewrap, drops to it; the sandbox's files are its. */
	int drop;
	uid_t agent_uid;
	gid_t agent_gid;
	char *setpriv;     /* path of setpriv, when drop */
	char reuid[32], regid[32]; /* its arguments */
	int agent_root;    /* agent_user = root: the operator keeps uid 0 */
	char **env_allow;  /* extra names from the config */
	char **hidden;     /* host paths no sandbox sees (exec.c), found once;
			    * a trailing '/' marks a directory */
	int hidden_found;
	channel *channels;
	struct lmount *mounts; /* mount.c: what it mounted, by kernel id */
	struct mop *mops;      /* mount.c: mount operations in flight */
} local;

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

#define NO_BWRAP "local sandboxes run confined by bubblewrap, which is not installed " \
	"(apt-get install bubblewrap); [provider.local] confinement = none runs them " \
	"unconfined, as the runner's user with a view of the whole host"


/* box.c */
int local__valid_id(const char *id);
void local__done_status(sr_done_fn done, void *ud, int status,
			const char *message, const char *json);
int local__complete_now(const local *lp, sr_done_fn done, void *ud, int status,
			const char *message, const char *json);
char *local__find_in_path(const char *name);
int local__program_exists(const char *name, char *const *envp, const char *cwd);
int local__mkdir_p(const char *path, mode_t mode);
/* What the runner makes in a sandbox is the agent's (drop): fd's file, or
 * name in dirfd (never through a link). Best effort. */
void local__give_fd(const local *lp, int fd);
void local__give_at(const local *lp, int dirfd, const char *name);
/* A sandbox made before its agents ran as agent_user: its whole tree
 * given to that user, without following a link or crossing a mount. */
int local__give_tree(const local *lp, const char *dir);
/* A child's stderr kept for a message: data appended to buf (cap bytes,
 * NUL-terminated, *len used) while there is room. */
void local__text_append(char *buf, size_t cap, size_t *len, const void *data, size_t n);
int local__errno_status(int e);
void local__sandbox_dir(const local *lp, const char *id, char *buf, size_t n);
json_t *local__meta_read(const local *lp, const char *id);
int local__meta_write(const local *lp, const char *id, json_t *meta);
/* The record goes with its sandbox. */
void local__meta_remove(const local *lp, const char *id);
/* Where the records are, under ROOT (not a sandbox id). */
#define RECORDS_DIR ".records"
const char *local__net_name(int mode);
const sr_network_policy *local__network_of(const sr_sandbox_spec *spec);
const char *local__policy_unenforceable(const local *lp,
					const sr_network_policy *np);
const char *local__unconfinable(const local *lp);
char *local__result_json(const local *lp, const char *id);
json_t *local__pairs_object(const sr_pair *p, size_t n);

/* files.c */
fop *local__fop_new(local *lp, int kind, const char *id, sr_done_fn done,
		    void *ud);
int local__fop_submit(fop *f);
fop *local__fop_for(local *lp, int kind, const char *id, sr_done_fn done,
		    void *ud, int *rc);
int local__file_put(void *self, uint64_t req, const char *id,
		      const char *path, const void *data, size_t len,
		      uint32_t mode, sr_done_fn done, void *ud);
int local__file_get(void *self, uint64_t req, const char *id,
		      const char *path, size_t max_len, sr_done_fn done,
		      void *ud);
int local__file_list(void *self, uint64_t req, const char *id,
		       const char *path, sr_done_fn done, void *ud);
int local__file_rename(void *self, uint64_t req, const char *id,
			 const char *from, const char *to, sr_done_fn done,
			 void *ud);
int local__file_remove(void *self, uint64_t req, const char *id,
			 const char *path, sr_done_fn done, void *ud);
int local__file_mkdir(void *self, uint64_t req, const char *id,
			const char *path, uint32_t mode, sr_done_fn done,
			void *ud);
int local__list(void *self, uint64_t req, const sr_pair *labels,
		  size_t n_labels, sr_done_fn done, void *ud);
int local__status(void *self, uint64_t req, const char *id,
		    sr_done_fn done, void *ud);

/* exec.c */
void local__kill_channels(local *lp, const char *id, int signum);
channel *local__find_channel(local *lp, uint64_t req);
void local__free_strv(char **v);
/* At most this many host paths under /etc, /opt and /usr/local hidden
 * from every sandbox, and
 * the room local__confine_args needs besides its paths. */
#define LOCAL_HIDDEN_MAX 128
#define LOCAL_PATH_DEPTH 24
#define LOCAL_CONFINE_ROOM (100 + 3 * LOCAL_HIDDEN_MAX + 4 * LOCAL_PATH_DEPTH)
/* ... and for each path it binds */
#define LOCAL_PATH_ROOM (3 + 4 * LOCAL_PATH_DEPTH)
size_t local__confine_args(local *lp, const char *dir, const char *cwd,
			   int net_off, const char *const *paths, size_t n_paths,
			   const char **argv, char **mem);
int local__exec(void *self, uint64_t req, const char *id,
		  const sr_exec_spec *spec, const sr_channel_callbacks *cbs,
		  void *ud);
/* mount.c */
/* Every mount below dir unmounted, the deepest first, lazily when busy;
 * 0, or -1 when one stays (thread pool). */
int local__unmount_below(const char *dir);
/* Forget what was mounted in sandbox id (NULL: in every sandbox). */
void local__forget_mounts(local *lp, const char *id);
/* Cancel the mount operation req (its mounter killed): SR_ENOTFOUND when
 * there is none; its done then runs with SR_ECANCELED (or with its
 * outcome, when the mount was made already). */
int local__cancel_mount(local *lp, uint64_t req);
int local__mount(void *self, uint64_t req, const char *id, const sr_mount_spec *spec,
		 sr_done_fn done, void *ud);
int local__unmount(void *self, uint64_t req, const char *id, const char *path,
		   sr_done_fn done, void *ud);
int local__channel_write(void *self, uint64_t req, const void *data,
			   size_t len);
int local__channel_close_input(void *self, uint64_t req);
int local__channel_signal(void *self, uint64_t req, int signum);

#endif
