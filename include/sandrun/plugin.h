/*
 * sandrun plugin ABI.
 *
 * This is the only header a plugin needs. It depends on the C standard
 * library alone: no libuv, libcurl or jansson type crosses it. Structured
 * results cross as JSON text, borrowed for the duration of a callback.
 *
 * Rules (see doc/plugin-abi.md):
 *  - A plugin exports one symbol, SR_PLUGIN_ENTRY_SYMBOL, returning a const
 *    descriptor that lives as long as the module is loaded.
 *  - The core accepts a plugin whose abi_major equals SR_ABI_MAJOR and whose
 *    abi_minor is at most SR_ABI_MINOR.
 *  - Every table (descriptor, host, ops, specs, results) starts with a size
 *    field. Tables only grow by appending; a reader never touches a slot
 *    beyond the size the writer declared. A slot that is missing or NULL is
 *    "unsupported" and surfaces as SR_EUNSUPPORTED naming the plugin and
 *    the operation.
 *  - Every struct that crosses the ABI by pointer or in an array carries
 *    its size, so each can grow (arrays of such structs are arrays of
 *    pointers). sr_pair is the one fixed-shape exception.
 *
 * The completion rule (as libuv's). Every operation that can take time
 * takes a completion callback `done` and a user pointer:
 *  - it returns SR_OK and then calls done exactly once, on the core's loop
 *    thread, and never from inside the call that started it;
 *  - or it returns a negative status and never calls done.
 * An operation that knows its outcome at once (an invalid argument it wants
 * to explain, a cached answer) returns host->complete(host, done, ud,
 * &result): the host delivers the result on the next loop iteration.
 * Nothing blocks the loop. Cancellation is an operation of its own
 * (ops->cancel): done then runs with SR_ECANCELED, still exactly once.
 * Synchronous operations (capabilities, describe, mcp_servers,
 * is_own_permission) take no callback and say so.
 */
#ifndef SANDRUN_PLUGIN_H
#define SANDRUN_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SR_ABI_MAJOR 2
#define SR_ABI_MINOR 6

#define SR_PLUGIN_ENTRY_SYMBOL "sandrun_plugin_entry"

/* The MCP server name of the platform tools, reserved: no user MCP server
 * may take it. */
#define SR_TOOLS_SERVER_NAME "sandrun-tools"

#if defined(__GNUC__)
#define SR_PLUGIN_EXPORT __attribute__((visibility("default")))
#define SR_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SR_PLUGIN_EXPORT
#define SR_PRINTF(f, a)
#endif

/* Offset one past the end of a table member: a table declaring
 * size >= SR_TABLE_HAS(type, member) carries that member. */
#define SR_TABLE_HAS(type, member) \
	(offsetof(type, member) + sizeof(((type *)0)->member))

/* ---------------------------------------------------------------- errors */

/* Status codes: 0 is success, failures are negative. host->strerror()
 * gives the text of a code. New codes are only appended. */
enum sr_status {
	SR_OK = 0,
	SR_EINVAL = -1,       /* an argument or input is invalid */
	SR_ENOMEM = -2,       /* out of memory */
	SR_EUNSUPPORTED = -3, /* the plugin does not offer this operation */
	SR_ENOTFOUND = -4,    /* no such sandbox, file, key or tunnel */
	SR_EEXIST = -5,       /* already exists */
	SR_EIO = -6,          /* an I/O or system call failed */
	SR_ETIMEDOUT = -7,    /* the operation ran out of time */
	SR_ECANCELED = -8,    /* cancelled through ops->cancel */
	SR_ECONNREFUSED = -9, /* the peer refused the connection */
	SR_ETOOBIG = -10,     /* a size limit was exceeded */
	SR_EPROTO = -11,      /* the peer broke its protocol */
	SR_ESTATE = -12,      /* not possible in the current state */
	SR_EPERM = -13,       /* refused by policy or permissions */
	SR_ENETWORK = -14,    /* DNS, TLS or another network failure */
	SR_EHTTP = -15        /* the server answered with an HTTP error */
};

/* -------------------------------------------------------- plugin kinds */

enum sr_plugin_kind {
	SR_PLUGIN_PROVIDER = 1,
	SR_PLUGIN_TUNNEL = 2,
	SR_PLUGIN_HARNESS = 3
};

