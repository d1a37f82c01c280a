/* The run's sandbox enrolled in the configured tunnel, when one of its
 * endpoints resolved through a route that only an enrolled sandbox has
 * (NetBird: resolve says "enrolment": true). After the endpoints and
 * before the mounts (whose store may be such an endpoint):
 *
 *   enrol      the tunnel makes what the sandbox needs for exactly the
 *              runner ports of those endpoints, and answers a setup key
 *              and the command that joins with it;
 *   key        the key goes to a 0600 file under the sandbox's home
 *              (never its workspace, environment or a command line);
 *   join       the command runs in the sandbox; the file is removed by
 *              the command's shell, and again by the provider, whatever
 *              happened;
 *   verify     the tunnel checks that the sandbox's peer joined, retried
 *              for a bounded time.
 *
 * At release the enrolment is released whatever the outcome of the turn
 * (sr__run_release_enrolment), so a failed run leaves nothing behind. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host/log.h"
#include "core/host/status.h"
#include "core/plugins/provider.h"
#include "core/plugins/tunnel.h"
#include "core/run/plan.h"
#include "core/run/run_int.h"

#define VERIFY_TRIES 20
#define VERIFY_DELAY_MS 500

enum { E_ENROL, E_DIR, E_PUT, E_JOIN, E_REMOVE, E_VERIFY };

static const char join_script[] =
	"f=$1; shift; timeout 60 \"$@\"; r=$?; rm -f \"$f\"; exit $r";

static void enrol_step(sr__run *r);

void sr__run_note_enrolment(sr__run *r, const char *url)
{
	json_t *v;
	size_t i;
	long port = url ? sr__url_port(url) : 0;

	if (!port)
		return;
	if (!r->enrol_ports && !(r->enrol_ports = json_array()))
		return;
	json_array_foreach(r->enrol_ports, i, v)
		if (json_integer_value(v) == port)
			return;
	json_array_append_new(r->enrol_ports, json_integer(port));
}

static void enrol_fail(sr__run *r, const char *fmt, const char *what)
{
	char *red = sr__redact(what ? what : "");

	sr__run_fail(r, "tunnel_enrol_failed", fmt, r->tunnel->desc->name, red ? red : "");
	free(red);
}

static void on_key_removed(void *ud, const sr_result *res)
{
	(void)res;
	(void)sr__run_landed(ud);
}

/* The key file removed, counted as an operation of the run: a run that
 * ends after the key was put leaves no key in the sandbox. */
static void remove_key(sr__run *r)
{
	(void)sr__run_started(r, sr__provider_file_remove(r->provider, sr__next_req(),
							  r->sandbox_id, r->enrol_key_file,
							  on_key_removed, r),
			      "tunnel_enrol_failed", "cannot remove the tunnel's key file");
}

static void on_enrol_result(void *ud, const sr_result *res)
{
	sr__run *r = ud;
	json_t *a;

	/* Known before the run may end here: what to release, what to
	 * remove. */
	if (r->enrol_step == E_ENROL && res->status == SR_OK)
		r->enrolled = 1;
	if (r->enrol_step == E_PUT && (res->status != SR_OK || r->phase >= SR__RUN_STOPPING))
		remove_key(r);
	if (!sr__run_landed(r))
		return;
	switch (r->enrol_step) {
	case E_ENROL:
		if (res->status != SR_OK) {
			enrol_fail(r, "tunnel '%s' could not enrol the sandbox: %s",
				   res->message ? res->message : sr__strerror(res->status));
			return;
		}
		a = json_loads(res->json ? res->json : "", 0, NULL);
		if (json_is_string(json_object_get(a, "setup_key")))
			sr__secret_hold_in(&r->secrets,
					   json_string_value(json_object_get(a, "setup_key")));
		if (!json_is_string(json_object_get(a, "setup_key")) ||
		    !json_array_size(json_object_get(a, "command"))) {
			json_decref(a);
			enrol_fail(r, "tunnel '%s' enrolled the sandbox but answered %s",
				   "no \"setup_key\" and \"command\" to join with");
			return;
		}
		r->enrol_answer = a;
		r->enrol_step = E_DIR;
		break;
	case E_DIR:
		if (res->status != SR_OK && res->status != SR_EEXIST) {
			enrol_fail(r, "tunnel '%s': cannot make the sandbox's .sandrun directory: %s",
				   res->message ? res->message : sr__strerror(res->status));
			return;
		}
		r->enrol_step = E_PUT;
		break;
	case E_PUT:
		if (res->status != SR_OK) {
			enrol_fail(r, "tunnel '%s': cannot put the setup key in the sandbox: %s",
				   res->message ? res->message : sr__strerror(res->status));
			return;
		}
		r->enrol_step = E_JOIN;
		break;
	case E_REMOVE:
		if (r->enrol_join_status != 0) {
			enrol_fail(r, "tunnel '%s': the sandbox could not join: %s", r->enrol_err);
			return;
		}
		r->enrol_step = E_VERIFY;
		r->enrol_tries = 0;
		break;
	case E_VERIFY:
		if (res->status != SR_OK) {
			if (++r->enrol_tries < VERIFY_TRIES) {
				r->enrol_delay = 1;
				break;
			}
			enrol_fail(r, "tunnel '%s': the sandbox's peer did not show up: %s",
				   res->message ? res->message : sr__strerror(res->status));
			return;
		}
		a = json_loads(res->json ? res->json : "{}", 0, NULL);
		sr__run_emit(r, json_pack("{s:s, s:s, s:O?, s:O?, s:O}", "type", "tunnel.enrolled",
					  "tunnel", r->tunnel->desc->name, "peer",
					  json_object_get(a, "peer"), "ip", json_object_get(a, "ip"),
					  "ports", r->enrol_ports));
		json_decref(a);
		r->enrol_next(r);
		return;
	default:
		return;
	}
	enrol_step(r);
}

