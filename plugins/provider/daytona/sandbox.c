/* A sandbox's life on the Daytona control plane: create (waiting for
 * 'started' with backed-off polling and progress events), reconnect
 * (start when stopped, converge the network settings when they differ),
 * park (running, or stopped after a stable state; a failed park deletes),
 * destroy (409 retried, confirmed by a 404), list, status, doctor.
 *
 * Error classes, as the run sees them:
 *  - terminal (SR_ENOTFOUND): the sandbox is gone, or in a state it never
 *    leaves (error, build_failed, destroyed): the session forgets it;
 *  - transient (SR_ETIMEDOUT, SR_ENETWORK, SR_ECONNREFUSED, SR_EHTTP for
 *    5xx): worth another try, the session keeps it;
 *  - the rest name what was refused (SR_EINVAL, SR_EPERM, SR_ESTATE). */
#define _GNU_SOURCE 1 /* strptime, timegm */
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daytona.h"

static const char *const transitional[] = {
	"creating", "restoring", "starting", "stopping", "destroying",
	"pulling_snapshot", "archiving", "resizing", "snapshotting", "forking",
	"pausing", "resuming", "pending_build", "building_snapshot", "unknown",
	NULL
};

static int in_list(const char *s, const char *const *list)
{
	for (; s && *list; list++)
		if (strcmp(s, *list) == 0)
			return 1;
	return 0;
}

static int is_transitional(const char *s)
{
	return !s || in_list(s, transitional);
}

static int is_failed(const char *s)
{
	return s && (strcmp(s, "error") == 0 || strcmp(s, "build_failed") == 0);
}

static int is_stopped(const char *s)
{
	return s && (strcmp(s, "stopped") == 0 || strcmp(s, "archived") == 0 ||
		     strcmp(s, "paused") == 0);
}

static int is_gone(const char *s)
{
	return s && (strcmp(s, "destroyed") == 0 || strcmp(s, "destroying") == 0);
}

/* Daytona's state in the words of the provider ABI. */
const char *dy__state_name(const char *s)
{
	if (!s)
		return "unknown";
	if (strcmp(s, "started") == 0)
		return "running";
	if (is_stopped(s))
		return "stopped";
	if (is_failed(s))
		return "error";
	if (is_gone(s))
		return s;
	if (in_list(s, (const char *const[]){ "stopping", "archiving", "pausing", NULL }))
		return "stopping";
	if (is_transitional(s))
		return "starting";
	return s;
}

static const char *rec_state(json_t *rec)
{
	return json_string_value(json_object_get(rec, "state"));
}

static const char *rec_reason(json_t *rec)
{
	const char *r = json_string_value(json_object_get(rec, "errorReason"));

	return r && *r ? r : "no reason given";
}

static void keep_record(dy_op *op, json_t *rec)
{
	json_incref(rec);
	json_decref(op->rec);
	op->rec = rec;
}

/* A progress event when the state changed since the last one. */
static void progress(dy_op *op)
{
	const sr_host *h = op->d->host;
	const char *st = rec_state(op->rec);
	json_t *ev;
	char *s;

	if (!st || (op->last_state && strcmp(op->last_state, st) == 0))
		return;
	free(op->last_state);
	op->last_state = strdup(st);
	if (h->size < SR_TABLE_HAS(sr_host, event))
		return;
	ev = json_pack("{s:s, s:s, s:s, s:I}", "sandbox", op->id, "state", st,
		       "operation", op->kind == DY_CREATE ? "create" : "reconnect",
		       "elapsed_ms", (json_int_t)(dy__now_ms() - op->started_ms));
	s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	if (s)
		h->event(h, "sandbox.progress", s);
	free(s);
	json_decref(ev);
}

static void finish_acquired(dy_op *op, const dy_resp *unused)
{
	dy_box *b = dy__box(op->d, op->id);
	json_t *j;

	(void)unused;
	j = b && b->workspace ? json_pack("{s:s, s:s, s:s}", "id", op->id, "workspace",
					  b->workspace, "home", b->home) : NULL;
	/* What the sandbox sees instead of each credential binding's value. */
	json_t *ph = j ? dy__sec_placeholders(op) : NULL;
	if (ph)
		json_object_set_new(j, "placeholders", ph);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	if (s)
		dy__op_finish(op, SR_OK, s, NULL, 0, NULL);
	else
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
	free(s);
	json_decref(j);
}

static int get_record(dy_op *op, dy_step next)
{
	char *url = dy__url(op->d, "/sandbox/%s", op->id);
	int rc;

	if (!url) {
		if (!op->in_call)
			dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return SR_ENOMEM;
	}
	rc = dy__api(op, "GET", url, NULL, NULL, 0, 0, next);
	free(url);
	return rc;
}

static int post_sandbox(dy_op *op, const char *action, json_t *body, dy_step next)
{
	char *url = dy__url(op->d, "/sandbox/%s/%s", op->id, action);
	int rc;

	if (!url) {
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return SR_ENOMEM;
	}
	rc = dy__api_json(op, "POST", url, body, next);
	free(url);
	return rc;
}

static uint64_t backoff(dy_op *op)
{
	uint64_t ms = op->delay_ms;

	op->delay_ms = op->delay_ms * 2 > 2000 ? 2000 : op->delay_ms * 2;
	return ms;
}

static int transient(const dy_resp *r)
{
	return r->status != SR_OK || r->http >= 500 || r->http == 429;
}

/* ------------------------------------------------------------ delete */

static void del_send(dy_op *op, const dy_resp *unused);
static void del_confirm(dy_op *op, const dy_resp *r);

static void del_finished(dy_op *op, int confirmed, const char *why);

static void del_released(dy_op *op)
{
	op->released = 1;
	del_finished(op, 1, NULL);
}

/* The end of a deletion. Once it is confirmed, and only then, the leases
 * of the sandbox are released (its secrets deleted). */
