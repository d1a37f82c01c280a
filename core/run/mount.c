/* Storage mounts (core/run/mount.h): one job steps through the mounts,
 * each step an asynchronous operation whose answer moves it on. */
#include <ctype.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "core/host/conf.h"
#include "core/host/log.h"
#include "core/host/proc.h"
#include "core/host/status.h"
#include "core/plugins/provider.h"
#include "core/run/mount.h"

#define CREDS_MAX 8192
#define CREDS_TIMEOUT_MS 30000

/* Through exec (a provider without a mount operation), the mounter's
 * shell: the credentials file into the environment, the file gone, the
 * mount point made, then the mounter (bounded: a FUSE mounter returns
 * once mounted, its daemon lives on). */
static const char mount_script[] =
	"f=$1 p=$2; shift 2; set -a; . \"$f\"; r=$?; set +a; rm -f \"$f\"; "
	"[ $r -eq 0 ] || { echo \"cannot read the credentials file\" >&2; exit 1; }; "
	"mkdir -p \"$p\" && exec timeout 120 \"$@\"";
static const char check_script[] =
	"mountpoint -q \"$1\" || { echo \"$1 is not a mount point\" >&2; exit 1; }; "
	"timeout 20 ls -A \"$1\" >/dev/null";
/* Only a FUSE mount (or one whose daemon died: stat fails); plainly
 * first, lazily when busy. 32: nothing of ours is there. */
static const char unmount_script[] =
	"t=$(stat -f -c %T \"$1\" 2>/dev/null) || t=dead; "
	"case $t in fuse*|dead) ;; *) exit 32 ;; esac; "
	"timeout 30 fusermount -u \"$1\" 2>/dev/null || fusermount -u -z \"$1\" 2>/dev/null || "
	"fusermount3 -u -z \"$1\" 2>/dev/null || umount -l \"$1\" 2>/dev/null || "
	"{ [ $t = dead ] && [ ! -e \"$1\" ] && exit 32; echo \"cannot unmount $1\" >&2; exit 1; }";

enum step { S_START, S_STALE, S_CREDS, S_DIR, S_PUT, S_MOUNT, S_CLEAN, S_CHECK, S_UNMOUNT };

/* The credentials' names in the mounter's environment: s3fs's, then the
 * AWS SDK's (geesefs). */
static const char *const cred_names[3][2] = {
	{ "AWSACCESSKEYID", "AWS_ACCESS_KEY_ID" },
	{ "AWSSECRETACCESSKEY", "AWS_SECRET_ACCESS_KEY" },
	{ "AWSSESSIONTOKEN", "AWS_SESSION_TOKEN" },
};

struct sr__mount_job {
	sr__ctx *ctx;
	sr__plugin *provider;
	int via_op;                /* the provider mounts (ABI 2.3) */
	char *sandbox, *workspace, *home, *s3_url;
	const char *mounter, *region, *creds_cmd;
	sr__mount_target t[SR__MOUNT_MAX];
	char *down[SR__MOUNT_MAX];
	size_t n, i;
	enum step step;
	int cancelled, finished;
	int status;                /* a failure kept over S_CLEAN; down: the
				    * last unmount that failed */
	char abs[1300];            /* the current mount point */
	char envfile[1300];
	char *out;                 /* the credentials command's stdout */
	size_t out_len;
	char *cred[3];             /* key id, secret, session token or NULL */
	sr__secret_holds *secrets; /* the box's: its credentials held there */
	char err[1024];            /* the current process's stderr, its end */
	size_t err_len;
	char msg[2048];
	sr_proc *proc;
	uint64_t chan;             /* the exec in flight, or 0 */
	uint64_t op_req;           /* the provider's mount in flight, or 0 */
	uv_timer_t timer;
	sr__mount_event_fn event;
	sr__mount_done_fn done;
	void *ud;
};

static void step(sr__mount_job *j);

/* ------------------------------------------------------------ parsing */

