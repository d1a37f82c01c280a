/* The Daytona provider's insides, shared by its files: daytona.c (init,
 * capabilities, cancel, the descriptor), api.c (HTTP calls through the
 * host table, errors, operations and their lifecycle), sandbox.c (create,
 * reconnect, park, destroy, list, status, doctor), files.c (the toolbox's
 * file calls), exec.c (processes through toolbox sessions, and watch),
 * secrets.c (credential bindings as Daytona secrets, their leases, the
 * release of both, maintain), lease.c (the pure parts of those: checks,
 * names, the lease record). */
#ifndef SR_DAYTONA_H
#define SR_DAYTONA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "sandrun/plugin.h"

#define DY_DEFAULT_URL "https://app.daytona.io/api"
#define DY_DEFAULT_SECRET_PREFIX "sandrun"
#define DY_DEFAULT_PLACEHOLDER_PREFIX "dtn_secret_"
/* The label naming a sandbox's lease, and the kv keys of leases. */
#define DY_LEASE_LABEL "sandrun.lease"
#define DY_LEASE_KEY "lease."

/* A sandbox's toolbox base URL, cached from its record. */
typedef struct dy_box {
	char *id;
	char *toolbox; /* {toolboxProxyUrl}/{id} */
	char *home, *workspace; /* absolute, inside the sandbox; NULL: not asked yet */
	struct dy_box *next;
} dy_box;

typedef struct dy dy;
typedef struct dy_op dy_op;
typedef struct dy_chan dy_chan;
typedef struct dy_sec dy_sec;

struct dy {
	const sr_host *host;
	char *api_url;       /* without a trailing '/' */
	char *api_key;       /* wiped on free */
	char *target, *snapshot;
	char *workspace, *home; /* configured, or NULL: from the toolbox */
	long auto_stop_minutes;
	uint64_t start_timeout_ms;   /* create/start: until 'started' */
	uint64_t request_timeout_ms; /* one API call */
	uint64_t stream_idle_ms;     /* a followed log without a byte */
	uint64_t destroy_timeout_ms;
	uint64_t stable_timeout_ms;  /* park: a stable state (10 s) */
	uint64_t poll_ms;            /* park's poll interval (250 ms) */
	dy_box *boxes;
	dy_op *ops;
	dy_chan *chans;
	struct dy_ff *ffs;   /* best-effort calls in flight */
	int closing;
	/* credential bindings as Daytona secrets */
	int secrets_on;            /* [provider.daytona] secrets (default on) */
	char *secret_prefix;       /* secret names: <prefix>_<lease>_<n> */
	char *placeholder_prefix;  /* what Daytona's placeholders start with */
	char instance[33];         /* this plugin instance, in lease owners */
};

/* One API response, borrowed by the step it is handed to. */
typedef struct dy_resp {
	int status;        /* SR_OK: an answer came (any HTTP status) */
	int http;          /* the HTTP status, 0 without an answer */
	json_t *json;      /* the body parsed, or NULL */
	const char *body;  /* raw body (NUL-terminated copy) */
	size_t len;
	const char *why;   /* transport failure text, or the body's message */
} dy_resp;

typedef void (*dy_step)(dy_op *op, const dy_resp *r);

enum dy_kind {
	DY_CREATE, DY_RECONNECT, DY_PARK, DY_DESTROY, DY_LIST, DY_STATUS,
	DY_FILE, DY_DOCTOR, DY_AUX, DY_MAINTAIN,
	DY_RETRY /* a lease's cleanup tried again in the background */
};

/* One provider operation: a chain of API calls and timers, ending in
 * exactly one call of done (op_finish), never from inside the call that
 * started it. */