static void del_finished(dy_op *op, int confirmed, const char *why)
{
	json_t *j, *pending;
	char *s, note[700];

	dy__box_forget(op->d, op->id);
	if (confirmed && !op->released) {
		dy__sec_release_box(op, del_released);
		return;
	}
	dy__sec_note(op, note, sizeof(note));
	if (op->kind == DY_DESTROY && confirmed) {
		j = json_pack("{s:s, s:s}", "id", op->id, "state", "destroyed");
		if (j && (pending = dy__sec_pending(op)))
			json_object_set_new(j, "cleanup_pending", pending);
		s = j ? json_dumps(j, JSON_COMPACT) : NULL;
		dy__op_finish(op, SR_OK, s, NULL, 0, NULL);
		free(s);
		json_decref(j);
	} else if (op->kind == DY_DESTROY) {
		dy__op_finish(op, op->err_status, NULL, NULL, 0,
			      "daytona: sandbox '%s': not destroyed: %s", op->id, why);
	} else if (op->kind == DY_PARK && confirmed) {
		/* The sandbox is gone: SR_ENOTFOUND, so the session forgets it. */
		j = json_pack("{s:s, s:s, s:b}", "id", op->id, "state", "destroyed", "deleted", 1);
		if (j && (pending = dy__sec_pending(op)))
			json_object_set_new(j, "cleanup_pending", pending);
		s = j ? json_dumps(j, JSON_COMPACT) : NULL;
		dy__op_finish(op, SR_ENOTFOUND, s, NULL, 0,
			      "daytona: sandbox '%s': %s; deleted instead of parked%s", op->id,
			      op->first_error, note);
		free(s);
		json_decref(j);
	} else if (confirmed) {
		dy__op_finish(op, op->err_status, NULL, NULL, 0,
			      "daytona: sandbox '%s': %s; the sandbox was deleted%s", op->id,
			      op->first_error, note);
	} else {
		dy__op_finish(op, op->err_status, NULL, NULL, 0,
			      "daytona: sandbox '%s': %s; deleting it failed too: %s%s", op->id,
			      op->first_error, why, op->sec ? "; its secrets are kept until "
			      "its deletion is confirmed (`sandrun janitor`)" : "");
	}
}

/* The sandbox's sandrun.lease label, from a record (a DELETE's answer or a
 * GET's): it names the lease even when a crash kept its id out of it. */
static void note_lease_label(dy_op *op, json_t *rec)
{
	const char *l = json_string_value(json_object_get(json_object_get(rec, "labels"),
							  DY_LEASE_LABEL));

	if (l && dy__valid_id(l) && strlen(l) < sizeof(op->lease_hint))
		snprintf(op->lease_hint, sizeof(op->lease_hint), "%s", l);
}

static void del_retry_or_fail(dy_op *op, const dy_resp *r, dy_step again)
{
	char why[600];

	if (r->status != SR_OK)
		snprintf(why, sizeof(why), "%s: %s", op->what,
			 r->why ? r->why : op->d->host->strerror(r->status));
	else
		snprintf(why, sizeof(why), "%s: HTTP %d%s%s", op->what, r->http,
			 r->why ? ": " : "", r->why ? r->why : "");
	if (dy__now_ms() >= op->deadline_ms) {
		if (op->kind == DY_DESTROY)
			op->err_status = r->status != SR_OK ? r->status : SR_ETIMEDOUT;
		del_finished(op, 0, why);
		return;
	}
	dy__wait(op, backoff(op), again);
}

static void del_answer(dy_op *op, const dy_resp *r)
{
	if (r->status == SR_OK && r->http < 300)
		note_lease_label(op, r->json);
	if (r->status == SR_OK && r->http == 404) {
		del_finished(op, 1, NULL);
		return;
	}
	if (r->status == SR_OK && r->http < 300) {
		op->delay_ms = 250;
		dy__wait(op, backoff(op), del_confirm);
		return;
	}
	/* 409: another state change is in progress; 5xx and timeouts may
	 * pass. Both are tried again until the deadline. */
	if (transient(r) || r->http == 409) {
		del_retry_or_fail(op, r, del_send);
		return;
	}
	if (op->kind == DY_DESTROY) {
		dy__op_fail(op, r);
		return;
	}
	{
		char why[600];
		snprintf(why, sizeof(why), "%s: HTTP %d%s%s", op->what, r->http,
			 r->why ? ": " : "", r->why ? r->why : "");
		del_finished(op, 0, why);
	}
}

static void del_confirmed(dy_op *op, const dy_resp *r)
{
	const char *st;

	if (r->status == SR_OK && r->http == 404) {
		del_finished(op, 1, NULL);
		return;
	}
	st = r->status == SR_OK && r->http == 200 ? rec_state(r->json) : NULL;
	if (st)
		note_lease_label(op, r->json);
	if (st && strcmp(st, "destroyed") == 0) {
		del_finished(op, 1, NULL);
		return;
	}
	if (dy__now_ms() >= op->deadline_ms) {
		op->err_status = SR_ETIMEDOUT;
		del_finished(op, 0, "the deletion was not confirmed in time (no 404)");
		return;
	}
	dy__wait(op, backoff(op), del_confirm);
}

static void del_confirm(dy_op *op, const dy_resp *unused)
{
	(void)unused;
	get_record(op, del_confirmed);
}

static void del_send(dy_op *op, const dy_resp *unused)
{
	char *url = dy__url(op->d, "/sandbox/%s", op->id);

	(void)unused;
	if (!url) {
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return;
	}
	dy__api(op, "DELETE", url, NULL, NULL, 0, 0, del_answer);
	free(url);
}

/* Delete op's sandbox after failure (status, message in first_error). */
static void delete_after(dy_op *op, int status)
{
	op->err_status = status;
	op->fell_back = 1;
	op->delay_ms = 250;
	op->deadline_ms = dy__now_ms() + op->d->destroy_timeout_ms;
	dy__chans_end(op->d, op->id, "the sandbox is being deleted");
	del_send(op, NULL);
}