static void on_join_err(void *ud, const void *data, size_t len)
{
	sr__run *r = ud;

	sr__text_append(r->enrol_err, sizeof(r->enrol_err), &r->enrol_err_len, data, len);
}

static void on_join_out(void *ud, const void *data, size_t len)
{
	(void)ud;
	(void)data;
	(void)len;
}

static void join_ended(sr__run *r, int status)
{
	r->enrol_join_status = status;
	sr__text_one_line(r->enrol_err, &r->enrol_err_len);
	if (status != 0 && !r->enrol_err_len)
		snprintf(r->enrol_err, sizeof(r->enrol_err), "exit status %d", status);
	if (r->phase >= SR__RUN_STOPPING)
		remove_key(r);
	if (!sr__run_landed(r))
		return;
	/* Removed by the command's shell; again here, whatever happened. */
	r->enrol_step = E_REMOVE;
	enrol_step(r);
}

static void on_join_exit(void *ud, int status, int sig)
{
	join_ended(ud, sig ? 128 + sig : status);
}

static void on_join_failed(void *ud, int status, const char *message)
{
	on_join_err(ud, message ? message : "", message ? strlen(message) : 0);
	join_ended(ud, status ? status : -1);
}

static void on_timer_closed(uv_handle_t *h)
{
	free(h);
}

static void on_verify_timer(uv_timer_t *t)
{
	sr__run *r = t->data;

	uv_close((uv_handle_t *)t, on_timer_closed);
	if (!sr__run_landed(r))
		return;
	enrol_step(r);
}

