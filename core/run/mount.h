/* Storage mounts: `sandrun run --mount s3://BUCKET/PREFIX:PATH`. A prefix
 * of an S3-compatible store, mounted in the sandbox before the agent
 * starts, by a FUSE mounter that runs there ([mount] mounter: s3fs or
 * geesefs) and reaches the store through endpoint resolution ([mount]
 * endpoint names its [endpoint.NAME]).
 *
 * Credentials: the operator's [mount] credentials_command, run on the
 * runner's host as `COMMAND BUCKET PREFIX`, prints short-lived credentials
 * for that prefix in the AWS credential_process form ({"Version": 1,
 * "AccessKeyId", "SecretAccessKey", "SessionToken"?, "Expiration"?}).
 * They are registered as secrets (never logged) and reach the mounter's
 * environment only: through the provider's mount operation, or, where the
 * core mounts through exec, as a 0600 file under the sandbox's home's
 * .sandrun that the mounter's shell reads and removes before the mounter
 * starts (and the job removes again, even when cancelled). Never in argv,
 * never in the workspace.
 *
 * Up, per mount: a path that would cover the workspace, the home or its
 * .sandrun, or another mount, is refused; whatever is left mounted at the
 * path is unmounted (a reconnected sandbox mounts cleanly, over a dead
 * mount too), the credentials are fetched, the mounter runs (the
 * provider's mount operation, or exec when it has none), and the mount is
 * checked alive: a mount point, and a listing. Down (at the end of every
 * turn, before the sandbox is parked or kept): each path is unmounted,
 * plainly, or lazily when busy. */
#ifndef SR_CORE_MOUNT_H
#define SR_CORE_MOUNT_H

#include <jansson.h>

#include "core/host/ctx.h"
#include "core/host/log.h"
#include "core/plugins/loader.h"

#define SR__MOUNT_MAX 8

typedef struct sr__mount_target {
	char bucket[64];
	char prefix[900];   /* no leading or trailing '/'; may be empty */
	char path[600];     /* relative to the workspace, or absolute */
} sr__mount_target;

/* arg as s3://BUCKET[/PREFIX]:PATH; SR_EINVAL with the reason in why. */
int sr__mount_parse(const char *arg, sr__mount_target *t, char *why, size_t n);

/* [mount] is usable: its endpoint's name in *endpoint (borrowed from the
 * configuration; "s3" when not set); SR_EINVAL with the reason. */
int sr__mount_config(sr__ctx *ctx, const char **endpoint, char *why, size_t n);

/* The sandbox the mounts are in. */
typedef struct sr__mount_box {
	sr__plugin *provider;
	const char *sandbox;
	const char *workspace;
	const char *home;     /* NULL: the workspace */
	/* Where the credentials given to mounters are held as secrets: the
	 * run's, as long as what it mounted may show them (a mounter's
	 * environment can be read by the sandbox's processes). NULL: held
	 * for good. */
	sr__secret_holds *secrets;
} sr__mount_box;

/* Each event, borrowed: {"type": "mount.mounting", "bucket", "prefix",
 * "path"} before the mounter runs, {"type": "mount.ready", "bucket",
 * "prefix", "path", "mounter"}, {"type": "mount.unmounted", "path"} (nothing when nothing was mounted), {"type":
 * "mount.unmount_failed", "path", "message"}. */
typedef void (*sr__mount_event_fn)(void *ud, json_t *ev);
/* Once, never from inside the call that started the job. */
typedef void (*sr__mount_done_fn)(void *ud, int status, const char *message);

typedef struct sr__mount_job sr__mount_job;

/* Mount each of t (copied) with the store at s3_url,
 * in order; the first failure ends the job (what was mounted before it
 * has had its mount.ready). NULL when out of memory. */
sr__mount_job *sr__mounts_up(sr__ctx *ctx, const sr__mount_box *box,
			     const sr__mount_target *t, size_t n, const char *s3_url,
			     sr__mount_event_fn event, sr__mount_done_fn done, void *ud);
/* Unmount each absolute path of the array paths (borrowed for the call);
 * a failure is an event, and the job goes on with the next. done has
 * SR_EIO (and the last failure) when one did not come down. */
sr__mount_job *sr__mounts_down(sr__ctx *ctx, const sr__mount_box *box, json_t *paths,
			       sr__mount_event_fn event, sr__mount_done_fn done, void *ud);
/* The job stops after the operation in flight: done then runs with
 * SR_ECANCELED. A second call does nothing. */
void sr__mount_cancel(sr__mount_job *j);

#endif