int dy__destroy(void *self, uint64_t req, const char *id, sr_done_fn done,
		void *ud)
{
	dy *d = self;
	dy_op *op;
	char *url;
	int rc;

	if (!dy__valid_id(id))
		return dy__complete_now(d, done, ud, SR_EINVAL,
					"daytona: invalid sandbox id '%s'", id ? id : "");
	if (!(op = dy__op_new(d, DY_DESTROY, req, id, done, ud)))
		return SR_ENOMEM;
	op->err_status = SR_EHTTP;
	op->deadline_ms = dy__now_ms() + d->destroy_timeout_ms;
	dy__chans_end(d, id, "the sandbox is being destroyed");
	if (!(url = dy__url(d, "/sandbox/%s", id)))
		return dy__op_start(op, SR_ENOMEM);
	rc = dy__api(op, "DELETE", url, NULL, NULL, 0, 0, del_answer);
	free(url);
	return dy__op_start(op, rc);
}

/* ------------------------------------------------------------ create */

static void create_polled(dy_op *op, const dy_resp *r);

static void create_poll(dy_op *op, const dy_resp *unused)
{
	(void)unused;
	get_record(op, create_polled);
}

static void workspace_made(dy_op *op, const dy_resp *r)
{
	if (r->status == SR_OK && (r->http < 300 || r->http == 409)) {
		finish_acquired(op, NULL);
		return;
	}
	snprintf(op->first_error, sizeof(op->first_error), "%s: %s%d%s%s", op->what,
		 r->status != SR_OK ? op->d->host->strerror(r->status) : "HTTP ",
		 r->status != SR_OK ? 0 : r->http, r->why ? ": " : "", r->why ? r->why : "");
	delete_after(op, r->status != SR_OK ? r->status : dy__http_error(r->http));
}

static void make_workspace(dy_op *op, const dy_resp *unused)
{
	dy_box *b = dy__box(op->d, op->id);
	char *path = b && b->workspace ? dy__urlenc(b->workspace) : NULL;
	const char *tb = b ? b->toolbox : NULL;
	char *url;

	(void)unused;
	if (!tb) {
		snprintf(op->first_error, sizeof(op->first_error),
			 "its record has no toolboxProxyUrl");
		free(path);
		delete_after(op, SR_EPROTO);
		return;
	}
	url = path ? malloc(strlen(tb) + strlen(path) + 64) : NULL;
	if (!url) {
		free(path);
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return;
	}
	sprintf(url, "%s/files/folder?path=%s&mode=755", tb, path);
	dy__api(op, "POST", url, NULL, NULL, 0, 0, workspace_made);
	free(url);
	free(path);
}

static void create_state(dy_op *op)
{
	const char *st = rec_state(op->rec);

	progress(op);
	if (st && strcmp(st, "started") == 0) {
		dy__box_set(op->d, op->id, op->rec);
		if (!dy__box_toolbox(op->d, op->id)) {
			snprintf(op->first_error, sizeof(op->first_error),
				 "its record has no toolboxProxyUrl");
			delete_after(op, SR_EPROTO);
			return;
		}
		dy__ensure_home(op, make_workspace);
		return;
	}
	if (is_failed(st) || is_gone(st)) {
		snprintf(op->first_error, sizeof(op->first_error), "create ended in state '%s' (%s)",
			 st, rec_reason(op->rec));
		delete_after(op, SR_EIO);
		return;
	}
	if (dy__now_ms() >= op->deadline_ms) {
		snprintf(op->first_error, sizeof(op->first_error),
			 "not started after %llu s (state '%s')",
			 (unsigned long long)(op->d->start_timeout_ms / 1000), st ? st : "?");
		delete_after(op, SR_ETIMEDOUT);
		return;
	}
	dy__wait(op, backoff(op), create_poll);
}

static void create_polled(dy_op *op, const dy_resp *r)
{
	if (r->status == SR_OK && r->http == 200) {
		keep_record(op, r->json);
		create_state(op);
		return;
	}
	if (transient(r) && dy__now_ms() < op->deadline_ms) {
		dy__wait(op, backoff(op), create_poll);
		return;
	}
	snprintf(op->first_error, sizeof(op->first_error), "%s: %s%s%s", op->what,
		 r->status != SR_OK ? op->d->host->strerror(r->status) : "HTTP error",
		 r->why ? ": " : "", r->why ? r->why : "");
	delete_after(op, r->status != SR_OK ? r->status : dy__http_error(r->http));
}

/* A create with secrets whose POST /sandbox failed: the sandbox may exist
 * all the same (a timeout, a 5xx). It is looked up by its sandrun.lease
 * label: found, it is deleted, then the secrets; not found, the secrets
 * are deleted; the lookup failing, the lease is left to maintain. */
static void box_looked_up(dy_op *op, const dy_resp *r)
{
	const char *lease = dy__sec_lease_id(op->sec);
	json_t *items, *it;
	char why[600];
	size_t i;

	if (r->status != SR_OK || r->http != 200) {
		snprintf(why, sizeof(why), "whether the sandbox was created is unknown (%s: %s)",
			 op->what, r->why ? r->why : r->status != SR_OK ?
			 op->d->host->strerror(r->status) : "HTTP error");
		dy__sec_abandon(op, why);
		return;
	}
	items = json_is_array(r->json) ? r->json : json_object_get(r->json, "items");
	json_array_foreach(items, i, it) {
		const char *id = json_string_value(json_object_get(it, "id"));
		const char *l = json_string_value(json_object_get(json_object_get(it, "labels"),
								  DY_LEASE_LABEL));
		if (!dy__valid_id(id) || !l || strcmp(l, lease) != 0 ||
		    is_gone(rec_state(it)))
			continue;
		free(op->id);
		if (!(op->id = strdup(id))) {
			dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
			return;
		}
		dy__sec_box_created(op, op->id);
		delete_after(op, op->err_status);
		return;
	}
	dy__sec_abort(op);
}