struct dy_op {
	dy *d;
	int kind;
	uint64_t req;
	char *id;             /* the sandbox's id, or NULL */
	sr_done_fn done;
	void *ud;
	sr_http_call *call;   /* the API call in flight */
	sr_timer *timer;      /* a wait in progress */
	dy_step next;         /* the step a call or a wait goes on with */
	const char *what;     /* "POST /sandbox/ID/stop" of the call in flight */
	char what_buf[320];
	uint64_t started_ms, deadline_ms;
	uint64_t delay_ms;    /* the next backoff */
	int attempts;
	int in_call;          /* inside the ABI call that started the op */
	int canceled;
	int start_rc;         /* a call that could not be sent while in_call */
	int zombie;           /* finished while in_call: freed by dy__op_start */
	dy_step after_toolbox;
	/* operation state */
	json_t *body;         /* create: the request; others: scratch */
	json_t *rec;          /* the sandbox's last record */
	json_t *acc;          /* list: items gathered so far */
	char *path, *path2;
	size_t max;
	uint32_t mode;
	int park_mode;
	int has_policy;
	int net_block;
	char *net_cidrs, *net_domains; /* comma-separated, sorted */
	char *last_state;
	int fell_back;        /* park: deleting instead */
	int err_status;       /* the failure a clean-up delete reports */
	char first_error[512];
	void *xdata;           /* an operation's own data, freed by xfree */
	void (*xfree)(void *);
	dy_sec *sec;           /* secrets and leases (secrets.c), or NULL */
	int released;          /* the deleted sandbox's leases were released */
	char lease_hint[40];   /* the sandbox's sandrun.lease label, if seen */
	dy_op *next_op;
};

struct dy_chan {
	dy *d;
	uint64_t req;
	char *id, *toolbox;
	char sid[40], cid[96];
	sr_channel_callbacks cbs;
	void *ud;
	dy_op *setup;             /* the internal call in flight */
	sr_http_call *stream;     /* the followed log */
	sr_http_call *wcall;      /* the input POST in flight */
	sr_timer *wtimer;         /* an input POST waiting to be tried again */
	int w409;                 /* 409s in a row: the command not started yet */
	sr_timer *timer;
	sr_timer *ptimer;         /* the wait before the next read of the log */
	unsigned idle_ms;         /* that wait: doubles while nothing comes */
	char *command;            /* exec: the shell command; watch: the dir */
	char *cwd;                /* exec: the asked directory, or NULL */
	uint64_t delivered, skip; /* stdout bytes given out; to skip when read again */
	int stream_http, progress, stream_clean;
	int final_read;           /* the exit is known: this read is the last */
	int reattach_fails;
	int ended, ending, ending_status;
	char *ending_msg;
	int input_closed, exit_code, have_exit;
	int pending_signal;       /* asked for before the command started */
	char *err;                /* the tail of the process's stderr */
	size_t n_err;
	/* writes, one POST at a time, in order */
	struct dy_wbuf *wq, **wq_tail;
	char *line;               /* input held until its newline */
	size_t n_line;
	int is_watch;
	sr_watch_callbacks wcbs;
	json_t *seen;
	dy_chan *next;
};

/* api.c */
uint64_t dy__now_ms(void);
char *dy__urlenc(const char *s);
char *dy__shq(const char *s);
int dy__http_error(int http);
const char *dy__body_message(json_t *j);
dy_op *dy__op_new(dy *d, int kind, uint64_t req, const char *id,
		  sr_done_fn done, void *ud);
void dy__op_free(dy_op *op);
int dy__op_start(dy_op *op, int rc);
void dy__op_finish(dy_op *op, int status, const char *json, const void *data,
		   size_t len, const char *fmt, ...) SR_PRINTF(6, 7);
void dy__op_fail(dy_op *op, const dy_resp *r);
int dy__api(dy_op *op, const char *method, const char *url,
	    const char *ctype, const void *body, size_t len, size_t max,
	    dy_step next);
int dy__api_json(dy_op *op, const char *method, const char *url, json_t *body,
		 dy_step next);
char *dy__url(const dy *d, const char *fmt, ...) SR_PRINTF(2, 3);
int dy__wait(dy_op *op, uint64_t ms, dy_step next);
void dy__op_cancel(dy_op *op);
int dy__complete_now(const dy *d, sr_done_fn done, void *ud, int status,
		     const char *fmt, ...) SR_PRINTF(5, 6);
const char *dy__box_toolbox(dy *d, const char *id);
void dy__box_set(dy *d, const char *id, json_t *rec);
void dy__box_forget(dy *d, const char *id);
int dy__with_toolbox(dy_op *op, dy_step next);
int dy__http_fail_status(int http, const char *why);
void dy__headers(const dy *d, sr_pair *h, size_t *n, const char *ctype);
char *dy__path_in_box(dy *d, const char *id, const char *path);
dy_box *dy__box(dy *d, const char *id);
int dy__ensure_home(dy_op *op, dy_step next);
int dy__fire_and_forget(dy *d, const char *method, const char *url,
			json_t *body);
void dy__ff_cancel_all(dy *d);