enum sr_log_level {
	SR_LOG_ERROR = 0,
	SR_LOG_WARN = 1,
	SR_LOG_INFO = 2,
	SR_LOG_DEBUG = 3
};

/* -------------------------------------------------------------- results */

/* The one completion shape. Everything in it is borrowed for the duration
 * of the callback: copy what you keep. */
typedef struct sr_result {
	uint32_t size;       /* sizeof(sr_result) of the writer */
	int status;          /* SR_OK or a negative sr_status */
	const char *message; /* failure text naming the thing and value, or NULL */
	const char *json;    /* operation-specific JSON text, or NULL */
	const void *data;    /* raw bytes (file contents, bodies), or NULL */
	size_t len;          /* bytes at data */
} sr_result;

typedef void (*sr_done_fn)(void *ud, const sr_result *result);

/* A name/value pair (environment variables, labels, HTTP headers). Its
 * shape is fixed: it will never grow. */
typedef struct sr_pair {
	const char *name;
	const char *value;
} sr_pair;

/* ----------------------------------------------------------- host table */

typedef struct sr_host sr_host;
typedef struct sr_timer sr_timer;
typedef struct sr_http_call sr_http_call;
typedef struct sr_proc sr_proc;

typedef void (*sr_timer_fn)(void *ud);

typedef struct sr_http_request {
	uint32_t size;          /* sizeof(sr_http_request) */
	const char *method;     /* "GET", "POST", ...; NULL means GET */
	const char *url;
	const sr_pair *headers; /* "Name", "value" pairs */
	size_t n_headers;
	const void *body;       /* request body or NULL */
	size_t body_len;
	uint64_t timeout_ms;    /* whole transfer; 0 means 30000 */
	size_t max_response;    /* body cap in bytes; 0 means 4 MiB */
} sr_http_request;

/* HTTP completion: result->status is SR_OK when a response arrived (any
 * HTTP status); result->json is {"status":N,"headers":{lowercase: value}};
 * result->data/len is the body. On failure status is SR_ETIMEDOUT,
 * SR_ECONNREFUSED, SR_ETOOBIG, SR_ENETWORK or SR_ECANCELED. */

/* A streamed HTTP response (log follow, server-sent events): on_headers
 * once when the status line and headers arrived (json as above, without a
 * body), on_chunk for each piece of the body as it arrives (borrowed), then
 * done exactly once (SR_OK at the end of the body: data/len empty; or the
 * failure). max_response in the request caps the whole body; timeout_ms
 * then limits the time between two chunks, not the whole transfer. */
typedef struct sr_http_stream_callbacks {
	uint32_t size; /* sizeof(sr_http_stream_callbacks) */
	void (*on_headers)(void *ud, int http_status, const char *headers_json);
	void (*on_chunk)(void *ud, const void *data, size_t len);
	sr_done_fn done;
} sr_http_stream_callbacks;

/* Process spawning with duplex pipes. */
typedef struct sr_proc_spec {
	uint32_t size;            /* sizeof(sr_proc_spec) */
	const char *const *argv;  /* argv[0] is searched in PATH; NULL-terminated */
	const char *const *envp;  /* "NAME=value", NULL-terminated; NULL inherits */
	const char *cwd;          /* NULL: the runner's */
	uint32_t flags;           /* SR_PROC_* */
} sr_proc_spec;

/* The child leads a new session and process group (so it has no
 * controlling terminal), and proc_kill signals the whole group. */
#define SR_PROC_GROUP (1u << 0)

typedef struct sr_proc_callbacks {
	uint32_t size; /* sizeof(sr_proc_callbacks) */
	/* Output chunks, borrowed. len 0 means that stream reached its end. */
	void (*on_stdout)(void *ud, const void *data, size_t len);
	void (*on_stderr)(void *ud, const void *data, size_t len);
	/* Called once, after both output streams ended. exit_status is the
	 * exit code, term_signal the signal that killed it (0 if none). The
	 * sr_proc is released by the host right after this returns. */
	void (*on_exit)(void *ud, int exit_status, int term_signal);
} sr_proc_callbacks;