static void create_failed_with_secrets(dy_op *op, const dy_resp *r, int status)
{
	json_t *lbl = json_pack("{s:s}", DY_LEASE_LABEL, dy__sec_lease_id(op->sec));
	char *s = lbl ? json_dumps(lbl, JSON_COMPACT) : NULL;
	char *enc = s ? dy__urlenc(s) : NULL;
	char *url = enc ? dy__url(op->d, "/sandbox?labels=%s&limit=100", enc) : NULL;

	if (r->status != SR_OK)
		snprintf(op->first_error, sizeof(op->first_error), "%s: %s", op->what,
			 r->why ? r->why : op->d->host->strerror(r->status));
	else
		snprintf(op->first_error, sizeof(op->first_error), "%s: HTTP %d%s%.400s",
			 op->what, r->http, r->why ? ": " : "", r->why ? r->why : "");
	op->err_status = status;
	dy__sec_failed(op, status, "daytona: %s", op->first_error);
	if (url && (transient(r) || (r->http >= 200 && r->http < 300)))
		dy__api(op, "GET", url, NULL, NULL, 0, 16u << 20, box_looked_up);
	else if (url)
		dy__sec_abort(op); /* refused: no sandbox was made */
	else
		dy__sec_abandon(op, "out of memory");
	json_decref(lbl);
	free(s);
	free(enc);
	free(url);
}

static void created(dy_op *op, const dy_resp *r)
{
	const char *id;

	if (r->status != SR_OK || r->http >= 300) {
		if (op->sec)
			create_failed_with_secrets(op, r, r->status != SR_OK ? r->status :
						   dy__http_fail_status(r->http, r->why));
		else
			dy__op_fail(op, r);
		return;
	}
	id = json_string_value(json_object_get(r->json, "id"));
	if (!id || !dy__valid_id(id)) {
		if (op->sec)
			create_failed_with_secrets(op, r, SR_EPROTO);
		else
			dy__op_finish(op, SR_EPROTO, NULL, NULL, 0,
				      "daytona: POST /sandbox: HTTP %d without a valid sandbox id",
				      r->http);
		return;
	}
	free(op->id);
	op->id = strdup(id);
	if (!op->id) {
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return;
	}
	if (op->sec)
		dy__sec_box_created(op, op->id);
	keep_record(op, r->json);
	create_state(op);
}

/* Split an allow list into CIDRs and host names, each comma-joined and
 * sorted; SR_EINVAL names a bad entry in why. */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int looks_like_cidr(const char *s)
{
	size_t digits = strspn(s, "0123456789.:abcdefABCDEF/");

	return s[digits] == 0 && (strchr(s, '/') || strspn(s, "0123456789.") == strlen(s) ||
				  strchr(s, ':'));
}

static char *join_sorted(const char **v, size_t n)
{
	size_t len = 1;
	char *out;

	qsort(v, n, sizeof(*v), cmp_str);
	for (size_t i = 0; i < n; i++)
		len += strlen(v[i]) + 1;
	if (!(out = malloc(len)))
		return NULL;
	len = 0;
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(v[i]);
		if (i)
			out[len++] = ',';
		memcpy(out + len, v[i], l);
		len += l;
	}
	out[len] = 0;
	return out;
}

static int split_policy(dy_op *op, const sr_network_policy *np, char *why, size_t whylen)
{
	const char **cidrs, **hosts;
	size_t nc = 0, nh = 0;
	char norm[4096];

	op->has_policy = np != NULL;
	if (!np)
		return SR_OK;
	if (np->size < SR_TABLE_HAS(sr_network_policy, n_allow)) {
		snprintf(why, whylen, "daytona: network policy of size %u is too small", np->size);
		return SR_EINVAL;
	}
	if (np->mode != SR_NET_OPEN && np->mode != SR_NET_OFF && np->mode != SR_NET_ALLOWLIST) {
		snprintf(why, whylen, "daytona: unknown network mode %d", np->mode);
		return SR_EINVAL;
	}
	op->net_block = np->mode == SR_NET_OFF;
	if (np->mode != SR_NET_ALLOWLIST)
		return SR_OK;
	if (np->n_allow == 0 || !np->allow) {
		snprintf(why, whylen, "daytona: network mode 'allowlist' with an empty list "
			 "(use mode 'off' for no network)");
		return SR_EINVAL;
	}
	cidrs = calloc(np->n_allow, sizeof(*cidrs));
	hosts = calloc(np->n_allow, sizeof(*hosts));
	if (!cidrs || !hosts) {
		free(cidrs);
		free(hosts);
		return SR_ENOMEM;
	}
	for (size_t i = 0; i < np->n_allow; i++) {
		const char *a = np->allow[i];
		if (!a || !*a || strcspn(a, ", \t\r\n") != strlen(a)) {
			snprintf(why, whylen, "daytona: network allow entry '%s' is not a CIDR or a "
				 "host name", a ? a : "");
			free(cidrs);
			free(hosts);
			return SR_EINVAL;
		}
		if (looks_like_cidr(a))
			cidrs[nc++] = a;
		else
			hosts[nh++] = a;
	}
	(void)norm;
	op->net_cidrs = nc ? join_sorted(cidrs, nc) : NULL;
	op->net_domains = nh ? join_sorted(hosts, nh) : NULL;
	free(cidrs);
	free(hosts);
	if ((nc && !op->net_cidrs) || (nh && !op->net_domains))
		return SR_ENOMEM;
	return SR_OK;
}

/* CIDRs without a prefix length get /32: Daytona takes CIDRs only. */
static json_t *cidr_list(const char *joined)
{
	char buf[8192], *tok, *save;
	json_t *out;
	char *res;
	size_t n = 0;

	snprintf(buf, sizeof(buf), "%s", joined);
	res = calloc(1, strlen(joined) * 2 + 64);
	if (!res)
		return NULL;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		n += (size_t)sprintf(res + n, "%s%s%s", n ? "," : "", tok,
				     strchr(tok, '/') ? "" : (strchr(tok, ':') ? "/128" : "/32"));
	}
	out = json_string(res);
	free(res);
	return out;
}

static void policy_fields(dy_op *op, json_t *body)
{
	json_object_set_new(body, "networkBlockAll", json_boolean(op->net_block));
	if (op->net_cidrs)
		json_object_set_new(body, "networkAllowList", cidr_list(op->net_cidrs));
	if (op->net_domains)
		json_object_set_new(body, "domainAllowList", json_string(op->net_domains));
}

