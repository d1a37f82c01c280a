/*
 * One agent turn as a state machine (DESIGN section 5; core/run/run_int.h
 * lists the phases). A turn moves forward only:
 *
 *   PLANNING    the gates that need the loop (run_plan.c)
 *   ACQUIRING   the sandbox is created or reconnected (run_prepare.c)
 *   PREPARING   relay, tool specs, the harness's files (run_prepare.c)
 *   STARTING    the agent and its ACP session (run_agent.c)
 *   PROMPTING   session/prompt sent: updates, tool calls, permissions
 *   CANCELLING  session/cancel sent: the prompt's answer ends the turn
 *   STOPPING    the outcome is known (run.finished or run.failed sent):
 *               the agent is stopped and every callback still due comes in
 *   RELEASING   the session pointer is written, the sandbox parked or
 *               destroyed
 *   DONE        nothing is due any more: the caller frees the run
 *
 * Every operation the run starts is counted (sr__run_started) until its
 * callback arrives (sr__run_landed), the agent's channel included. The
 * ending leaves STOPPING and RELEASING only when nothing is due, so no
 * callback ever finds the run freed.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host/log.h"
#include "core/run/creds.h"
#include "core/plugins/provider.h"
#include "core/run/pool.h"
#include "core/run/endpoint.h"
#include "core/run/mount.h"
#include "core/run/run_int.h"
#include "core/run/session.h"
#include "core/tools/relay_bridge.h"
#include "core/host/status.h"

static const char *const phase_names[] = {
	"planning", "acquiring", "preparing", "starting", "prompting",
	"cancelling", "stopping", "releasing", "done"
};

static void release_sandbox(sr__run *r);

/* The ending, one step further when nothing holds it: the agent gone and
 * no callback due. Called when STOPPING is entered and whenever a
 * callback lands after that. */
static void advance(sr__run *r)
{
	if (r->phase == SR__RUN_STOPPING && r->mount_job) {
		/* Its callback lands once the operation in flight does. */
		sr__mount_cancel(r->mount_job);
	}
	if (r->phase == SR__RUN_STOPPING && r->ep_job) {
		/* Its callback lands at once, counted off without advancing. */
		struct sr__endpoint_job *j = r->ep_job;
		r->ep_job = NULL;
		sr__endpoint_cancel(j);
	}
	if (r->phase == SR__RUN_STOPPING) {
		/* After a clean turn the agent may live on in the warm pool;
		 * otherwise it is stopped and its exit lands later. */
		if (r->agent && !sr__run_keep_agent(r)) {
			sr__run_stop_agent(r);
			return;
		}
		if (r->inflight)
			return;
		sr__run_enter(r, SR__RUN_RELEASING);
		release_sandbox(r);
	}
	if (r->phase == SR__RUN_RELEASING && !r->inflight)
		sr__run_enter(r, SR__RUN_DONE);
}

/* The one transition function. */
void sr__run_enter(sr__run *r, enum sr__run_phase next)
{
	if (next <= r->phase) {
		sr__log(SR_LOG_ERROR, "run", "no way back from %s to %s", phase_names[r->phase],
			phase_names[next]);
		return;
	}
	sr__log(SR_LOG_DEBUG, "run", "%s -> %s", phase_names[r->phase], phase_names[next]);
	r->phase = next;
	if (next == SR__RUN_STOPPING)
		advance(r);
	else if (next == SR__RUN_DONE && r->o.done)
		r->o.done(r->o.ud);
}

int sr__run_started(sr__run *r, int rc, const char *code, const char *what)
{
	if (rc == SR_OK) {
		r->inflight++;
		return SR_OK;
	}
	sr__run_fail(r, code, "%s: %s", what, sr__strerror(rc));
	return rc;
}

int sr__run_landed(sr__run *r)
{
	r->inflight--;
	if (r->phase < SR__RUN_STOPPING)
		return 1;
	advance(r);
	return 0;
}

/* ------------------------------------------------------------ outcomes */

void sr__run_fail(sr__run *r, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	json_t *ev;

	if (r->phase >= SR__RUN_STOPPING)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->exit_code = r->retryable ? SR_RUN_EXIT_RETRY : SR_RUN_EXIT_FAILED;
	ev = json_pack("{s:s, s:s, s:s, s:s, s:b}", "type", "run.failed", "code", code,
		       "message", msg, "session", r->session, "retryable", r->retryable);
	if (r->tail_len) {
		r->tail[r->tail_len] = 0;
		json_object_set_new(ev, "stderr_tail", json_string(r->tail));
	}
	sr__run_emit(r, ev);
	sr__run_enter(r, SR__RUN_STOPPING);
}