/* Work run on the host's thread pool (blocking file system work and the
 * like); done runs on the loop thread with the status work returned. */
typedef int (*sr_work_fn)(void *ud);
typedef void (*sr_work_done_fn)(void *ud, int status);

/* Visitor for kv_list: return non-zero to stop. */
typedef int (*sr_kv_visit_fn)(void *ud, const char *key);

struct sr_host {
	uint32_t size;       /* sizeof(sr_host) of the core */
	uint32_t abi_minor;  /* the core's SR_ABI_MINOR */
	const char *plugin;  /* the plugin's name */
	void *core;          /* private to the core */

	/* Logging. The host redacts every registered secret from the text. */
	void (*log)(const sr_host *h, int level, const char *fmt, ...)
		SR_PRINTF(3, 4);
	/* Register a secret value: it never appears in a log line again.
	 * For a value of something that ends (a sandbox's, an enrolment's),
	 * secret_hold and secret_release (2.4) below. */
	void (*secret_register)(const sr_host *h, const char *value);
	const char *(*strerror)(int status);

	/* Configuration: this plugin's own section ([provider.NAME], ...),
	 * with SANDRUN_<SECTION>_<KEY> environment overrides applied. NULL
	 * when unset. Borrowed; valid while the plugin is loaded. */
	const char *(*config_get)(const sr_host *h, const char *key);
	/* Report an invalid value of this plugin's key: logs one line naming
	 * file, line, key and value, and returns SR_EINVAL. */
	int (*config_invalid)(const sr_host *h, const char *key,
			      const char *why);
	/* The runner's state directory (exists, mode 0700), and the plugin's
	 * own directory under it (created on first call). */
	const char *(*state_dir)(const sr_host *h);
	const char *(*plugin_dir)(const sr_host *h);

	/* Timers: one-shot when repeat_ms is 0. timer_stop frees the timer
	 * (also after it fired; a one-shot timer must still be stopped). */
	sr_timer *(*timer_start)(const sr_host *h, uint64_t after_ms,
				 uint64_t repeat_ms, sr_timer_fn fn, void *ud);
	void (*timer_stop)(sr_timer *t);

	/* Asynchronous HTTP (libcurl multi on the core's loop), under the
	 * completion rule. *call is valid until done runs; http_cancel makes
	 * done run with SR_ECANCELED (from inside http_cancel: cancelling is
	 * the caller's own act). */
	int (*http_request)(const sr_host *h, const sr_http_request *req,
			    sr_done_fn done, void *ud, sr_http_call **call);
	void (*http_cancel)(sr_http_call *call);

	/* Processes with pipes on stdin, stdout and stderr. */
	int (*proc_spawn)(const sr_host *h, const sr_proc_spec *spec,
			  const sr_proc_callbacks *cbs, void *ud,
			  sr_proc **out);
	/* Copies data and queues it for the child's stdin. */
	int (*proc_write)(sr_proc *p, const void *data, size_t len);
	int (*proc_close_stdin)(sr_proc *p);
	int (*proc_kill)(sr_proc *p, int signum);
	long (*proc_pid)(const sr_proc *p);

	/* Random bytes from the kernel's CSPRNG. */
	int (*random_bytes)(const sr_host *h, void *buf, size_t len);

	/* Thread-pool work: the only place a plugin may block. */
	int (*work)(const sr_host *h, sr_work_fn fn, sr_work_done_fn done,
		    void *ud);

	/* A durable key-value area of the plugin's own (leases, enrolments).
	 * Keys: [A-Za-z0-9._-]{1,128}, not starting with '.'. Values up to
	 * 1 MiB. kv_get hands over a malloc'd, NUL-terminated copy: release
	 * it with host->free. kv_put replaces atomically. */
	int (*kv_get)(const sr_host *h, const char *key, char **value,
		      size_t *len);
	int (*kv_put)(const sr_host *h, const char *key, const void *value,
		      size_t len);
	int (*kv_delete)(const sr_host *h, const char *key);
	int (*kv_list)(const sr_host *h, sr_kv_visit_fn visit, void *ud);
	void (*free)(void *p);