static json_t *pairs_object(const sr_pair *p, size_t n)
{
	json_t *o = json_object();

	for (size_t i = 0; o && i < n; i++)
		if (p[i].name && p[i].value)
			json_object_set_new(o, p[i].name, json_string(p[i].value));
	return o;
}

/* POST /sandbox with op->body (a create with secrets, once they exist). */
static int post_create(dy_op *op)
{
	char *url = dy__url(op->d, "/sandbox");
	int rc;

	if (!url) {
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
		return SR_ENOMEM;
	}
	op->deadline_ms = dy__now_ms() + op->d->start_timeout_ms;
	rc = dy__api_json(op, "POST", url, op->body, created);
	free(url);
	return rc;
}

int dy__create(void *self, uint64_t req, const sr_sandbox_spec *spec,
	       sr_done_fn done, void *ud)
{
	dy *d = self;
	const sr_network_policy *np;
	char why[512];
	char *url;
	dy_op *op;
	dy_sec *sec = NULL;
	json_t *body;
	int rc;

	if (!spec || spec->size < SR_TABLE_HAS(sr_sandbox_spec, n_labels))
		return dy__complete_now(d, done, ud, SR_EINVAL, "daytona: sandbox spec too small");
	if (spec->n_credentials && !spec->credentials)
		return dy__complete_now(d, done, ud, SR_EINVAL, "daytona: %zu credential bindings "
					"announced, none given", spec->n_credentials);
	if (spec->n_credentials && !d->secrets_on)
		return dy__complete_now(d, done, ud, SR_EUNSUPPORTED,
					"daytona: credential bindings need Daytona secrets, turned "
					"off here ([provider.daytona] secrets = off)");
	for (size_t i = 0; i < spec->n_env; i++)
		if (!spec->env[i].name || !*spec->env[i].name || !spec->env[i].value)
			return dy__complete_now(d, done, ud, SR_EINVAL,
						"daytona: environment entry %zu has no name or value", i);
	if (spec->n_credentials &&
	    (rc = dy__sec_plan(d, spec, &sec, why, sizeof(why))) != SR_OK) {
		dy__sec_free(sec);
		return rc == SR_EINVAL ? dy__complete_now(d, done, ud, rc, "%s", why) : rc;
	}
	if (!(op = dy__op_new(d, DY_CREATE, req, NULL, done, ud))) {
		dy__sec_free(sec);
		return SR_ENOMEM;
	}
	op->sec = sec;
	np = spec->network;
	rc = split_policy(op, np, why, sizeof(why));
	if (rc != SR_OK) {
		dy__op_free(op);
		return rc == SR_EINVAL ? dy__complete_now(d, done, ud, rc, "%s", why) : rc;
	}
	body = json_object();
	if (spec->image || d->snapshot)
		json_object_set_new(body, "snapshot", json_string(spec->image ? spec->image :
								  d->snapshot));
	if (d->target)
		json_object_set_new(body, "target", json_string(d->target));
	json_object_set_new(body, "env", pairs_object(spec->env, spec->n_env));
	json_object_set_new(body, "labels", pairs_object(spec->labels, spec->n_labels));
	json_object_set_new(body, "autoStopInterval", json_integer(d->auto_stop_minutes));
	if (np)
		policy_fields(op, body);
	op->deadline_ms = dy__now_ms() + d->start_timeout_ms;
	if (sec) {
		/* The secrets first (and the lease before them), then the sandbox. */
		json_object_set_new(json_object_get(body, "labels"), DY_LEASE_LABEL,
				    json_string(dy__sec_lease_id(sec)));
		op->body = body;
		return dy__op_start(op, dy__sec_start(op, post_create));
	}
	url = dy__url(d, "/sandbox");
	rc = url ? dy__api_json(op, "POST", url, body, created) : SR_ENOMEM;
	free(url);
	json_decref(body);
	return dy__op_start(op, rc);
}

/* --------------------------------------------------------- reconnect */

static void reconnect_polled(dy_op *op, const dy_resp *r);

static void reconnect_poll(dy_op *op, const dy_resp *unused)
{
	(void)unused;
	get_record(op, reconnect_polled);
}

static char *norm_list(const char *s)
{
	const char *v[256];
	char buf[8192], *tok, *save;
	size_t n = 0;

	if (!s || !*s)
		return NULL;
	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ", ", &save); tok && n < 256; tok = strtok_r(NULL, ", ", &save))
		v[n++] = tok;
	return n ? join_sorted(v, n) : NULL;
}

static int same_list(const char *a, const char *b)
{
	char *na = norm_list(a), *nb = norm_list(b);
	int same = (!na && !nb) || (na && nb && strcmp(na, nb) == 0);

	free(na);
	free(nb);
	return same;
}

static int policy_differs(dy_op *op)
{
	json_t *rec = op->rec;
	json_t *want_cidrs = op->net_cidrs ? cidr_list(op->net_cidrs) : NULL;
	int differs;

	differs = json_is_true(json_object_get(rec, "networkBlockAll")) != op->net_block ||
		  !same_list(json_string_value(json_object_get(rec, "networkAllowList")),
			     json_string_value(want_cidrs)) ||
		  !same_list(json_string_value(json_object_get(rec, "domainAllowList")),
			     op->net_domains);
	json_decref(want_cidrs);
	return differs;
}

/* Whether one of this runner's live channels holds session sid. */
static int own_session(dy *d, const char *sid)
{
	for (dy_chan *c = d->chans; c; c = c->next)
		if (strcmp(c->sid, sid) == 0)
			return 1;
	return 0;
}

/* A reconnected sandbox runs nothing of an earlier runner: sessions this
 * plugin made (sandrun-*) that no live channel holds belonged to a runner
 * that ended without parking (killed mid-turn); their agent and watch would
 * go on calling tools. Deleting a session ends its commands. Best effort:
 * a failure is logged and the reconnect goes on. */