static int valid_bucket(const char *b, size_t n)
{
	if (n < 3 || n > 63 || !isalnum((unsigned char)b[0]) || !isalnum((unsigned char)b[n - 1]))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)b[i]) || isdigit((unsigned char)b[i]) || b[i] == '.' ||
		      b[i] == '-'))
			return 0;
	return 1;
}

/* No empty, '.' or '..' component, nothing but printable characters. */
static int valid_components(const char *s)
{
	const char *p = s;

	for (const char *c = s; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f || *c == '\\')
			return 0;
	while (*p) {
		size_t l = strcspn(p, "/");
		if (l == 0 || (l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += l;
		if (*p == '/')
			p++;
	}
	return 1;
}

int sr__mount_parse(const char *arg, sr__mount_target *t, char *why, size_t n)
{
	const char *b, *colon, *slash, *path;
	size_t bl, pl;

	memset(t, 0, sizeof(*t));
	if (strncmp(arg, "s3://", 5) != 0 || !(colon = strrchr(arg + 5, ':'))) {
		snprintf(why, n, "--mount '%s': expected s3://BUCKET/PREFIX:PATH", arg);
		return SR_EINVAL;
	}
	b = arg + 5;
	slash = memchr(b, '/', (size_t)(colon - b));
	bl = (size_t)((slash ? slash : colon) - b);
	if (!valid_bucket(b, bl)) {
		snprintf(why, n, "--mount '%s': '%.*s' is not a bucket name (3 to 63 of a-z, 0-9, "
			 "'.' and '-', starting and ending with a letter or digit)", arg, (int)bl, b);
		return SR_EINVAL;
	}
	memcpy(t->bucket, b, bl);
	if (slash) {
		const char *pre = slash + 1;
		pl = (size_t)(colon - pre);
		while (pl && pre[pl - 1] == '/')
			pl--;
		if (pl >= sizeof(t->prefix)) {
			snprintf(why, n, "--mount '%s': the prefix is longer than %zu bytes", arg,
				 sizeof(t->prefix) - 1);
			return SR_EINVAL;
		}
		memcpy(t->prefix, pre, pl);
		if (pl && !valid_components(t->prefix)) {
			snprintf(why, n, "--mount '%s': the prefix has an empty, '.' or '..' part, or a "
				 "control character", arg);
			return SR_EINVAL;
		}
		if (t->prefix[0] == '-') {
			snprintf(why, n, "--mount '%s': the prefix starts with '-' (it would read as an "
				 "option of the credentials command)", arg);
			return SR_EINVAL;
		}
	}
	path = colon + 1;
	if (!*path || strlen(path) >= sizeof(t->path) ||
	    !valid_components(path[0] == '/' ? path + 1 : path) || strcmp(path, "/") == 0) {
		snprintf(why, n, "--mount '%s': the path '%s' is not a directory in the sandbox "
			 "(relative to the workspace, or absolute; no '.' or '..' part)", arg, path);
		return SR_EINVAL;
	}
	snprintf(t->path, sizeof(t->path), "%s", path);
	return SR_OK;
}

int sr__mount_config(sr__ctx *ctx, const char **endpoint, char *why, size_t n)
{
	static const char *const keys[] = { "endpoint", "mounter", "credentials_command",
					    "region", NULL };
	const char *m = sr__config_get(ctx->config, "mount", "mounter");
	const char *cmd = sr__config_get(ctx->config, "mount", "credentials_command");
	const char *ep = sr__config_get(ctx->config, "mount", "endpoint");

	sr__config_warn_unknown(ctx->config, "mount", keys);
	*endpoint = ep && *ep ? ep : "s3";
	if (m && strcmp(m, "s3fs") != 0 && strcmp(m, "geesefs") != 0) {
		snprintf(why, n, "[mount] mounter: '%s' is not s3fs or geesefs", m);
		return SR_EINVAL;
	}
	if (!cmd || !*cmd) {
		snprintf(why, n, "--mount needs [mount] credentials_command: a program that prints "
			 "short-lived credentials for a bucket and prefix (see sandrun.conf(5))");
		return SR_EINVAL;
	}
	if (cmd[0] != '/') {
		snprintf(why, n, "[mount] credentials_command: '%s' is not an absolute path", cmd);
		return SR_EINVAL;
	}
	return SR_OK;
}

/* ------------------------------------------------------------ the job */

static void wipe(char *s)
{
	if (s)
		memset(s, 0, strlen(s));
}

static void forget_creds(sr__mount_job *j)
{
	for (int k = 0; k < 3; k++) {
		wipe(j->cred[k]);
		free(j->cred[k]);
		j->cred[k] = NULL;
	}
	if (j->out)
		memset(j->out, 0, j->out_len);
	free(j->out);
	j->out = NULL;
	j->out_len = 0;
}

static void on_closed(uv_handle_t *h)
{
	sr__mount_job *j = h->data;

	for (size_t i = 0; i < j->n; i++)
		free(j->down[i]);
	forget_creds(j);
	free(j->sandbox);
	free(j->workspace);
	free(j->home);
	free(j->s3_url);
	free(j);
}

static void finish(sr__mount_job *j, int status, const char *message)
{
	j->finished = 1;
	uv_timer_stop(&j->timer);
	forget_creds(j);
	j->done(j->ud, status, message);
	uv_close((uv_handle_t *)&j->timer, on_closed);
}

/* j->msg with every registered secret replaced. */
static void redact_msg(sr__mount_job *j)
{
	char *r = sr__redact(j->msg);

	if (r) {
		snprintf(j->msg, sizeof(j->msg), "%s", r);
		free(r);
	}
}

/* The failure of the current mount, in j->msg. A credentials file that
 * may be in the sandbox is removed first (S_CLEAN), then the job ends. */
static void fail(sr__mount_job *j, int status, const char *fmt, ...) SR_PRINTF(3, 4);
static void fail(sr__mount_job *j, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(j->msg, sizeof(j->msg), fmt, ap);
	va_end(ap);
	redact_msg(j);
	if (!j->via_op && (j->step == S_PUT || j->step == S_MOUNT)) {
		j->status = status;
		j->step = S_CLEAN;
		step(j);
		return;
	}
	finish(j, status, j->msg);
}

static void emit(sr__mount_job *j, json_t *ev)
{
	if (ev && j->event)
		j->event(j->ud, ev);
	json_decref(ev);
}

static void tail_add(sr__mount_job *j, const void *data, size_t len)
{
	sr__text_append(j->err, sizeof(j->err), &j->err_len, data, len);
}

/* The end of the current process's stderr, one line, for a message. */
static const char *tail(sr__mount_job *j)
{
	sr__text_one_line(j->err, &j->err_len);
	return j->err_len ? j->err : "(nothing on stderr)";
}

/* One operation landed: the next step, or the end. */
static void landed(sr__mount_job *j, int status, const char *message);

static void on_result(void *ud, const sr_result *res)
{
	sr__mount_job *j = ud;

	j->op_req = 0;
	landed(j, res->status, res->message);
}

static void on_ch_err(void *ud, const void *data, size_t len)
{
	tail_add(ud, data, len);
}

static void on_ch_out(void *ud, const void *data, size_t len)
{
	(void)ud;
	(void)data;
	(void)len;
}

static void on_ch_exit(void *ud, int status, int sig)
{
	sr__mount_job *j = ud;

	j->chan = 0;
	if (sig)
		landed(j, j->cancelled ? SR_ECANCELED : SR_EIO, "killed by a signal");
	else
		landed(j, status == 0 ? SR_OK : status == 32 ? SR_ENOTFOUND : SR_EIO, NULL);
}

static void on_ch_failed(void *ud, int status, const char *message)
{
	sr__mount_job *j = ud;

	j->chan = 0;
	tail_add(j, message, message ? strlen(message) : 0);
	landed(j, status < 0 ? status : SR_EIO, message);
}

/* argv through the provider's exec, stdin closed at once. */
static int exec_in_box(sr__mount_job *j, const char *const *argv)
{
	static const sr_channel_callbacks cbs = { sizeof(cbs), on_ch_out, on_ch_err, on_ch_exit,
						  on_ch_failed };
	sr_exec_spec spec = { sizeof(spec), argv, NULL, 0, NULL, NULL, 0 };
	uint64_t req = sr__next_req();
	int rc = sr__provider_exec(j->provider, req, j->sandbox, &spec, &cbs, j);

	if (rc == SR_OK) {
		j->chan = req;
		(void)sr__provider_channel_close_input(j->provider, req);
	}
	return rc;
}

/* --------------------------------------------------------- credentials */

static void creds_out(void *ud, const void *data, size_t len)
{
	sr__mount_job *j = ud;
	char *g;

	if (j->out_len + len > CREDS_MAX)
		len = j->out_len < CREDS_MAX ? CREDS_MAX - j->out_len : 0;
	if (!len || !data || !(g = realloc(j->out, j->out_len + len + 1)))
		return;
	j->out = g;
	memcpy(j->out + j->out_len, data, len);
	j->out_len += len;
	j->out[j->out_len] = 0;
}

static void creds_err(void *ud, const void *data, size_t len)
{
	tail_add(ud, data, len);
}

static void creds_exit(void *ud, int status, int sig)
{
	sr__mount_job *j = ud;
	char how[64];

	j->proc = NULL;
	uv_timer_stop(&j->timer);
	if (j->cancelled) {
		landed(j, SR_ECANCELED, NULL);
		return;
	}
	if (sig || status != 0) {
		if (j->err_len)
			(void)tail(j); /* one line, no trailing blank */
		snprintf(how, sizeof(how), "%s(%s %d)", j->err_len ? " " : "",
			 sig ? "signal" : "exit status", sig ? sig : status);
		tail_add(j, how, strlen(how));
		landed(j, SR_EIO, NULL);
		return;
	}
	landed(j, SR_OK, NULL);
}

static void creds_timeout(uv_timer_t *t)
{
	sr__mount_job *j = t->data;

	if (j->proc) {
		tail_add(j, " (timed out after 30 s)", 23);
		(void)sr__proc_kill(j->proc, SIGKILL);
	}
}

static int start_creds(sr__mount_job *j)
{
	const char *argv[] = { j->creds_cmd, j->t[j->i].bucket, j->t[j->i].prefix, NULL };
	sr_proc_spec ps = { sizeof(ps), argv, NULL, NULL, SR_PROC_GROUP };
	sr_proc_callbacks cb = { sizeof(cb), creds_out, creds_err, creds_exit };
	char err[256];
	int rc;

	forget_creds(j);
	rc = sr__proc_spawn(j->ctx->loop, &ps, &cb, j, &j->proc, err, sizeof(err));
	if (rc != SR_OK) {
		tail_add(j, err, strlen(err));
		return rc;
	}
	(void)sr__proc_close_stdin(j->proc); /* it reads nothing */
	uv_timer_start(&j->timer, creds_timeout, CREDS_TIMEOUT_MS, 0);
	return SR_OK;
}

/* A value for a single-quoted shell word: printable, no quote. */
static int shell_safe(const char *v)
{
	for (const char *c = v; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f || *c == '\'')
			return 0;
	return 1;
}

/* The command's output into j->cred, each value registered as a secret
 * first; SR_OK, or the reason in j->msg. */
static int parse_creds(sr__mount_job *j)
{
	static const char *const keys[3] = { "AccessKeyId", "SecretAccessKey", "SessionToken" };
	json_t *o = j->out ? json_loads(j->out, 0, NULL) : NULL;
	const char *v;
	int rc = SR_OK;

	if (!json_is_object(o) || json_integer_value(json_object_get(o, "Version")) != 1) {
		snprintf(j->msg, sizeof(j->msg), "it did not print a JSON object with \"Version\": 1");
		json_decref(o);
		return SR_EPROTO;
	}
	for (int k = 0; k < 3 && rc == SR_OK; k++) {
		v = json_string_value(json_object_get(o, keys[k]));
		if (v && j->secrets)
			sr__secret_hold_in(j->secrets, v);
		else if (v)
			sr__secret_register(v);
		if ((k < 2 && (!v || !*v)) || (v && !shell_safe(v))) {
			snprintf(j->msg, sizeof(j->msg), "its \"%s\" is %s", keys[k],
				 v && *v ? "not printable text without a quote" : "missing");
			rc = SR_EPROTO;
		} else if (v && *v && !(j->cred[k] = strdup(v))) {
			snprintf(j->msg, sizeof(j->msg), "out of memory");
			rc = SR_ENOMEM;
		}
	}
	/* The parsed copy of the secrets goes with the object. */
	json_object_clear(o);
	json_decref(o);
	return rc;
}

/* The credentials file's text (exec path). */
static char *creds_file(sr__mount_job *j)
{
	size_t cap = 64, len = 0;
	char *text;

	for (int k = 0; k < 3; k++)
		if (j->cred[k])
			cap += 2 * (strlen(cred_names[k][0]) + strlen(cred_names[k][1]) +
				    strlen(j->cred[k]) + 8);
	if ((text = malloc(cap)))
		for (int k = 0; k < 3; k++)
			for (int e = 0; e < 2 && j->cred[k]; e++)
				len += (size_t)snprintf(text + len, cap - len, "%s='%s'\n",
							cred_names[k][e], j->cred[k]);
	return text;
}

/* ------------------------------------------------------------- steps */

static int start_mount(sr__mount_job *j)
{
	const sr__mount_target *t = &j->t[j->i];
	char src[1000], url[1100], region[200];
	const char *argv[24];
	sr_pair env[6];
	size_t a = 0, e = 0;
	int rc;

	if (!j->via_op) {
		argv[a++] = "/bin/sh";
		argv[a++] = "-c";
		argv[a++] = mount_script;
		argv[a++] = "sh";
		argv[a++] = j->envfile;
		argv[a++] = j->abs;
	}
	if (strcmp(j->mounter, "geesefs") == 0) {
		snprintf(src, sizeof(src), "%s%s%s", t->bucket, *t->prefix ? ":" : "", t->prefix);
		argv[a++] = "geesefs";
		argv[a++] = "--endpoint";
		argv[a++] = j->s3_url;
		argv[a++] = "--region";
		argv[a++] = j->region;
	} else {
		snprintf(src, sizeof(src), "%s%s%s", t->bucket, *t->prefix ? ":/" : "", t->prefix);
		snprintf(url, sizeof(url), "url=%s", j->s3_url);
		snprintf(region, sizeof(region), "endpoint=%s", j->region);
		argv[a++] = "s3fs";
		argv[a++] = "-o";
		argv[a++] = url;
		argv[a++] = "-o";
		argv[a++] = "use_path_request_style";
		argv[a++] = "-o";
		argv[a++] = region;
		argv[a++] = "-o";
		argv[a++] = "connect_timeout=10,retries=2";
	}
	argv[a++] = src;
	argv[a++] = j->abs;
	argv[a] = NULL;
	if (j->via_op) {
		sr_mount_spec ms = { sizeof(ms), argv, j->abs, env, 0 };
		for (int k = 0; k < 3; k++)
			for (int v = 0; v < 2 && j->cred[k]; v++) {
				env[e].name = cred_names[k][v];
				env[e++].value = j->cred[k];
			}
		ms.n_env = e;
		j->op_req = sr__next_req();
		rc = sr__provider_mount(j->provider, j->op_req, j->sandbox, &ms, on_result, j);
		if (rc != SR_OK)
			j->op_req = 0;
		return rc;
	}
	return exec_in_box(j, argv);
}

static int start_unmount(sr__mount_job *j, const char *path)
{
	const char *argv[] = { "/bin/sh", "-c", unmount_script, "sh", path, NULL };

	if (j->via_op)
		return sr__provider_unmount(j->provider, sr__next_req(), j->sandbox, path, on_result,
					    j);
	return exec_in_box(j, argv);
}

/* The mount point of t, absolute, into out; 0 when it would cover the
 * workspace, the home or sandrun's own directory in it (its files would
 * go to the store), or another mount of the job. */
static int mount_point(sr__mount_job *j, size_t i, char *out, size_t n, char *why, size_t wn)
{
	const char *own[3];
	char dot[1300], other[1300];
	size_t l;

	if (j->t[i].path[0] == '/')
		snprintf(out, n, "%s", j->t[i].path);
	else
		snprintf(out, n, "%s/%s", j->workspace, j->t[i].path);
	snprintf(dot, sizeof(dot), "%s/.sandrun", j->home ? j->home : j->workspace);
	own[0] = j->workspace;
	own[1] = j->home;
	own[2] = dot;
	l = strlen(out);
	for (int k = 0; k < 3; k++) {
		size_t ol = own[k] ? strlen(own[k]) : 0;
		if (!own[k])
			continue;
		/* out is own[k], above it, or (for .sandrun) below it. */
		if ((strncmp(own[k], out, l) == 0 && (own[k][l] == 0 || own[k][l] == '/')) ||
		    (k == 2 && strncmp(out, own[k], ol) == 0 && out[ol] == '/')) {
			snprintf(why, wn, "%s would cover %s", out, own[k]);
			return 0;
		}
	}
	for (size_t k = 0; k < j->n; k++) {
		size_t ol;
		if (k == i)
			continue;
		if (j->t[k].path[0] == '/')
			snprintf(other, sizeof(other), "%s", j->t[k].path);
		else
			snprintf(other, sizeof(other), "%s/%s", j->workspace, j->t[k].path);
		ol = strlen(other);
		if ((strncmp(other, out, l) == 0 && other[l] == '/') ||
		    (strncmp(out, other, ol) == 0 && (out[ol] == '/' || out[ol] == 0))) {
			snprintf(why, wn, "%s and %s are one inside the other", out, other);
			return 0;
		}
	}
	return 1;
}

/* Start the operation of j->step; its answer comes to landed. */
static void step(sr__mount_job *j)
{
	const char *check[] = { "/bin/sh", "-c", check_script, "sh", j->abs, NULL };
	char dir[1300], why[3000], *text;
	int rc;

	/* A credentials file in the sandbox is removed even when cancelled:
	 * one is there between its put and the removal. */
	if (j->cancelled && j->step == S_MOUNT && !j->via_op) {
		j->status = SR_ECANCELED;
		snprintf(j->msg, sizeof(j->msg), "cancelled");
		j->step = S_CLEAN;
	} else if (j->cancelled && j->step != S_CLEAN) {
		finish(j, SR_ECANCELED, "cancelled");
		return;
	}
	j->err_len = 0;
	j->err[0] = 0;
	if (j->step == S_UNMOUNT) {
		if (j->i >= j->n) {
			finish(j, j->status, j->status != SR_OK ? j->msg : NULL);
			return;
		}
		rc = start_unmount(j, j->down[j->i]);
		if (rc != SR_OK)
			landed(j, rc, sr__strerror(rc));
		return;
	}
	if (j->i >= j->n) {
		finish(j, SR_OK, NULL);
		return;
	}
	switch (j->step) {
	case S_START:
	case S_STALE:
		j->step = S_STALE;
		if (!mount_point(j, j->i, j->abs, sizeof(j->abs), why, sizeof(why))) {
			fail(j, SR_EINVAL, "mount %s: refused: %s", j->abs, why);
			return;
		}
		snprintf(j->envfile, sizeof(j->envfile), "%s/.sandrun/mount-%zu.env",
			 j->home ? j->home : j->workspace, j->i);
		rc = start_unmount(j, j->abs);
		break;
	case S_CREDS:
		rc = start_creds(j);
		if (rc != SR_OK) {
			fail(j, rc, "mount %s: cannot run [mount] credentials_command %s: %s", j->abs,
			     j->creds_cmd, tail(j));
			return;
		}
		return;
	case S_DIR:
		snprintf(dir, sizeof(dir), "%s/.sandrun", j->home ? j->home : j->workspace);
		rc = sr__provider_file_mkdir(j->provider, sr__next_req(), j->sandbox, dir, 0700,
					     on_result, j);
		break;
	case S_PUT:
		if (!(text = creds_file(j))) {
			fail(j, SR_ENOMEM, "mount %s: out of memory", j->abs);
			return;
		}
		rc = sr__provider_file_put(j->provider, sr__next_req(), j->sandbox, j->envfile,
					   text, strlen(text), 0600, on_result, j);
		wipe(text);
		free(text);
		break;
	case S_MOUNT:
		emit(j, json_pack("{s:s, s:s, s:s, s:s}", "type", "mount.mounting", "bucket",
				  j->t[j->i].bucket, "prefix", j->t[j->i].prefix, "path", j->abs));
		rc = start_mount(j);
		break;
	case S_CLEAN:
		rc = sr__provider_file_remove(j->provider, sr__next_req(), j->sandbox, j->envfile,
					      on_result, j);
		break;
	case S_CHECK:
		rc = exec_in_box(j, check);
		break;
	default:
		rc = SR_EINVAL;
		break;
	}
	if (rc != SR_OK)
		landed(j, rc, sr__strerror(rc));
}

static void landed(sr__mount_job *j, int status, const char *message)
{
	const sr__mount_target *t = j->i < j->n ? &j->t[j->i] : NULL;

	if (j->finished)
		return;
	switch (j->step) {
	case S_STALE:
		/* Nothing was mounted there, or something was and is gone. */
		j->step = S_CREDS;
		break;
	case S_CREDS:
		if (status == SR_ECANCELED || j->cancelled)
			break; /* step() ends it */
		if (status != SR_OK) {
			fail(j, SR_EIO, "mount %s: [mount] credentials_command %s failed: %s", j->abs,
			     j->creds_cmd, tail(j));
			return;
		}
		if ((status = parse_creds(j)) != SR_OK) {
			char why[300];
			snprintf(why, sizeof(why), "%s", j->msg);
			fail(j, status, "mount %s: [mount] credentials_command %s: %s", j->abs,
			     j->creds_cmd, why);
			return;
		}
		j->step = j->via_op ? S_MOUNT : S_DIR;
		break;
	case S_DIR:
		if (status != SR_OK && status != SR_EEXIST) {
			fail(j, status, "mount %s: cannot make the sandbox's .sandrun directory: %s",
			     j->abs, message ? message : sr__strerror(status));
			return;
		}
		j->step = S_PUT;
		break;
	case S_PUT:
		if (status != SR_OK) {
			fail(j, status, "mount %s: cannot put the credentials file: %s", j->abs,
			     message ? message : sr__strerror(status));
			return;
		}
		j->step = S_MOUNT;
		break;
	case S_MOUNT:
		forget_creds(j);
		if (j->via_op && (status == SR_ECANCELED || j->cancelled))
			break; /* step() ends it; the run unmounts the path */
		if (status == SR_EPERM && !j->err_len) {
			fail(j, status, "mount %s: provider '%s' refuses it as a mount point (a "
			     "directory of the sandbox's workspace or home, reached without a "
			     "symbolic link)%s%s", j->abs, j->provider->desc->name,
			     message ? ": " : "", message ? message : "");
			return;
		}
		if (status != SR_OK) {
			fail(j, status, "mount %s: %s failed: %s", j->abs, j->mounter,
			     message && !j->err_len ? message : tail(j));
			return;
		}
		j->step = j->via_op ? S_CHECK : S_CLEAN;
		break;
	case S_CLEAN:
		/* The file is gone either way: the mounter's shell removed it,
		 * or this did. */
		if (j->status != SR_OK) {
			finish(j, j->status, j->msg);
			return;
		}
		j->step = S_CHECK;
		break;
	case S_CHECK:
		if (status != SR_OK && strstr(j->err, "is not a mount point")) {
			fail(j, SR_EIO, "mount %s: %s exited as if mounted, but nothing is mounted "
			     "there: it gave up once started (it says why in the sandbox's syslog; "
			     "credentials the store refuses, or a bucket it does not have, most often)",
			     j->abs, j->mounter);
			return;
		}
		if (status != SR_OK) {
			fail(j, SR_EIO, "mount %s: %s mounted it, but it does not answer: %s", j->abs,
			     j->mounter, tail(j));
			return;
		}
		emit(j, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "mount.ready", "bucket",
				  t->bucket, "prefix", t->prefix, "path", j->abs, "mounter",
				  j->mounter));
		j->i++;
		j->step = S_STALE;
		break;
	case S_UNMOUNT:
		if (status == SR_OK)
			emit(j, json_pack("{s:s, s:s}", "type", "mount.unmounted", "path",
					  j->down[j->i]));
		else if (status != SR_ENOTFOUND) {
			const char *why = j->err_len ? tail(j) : message ? message :
				sr__strerror(status);
			emit(j, json_pack("{s:s, s:s, s:s}", "type", "mount.unmount_failed", "path",
					  j->down[j->i], "message", why));
			snprintf(j->msg, sizeof(j->msg), "%s: %s", j->down[j->i], why);
			redact_msg(j);
			j->status = SR_EIO;
		}
		j->i++;
		break;
	default:
		break;
	}
	step(j);
}

static void on_start(uv_timer_t *t)
{
	step(t->data);
}

static sr__mount_job *job_new(sr__ctx *ctx, const sr__mount_box *box, sr__mount_event_fn event,
			      sr__mount_done_fn done, void *ud)
{
	sr__mount_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->ctx = ctx;
	j->provider = box->provider;
	j->via_op = sr__provider_has_mount(box->provider);
	j->secrets = box->secrets;
	j->sandbox = strdup(box->sandbox);
	j->workspace = strdup(box->workspace);
	j->home = box->home ? strdup(box->home) : NULL;
	j->event = event;
	j->done = done;
	j->ud = ud;
	uv_timer_init(ctx->loop, &j->timer);
	j->timer.data = j;
	if (!j->sandbox || !j->workspace || (box->home && !j->home)) {
		uv_close((uv_handle_t *)&j->timer, on_closed);
		return NULL;
	}
	return j;
}

sr__mount_job *sr__mounts_up(sr__ctx *ctx, const sr__mount_box *box,
			     const sr__mount_target *t, size_t n, const char *s3_url,
			     sr__mount_event_fn event, sr__mount_done_fn done, void *ud)
{
	const char *m = sr__config_get(ctx->config, "mount", "mounter");
	const char *region = sr__config_get(ctx->config, "mount", "region");
	sr__mount_job *j;

	if (n > SR__MOUNT_MAX || !(j = job_new(ctx, box, event, done, ud)))
		return NULL;
	j->mounter = m && *m ? m : "s3fs";
	j->region = region && *region ? region : "us-east-1";
	j->creds_cmd = sr__config_get(ctx->config, "mount", "credentials_command");
	j->s3_url = strdup(s3_url);
	j->n = n;
	j->step = S_START;
	memcpy(j->t, t, n * sizeof(*t));
	if (!j->s3_url) {
		uv_close((uv_handle_t *)&j->timer, on_closed);
		return NULL;
	}
	uv_timer_start(&j->timer, on_start, 0, 0);
	return j;
}

sr__mount_job *sr__mounts_down(sr__ctx *ctx, const sr__mount_box *box, json_t *paths,
			       sr__mount_event_fn event, sr__mount_done_fn done, void *ud)
{
	sr__mount_job *j = job_new(ctx, box, event, done, ud);
	json_t *v;
	size_t i;

	if (!j)
		return NULL;
	j->step = S_UNMOUNT;
	json_array_foreach(paths, i, v)
		if (json_is_string(v) && j->n < SR__MOUNT_MAX &&
		    (j->down[j->n] = strdup(json_string_value(v))))
			j->n++;
	uv_timer_start(&j->timer, on_start, 0, 0);
	return j;
}

void sr__mount_cancel(sr__mount_job *j)
{
	if (j->cancelled)
		return;
	j->cancelled = 1;
	if (j->proc)
		(void)sr__proc_kill(j->proc, SIGKILL);
	if (j->chan)
		(void)sr__provider_channel_signal(j->provider, j->chan, SIGKILL);
	if (j->op_req)
		(void)sr__provider_cancel(j->provider, j->op_req);
}