	/* Deliver result to done on the next loop iteration (the result is
	 * copied): how an operation that knows its outcome at once keeps the
	 * completion rule. Returns SR_OK, or SR_ENOMEM and never calls done. */
	int (*complete)(const sr_host *h, sr_done_fn done, void *ud,
			const sr_result *result);
	/* A streamed HTTP request (see sr_http_stream_callbacks), under the
	 * completion rule; http_cancel cancels it. */
	int (*http_stream)(const sr_host *h, const sr_http_request *req,
			   const sr_http_stream_callbacks *cbs, void *ud,
			   sr_http_call **call);
	/* Emit a run event: type ("cleanup_pending", "tunnel.failed", ...)
	 * and a JSON object of fields (or NULL). It reaches every run that
	 * uses this plugin, as {"type": type, "plugin": "KIND.NAME", ...}. */
	void (*event)(const sr_host *h, const char *type,
		      const char *fields_json);
	/* Compare-and-set put: replace key's value only when it is exactly
	 * expected (expected NULL: only when the key does not exist).
	 * SR_ESTATE when it is not; atomic against other runner processes
	 * on this host. */
	int (*kv_cas)(const sr_host *h, const char *key, const void *expected,
		      size_t expected_len, const void *value, size_t len);
	/* 2.4: a secret while it is held. As secret_register, but the host
	 * forgets the value (and wipes its copy) when its last hold is
	 * released, so that a long-lived runner does not keep the secrets of
	 * everything that ever was. Each secret_hold is ended by one
	 * secret_release of the same value. The values of spec->credentials
	 * need neither: the core holds them while the run lives. */
	void (*secret_hold)(const sr_host *h, const char *value);
	void (*secret_release)(const sr_host *h, const char *value);
	/* 2.6: open path beneath the directory open at dirfd, never outside
	 * it: no "..", no absolute path, no magic link, and, unless
	 * SR_BENEATH_LINKS_INSIDE, no symbolic link on the way or at the
	 * end (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS; where
	 * openat2 is missing, one component at a time with O_NOFOLLOW, which
	 * refuses every link). flags and mode as for openat; O_CLOEXEC is
	 * added. A descriptor, or -1 with errno: EXDEV when the path leads
	 * out or through a link. What a runner opens under a sandbox (the
	 * sandbox writes there) it opens this way. Blocks: call it from
	 * host->work; safe from any thread. */
	int (*open_beneath)(const sr_host *h, int dirfd, const char *path, int flags,
			    unsigned mode, unsigned how);
};

/* sr_host.open_beneath: links that stay beneath the directory are
 * followed (a link in an agent's workspace to another of its files). */
#define SR_BENEATH_LINKS_INSIDE 1u

/* ---------------------------------------------------- provider plugins */

/* Capability flags returned by ops->capabilities. */
#define SR_CAP_REMOTE (1u << 0)           /* sandboxes run on another host */
#define SR_CAP_ISOLATED_SECRETS (1u << 1) /* secrets never reach the sandbox in plain text */
#define SR_CAP_NETWORK_POLICY (1u << 2)   /* network policy is enforced */
#define SR_CAP_PARK_STOPPED (1u << 3)     /* can park a sandbox stopped */
#define SR_CAP_WATCH (1u << 4)            /* offers ops->watch */
#define SR_CAP_SECRET_PORTS (1u << 5)     /* binds a secret to a credential's port (2.5) */

enum sr_network_mode {
	SR_NET_OPEN = 0,      /* no restriction */
	SR_NET_OFF = 1,       /* no network at all */
	SR_NET_ALLOWLIST = 2  /* only the listed CIDRs / hosts */
};

typedef struct sr_network_policy {
	uint32_t size;            /* sizeof(sr_network_policy) */
	int mode;                 /* enum sr_network_mode */
	const char *const *allow; /* CIDRs or host names, for SR_NET_ALLOWLIST */
	size_t n_allow;
} sr_network_policy;

/* Where a credential goes in the sandbox. */
enum sr_credential_target {
	SR_CRED_ENV = 0,    /* an environment variable named name */
	SR_CRED_HEADER = 1  /* an HTTP header named name (a user MCP server's) */
};

/* A secret the sandbox may use only towards exact hosts. A provider with
 * SR_CAP_ISOLATED_SECRETS keeps the value outside the sandbox (which sees
 * a placeholder) and substitutes it in requests to those hosts only. */