void sr__run_end_turn(sr__run *r, const char *stop_reason)
{
	if (r->phase >= SR__RUN_STOPPING)
		return;
	r->exit_code = strcmp(stop_reason, "cancelled") == 0 ? SR_RUN_EXIT_CANCELLED :
							      SR_RUN_EXIT_OK;
	sr__run_emit(r, json_pack("{s:s, s:s, s:s, s:s?, s:I}", "type", "run.finished",
				  "stop_reason", stop_reason, "session", r->session, "sandbox",
				  r->sandbox_id, "ms",
				  (json_int_t)(uv_now(r->ctx->loop) - r->t0)));
	sr__run_enter(r, SR__RUN_STOPPING);
}

void sr__run_refuse_late(sr__run *r, const char *code, const char *msg)
{
	if (r->phase >= SR__RUN_STOPPING)
		return;
	r->exit_code = SR_RUN_EXIT_REFUSED;
	sr__run_emit(r, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "run.failed", "code",
				  code, "message", msg, "phase", "plan", "session", r->session));
	sr__run_enter(r, SR__RUN_STOPPING);
}

/* ----------------------------------------------------------- release */

/* A session pointer written or removed off the loop (session.c). */
static void on_written(void *ud, int rc)
{
	sr__run *r = ud;

	if (rc != SR_OK && rc != SR_ENOTFOUND)
		sr__log(SR_LOG_WARN, "run", "session %s: its pointer could not be updated: %s",
			r->session, sr__strerror(rc));
	sr__run_landed(r);
}

static void on_released(void *ud, const sr_result *res)
{
	sr__run *r = ud;
	const char *state = sr__ctx_state_dir(r->ctx);

	if (res->status != SR_OK)
		sr__log(SR_LOG_WARN, "run", "sandbox %s: %s", r->sandbox_id,
			res->message ? res->message : sr__strerror(res->status));
	/* A park that answers SR_ENOTFOUND says the sandbox no longer
	 * exists (a provider deletes what it could not park): the session
	 * must not point at it. */
	if (res->status == SR_ENOTFOUND && state &&
	    sr__session_remove_async(r->ctx->loop, state, r->session, r->sandbox_id, on_written,
				     r) == SR_OK)
		r->inflight++;
	sr__run_landed(r);
}

static void dispose(sr__run *r);

/* The turn's pointer written (or not): then the sandbox is disposed of. */
static void on_stored(void *ud, int rc)
{
	sr__run *r = ud;

	if (rc == SR_ESTATE) {
		/* Another runner wrote a turn meanwhile: ours loses. */
		sr__run_emit(r, json_pack("{s:s, s:s, s:s, s:s}", "type", "run.failed", "code",
					  "session_conflict", "message",
					  "another run recorded a turn of this session first; "
					  "this turn's pointer was not written",
					  "session", r->session));
		r->exit_code = SR_RUN_EXIT_FAILED;
	} else if (rc != SR_OK) {
		sr__log(SR_LOG_WARN, "run", "session %s: this turn's pointer was not written: %s",
			r->session, sr__strerror(rc));
	}
	dispose(r);
	sr__run_landed(r);
}

/* The turn's pointer, with a compare-and-set on the turn index, written
 * off the loop; the sandbox is disposed of once it is (on_stored). SR_OK,
 * or not queued (the sandbox is for the caller to dispose of). */
static int store_pointer(sr__run *r, const char *state)
{
	json_t *rec = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}", "session", r->session,
				"sandbox", r->sandbox_id, "provider", r->provider->desc->name,
				"harness", r->harness->desc->name, "acp_session",
				r->acp_session, "turn", r->turn + 1);

	/* Where the sandbox lives: a runner that does not reach it refuses
	 * the session's turns instead of forgetting it (session.c). */
	if (rec)
		json_object_set_new(rec, "home",
				    sr__session_home(sr__ctx_runner_id(r->ctx),
						     sr__provider_locality(r->provider)));
	/* The credentials' fingerprint (never a value): a changed credential
	 * means a fresh sandbox next turn. */
	if (rec && r->isolate)
		json_object_set_new(rec, "credentials_fp", json_string(r->creds_fp));
	/* Which shim this sandbox has: the next turn need not upload it. */
	if (rec && r->shim_sha[0] && r->shim_in_box[0])
		json_object_set_new(rec, "shim", json_pack("{s:s, s:s, s:s}", "sandbox",
							   r->sandbox_id, "sha256", r->shim_sha,
							   "path", r->shim_in_box));
	if (!rec || sr__session_store_async(r->ctx->loop, state, r->session, rec, r->turn,
					    on_stored, r) != SR_OK) {
		sr__log(SR_LOG_ERROR, "run", "session %s: out of memory; this turn's pointer is "
			"not written", r->session);
		return SR_ENOMEM;
	}
	r->inflight++;
	return SR_OK;
}