static void sessions_listed(dy_op *op, const dy_resp *r)
{
	const char *toolbox = dy__box_toolbox(op->d, op->id);
	json_t *s;
	size_t i, n = 0;

	if (r->status != SR_OK || r->http != 200 || !json_is_array(r->json)) {
		op->d->host->log(op->d->host, SR_LOG_WARN,
				 "daytona: sandbox '%s': cannot list its sessions (%s); an "
				 "earlier runner's processes may still run", op->id,
				 r->why ? r->why : "no answer");
	} else {
		json_array_foreach(r->json, i, s) {
			const char *sid = json_string_value(json_object_get(s, "sessionId"));
			char url[1024];
			if (!sid || strncmp(sid, "sandrun-", 8) != 0 || own_session(op->d, sid) ||
			    !toolbox)
				continue;
			snprintf(url, sizeof(url), "%s/process/session/%s", toolbox, sid);
			if (dy__fire_and_forget(op->d, "DELETE", url, NULL) == SR_OK)
				n++;
		}
		if (n)
			op->d->host->log(op->d->host, SR_LOG_WARN,
					 "daytona: sandbox '%s': ended %zu session(s) of an "
					 "earlier runner", op->id, n);
	}
	dy__ensure_home(op, finish_acquired);
}

static void reap_sessions(dy_op *op)
{
	const char *toolbox = dy__box_toolbox(op->d, op->id);
	char url[1024];

	if (!toolbox) {
		dy__ensure_home(op, finish_acquired);
		return;
	}
	snprintf(url, sizeof(url), "%s/process/session", toolbox);
	dy__api(op, "GET", url, NULL, NULL, 0, 1 << 20, sessions_listed);
}

static void converged(dy_op *op, const dy_resp *r)
{
	if (r->status != SR_OK || r->http >= 300) {
		dy__op_fail(op, r);
		return;
	}
	reap_sessions(op);
}

static void converge(dy_op *op)
{
	json_t *body;

	dy__box_set(op->d, op->id, op->rec);
	if (!dy__box_toolbox(op->d, op->id)) {
		dy__op_finish(op, SR_EPROTO, NULL, NULL, 0,
			      "daytona: sandbox '%s': its record has no toolboxProxyUrl", op->id);
		return;
	}
	if (!op->has_policy || !policy_differs(op)) {
		reap_sessions(op);
		return;
	}
	body = json_object();
	policy_fields(op, body);
	/* Fields not asked for are cleared: the policy is the whole truth. */
	if (!op->net_cidrs)
		json_object_set_new(body, "networkAllowList", json_string(""));
	if (!op->net_domains)
		json_object_set_new(body, "domainAllowList", json_string(""));
	post_sandbox(op, "network-settings", body, converged);
	json_decref(body);
}

static void start_sent(dy_op *op, const dy_resp *r)
{
	/* 409: a state change is already under way; the poll sees it end. */
	if (r->status == SR_OK && (r->http < 300 || r->http == 409)) {
		dy__wait(op, backoff(op), reconnect_poll);
		return;
	}
	dy__op_fail(op, r);
}

static void reconnect_state(dy_op *op)
{
	const char *st = rec_state(op->rec);

	progress(op);
	if (st && strcmp(st, "started") == 0) {
		converge(op);
		return;
	}
	if (is_failed(st) || is_gone(st)) {
		dy__op_finish(op, SR_ENOTFOUND, NULL, NULL, 0,
			      "daytona: sandbox '%s': state '%s' (%s): it cannot be reconnected",
			      op->id, st, rec_reason(op->rec));
		return;
	}
	if (dy__now_ms() >= op->deadline_ms) {
		dy__op_finish(op, SR_ETIMEDOUT, NULL, NULL, 0,
			      "daytona: sandbox '%s': not started after %llu s (state '%s'); "
			      "transient, it may be tried again", op->id,
			      (unsigned long long)(op->d->start_timeout_ms / 1000), st ? st : "?");
		return;
	}
	if (is_stopped(st) && !op->attempts++) {
		post_sandbox(op, "start", NULL, start_sent);
		return;
	}
	dy__wait(op, backoff(op), reconnect_poll);
}

static void reconnect_polled(dy_op *op, const dy_resp *r)
{
	if (r->status == SR_OK && r->http == 200) {
		keep_record(op, r->json);
		reconnect_state(op);
		return;
	}
	if (r->status == SR_OK && r->http == 404) {
		dy__box_forget(op->d, op->id);
		dy__op_finish(op, SR_ENOTFOUND, NULL, NULL, 0,
			      "daytona: sandbox '%s': not found (%s: HTTP 404)", op->id, op->what);
		return;
	}
	if (transient(r)) {
		dy__op_finish(op, r->status != SR_OK ? r->status : SR_EHTTP, NULL, NULL, 0,
			      "daytona: sandbox '%s': %s: %s%s; transient, it may be tried again",
			      op->id, op->what,
			      r->status != SR_OK ? op->d->host->strerror(r->status) : "server error",
			      r->http ? (r->http >= 500 ? " (HTTP 5xx)" : " (HTTP 429)") : "");
		return;
	}
	dy__op_fail(op, r);
}

int dy__reconnect(void *self, uint64_t req, const char *id,
		  const sr_network_policy *policy, sr_done_fn done, void *ud)
{
	dy *d = self;
	char why[512];
	dy_op *op;
	int rc;

	if (!dy__valid_id(id))
		return dy__complete_now(d, done, ud, SR_EINVAL,
					"daytona: invalid sandbox id '%s'", id ? id : "");
	if (!(op = dy__op_new(d, DY_RECONNECT, req, id, done, ud)))
		return SR_ENOMEM;
	rc = split_policy(op, policy, why, sizeof(why));
	if (rc != SR_OK) {
		dy__op_free(op);
		return rc == SR_EINVAL ? dy__complete_now(d, done, ud, rc, "%s", why) : rc;
	}
	op->deadline_ms = dy__now_ms() + d->start_timeout_ms;
	return dy__op_start(op, get_record(op, reconnect_polled));
}

/* -------------------------------------------------------------- park */

static void park_polled(dy_op *op, const dy_resp *r);

static void park_poll(dy_op *op, const dy_resp *unused)
{
	(void)unused;
	get_record(op, park_polled);
}