typedef struct sr_credential {
	uint32_t size;             /* sizeof(sr_credential) */
	int target;                /* enum sr_credential_target */
	const char *name;          /* env or header name */
	const char *value;
	const char *const *hosts;  /* exact host names, no wildcard */
	size_t n_hosts;
	const char *usage;         /* how the host takes it: "api_key", "bearer" */
	int isolation_required;    /* 1: never in plain text in the sandbox */
	/* Since 2.5: the one port of hosts the value may go to (an operator
	 * allowed "host:port"), or NULL: any. A provider that binds secrets
	 * to ports declares SR_CAP_SECRET_PORTS; for one that does not, the
	 * core refuses such a credential under credential_isolation =
	 * required and reports it (credentials.port_unbound) otherwise. */
	const char *port;
} sr_credential;

typedef struct sr_sandbox_spec {
	uint32_t size;             /* sizeof(sr_sandbox_spec) */
	const char *image;         /* image or snapshot; NULL: the default */
	const sr_pair *env;
	size_t n_env;
	const sr_credential *const *credentials;
	size_t n_credentials;
	const sr_network_policy *network; /* NULL: open */
	const sr_pair *labels;
	size_t n_labels;
} sr_sandbox_spec;

enum sr_park_mode {
	SR_PARK_RUNNING = 0,
	SR_PARK_STOPPED = 1
};

typedef struct sr_exec_spec {
	uint32_t size;            /* sizeof(sr_exec_spec) */
	const char *const *argv;  /* NULL-terminated */
	const sr_pair *env;       /* added to the provider's base environment */
	size_t n_env;
	const char *cwd;          /* NULL: the sandbox's workspace */
	/* Absolute paths on the runner's host the process needs to read (an
	 * adapter's install directory, a runtime, the shim). A provider
	 * without SR_CAP_REMOTE that confines its sandboxes makes them
	 * visible inside, read-only; others ignore them. */
	const char *const *host_paths;
	size_t n_host_paths;
} sr_exec_spec;

/* A mount in a sandbox (sr_provider_ops.mount). */
typedef struct sr_mount_spec {
	uint32_t size;            /* sizeof(sr_mount_spec) */
	const char *const *argv;  /* NULL-terminated; never a secret in it */
	const char *path;         /* the mount point, absolute */
	/* The mounter's environment besides PATH and LANG: its credentials
	 * (secrets: never logged, never written where the sandbox can read
	 * them). */
	const sr_pair *env;
	size_t n_env;
} sr_mount_spec;

/* Duplex byte channel of a process in a sandbox. on_stdout, on_stderr and
 * on_exit mean what they mean in sr_proc_callbacks. on_failed reports a
 * process that could not be started after exec returned (a remote exec),
 * or a channel that was lost; after it nothing else is called. */
typedef struct sr_channel_callbacks {
	uint32_t size; /* sizeof(sr_channel_callbacks) */
	void (*on_stdout)(void *ud, const void *data, size_t len);
	void (*on_stderr)(void *ud, const void *data, size_t len);
	void (*on_exit)(void *ud, int exit_status, int term_signal);
	void (*on_failed)(void *ud, int status, const char *message);
} sr_channel_callbacks;

/* A directory watch: on_event for each name created in or moved into the
 * directory; on_lost when the watch stopped working (the sandbox went
 * away, the connection broke): the caller falls back to polling or
 * watches again. After on_lost nothing else is called. */
typedef struct sr_watch_callbacks {
	uint32_t size; /* sizeof(sr_watch_callbacks) */
	void (*on_event)(void *ud, const char *name);
	void (*on_lost)(void *ud, int status, const char *message);
} sr_watch_callbacks;

/*
 * Every operation takes `self` (the state init returned) and, when it is
 * asynchronous, a request token `req` chosen by the core, unique while the
 * operation runs; ops->cancel(self, req) cancels it (done then runs with
 * SR_ECANCELED). Results (result->json) are documented per operation.
 */