static void settle_sandbox(sr__run *r);

/* A mount may still be up: the sandbox is not kept running with it after
 * a clean turn (a failed or cancelled turn's is not kept anyway). */
static void mount_left_up(sr__run *r, int status, const char *message)
{
	sr__log(SR_LOG_WARN, "run", "sandbox %s: unmounting: %s", r->sandbox_id,
		message ? message : sr__strerror(status));
	if (r->teardown == SR__TD_COMPLETED) {
		r->teardown = SR__TD_UNMOUNT_FAILED;
		sr__log(SR_LOG_WARN, "run", "sandbox %s: a mount did not come down: the "
			"sandbox is parked stopped, not kept running", r->sandbox_id);
	}
}

static void on_unmounted(void *ud, int status, const char *message)
{
	sr__run *r = ud;

	r->mount_job = NULL;
	if (status != SR_OK)
		mount_left_up(r, status, message);
	json_array_clear(r->mounted);
	settle_sandbox(r);
	sr__run_landed(r);
}

/* Every mount of the turn unmounted (core/run/mount.h); SR_OK when that
 * is under way and settle_sandbox follows. */
static int unmount_all(sr__run *r)
{
	sr__mount_box box = { r->provider, r->sandbox_id, r->workspace, r->home, &r->secrets };

	if (!(r->mount_job = sr__mounts_down(r->ctx, &box, r->mounted, sr__run_on_mount_event,
					     on_unmounted, r)))
		return SR_ENOMEM;
	r->inflight++;
	return SR_OK;
}

static void on_bridge_closed(void *ud)
{
	(void)sr__run_landed(ud);
}

/* Why the turn's sandbox is let go (the table in pool.c decides what
 * becomes of it). */
static enum sr__teardown teardown_reason(const sr__run *r)
{
	if (r->exit_code == SR_RUN_EXIT_OK)
		return SR__TD_COMPLETED;
	if (r->exit_code == SR_RUN_EXIT_CANCELLED)
		return r->shutdown ? SR__TD_SHUTDOWN : SR__TD_CANCELLED;
	return SR__TD_FAILED;
}

/* The agent is gone and nothing is due: the relay and loopback server
 * stop, the turn's mounts are unmounted, the pointer is written after a
 * clean (or cancelled) turn, and the
 * sandbox is kept running in the warm pool, parked stopped or destroyed,
 * as the teardown table says for the turn's outcome. */
static void release_sandbox(sr__run *r)
{
	if (r->bridge) {
		/* Its provider operations answer before the run may end. */
		r->inflight++;
		sr__bridge_free(r->bridge, on_bridge_closed, r);
		r->bridge = NULL;
	}
	if (r->relay) {
		sr__relay_free(r->relay);
		r->relay = NULL;
	}
	if (r->mcp_http) {
		sr__mcp_http_stop(r->mcp_http);
		r->mcp_http = NULL;
	}
	if (!r->sandbox_id)
		return;
	r->teardown = teardown_reason(r);
	/* Its mounts go first, whatever becomes of it. */
	if (json_array_size(r->mounted)) {
		if (unmount_all(r) == SR_OK)
			return;
		mount_left_up(r, SR_ENOMEM, "out of memory");
	}
	settle_sandbox(r);
}

/* The pointer written, then the sandbox disposed of. */
static void settle_sandbox(sr__run *r)
{
	const char *state = sr__ctx_state_dir(r->ctx);
	enum sr__teardown why = r->teardown;
	enum sr__disposition d = sr__teardown_disposition(why, r->created);

	/* Its tunnel enrolment goes, whatever the outcome (a failed run
	 * leaves no peer, key, policy or group behind), once its mounts,
	 * whose store it may reach through the tunnel, are gone. */
	(void)sr__run_release_enrolment(r);
	/* The pointer first, then the sandbox: the pool never holds a
	 * sandbox whose session's pointer is a turn behind. */
	if (d != SR__DESTROY && state && r->acp_session &&
	    (why == SR__TD_COMPLETED || why == SR__TD_UNMOUNT_FAILED || why == SR__TD_CANCELLED ||
	     why == SR__TD_SHUTDOWN) &&
	    store_pointer(r, state) == SR_OK)
		return;
	dispose(r);
}

/* The sandbox kept running in the warm pool, parked stopped or destroyed,
 * as the teardown table says for r->teardown. */
