/* The runner's configuration: an INI file (libinih) with environment
 * overrides SANDRUN_<SECTION>_<KEY> (section dots and dashes as
 * underscores, upper case). */
#ifndef SR_CORE_CONF_H
#define SR_CORE_CONF_H

#include <stddef.h>

typedef struct sr__config sr__config;

sr__config *sr__config_new(void);
void sr__config_free(sr__config *c);

/* Parse path. A missing file is SR_ENOTFOUND (the caller decides whether
 * that is an error); a syntax error or an invalid [runner] value is
 * SR_EINVAL after one log line naming file, line, key and value. */
int sr__config_load(sr__config *c, const char *path);
const char *sr__config_path(const sr__config *c);
/* The file read, or NULL (built-in defaults). */
const char *sr__config_file(const sr__config *c);

/* The value of section/key: the environment override when set, else the
 * file's, else NULL. Borrowed. */
const char *sr__config_get(const sr__config *c, const char *section,
			   const char *key);
/* Where section/key came from: "FILE:LINE", "environment NAME" or
 * "default". Writes into buf. */
const char *sr__config_origin(const sr__config *c, const char *section,
			      const char *key, char *buf, size_t n);
/* Log "ORIGIN: [section] key 'key': invalid value 'value': why"; returns
 * SR_EINVAL. */
int sr__config_invalid(const sr__config *c, const char *section,
		       const char *key, const char *why);
/* Warn once per key of section that is not in known (NULL-terminated).
 * Returns how many were unknown. */
int sr__config_warn_unknown(const sr__config *c, const char *section,
			    const char *const *known);
/* Warn about sections that are neither [runner] nor KIND.NAME for a
 * loaded plugin; is_known(section, ud) decides. */
int sr__config_warn_sections(const sr__config *c,
			     int (*is_known)(const char *section, void *ud),
			     void *ud);

/* Whether the files of a and b give section the same keys and values
 * (the environment, the same for both, is not compared). */
int sr__config_same_section(const sr__config *a, const sr__config *b,
			    const char *section);

/* "SANDRUN_PROVIDER_LOCAL_ROOT" for ("provider.local", "root"); malloc'd. */
char *sr__config_env_name(const char *section, const char *key);

/* Parsed [runner] values with their defaults. */
typedef struct sr__runner_conf {
	const char *provider;   /* default "local" */
	const char *tunnel;     /* NULL: none */
	const char *harnesses;  /* comma-separated, default "claude" */
	const char *plugin_dir; /* colon-separated */
	const char *state_dir;
	const char *node_dir;   /* NULL: STATE_DIR/harness/node */
	int log_level;
	const char *mcp_allow_hosts; /* comma-separated host names, or "" */
	const char *callback_allow_hosts; /* the same, for tool callbacks */
	unsigned callback_concurrency; /* tool callbacks at once per host:port */
	int tool_latency_low;   /* tool_latency = low: hold a CPU latency request */
	const char *id;         /* NULL: made once, kept in STATE_DIR/runner-id */
	int relay_via_provider; /* relay_transport = provider */
	const char *remote_harness_dir; /* adapters in a remote sandbox */
	int credential_isolation; /* enum sr__isolation (core/run/creds.h) */
	const char *secrets_allow_hosts; /* [secrets] allow_hosts, or "" */
	const char *store_url;  /* [store] url, or "": SQLite in state_dir */
	const char *ca_file;    /* CAs the HTTP client trusts, or NULL: the system's */
} sr__runner_conf;

/* Parsed [service] values (sandrund) with their defaults. */
typedef struct sr__service_conf {
	const char *listen;      /* "HOST:PORT" or "unix:PATH"; default
				  * 127.0.0.1:8470 */
	const char *tokens_file; /* bearer tokens, one a line; NULL: none */
	size_t max_body;         /* request body cap, bytes; default 1 MiB */
	unsigned max_runs;       /* runs at once; default 8 */
	unsigned event_buffer;   /* events kept per run; default 10000 */
	unsigned runs_kept;      /* ended runs kept for GET and replay;
				  * default 1000 */
	unsigned drain_timeout_s; /* at a stop, how long runs going on may
				   * finish before they are cancelled;
				   * default 60 */
	unsigned warm_live_s;    /* after a clean turn, how long its sandbox
				  * stays parked running for the next turn;
				  * 0: parked stopped at once; default 120 */
	unsigned max_warm;       /* sandboxes parked running at once, per
				  * provider; default 20 */
	unsigned warm_ttl_s;     /* a sandbox parked stopped by the pool is
				  * destroyed this long after; 0: never
				  * (the default) */
	unsigned lease_ttl_s;    /* a session's lease lasts this long past
				  * its holder's last heartbeat (sent every
				  * third of it); default 30 */
	unsigned max_client_connections; /* connections at once from one
					  * address (TCP); default 256 */
	unsigned header_timeout_s; /* a request's headers must all come
				    * within it; default 10 */
	unsigned janitor_interval_s; /* [janitor] interval: sandrund sweeps
				      * what no run or session holds; 0: no;
				      * default 600 */
	const char *janitor_program; /* [janitor] program: the sandrun command
				      * it runs; NULL: the one beside sandrund */
	const char *janitor_grace;   /* [janitor] grace: its --grace, or NULL
				      * (the command's default, 2h) */
	const char *model_hosts; /* hosts (HOST or HOST:PORT, comma-separated)
				  * a request's model.url may name without
				  * credentials of its own; "" none */
} sr__service_conf;

/* Fill sc from [service], validating each value (SR_EINVAL on the first
 * invalid one, logged with where it was set) and warning about unknown
 * keys. */
int sr__config_service(const sr__config *c, sr__service_conf *sc);

/* Whether id can name a runner: 1 to 40 of [a-z0-9_-]. */
int sr__runner_id_valid(const char *id);

/* Fill rc from [runner], validating each value (SR_EINVAL on the first
 * invalid one, logged). */
int sr__config_runner(const sr__config *c, sr__runner_conf *rc);

#endif