static void park_fall_back(dy_op *op, int status, const char *fmt, const char *a,
			   const char *b)
{
	snprintf(op->first_error, sizeof(op->first_error), fmt, a, b);
	op->d->host->log(op->d->host, SR_LOG_WARN, "sandbox '%s': %s; deleting it instead",
			 op->id, op->first_error);
	delete_after(op, status);
}

static void parked(dy_op *op, const char *state)
{
	json_t *j = json_pack("{s:s, s:s}", "id", op->id, "state", state);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	dy__op_finish(op, SR_OK, s, NULL, 0, NULL);
	free(s);
	json_decref(j);
}

static void stop_sent(dy_op *op, const dy_resp *r)
{
	char code[32];

	if (r->status == SR_OK && (r->http < 300 || r->http == 409)) {
		op->deadline_ms = dy__now_ms() + op->d->stable_timeout_ms;
		dy__wait(op, op->d->poll_ms, park_poll);
		return;
	}
	snprintf(code, sizeof(code), "HTTP %d", r->http);
	park_fall_back(op, SR_EHTTP, "stop failed: %s", r->status != SR_OK ?
		       op->d->host->strerror(r->status) : code, NULL);
}

static void park_state(dy_op *op)
{
	const char *st = rec_state(op->rec);

	if (is_gone(st)) {
		dy__box_forget(op->d, op->id);
		dy__op_finish(op, SR_ENOTFOUND, NULL, NULL, 0,
			      "daytona: sandbox '%s': already %s", op->id, st);
		return;
	}
	if (is_failed(st)) {
		park_fall_back(op, SR_ESTATE, "state '%s' (%s) cannot be parked", st,
			       rec_reason(op->rec));
		return;
	}
	if (op->park_mode == SR_PARK_RUNNING && !is_transitional(st)) {
		parked(op, dy__state_name(st));
		return;
	}
	if (is_stopped(st)) {
		parked(op, "stopped");
		return;
	}
	if (st && strcmp(st, "started") == 0 && !op->attempts++) {
		post_sandbox(op, "stop", NULL, stop_sent);
		return;
	}
	if (dy__now_ms() >= op->deadline_ms) {
		park_fall_back(op, SR_ETIMEDOUT, "no stable state after %s s (state '%s')",
			       op->d->stable_timeout_ms >= 10000 ? "10" : "a few", st ? st : "?");
		return;
	}
	dy__wait(op, op->d->poll_ms, park_poll);
}

static void park_polled(dy_op *op, const dy_resp *r)
{
	char code[32];

	if (r->status == SR_OK && r->http == 200) {
		keep_record(op, r->json);
		park_state(op);
		return;
	}
	if (r->status == SR_OK && r->http == 404) {
		dy__box_forget(op->d, op->id);
		dy__op_finish(op, SR_ENOTFOUND, NULL, NULL, 0,
			      "daytona: sandbox '%s': not found (%s: HTTP 404)", op->id, op->what);
		return;
	}
	snprintf(code, sizeof(code), "HTTP %d", r->http);
	park_fall_back(op, r->status != SR_OK ? r->status : SR_EHTTP, "%s: %s", op->what,
		       r->status != SR_OK ? op->d->host->strerror(r->status) : code);
}

int dy__park(void *self, uint64_t req, const char *id, int mode,
	     sr_done_fn done, void *ud)
{
	dy *d = self;
	dy_op *op;

	if (!dy__valid_id(id))
		return dy__complete_now(d, done, ud, SR_EINVAL,
					"daytona: invalid sandbox id '%s'", id ? id : "");
	if (mode != SR_PARK_RUNNING && mode != SR_PARK_STOPPED)
		return dy__complete_now(d, done, ud, SR_EINVAL, "daytona: unknown park mode %d",
					mode);
	if (!(op = dy__op_new(d, DY_PARK, req, id, done, ud)))
		return SR_ENOMEM;
	op->park_mode = mode;
	op->deadline_ms = dy__now_ms() + d->stable_timeout_ms;
	if (mode == SR_PARK_STOPPED)
		dy__chans_end(d, id, "the sandbox is being parked stopped");
	return dy__op_start(op, get_record(op, park_polled));
}

/* -------------------------------------------------------------- list */

static int labels_match(json_t *have, json_t *want)
{
	const char *k;
	json_t *v;

	json_object_foreach(want, k, v) {
		const char *h = json_string_value(json_object_get(have, k));
		if (!h || strcmp(h, json_string_value(v)) != 0)
			return 0;
	}
	return 1;
}

static int list_page(dy_op *op, const char *cursor);


/* "created" (Unix seconds) from the record's createdAt (ISO 8601, UTC), for
 * janitors; left out when the record has none or it does not parse. */
static void add_created(json_t *item, json_t *rec)
{
	const char *at = json_string_value(json_object_get(rec, "createdAt"));
	struct tm tm;
	const char *end;

	if (!item || !at)
		return;
	memset(&tm, 0, sizeof(tm));
	end = strptime(at, "%Y-%m-%dT%H:%M:%S", &tm);
	if (end && (*end == '.' || *end == 'Z' || *end == '\0' || *end == '+'))
		json_object_set_new(item, "created", json_integer((json_int_t)timegm(&tm)));
}

static void list_got(dy_op *op, const dy_resp *r)
{
	json_t *items, *it;
	const char *cursor;
	size_t i;
	char *s;

	if (r->status != SR_OK || r->http != 200) {
		dy__op_fail(op, r);
		return;
	}
	items = json_is_array(r->json) ? r->json : json_object_get(r->json, "items");
	json_array_foreach(items, i, it) {
		const char *id = json_string_value(json_object_get(it, "id"));
		json_t *labels = json_object_get(it, "labels");
		if (!id || !labels_match(labels, op->body))
			continue;
		json_t *item = json_pack("{s:s, s:s, s:s, s:o}", "id", id, "state",
			dy__state_name(rec_state(it)), "daytona_state",
			rec_state(it) ? rec_state(it) : "unknown",
			"labels", json_is_object(labels) ? json_incref(labels) : json_object());
		add_created(item, it);
		json_array_append_new(op->acc, item);
	}
	cursor = json_string_value(json_object_get(r->json, "nextCursor"));
	if (cursor && *cursor && json_array_size(items) && ++op->attempts < 100) {
		list_page(op, cursor);
		return;
	}
	s = json_dumps(op->acc, JSON_COMPACT);
	dy__op_finish(op, s ? SR_OK : SR_ENOMEM, s, NULL, 0, s ? NULL : "daytona: out of memory");
	free(s);
}