typedef struct sr_provider_ops {
	uint32_t size; /* sizeof(sr_provider_ops) of the plugin */

	/* SR_CAP_* flags. Synchronous and cheap. */
	uint32_t (*capabilities)(void *self);
	/* json: {"id", "workspace", "home"} (absolute paths inside the
	 * sandbox), and for a provider without SR_CAP_REMOTE "root": the
	 * sandbox's directory on the runner's host. A provider with
	 * SR_CAP_ISOLATED_SECRETS adds "placeholders": {binding name: the
	 * placeholder the sandbox sees instead of its value} (since 2.1; the
	 * core puts a header binding's placeholder in the header, and fails
	 * the run when one is missing, rather than send the value). */
	int (*create)(void *self, uint64_t req, const sr_sandbox_spec *spec,
		      sr_done_fn done, void *ud);
	/* Find a sandbox by id (also one created by an earlier runner
	 * process), start it when stopped, converge its network policy
	 * (policy may be NULL: leave it). json as for create. */
	/* ("placeholders" as for create, since 2.1.) */
	int (*reconnect)(void *self, uint64_t req, const char *id,
			 const sr_network_policy *policy, sr_done_fn done,
			 void *ud);
	/* json: {"id", "state"}. SR_ENOTFOUND: the sandbox no longer exists
	 * (it was gone, or a park that failed deleted it instead): the
	 * caller forgets it (the session pointer is removed). */
	int (*park)(void *self, uint64_t req, const char *id, int mode,
		    sr_done_fn done, void *ud);
	/* json (since 2.1, optional): {"cleanup_pending": [names]}: the
	 * sandbox is gone, but what it leased (secrets) could not all be
	 * removed yet; the provider retries (and ops->maintain does), the
	 * core reports a cleanup_pending event. */
	int (*destroy)(void *self, uint64_t req, const char *id,
		       sr_done_fn done, void *ud);

	/* Start a process; its channel is addressed by req until on_exit or
	 * on_failed. SR_OK means a callback of cbs will end the channel; a
	 * negative status means the process did not start and none will. */
	int (*exec)(void *self, uint64_t req, const char *id,
		    const sr_exec_spec *spec, const sr_channel_callbacks *cbs,
		    void *ud);
	int (*channel_write)(void *self, uint64_t req, const void *data,
			     size_t len);
	int (*channel_close_input)(void *self, uint64_t req);
	int (*channel_signal)(void *self, uint64_t req, int signum);

	/* Files; paths are relative to the workspace, or absolute inside
	 * the sandbox. Nothing may resolve outside the sandbox. */
	int (*file_put)(void *self, uint64_t req, const char *id,
			const char *path, const void *data, size_t len,
			uint32_t mode, sr_done_fn done, void *ud);
	/* result data/len: the contents; SR_ETOOBIG past max_len. */
	int (*file_get)(void *self, uint64_t req, const char *id,
			const char *path, size_t max_len, sr_done_fn done,
			void *ud);
	/* json: [{"name","type":"file|dir|link|other","size"}] */
	int (*file_list)(void *self, uint64_t req, const char *id,
			 const char *path, sr_done_fn done, void *ud);
	int (*file_rename)(void *self, uint64_t req, const char *id,
			   const char *from, const char *to, sr_done_fn done,
			   void *ud);
	int (*file_remove)(void *self, uint64_t req, const char *id,
			   const char *path, sr_done_fn done, void *ud);
	int (*file_mkdir)(void *self, uint64_t req, const char *id,
			  const char *path, uint32_t mode, sr_done_fn done,
			  void *ud);

	/* Optional (SR_CAP_WATCH): cbs->on_event for each name created or
	 * moved into path, until ops->cancel(self, req) or cbs->on_lost. */
	int (*watch)(void *self, uint64_t req, const char *id,
		     const char *path, const sr_watch_callbacks *cbs,
		     void *ud);

	int (*cancel)(void *self, uint64_t req);

	/* The sandboxes this provider holds whose labels include all of
	 * labels (n_labels 0: all), for janitors. json: [{"id", "state",
	 * "labels": {name: value}, "created": Unix seconds}] ("created" may
	 * be missing when the provider cannot tell; a janitor then keeps the
	 * sandbox). */
	int (*list)(void *self, uint64_t req, const sr_pair *labels,
		    size_t n_labels, sr_done_fn done, void *ud);
	/* Inspect one sandbox without starting or changing it. json: {"id",
	 * "state": "running" | "stopped" | "starting" | "stopping" | "error"
	 * | ..., "labels": {...}, "network": "open" | "off" | "allowlist"};
	 * SR_ENOTFOUND when there is none. */
	int (*status)(void *self, uint64_t req, const char *id,
		      sr_done_fn done, void *ud);

	/* Since 2.1. Optional: what the provider made for its sandboxes
	 * besides the sandboxes themselves (Daytona: the secrets of
	 * credential bindings and their leases), cleaned up or reported, for
	 * `sandrun janitor` and `sandrun doctor`. params_json:
	 * {"dry_run": bool, "grace_s": N} (a dry run changes nothing). json:
	 * {"items": [{"kind": "secret" | "lease", "name", "sandbox",
	 * "action": "kept" | "deleted" | "would_delete" | "failed" |
	 * "pending" | "foreign", "reason"}]}: "pending" is a cleanup that
	 * failed and is retried, "foreign" something that looks like the
	 * provider's but that no lease of this runner names (never touched).
	 * Safe to run at any time, and twice at once. */
	int (*maintain)(void *self, uint64_t req, const char *params_json,
			sr_done_fn done, void *ud);

	/* ABI 2.3. Optional: run spec->argv with spec->env, a mounter that
	 * mounts a filesystem at spec->path and returns (a FUSE daemon that
	 * forks), so that the mount is seen by every later exec in the
	 * sandbox until unmount or the sandbox stops; done when argv exits
	 * (SR_OK for exit 0; the message carries the end of its stderr).
	 * ops->cancel(req) kills a mounter that has not returned (done then
	 * runs with SR_ECANCELED). spec->path is absolute, in the sandbox's workspace or home, and
	 * made when missing, never through a symbolic link. A provider
	 * without it has one view of the file system for all its execs (a
	 * container), and the core runs the mounter and `fusermount -u`
	 * through exec instead (the credentials then reach the mounter
	 * through a 0600 file that its shell reads and removes). */
	int (*mount)(void *self, uint64_t req, const char *id,
		     const sr_mount_spec *spec, sr_done_fn done, void *ud);
	/* Unmount what mount mounted at path, even when a directory on the
	 * way was renamed since (lazily when it is busy: it goes once its
	 * last user does); SR_ENOTFOUND when nothing it mounted is there.
	 * Never anything but a FUSE mount, never through a symbolic link. */
	int (*unmount)(void *self, uint64_t req, const char *id,
		       const char *path, sr_done_fn done, void *ud);

	/* ABI 2.5. Optional: where this provider's sandboxes live, for a
	 * provider whose sandboxes only some runners reach (the local
	 * provider: "HOST:ROOT", its host and sandbox directory); NULL, or
	 * no slot: every runner with this provider's configuration reaches
	 * them. Synchronous and cheap; the string is the plugin's, valid
	 * until fini. The core records it with a session, and a runner
	 * whose provider answers another place does not reconnect (or
	 * forget) that session's sandbox: it refuses the turn as
	 * session_elsewhere. */
	const char *(*locality)(void *self);
} sr_provider_ops;