static void dispose(sr__run *r)
{
	const char *state = sr__ctx_state_dir(r->ctx);
	enum sr__teardown why = r->teardown;
	enum sr__disposition d = sr__teardown_disposition(why, r->created);
	int rc;

	if (d == SR__KEEP_RUNNING) {
		/* A place reserved when the agent was kept, or taken now. */
		if (r->o.pool && (r->reserved || sr__pool_reserve(r->o.pool, r->provider))) {
			r->reserved = 0;
			if (sr__pool_put(r->o.pool, r->provider, r->session, r->sandbox_id,
					 r->acquired, r->o.network, r->kept)) {
				r->kept = NULL;
				return; /* the pool's now: no provider call */
			}
		}
		if (r->o.pool)
			why = SR__TD_CAPACITY;
		d = SR__PARK_STOPPED;
	}
	/* Not kept warm: neither is its agent. */
	sr__run_free_agents(r, 0);
	sr__log(SR_LOG_DEBUG, "run", "sandbox %s: %s (%s)", r->sandbox_id,
		d == SR__DESTROY ? "destroyed" : "parked stopped", sr__teardown_name(why));
	if (d == SR__DESTROY) {
		rc = sr__provider_destroy(r->provider, sr__next_req(), r->sandbox_id,
					  on_released, r);
		if (state && sr__session_remove_async(r->ctx->loop, state, r->session, NULL,
						      on_written, r) == SR_OK)
			r->inflight++;
	} else {
		/* Parked stopped: the agent process ends with this runner. */
		rc = sr__provider_park(r->provider, sr__next_req(), r->sandbox_id,
				       SR_PARK_STOPPED, on_released, r);
		if (r->o.pool)
			sr__pool_parked(r->o.pool, r->provider, r->session, r->sandbox_id);
	}
	if (rc == SR_OK)
		r->inflight++;
	else
		sr__log(SR_LOG_WARN, "run", "sandbox %s: cannot release it: %s", r->sandbox_id,
			sr__strerror(rc));
}

/* -------------------------------------------------------------- public */

void sr__run_cancel(sr__run *r)
{
	if (r->phase >= SR__RUN_CANCELLING)
		return;
	sr__run_emit(r, json_pack("{s:s}", "type", "run.cancelling"));
	if (r->phase < SR__RUN_PROMPTING) {
		/* No turn yet: nothing to wait for. */
		sr__run_end_turn(r, "cancelled");
		return;
	}
	sr__run_enter(r, SR__RUN_CANCELLING);
	sr__run_perms_cancel(r);
	if (r->relay)
		sr__relay_set_ask_policy(r->relay, SR_ASK_DENY);
	/* The prompt's answer (stopReason cancelled) ends the turn; an agent
	 * that does not answer is killed. */
	sr__run_cancel_agent(r);
}

void sr__run_cancel_shutdown(sr__run *r)
{
	r->shutdown = 1;
	sr__run_cancel(r);
}

int sr__run_done(const sr__run *r)
{
	return r->phase == SR__RUN_DONE;
}

const char *sr__run_phase(const sr__run *r)
{
	return phase_names[r->phase];
}

void sr__run_free(sr__run *r)
{
	sr__ctx_remove_sink(r->ctx, &r->sink);
	sr__run_free_agents(r, 1);
	sr__run_perms_free(r);
	if (r->bridge)
		sr__bridge_free(r->bridge, NULL, NULL);
	if (r->relay)
		sr__relay_free(r->relay);
	if (r->mcp_http)
		sr__mcp_http_stop(r->mcp_http);
	sr__tools_free(r->tools);
	json_decref(r->mcp_servers);
	sr__guard_clear(&r->guard);
	json_decref(r->desc);
	json_decref(r->user_mcp);
	sr__run_forget_lookups(r);
	free(r->allow_buf);
	free(r->allow);
	free(r->secrets_allow_buf);
	free(r->secrets_allow);
	sr__creds_free(r->creds);
	json_decref(r->stored_shim);
	json_decref(r->files);
	json_decref(r->env);
	json_decref(r->ep_env);
	json_decref(r->ep_routes);
	json_decref(r->mounted);
	sr__run_enrol_free(r);
	free(r->mt);
	free(r->s3_url);
	free(r->acquired);
	free(r->sandbox_id);
	free(r->workspace);
	free(r->home);
	free(r->root);
	free(r->acp_session);
	/* Last: nothing of the run can be logged or emitted after this. */
	sr__secret_holds_release(&r->secrets);
	free(r);
}

int sr__run_finish(sr__run *r)
{
	int code = r->exit_code;

	sr__run_free(r);
	return code;
}