static void enrol_step(sr__run *r)
{
	static const sr_channel_callbacks join_cbs = { sizeof(join_cbs), on_join_out, on_join_err,
						       on_join_exit, on_join_failed };
	const char *base = r->home ? r->home : r->workspace;
	char dir[4200], *text, *params;
	const char **argv;
	json_t *cmd, *v, *p;
	size_t i, n;
	int rc = SR_OK;

	switch (r->enrol_step) {
	case E_ENROL:
		p = json_pack("{s:O, s:s?}", "ports", r->enrol_ports, "runner",
			      sr__ctx_runner_id(r->ctx));
		params = p ? json_dumps(p, JSON_COMPACT) : NULL;
		json_decref(p);
		rc = params ? sr__tunnel_enrol(r->tunnel, sr__next_req(), r->sandbox_id, params,
					       on_enrol_result, r) : SR_ENOMEM;
		free(params);
		break;
	case E_DIR:
		snprintf(dir, sizeof(dir), "%s/.sandrun", base);
		rc = sr__provider_file_mkdir(r->provider, sr__next_req(), r->sandbox_id, dir, 0700,
					     on_enrol_result, r);
		break;
	case E_PUT:
		snprintf(r->enrol_key_file, sizeof(r->enrol_key_file), "%s/.sandrun/tunnel.key", base);
		v = json_object_get(r->enrol_answer, "setup_key");
		if (!(text = malloc(json_string_length(v) + 2))) {
			rc = SR_ENOMEM;
			break;
		}
		snprintf(text, json_string_length(v) + 2, "%s\n", json_string_value(v));
		rc = sr__provider_file_put(r->provider, sr__next_req(), r->sandbox_id,
					   r->enrol_key_file, text, strlen(text), 0600,
					   on_enrol_result, r);
		memset(text, 0, strlen(text));
		free(text);
		break;
	case E_JOIN: {
		sr_exec_spec spec = { sizeof(spec), NULL, NULL, 0, NULL, NULL, 0 };
		uint64_t req = sr__next_req();
		cmd = json_object_get(r->enrol_answer, "command");
		n = json_array_size(cmd);
		if (!(argv = calloc(n + 6, sizeof(*argv)))) {
			rc = SR_ENOMEM;
			break;
		}
		argv[0] = "/bin/sh";
		argv[1] = "-c";
		argv[2] = join_script;
		argv[3] = "sh";
		argv[4] = r->enrol_key_file;
		json_array_foreach(cmd, i, v)
			argv[5 + i] = !json_is_string(v) ? "" :
				      strcmp(json_string_value(v), "{setup_key_file}") == 0 ?
				      r->enrol_key_file : json_string_value(v);
		spec.argv = argv;
		r->enrol_err_len = 0;
		r->enrol_err[0] = 0;
		rc = sr__provider_exec(r->provider, req, r->sandbox_id, &spec, &join_cbs, r);
		free(argv);
		if (rc == SR_OK)
			(void)sr__provider_channel_close_input(r->provider, req);
		break;
	}
	case E_REMOVE:
		rc = sr__provider_file_remove(r->provider, sr__next_req(), r->sandbox_id,
					      r->enrol_key_file, on_enrol_result, r);
		break;
	case E_VERIFY:
		if (r->enrol_delay) {
			uv_timer_t *t = malloc(sizeof(*t));
			r->enrol_delay = 0;
			if (!t) {
				rc = SR_ENOMEM;
				break;
			}
			uv_timer_init(r->ctx->loop, t);
			t->data = r;
			uv_timer_start(t, on_verify_timer, VERIFY_DELAY_MS, 0);
			r->inflight++; /* the timer's callback lands */
			return;
		}
		rc = sr__tunnel_enrol(r->tunnel, sr__next_req(), r->sandbox_id,
				      "{\"verify\":true}", on_enrol_result, r);
		break;
	default:
		return;
	}
	(void)sr__run_started(r, rc, "tunnel_enrol_failed", "cannot take the next step of the "
			      "tunnel enrolment");
}

void sr__run_enrol(sr__run *r, sr__plugin *tunnel, void (*next)(sr__run *r))
{
	if (!json_array_size(r->enrol_ports)) {
		next(r);
		return;
	}
	r->tunnel = tunnel;
	r->enrol_next = next;
	r->enrol_step = E_ENROL;
	enrol_step(r);
}

void sr__run_enrol_free(sr__run *r)
{
	json_decref(r->enrol_answer);
	r->enrol_answer = NULL;
	json_decref(r->enrol_ports);
	r->enrol_ports = NULL;
}

static void on_released(void *ud, const sr_result *res)
{
	sr__run *r = ud;

	if (res->status == SR_OK)
		sr__run_emit(r, json_pack("{s:s, s:s}", "type", "tunnel.released", "tunnel",
					  r->tunnel->desc->name));
	else
		sr__run_emit(r, json_pack("{s:s, s:s, s:s}", "type", "tunnel.release_failed",
					  "tunnel", r->tunnel->desc->name, "message",
					  res->message ? res->message : sr__strerror(res->status)));
	sr__run_landed(r);
}

int sr__run_release_enrolment(sr__run *r)
{
	int rc;

	if (!r->enrolled)
		return SR_ENOTFOUND;
	r->enrolled = 0;
	rc = sr__tunnel_release(r->tunnel, sr__next_req(), r->sandbox_id, on_released, r);
	if (rc == SR_OK) {
		r->inflight++;
		return SR_OK;
	}
	sr__log(SR_LOG_WARN, "run", "sandbox %s: cannot release its %s enrolment (%s); "
		"`sandrun janitor` will", r->sandbox_id, r->tunnel->desc->name, sr__strerror(rc));
	return rc;
}