/* ------------------------------------------------------ tunnel plugins */

typedef struct sr_tunnel_ops {
	uint32_t size; /* sizeof(sr_tunnel_ops) of the plugin */

	/* Start the tunnel agent, or attach to a running one. */
	int (*start)(void *self, uint64_t req, sr_done_fn done, void *ud);
	/* Make a runner-side URL reachable; json: {"url": "https://..."} */
	int (*resolve)(void *self, uint64_t req, const char *local_url,
		       sr_done_fn done, void *ud);
	/* Optional: enrol a sandbox (per-run keys, groups, policies).
	 * params_json is operation-specific; json: what the sandbox needs.
	 * A run enrols its sandbox when resolve said "enrolment": true, with
	 * params {"ports": [the runner ports it reaches], "runner": id}, and
	 * uses two fields of the answer: "setup_key" (a secret the core puts
	 * in a 0600 file in the sandbox, outside its workspace, and removes
	 * once used) and "command" (the argv that joins the sandbox, run in
	 * it once the file is there; an argument "{setup_key_file}" becomes
	 * the file's path). Then it enrols again with {"verify": true} until
	 * that answers SR_OK (a bounded number of times), and releases the
	 * sandbox when the turn ends. */
	int (*enrol)(void *self, uint64_t req, const char *sandbox_id,
		     const char *params_json, sr_done_fn done, void *ud);
	/* Release everything this plugin created (for one sandbox when
	 * sandbox_id is not NULL). */
	int (*release)(void *self, uint64_t req, const char *sandbox_id,
		       sr_done_fn done, void *ud);
	/* Probe a route; json: {"ok": true, "status": N} */
	int (*probe)(void *self, uint64_t req, const char *url,
		     sr_done_fn done, void *ud);
	int (*cancel)(void *self, uint64_t req);

	/* ABI 2.2. Optional: every enrolment this plugin holds a record of
	 * (for `sandrun janitor`); json: {"items": [{"sandbox", "name",
	 * "created": unix seconds, "runner": the "runner" of enrol's
	 * params}]}. enrol's params carry "runner" (the runner's id) for
	 * this. */
	int (*enrolments)(void *self, uint64_t req, sr_done_fn done, void *ud);
} sr_tunnel_ops;