/* sandbox.c */
int dy__create(void *self, uint64_t req, const sr_sandbox_spec *spec,
	       sr_done_fn done, void *ud);
int dy__reconnect(void *self, uint64_t req, const char *id,
		  const sr_network_policy *policy, sr_done_fn done, void *ud);
int dy__park(void *self, uint64_t req, const char *id, int mode,
	     sr_done_fn done, void *ud);
int dy__destroy(void *self, uint64_t req, const char *id, sr_done_fn done,
		void *ud);
int dy__list(void *self, uint64_t req, const sr_pair *labels, size_t n_labels,
	     sr_done_fn done, void *ud);
int dy__status(void *self, uint64_t req, const char *id, sr_done_fn done,
	       void *ud);
int dy__doctor(void *self, sr_done_fn done, void *ud);
const char *dy__state_name(const char *daytona_state);

/* files.c */
int dy__file_put(void *self, uint64_t req, const char *id, const char *path,
		 const void *data, size_t len, uint32_t mode, sr_done_fn done,
		 void *ud);
int dy__file_get(void *self, uint64_t req, const char *id, const char *path,
		 size_t max_len, sr_done_fn done, void *ud);
int dy__file_list(void *self, uint64_t req, const char *id, const char *path,
		  sr_done_fn done, void *ud);
int dy__file_rename(void *self, uint64_t req, const char *id,
		    const char *from, const char *to, sr_done_fn done,
		    void *ud);
int dy__file_remove(void *self, uint64_t req, const char *id,
		    const char *path, sr_done_fn done, void *ud);
int dy__file_mkdir(void *self, uint64_t req, const char *id, const char *path,
		   uint32_t mode, sr_done_fn done, void *ud);

/* lease.c: pure, no host call */
int dy__valid_id(const char *id);
int dy__prefix_valid(const char *s);
int dy__env_name_valid(const char *s);
int dy__secret_name(char *buf, size_t n, const char *prefix, const char *lease_id,
		    size_t i);
int dy__cred_check(const sr_credential *c, size_t i, char *why, size_t n);
int dy__secret_check(json_t *rec, const char *name, const char *host,
		     const char *ph_prefix, char *why, size_t n);
json_t *dy__lease_new(const char *id, const char *prefix, const char *runner,
		      json_t *owner, long long now);
int dy__lease_plan(json_t *lease, const char *name, const char *binding, int header,
		   const char *env, const char *host);
json_t *dy__lease_secret(json_t *lease, const char *name);
const char *dy__lease_str(json_t *j, const char *key);
json_t *dy__lease_placeholders(json_t *lease);
int dy__lease_parse(const char *text, size_t len, json_t **out, char *why, size_t n);

/* secrets.c */
int dy__sec_plan(dy *d, const sr_sandbox_spec *spec, dy_sec **out, char *why,
		 size_t n);
const char *dy__sec_lease_id(const dy_sec *sec);
int dy__sec_start(dy_op *op, int (*post_sandbox)(dy_op *op));
void dy__sec_box_created(dy_op *op, const char *sandbox_id);
void dy__sec_failed(dy_op *op, int status, const char *fmt, ...) SR_PRINTF(3, 4);
void dy__sec_abort(dy_op *op);
void dy__sec_abandon(dy_op *op, const char *why);
json_t *dy__sec_placeholders(dy_op *op);
void dy__sec_release_box(dy_op *op, void (*then)(dy_op *op));
void dy__sec_note(const dy_op *op, char *buf, size_t n);
json_t *dy__sec_pending(const dy_op *op);
void dy__sec_end(dy_op *op);
void dy__sec_free(dy_sec *sec);
int dy__maintain(void *self, uint64_t req, const char *params_json, sr_done_fn done,
		 void *ud);
void dy__sec_doctor(dy *d, char *buf, size_t n);

/* exec.c */
int dy__exec(void *self, uint64_t req, const char *id,
	     const sr_exec_spec *spec, const sr_channel_callbacks *cbs,
	     void *ud);
int dy__channel_write(void *self, uint64_t req, const void *data, size_t len);
int dy__channel_close_input(void *self, uint64_t req);
int dy__channel_signal(void *self, uint64_t req, int signum);
int dy__watch(void *self, uint64_t req, const char *id, const char *path,
	      const sr_watch_callbacks *cbs, void *ud);
int dy__chan_cancel(dy *d, uint64_t req);
void dy__chans_end(dy *d, const char *id, const char *why);
void dy__chans_free(dy *d);

#endif