static int list_page(dy_op *op, const char *cursor)
{
	char *labels = json_dumps(op->body, JSON_COMPACT);
	char *enc = labels ? dy__urlenc(labels) : NULL;
	char *cur = cursor ? dy__urlenc(cursor) : NULL;
	char *url = enc ? dy__url(op->d, "/sandbox?labels=%s%s%s", enc, cur ? "&cursor=" : "",
				  cur ? cur : "") : NULL;
	int rc = url ? dy__api(op, "GET", url, NULL, NULL, 0, 16u << 20, list_got) : SR_ENOMEM;

	free(labels);
	free(enc);
	free(cur);
	free(url);
	return rc;
}

int dy__list(void *self, uint64_t req, const sr_pair *labels, size_t n_labels,
	     sr_done_fn done, void *ud)
{
	dy *d = self;
	dy_op *op = dy__op_new(d, DY_LIST, req, NULL, done, ud);

	if (!op)
		return SR_ENOMEM;
	op->body = pairs_object(labels, n_labels);
	op->acc = json_array();
	if (!op->body || !op->acc)
		return dy__op_start(op, SR_ENOMEM);
	return dy__op_start(op, list_page(op, NULL));
}

/* ------------------------------------------------------------ status */

static const char *net_name(json_t *rec)
{
	const char *a = json_string_value(json_object_get(rec, "networkAllowList"));
	const char *b = json_string_value(json_object_get(rec, "domainAllowList"));

	if (json_is_true(json_object_get(rec, "networkBlockAll")))
		return "off";
	return (a && *a) || (b && *b) ? "allowlist" : "open";
}

static void status_got(dy_op *op, const dy_resp *r)
{
	json_t *labels, *j;
	char *s;

	if (r->status == SR_OK && r->http == 404) {
		dy__op_finish(op, SR_ENOTFOUND, NULL, NULL, 0,
			      "daytona: sandbox '%s': not found (%s: HTTP 404)", op->id, op->what);
		return;
	}
	if (r->status != SR_OK || r->http != 200) {
		dy__op_fail(op, r);
		return;
	}
	labels = json_object_get(r->json, "labels");
	j = json_pack("{s:s, s:s, s:s, s:o, s:s}", "id", op->id, "state",
		      dy__state_name(rec_state(r->json)), "daytona_state",
		      rec_state(r->json) ? rec_state(r->json) : "unknown", "labels",
		      json_is_object(labels) ? json_incref(labels) : json_object(), "network",
		      net_name(r->json));
	add_created(j, r->json);
	if (j && is_failed(rec_state(r->json)))
		json_object_set_new(j, "error", json_string(rec_reason(r->json)));
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	dy__op_finish(op, s ? SR_OK : SR_ENOMEM, s, NULL, 0, s ? NULL : "daytona: out of memory");
	free(s);
	json_decref(j);
}

int dy__status(void *self, uint64_t req, const char *id, sr_done_fn done,
	       void *ud)
{
	dy *d = self;
	dy_op *op;

	if (!dy__valid_id(id))
		return dy__complete_now(d, done, ud, SR_EINVAL,
					"daytona: invalid sandbox id '%s'", id ? id : "");
	if (!(op = dy__op_new(d, DY_STATUS, req, id, done, ud)))
		return SR_ENOMEM;
	return dy__op_start(op, get_record(op, status_got));
}

/* ------------------------------------------------------------ doctor */

static void doctor_got(dy_op *op, const dy_resp *r)
{
	char detail[700];
	json_t *j;
	char *s;
	int ok = r->status == SR_OK && r->http == 200;

	if (ok)
		snprintf(detail, sizeof(detail), "%s answers; the API key is accepted",
			 op->d->api_url);
	else if (r->status == SR_OK && (r->http == 401 || r->http == 403))
		snprintf(detail, sizeof(detail), "%s refused the API key (HTTP %d)",
			 op->d->api_url, r->http);
	else if (r->status == SR_OK)
		snprintf(detail, sizeof(detail), "%s: GET /sandbox: HTTP %d%s%s", op->d->api_url,
			 r->http, r->why ? ": " : "", r->why ? r->why : "");
	else
		snprintf(detail, sizeof(detail), "%s is unreachable: %s", op->d->api_url,
			 r->why ? r->why : op->d->host->strerror(r->status));
	if (ok) {
		char sec[300];
		dy__sec_doctor(op->d, sec, sizeof(sec));
		snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail), "%s", sec);
	}
	j = json_pack("{s:b, s:s}", "ok", ok, "detail", detail);
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	dy__op_finish(op, SR_OK, s, NULL, 0, NULL);
	free(s);
	json_decref(j);
}

int dy__doctor(void *self, sr_done_fn done, void *ud)
{
	dy *d = self;
	dy_op *op;
	char *url;
	int rc;

	if (!d->api_key) {
		sr_result r = { sizeof(r), SR_OK, NULL,
				"{\"ok\":false,\"detail\":\"no API key: set api_key or api_key_file "
				"in [provider.daytona], or SANDRUN_PROVIDER_DAYTONA_API_KEY\"}",
				NULL, 0 };
		return d->host->complete(d->host, done, ud, &r);
	}
	if (!(op = dy__op_new(d, DY_DOCTOR, 0, NULL, done, ud)))
		return SR_ENOMEM;
	url = dy__url(d, "/sandbox?limit=1");
	rc = url ? dy__api(op, "GET", url, NULL, NULL, 0, 0, doctor_got) : SR_ENOMEM;
	free(url);
	return dy__op_start(op, rc);
}