/* ----------------------------------------------------- harness plugins */

/* Tool delivery a harness supports (in describe's "tools" array too). */
#define SR_TOOLS_MCP_STDIO (1u << 0)
#define SR_TOOLS_MCP_HTTP (1u << 1)
#define SR_TOOLS_RELAY_EXTENSION (1u << 2)

typedef struct sr_harness_ops {
	uint32_t size; /* sizeof(sr_harness_ops) of the plugin */

	/* Synchronous: *json is set to a malloc'd JSON object (the core
	 * frees it): {"command":[...], "credential_env":[...], "tools":[...],
	 * ...} (doc/plugin-abi.md lists the fields). */
	int (*describe)(void *self, char **json);
	/* run_json describes the run; result json: {"files":[{"path",
	 * "content", "mode"}], "env":[{"name","value"}]} for the core to
	 * apply. */
	int (*prepare)(void *self, uint64_t req, const char *run_json,
		       sr_done_fn done, void *ud);
	/* Synchronous: *json is set to a malloc'd JSON array, the ACP
	 * mcpServers of the run (the core frees it). */
	int (*mcp_servers)(void *self, const char *run_json, char **json);
	/* Synchronous; 1 if this ACP session/request_permission params
	 * object is one the harness raised for a platform tool. */
	int (*is_own_permission)(void *self, const char *request_json);
	int (*cancel)(void *self, uint64_t req);
} sr_harness_ops;

/* ---------------------------------------------------------- descriptor */

typedef struct sr_plugin_descriptor {
	uint32_t abi_major;   /* SR_ABI_MAJOR at build time */
	uint32_t abi_minor;   /* SR_ABI_MINOR at build time */
	uint32_t size;        /* sizeof(sr_plugin_descriptor) */
	uint32_t kind;        /* enum sr_plugin_kind */
	const char *name;     /* [a-z0-9_-]{1,32}, unique per kind */
	const char *version;  /* the plugin's own version */
	const char *description; /* one line */
	const void *ops;      /* sr_provider_ops, sr_tunnel_ops or
	                         sr_harness_ops, by kind */
	/* Keys the plugin reads from its section, NULL-terminated; others
	 * draw an "unknown key" warning. NULL: accept any. */
	const char *const *config_keys;
	/* Create the plugin's state. The host table outlives it. Return
	 * SR_OK and set *self, or a negative status after logging why. */
	int (*init)(const sr_host *host, void **self);
	void (*fini)(void *self);
	/* Optional: is the plugin usable here (binaries present, service
	 * reachable)? Under the completion rule; json:
	 * {"ok":bool,"detail":"..."}, and "warn": true when usable with a
	 * caveat the detail names (doctor prints warn, not ok). */
	int (*doctor)(void *self, sr_done_fn done, void *ud);
} sr_plugin_descriptor;

/* The one symbol a plugin exports:
 *
 *   SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
 */
typedef const sr_plugin_descriptor *(*sr_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* SANDRUN_PLUGIN_H */
