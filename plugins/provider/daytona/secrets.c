/* Credential bindings as Daytona secrets, and the leases that make them
 * durable (the record itself and the pure checks are in lease.c).
 *
 * create: the lease is written (kv_cas, create-only) before the first
 * POST /secret, naming every planned secret; each secret is created in
 * turn, its record checked (exactly the one host, a placeholder with the
 * expected prefix; otherwise it is deleted), and the lease updated; then
 * the sandbox is created with them linked through its "secrets" field
 * (never "env") and labelled sandrun.lease=<lease id>. A failure deletes
 * what was created, newest first, before the create fails.
 *
 * release: once a sandbox's deletion is confirmed (404), each of its
 * leases is claimed, its secrets deleted newest first (404 = already
 * gone), and the lease removed. A deletion that fails leaves the lease
 * cleanup_pending: a cleanup_pending event, a retry on the loop with
 * backoff, and destroy's "cleanup_pending" names.
 *
 * maintain: the organization's secrets with the prefix are listed (first,
 * so that a lease read afterwards names every secret of its own in that
 * list), then the leases; a lease whose sandbox exists is kept, one whose
 * sandbox is gone and older than the grace period is released, one
 * cleanup_pending is tried again; a secret with the prefix that no lease
 * names is "foreign" and never touched.
 *
 * Two processes (or two operations) never work on one lease at once: the
 * lease names its owner (pid, host, plugin instance), set and cleared by
 * compare-and-set; an owner that is still at work makes the others leave
 * the lease alone. Deleting twice is harmless anyway (404). */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "daytona.h"

#define RETRY_CAP_S 300       /* the backoff between two retries, at most */

typedef struct dy_cred {
	char *binding;   /* env name, or "<mcp server>/<header>" */
	char *env;       /* the sandbox's variable linked to the secret */
	char *host;
	char *secret;    /* the secret's name */
	char *value;     /* wiped on free */
	int header;
} dy_cred;

struct dy_sec {
	/* create */
	char lease_id[24], key[40];
	char *runner;
	dy_cred *creds;
	size_t n, i;
	size_t absent_from;   /* secrets from here on were never created */
	int (*post_sandbox)(dy_op *op);
	int fail_status;
	char fail_msg[1024];
	/* release */
	json_t *rel_keys;     /* the leases to release, in order */
	size_t rel_i;
	json_t *rel_lease;    /* the one being released (a copy) */
	json_t *rel_order;    /* its secrets to delete, newest first */
	size_t rel_j;
	json_t *rel_failed;   /* names of this lease whose deletion failed */
	char rel_error[512];
	size_t n_deleted;
	int released;         /* a release ran to its end */
	json_t *pending;      /* every name left cleanup_pending */
	void (*rel_then)(dy_op *op);
	char working[64];     /* the lease this op works on now, or "" */
	/* the organization's secrets: {name: id} of names starting with stem */
	json_t *listing;
	char stem[200];
	void (*list_then)(dy_op *op, int ok);
	int list_pages, list_fallback;
	char list_error[512];
	/* maintain */
	json_t *items;        /* the report, or NULL outside maintain */
	int dry_run;
	long long grace_s;
	json_t *leases;       /* [{"key", "lease" | "error"}] */
	size_t li;
	json_t *cur;          /* the lease maintain looks at (borrowed) */
};

static void wipe_free(char *s)
{
	if (!s)
		return;
	for (volatile char *p = s; *p; p++)
		*p = 0;
	free(s);
}

void dy__sec_free(dy_sec *sec)
{
	if (!sec)
		return;
	for (size_t i = 0; sec->creds && i < sec->n; i++) {
		free(sec->creds[i].binding);
		free(sec->creds[i].env);
		free(sec->creds[i].host);
		free(sec->creds[i].secret);
		wipe_free(sec->creds[i].value);
	}
	free(sec->creds);
	free(sec->runner);
	json_decref(sec->rel_keys);
	json_decref(sec->rel_lease);
	json_decref(sec->rel_order);
	json_decref(sec->rel_failed);
	json_decref(sec->pending);
	json_decref(sec->listing);
	json_decref(sec->items);
	json_decref(sec->leases);
	free(sec);
}

const char *dy__sec_lease_id(const dy_sec *sec)
{
	return sec->lease_id;
}

static dy_sec *sec_of(dy_op *op)
{
	if (!op->sec)
		op->sec = calloc(1, sizeof(*op->sec));
	return op->sec;
}

static long long now_s(void)
{
	return (long long)time(NULL);
}

static int transient(const dy_resp *r)
{
	return r->status != SR_OK || r->http >= 500 || r->http == 429;
}

/* "HTTP 500: message" or the transport's failure, for messages. */
static void resp_text(const dy_op *op, const dy_resp *r, char *buf, size_t n)
{
	if (r->status != SR_OK)
		snprintf(buf, n, "%s: %s", op->what, r->why ? r->why :
			 op->d->host->strerror(r->status));
	else
		snprintf(buf, n, "%s: HTTP %d%s%.300s", op->what, r->http, r->why ? ": " : "",
			 r->why ? r->why : "");
}

/* ------------------------------------------------------------ owners */

static json_t *owner_me(const dy *d)
{
	char host[256] = "";

	gethostname(host, sizeof(host) - 1);
	return json_pack("{s:I, s:s, s:s}", "pid", (json_int_t)getpid(), "host", host,
			 "instance", d->instance);
}

/* Whether the lease's owner is at work on it now, other than op: an
 * operation of this plugin instance in flight, or another live process on
 * this host. An owner on another host, or an earlier instance in this
 * process, is not (the grace period covers what cannot be told). */
static int owner_busy(const dy *d, json_t *lease, const char *key, const dy_op *op)
{
	json_t *owner = json_object_get(lease, "owner");
	const char *host = dy__lease_str(owner, "host");
	const char *inst = dy__lease_str(owner, "instance");
	json_int_t pid = json_integer_value(json_object_get(owner, "pid"));
	char me[256] = "";

	if (!json_is_object(owner) || pid <= 0 || !host)
		return 0;
	gethostname(me, sizeof(me) - 1);
	if (strcmp(host, me) != 0)
		return 0;
	if (pid == (json_int_t)getpid()) {
		if (!inst || strcmp(inst, d->instance) != 0)
			return 0;
		for (const dy_op *o = d->ops; o; o = o->next_op)
			if (o != op && o->sec && strcmp(o->sec->working, key) == 0)
				return 1;
		return 0;
	}
	return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* ------------------------------------------------------------ leases */

typedef int (*lease_fn)(dy_op *op, json_t *lease, void *arg);

/* Apply fn to the lease at key and store it, atomically against other
 * writers (compare-and-set, tried again when one came first).
 * SR_ENOTFOUND: no such lease; fn's status when it refused. *out
 * (optional): the stored record, a new reference. */
static int lease_update(dy_op *op, const char *key, lease_fn fn, void *arg, json_t **out)
{
	const sr_host *h = op->d->host;
	char why[256];
	int rc = SR_ESTATE;

	if (out)
		*out = NULL;
	for (int tries = 0; tries < 16 && rc == SR_ESTATE; tries++) {
		char *old = NULL, *text;
		size_t len = 0;
		json_t *l;

		if ((rc = h->kv_get(h, key, &old, &len)) != SR_OK)
			return rc;
		if ((rc = dy__lease_parse(old, len, &l, why, sizeof(why))) != SR_OK) {
			h->log(h, SR_LOG_WARN, "daytona: %s: %s; left alone", key, why);
			h->free(old);
			return rc;
		}
		if ((rc = fn(op, l, arg)) != SR_OK) {
			h->free(old);
			json_decref(l);
			return rc;
		}
		json_object_set_new(l, "updated", json_integer(now_s()));
		text = json_dumps(l, JSON_COMPACT);
		rc = text ? h->kv_cas(h, key, old, len, text, strlen(text)) : SR_ENOMEM;
		h->free(old);
		free(text);
		if (rc == SR_OK && out)
			*out = json_incref(l);
		json_decref(l);
	}
	return rc;
}

/* The lease at key, parsed; NULL (why says so) when missing or damaged. */
static json_t *lease_load(const dy *d, const char *key, char *why, size_t n)
{
	const sr_host *h = d->host;
	char *text = NULL;
	size_t len = 0;
	json_t *l = NULL;
	int rc = h->kv_get(h, key, &text, &len);

	if (rc != SR_OK)
		snprintf(why, n, "%s", h->strerror(rc));
	else
		dy__lease_parse(text, len, &l, why, n);
	h->free(text);
	return l;
}

static int collect_key(void *ud, const char *key)
{
	if (strncmp(key, DY_LEASE_KEY, strlen(DY_LEASE_KEY)) == 0)
		json_array_append_new(ud, json_string(key));
	return 0;
}

/* The keys of every lease of this runner (new array), NULL on failure. */
static json_t *lease_keys(const dy *d)
{
	json_t *keys = json_array();

	if (keys && d->host->kv_list(d->host, collect_key, keys) != SR_OK) {
		json_decref(keys);
		return NULL;
	}
	return keys;
}

static int set_str(json_t *o, const char *k, const char *v)
{
	return json_object_set_new(o, k, v ? json_string(v) : json_null()) ? SR_ENOMEM : SR_OK;
}

struct created_arg { const char *name, *id, *placeholder; };

static int mark_created(dy_op *op, json_t *lease, void *arg)
{
	struct created_arg *a = arg;
	json_t *s = dy__lease_secret(lease, a->name);

	(void)op;
	if (!s)
		return SR_ENOTFOUND;
	set_str(s, "id", a->id);
	set_str(s, "placeholder", a->placeholder);
	return set_str(s, "state", "created");
}

static int mark_deleted(dy_op *op, json_t *lease, void *arg)
{
	json_t *s = dy__lease_secret(lease, arg);

	(void)op;
	return s ? set_str(s, "state", "deleted") : SR_OK;
}

static int mark_absent(dy_op *op, json_t *lease, void *arg)
{
	size_t from = *(size_t *)arg, i;
	json_t *s;

	(void)op;
	json_array_foreach(json_object_get(lease, "secrets"), i, s) {
		const char *st = dy__lease_str(s, "state");
		if (i >= from && st && strcmp(st, "planned") == 0)
			set_str(s, "state", "absent");
	}
	return SR_OK;
}

/* The sandbox exists: from now on its existence keeps the lease, not its
 * owner (who is cleared). */
static int set_box(dy_op *op, json_t *lease, void *arg)
{
	(void)op;
	set_str(lease, "sandbox", arg);
	json_object_set_new(lease, "owner", json_null());
	return set_str(lease, "state", "active");
}

static int clear_owner(dy_op *op, json_t *lease, void *arg)
{
	(void)op;
	(void)arg;
	return json_object_set_new(lease, "owner", json_null()) ? SR_ENOMEM : SR_OK;
}

/* The owner cleared when it is this plugin instance (an operation that
 * ended before its lease's story did: cancelled, or failed not knowing
 * whether its sandbox exists); another's claim is left alone. */
static int clear_my_owner(dy_op *op, json_t *lease, void *arg)
{
	json_t *owner = json_object_get(lease, "owner");
	const char *inst = dy__lease_str(owner, "instance");

	(void)arg;
	if (json_integer_value(json_object_get(owner, "pid")) != (json_int_t)getpid() || !inst ||
	    strcmp(inst, op->d->instance) != 0)
		return SR_EEXIST;
	return json_object_set_new(lease, "owner", json_null()) ? SR_ENOMEM : SR_OK;
}

/* Claim a lease for its release: refused (SR_EEXIST) while its owner is at
 * work on it. */
static int claim(dy_op *op, json_t *lease, void *arg)
{
	if (owner_busy(op->d, lease, arg, op))
		return SR_EEXIST;
	json_object_set_new(lease, "owner", owner_me(op->d));
	return set_str(lease, "state", "releasing");
}

static int set_pending(dy_op *op, json_t *lease, void *arg)
{
	json_int_t n = json_integer_value(json_object_get(lease, "attempts")) + 1;

	json_object_set_new(lease, "owner", json_null());
	json_object_set_new(lease, "attempts", json_integer(n));
	set_str(lease, "error", op->sec->rel_error);
	(void)arg;
	return set_str(lease, "state", "cleanup_pending");
}

/* ------------------------------------------------------------- items */

static void item(dy_op *op, const char *kind, const char *name, const char *sandbox,
		 const char *action, const char *reason)
{
	json_t *it;

	if (!op->sec || !op->sec->items)
		return;
	it = json_pack("{s:s, s:s, s:s, s:s}", "kind", kind, "name", name ? name : "",
		       "action", action, "reason", reason);
	if (it && sandbox)
		json_object_set_new(it, "sandbox", json_string(sandbox));
	json_array_append_new(op->sec->items, it);
}

/* Items for the secrets of lease (those not gone), then the lease. */
static void lease_items(dy_op *op, json_t *lease, const char *action, const char *reason)
{
	const char *box = dy__lease_str(lease, "sandbox");
	json_t *s;
	size_t i;

	json_array_foreach(json_object_get(lease, "secrets"), i, s) {
		const char *st = dy__lease_str(s, "state");
		const char *name = dy__lease_str(s, "name");
		if (strcmp(st, "deleted") == 0 || strcmp(st, "absent") == 0)
			continue;
		if (strcmp(st, "planned") == 0 && op->sec->listing &&
		    !json_object_get(op->sec->listing, name))
			continue; /* never created */
		item(op, "secret", name, box, action, reason);
	}
	item(op, "lease", dy__lease_str(lease, "id"), box, action, reason);
}

/* ----------------------------------------------------------- listing */

static void list_page(dy_op *op, const char *cursor);

static void listed(dy_op *op, const dy_resp *r)
{
	dy_sec *sec = op->sec;
	json_t *items, *it;
	const char *cursor;
	size_t i;

	if (!sec->list_fallback && r->status == SR_OK && (r->http == 404 || r->http == 405)) {
		sec->list_fallback = 1; /* an API without /secret/paginated */
		list_page(op, NULL);
		return;
	}
	if (r->status != SR_OK || r->http != 200) {
		resp_text(op, r, sec->list_error, sizeof(sec->list_error));
		sec->list_then(op, 0);
		return;
	}
	items = json_is_array(r->json) ? r->json : json_object_get(r->json, "items");
	json_array_foreach(items, i, it) {
		const char *name = dy__lease_str(it, "name");
		const char *id = dy__lease_str(it, "id");
		if (name && dy__valid_id(id) && strncmp(name, sec->stem, strlen(sec->stem)) == 0)
			json_object_set_new(sec->listing, name, json_string(id));
	}
	cursor = json_is_object(r->json) ? dy__lease_str(r->json, "nextCursor") : NULL;
	if (!sec->list_fallback && cursor && *cursor && json_array_size(items)) {
		if (++sec->list_pages >= 1000) {
			/* An incomplete list would make a secret look never created. */
			snprintf(sec->list_error, sizeof(sec->list_error), "%s: more than 1000 "
				 "pages of secrets", op->what);
			sec->list_then(op, 0);
			return;
		}
		list_page(op, cursor);
		return;
	}
	sec->list_then(op, 1);
}

/* Every page, filtered here: the API's own name filter is not relied on
 * (a secret a filter left out would look never created). */
static void list_page(dy_op *op, const char *cursor)
{
	dy_sec *sec = op->sec;
	char *cur = cursor ? dy__urlenc(cursor) : NULL;
	char *url = sec->list_fallback ? dy__url(op->d, "/secret") :
		    dy__url(op->d, "/secret/paginated?limit=100%s%s", cur ? "&cursor=" : "",
			    cur ? cur : "");

	if (url && (!cursor || cur))
		dy__api(op, "GET", url, NULL, NULL, 0, 16u << 20, listed);
	else
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
	free(cur);
	free(url);
}

/* List the organization's secrets whose names start with stem into
 * sec->listing ({name: id}), then then(op, ok). */
static void list_secrets(dy_op *op, const char *stem, void (*then)(dy_op *, int))
{
	dy_sec *sec = op->sec;

	snprintf(sec->stem, sizeof(sec->stem), "%s", stem);
	json_decref(sec->listing);
	sec->listing = json_object();
	sec->list_then = then;
	sec->list_pages = 0;
	sec->list_fallback = 0;
	sec->list_error[0] = 0;
	list_page(op, NULL);
}

/* ----------------------------------------------------------- release */

static void rel_next_lease(dy_op *op);
static void rel_delete_next(dy_op *op);
static void retry_later(dy *d, const char *key, json_int_t attempts);

static void rel_lease_done(dy_op *op)
{
	const sr_host *h = op->d->host;
	dy_sec *sec = op->sec;
	const char *key = json_string_value(json_array_get(sec->rel_keys, sec->rel_i));
	const char *id = dy__lease_str(sec->rel_lease, "id");
	const char *box = dy__lease_str(sec->rel_lease, "sandbox");
	json_t *stored = NULL, *ev;
	char *s;

	if (json_array_size(sec->rel_failed) == 0) {
		int rc = h->kv_delete(h, key);
		if (rc != SR_OK && rc != SR_ENOTFOUND)
			h->log(h, SR_LOG_WARN, "daytona: cannot remove %s: %s", key, h->strerror(rc));
		item(op, "lease", id, box, "deleted", "all its secrets are gone");
	} else {
		lease_update(op, key, set_pending, NULL, &stored);
		json_array_extend(sec->pending, sec->rel_failed);
		item(op, "lease", id, box, "pending", sec->rel_error);
		ev = json_pack("{s:s, s:s?, s:O, s:s, s:I}", "lease", id, "sandbox", box, "secrets",
			       sec->rel_failed, "error", sec->rel_error, "attempts",
			       json_integer_value(json_object_get(stored, "attempts")));
		s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
		h->log(h, SR_LOG_WARN, "daytona: lease %s: the deletion of %zu secret(s) failed "
		       "(%s); retried later", id, json_array_size(sec->rel_failed), sec->rel_error);
		if (s && h->size >= SR_TABLE_HAS(sr_host, event))
			h->event(h, "cleanup_pending", s);
		free(s);
		json_decref(ev);
		if (stored)
			retry_later(op->d, key, json_integer_value(json_object_get(stored, "attempts")));
		json_decref(stored);
	}
	sec->working[0] = 0;
	sec->rel_i++;
	rel_next_lease(op);
}

static void rel_deleted(dy_op *op, const dy_resp *r)
{
	dy_sec *sec = op->sec;
	json_t *s = json_array_get(sec->rel_order, sec->rel_j);
	const char *name = dy__lease_str(s, "name");
	const char *key = json_string_value(json_array_get(sec->rel_keys, sec->rel_i));
	const char *box = dy__lease_str(sec->rel_lease, "sandbox");

	if (r->status == SR_OK && ((r->http >= 200 && r->http < 300) || r->http == 404)) {
		lease_update(op, key, mark_deleted, (void *)name, NULL);
		sec->n_deleted++;
		item(op, "secret", name, box, "deleted", r->http == 404 ? "already gone" :
		     "its sandbox is gone");
	} else {
		resp_text(op, r, sec->rel_error, sizeof(sec->rel_error));
		json_array_append_new(sec->rel_failed, json_string(name));
		item(op, "secret", name, box, "pending", sec->rel_error);
	}
	sec->rel_j++;
	rel_delete_next(op);
}

static void rel_delete_next(dy_op *op)
{
	dy_sec *sec = op->sec;
	const char *key = json_string_value(json_array_get(sec->rel_keys, sec->rel_i));

	while (sec->rel_j < json_array_size(sec->rel_order)) {
		json_t *s = json_array_get(sec->rel_order, sec->rel_j);
		const char *name = dy__lease_str(s, "name");
		const char *id = dy__lease_str(s, "id");
		char *url;

		if (!id && sec->listing)
			id = json_string_value(json_object_get(sec->listing, name));
		if (!id) {
			/* Planned, and not in the organization's list: never created. */
			lease_update(op, key, mark_deleted, (void *)name, NULL);
			sec->rel_j++;
			continue;
		}
		if (!(url = dy__url(op->d, "/secret/%s", id))) {
			dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
			return;
		}
		dy__api(op, "DELETE", url, NULL, NULL, 0, 0, rel_deleted);
		free(url);
		return;
	}
	rel_lease_done(op);
}

static void rel_listed(dy_op *op, int ok)
{
	dy_sec *sec = op->sec;

	if (!ok) {
		/* Names without an id cannot be resolved now: the lease stays. */
		snprintf(sec->rel_error, sizeof(sec->rel_error), "%s", sec->list_error);
		json_decref(sec->listing);
		sec->listing = NULL;
		for (size_t j = sec->rel_j; j < json_array_size(sec->rel_order); j++) {
			json_t *s = json_array_get(sec->rel_order, j);
			if (!dy__lease_str(s, "id")) {
				json_array_append_new(sec->rel_failed,
						      json_string(dy__lease_str(s, "name")));
				json_array_remove(sec->rel_order, j--);
			}
		}
	}
	rel_delete_next(op);
}

/* The secrets of lease still to delete, newest first (new array); *unnamed
 * is set when one has no id yet (its name must be looked up). */
static json_t *deletion_order(json_t *lease, int *unnamed)
{
	json_t *secrets = json_object_get(lease, "secrets"), *out = json_array();
	size_t n = json_array_size(secrets);

	*unnamed = 0;
	for (size_t i = n; out && i-- > 0;) {
		json_t *s = json_array_get(secrets, i);
		const char *st = dy__lease_str(s, "state");
		if (strcmp(st, "deleted") == 0 || strcmp(st, "absent") == 0)
			continue;
		if (!dy__lease_str(s, "id"))
			*unnamed = 1;
		json_array_append(out, s);
	}
	return out;
}

static void rel_next_lease(dy_op *op)
{
	const sr_host *h = op->d->host;
	dy_sec *sec = op->sec;

	while (sec->rel_i < json_array_size(sec->rel_keys)) {
		const char *key = json_string_value(json_array_get(sec->rel_keys, sec->rel_i));
		json_t *lease = NULL;
		char stem[200];
		int rc, unnamed;

		snprintf(sec->working, sizeof(sec->working), "%s", key);
		rc = lease_update(op, key, claim, (void *)key, &lease);
		if (rc != SR_OK) {
			char why[128];
			json_t *l = lease_load(op->d, key, why, sizeof(why));
			sec->working[0] = 0;
			if (rc == SR_EEXIST)
				lease_items(op, l, "kept", "another sandrun operation is "
					    "cleaning it up now");
			else if (rc != SR_ENOTFOUND)
				h->log(h, SR_LOG_WARN, "daytona: %s: cannot claim it: %s", key,
				       h->strerror(rc));
			json_decref(l);
			sec->rel_i++;
			continue;
		}
		json_decref(sec->rel_lease);
		json_decref(sec->rel_order);
		json_decref(sec->rel_failed);
		sec->rel_lease = lease;
		sec->rel_order = deletion_order(lease, &unnamed);
		sec->rel_failed = json_array();
		sec->rel_error[0] = 0;
		sec->rel_j = 0;
		snprintf(stem, sizeof(stem), "%s_%s_", dy__lease_str(lease, "prefix"),
			 dy__lease_str(lease, "id"));
		if (unnamed && (!sec->listing || strncmp(stem, sec->stem, strlen(sec->stem)) != 0)) {
			list_secrets(op, stem, rel_listed);
			return;
		}
		rel_delete_next(op);
		return;
	}
	sec->working[0] = 0;
	sec->released = 1;
	sec->rel_then(op);
}

/* Release the leases in sec->rel_keys, then then(op). */
static void release(dy_op *op, void (*then)(dy_op *))
{
	dy_sec *sec = op->sec;

	if (!sec->pending)
		sec->pending = json_array();
	sec->rel_then = then;
	sec->rel_i = 0;
	rel_next_lease(op);
}

struct box_scan { const dy *d; const char *box; json_t *keys; };

static int match_box(void *ud, const char *key)
{
	struct box_scan *b = ud;
	char why[128];
	json_t *l;

	if (strncmp(key, DY_LEASE_KEY, strlen(DY_LEASE_KEY)) != 0)
		return 0;
	l = lease_load(b->d, key, why, sizeof(why));
	if (l && dy__lease_str(l, "sandbox") && strcmp(dy__lease_str(l, "sandbox"), b->box) == 0)
		json_array_append_new(b->keys, json_string(key));
	json_decref(l);
	return 0;
}

/* The keys of the leases of sandbox box (new array): those naming it, and
 * the one its sandrun.lease label names when that lease names no sandbox
 * yet (a crash before its id was recorded). */
static json_t *leases_of_box(const dy *d, const char *box, const char *hint)
{
	struct box_scan b = { d, box, json_array() };
	char key[64], why[128];
	json_t *l, *k;
	size_t i;

	if (!b.keys)
		return NULL;
	d->host->kv_list(d->host, match_box, &b);
	if (hint && *hint && dy__valid_id(hint)) {
		snprintf(key, sizeof(key), "%s%s", DY_LEASE_KEY, hint);
		json_array_foreach(b.keys, i, k)
			if (strcmp(json_string_value(k), key) == 0)
				return b.keys;
		l = lease_load(d, key, why, sizeof(why));
		if (l && json_is_null(json_object_get(l, "sandbox")))
			json_array_append_new(b.keys, json_string(key));
		json_decref(l);
	}
	return b.keys;
}

/* After op's sandbox was deleted (confirmed): release its leases, then
 * then(op). */
void dy__sec_release_box(dy_op *op, void (*then)(dy_op *))
{
	dy_sec *sec = sec_of(op);
	json_t *keys;

	if (!sec) {
		then(op);
		return;
	}
	keys = leases_of_box(op->d, op->id, op->lease_hint);
	json_decref(sec->rel_keys);
	sec->rel_keys = keys ? keys : json_array();
	if (sec->key[0] && !json_array_size(sec->rel_keys))
		json_array_append_new(sec->rel_keys, json_string(sec->key));
	if (!json_array_size(sec->rel_keys)) {
		then(op);
		return;
	}
	release(op, then);
}

/* At the end of op (dy__op_free): an operation that did not get to the end
 * of its lease's story (a cancelled create or release) leaves the lease
 * without owner, for maintain. Unloading is like the process ending: the
 * record stays as it is. */
void dy__sec_end(dy_op *op)
{
	char key[sizeof(op->sec->working)];

	if (!op->sec || !op->sec->working[0] || op->d->closing)
		return;
	snprintf(key, sizeof(key), "%s", op->sec->working);
	op->sec->working[0] = 0;
	lease_update(op, key, clear_my_owner, NULL, NULL);
}

/* The names left cleanup_pending by op's releases (new reference), or NULL
 * when there are none. */
json_t *dy__sec_pending(const dy_op *op)
{
	if (!op->sec || !json_array_size(op->sec->pending))
		return NULL;
	return json_incref(op->sec->pending);
}

/* What happened to op's secrets, for a failure message: "" when none. */
void dy__sec_note(const dy_op *op, char *buf, size_t n)
{
	const dy_sec *sec = op->sec;
	char *names;

	buf[0] = 0;
	if (!sec || !sec->released)
		return;
	if (json_array_size(sec->pending)) {
		names = json_dumps(sec->pending, JSON_COMPACT);
		snprintf(buf, n, "; secrets %s could not be deleted yet: they are retried "
			 "(cleanup_pending; `sandrun janitor` retries too)", names ? names : "?");
		free(names);
	} else if (sec->n_deleted) {
		snprintf(buf, n, "; the %zu secret(s) created for it were deleted",
			 sec->n_deleted);
	}
}

/* ------------------------------------------------------ retries */

static void retry_released(dy_op *op)
{
	dy__op_finish(op, SR_OK, NULL, NULL, 0, NULL);
}

static void retry_fire(dy_op *op, const dy_resp *unused)
{
	(void)unused;
	release(op, retry_released);
}

/* Try the cleanup of the lease at key again after a backoff (2 s doubling,
 * at most 5 min), unless this process already waits to: for as long as
 * the lease lives (its secrets hold live keys) and the process runs. */
static void retry_later(dy *d, const char *key, json_int_t attempts)
{
	uint64_t s = 1;
	dy_op *op;

	if (d->closing)
		return;
	for (op = d->ops; op; op = op->next_op) {
		const char *k = op->kind == DY_RETRY && op->timer && op->sec ?
			json_string_value(json_array_get(op->sec->rel_keys, 0)) : NULL;
		if (k && strcmp(k, key) == 0)
			return;
	}
	for (json_int_t i = 0; i < attempts && s < RETRY_CAP_S; i++)
		s *= 2;
	if (s > RETRY_CAP_S)
		s = RETRY_CAP_S;
	if (!(op = dy__op_new(d, DY_RETRY, 0, NULL, NULL, NULL)))
		return;
	if (!sec_of(op) || !(op->sec->rel_keys = json_pack("[s]", key)) ||
	    dy__wait(op, s * 1000, retry_fire) != SR_OK) {
		dy__op_free(op);
		return;
	}
	op->in_call = 0; /* nobody waits for it: it ends freeing itself */
}

/* ------------------------------------------------------------ create */

/* Check and copy the bindings of spec, and plan their secrets and lease.
 * why names the binding that is refused. */
int dy__sec_plan(dy *d, const sr_sandbox_spec *spec, dy_sec **out, char *why, size_t n)
{
	unsigned char rnd[8];
	dy_sec *sec;
	int rc;

	*out = NULL;
	if (!spec->n_credentials || !spec->credentials) {
		snprintf(why, n, "daytona: no credential bindings to plan");
		return SR_EINVAL;
	}
	for (size_t i = 0; i < spec->n_credentials; i++)
		if ((rc = dy__cred_check(spec->credentials[i], i, why, n)) != SR_OK)
			return rc;
	if (!(sec = calloc(1, sizeof(*sec))) ||
	    !(sec->creds = calloc(spec->n_credentials, sizeof(*sec->creds)))) {
		free(sec);
		return SR_ENOMEM;
	}
	*out = sec;
	if ((rc = d->host->random_bytes(d->host, rnd, sizeof(rnd))) != SR_OK)
		return rc;
	for (size_t i = 0; i < sizeof(rnd); i++)
		sprintf(sec->lease_id + 2 * i, "%02x", rnd[i]);
	snprintf(sec->key, sizeof(sec->key), "%s%s", DY_LEASE_KEY, sec->lease_id);
	for (size_t i = 0; i < spec->n_labels; i++)
		if (spec->labels[i].name && strcmp(spec->labels[i].name, "sandrun.runner") == 0 &&
		    spec->labels[i].value && !(sec->runner = strdup(spec->labels[i].value)))
			return SR_ENOMEM;
	for (size_t i = 0; i < spec->n_credentials; i++) {
		const sr_credential *c = spec->credentials[i];
		dy_cred *k = &sec->creds[sec->n++];
		char name[160], env[40];

		k->header = c->target == SR_CRED_HEADER;
		snprintf(env, sizeof(env), "SANDRUN_SECRET_%zu", i + 1);
		if (dy__secret_name(name, sizeof(name), d->secret_prefix, sec->lease_id, i) != 0)
			return SR_EINVAL;
		if (!(k->binding = strdup(c->name)) || !(k->host = strdup(c->hosts[0])) ||
		    !(k->value = strdup(c->value)) || !(k->secret = strdup(name)) ||
		    !(k->env = strdup(k->header ? env : c->name)))
			return SR_ENOMEM;
		for (size_t j = 0; j < i; j++) {
			if (strcmp(sec->creds[j].binding, k->binding) == 0 ||
			    strcmp(sec->creds[j].env, k->env) == 0) {
				snprintf(why, n, "daytona: credential binding '%s' is given twice, or "
					 "its variable '%s' is", k->binding, k->env);
				return SR_EINVAL;
			}
		}
		for (size_t j = 0; j < spec->n_env; j++) {
			if (spec->env[j].name && strcmp(spec->env[j].name, k->env) == 0) {
				snprintf(why, n, "daytona: environment entry '%s' is also a credential "
					 "binding: the binding's secret is the only value it may take",
					 k->env);
				return SR_EINVAL;
			}
		}
	}
	sec->absent_from = sec->n;
	return SR_OK;
}

/* A JSON string of s (quotes included) in memory the caller wipes. */
static char *quote(const char *s)
{
	size_t n = 3;
	char *out, *o;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		n += *p < 0x20 ? 6 : (*p == '"' || *p == '\\') ? 2 : 1;
	if (!(out = malloc(n)))
		return NULL;
	o = out;
	*o++ = '"';
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x20) {
			o += sprintf(o, "\\u%04x", *p);
		} else {
			if (*p == '"' || *p == '\\')
				*o++ = '\\';
			*o++ = (char)*p;
		}
	}
	*o++ = '"';
	*o = 0;
	return out;
}

static void secret_made(dy_op *op, const dy_resp *r);

/* POST /secret for the next binding. The value goes only into this one
 * body, wiped once the host copied it. */
static int post_secret(dy_op *op)
{
	dy_sec *sec = op->sec;
	dy_cred *c = &sec->creds[sec->i];
	char desc[300];
	json_t *j;
	char *head = NULL, *val = NULL, *body = NULL, *url = dy__url(op->d, "/secret");
	size_t hl;
	int rc = SR_ENOMEM;

	snprintf(desc, sizeof(desc), "sandrun lease %s%s%s: credential binding %s; deleted "
		 "with its sandbox", sec->lease_id, sec->runner ? ", runner " : "",
		 sec->runner ? sec->runner : "", c->binding);
	j = json_pack("{s:s, s:s, s:[s]}", "name", c->secret, "description", desc, "hosts",
		      c->host);
	head = j ? json_dumps(j, JSON_COMPACT) : NULL;
	val = c->value ? quote(c->value) : NULL;
	if (url && head && val && c->value && (body = malloc((hl = strlen(head)) + strlen(val) + 16))) {
		/* {..., "value": "..."} */
		snprintf(body, hl + strlen(val) + 16, "%.*s,\"value\":%s}", (int)(hl - 1), head,
			 val);
		rc = dy__api(op, "POST", url, "application/json", body, strlen(body), 0,
			     secret_made);
		/* Sent once, never again: the host has its copy. */
		wipe_free(c->value);
		c->value = NULL;
	} else if (!op->in_call) {
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
	}
	json_decref(j);
	free(head);
	free(url);
	wipe_free(val);
	wipe_free(body);
	return rc;
}

static void sec_failed_v(dy_op *op, int status, const char *fmt, va_list ap)
{
	dy_sec *sec = op->sec;

	sec->fail_status = status;
	vsnprintf(sec->fail_msg, sizeof(sec->fail_msg), fmt, ap);
}

/* Record why the create failed (for dy__sec_abort and friends). */
void dy__sec_failed(dy_op *op, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sec_failed_v(op, status, fmt, ap);
	va_end(ap);
}

static void secret_made(dy_op *op, const dy_resp *r)
{
	dy_sec *sec = op->sec;
	dy_cred *c = &sec->creds[sec->i];
	const char *id = dy__lease_str(r->json, "id");
	struct created_arg a = { c->secret, id, dy__lease_str(r->json, "placeholder") };
	char why[600];

	if (r->status != SR_OK || r->http < 200 || r->http >= 300) {
		resp_text(op, r, why, sizeof(why));
		/* 4xx: not created. Otherwise it may have been: its name stays
		 * planned, and the release looks it up. */
		sec->absent_from = transient(r) ? sec->i + 1 : sec->i;
		dy__sec_failed(op, r->status != SR_OK ? r->status :
			       dy__http_fail_status(r->http, r->why),
			       "daytona: credential binding '%s': secret '%s' not created (%s)",
			       c->binding, c->secret, why);
		dy__sec_abort(op);
		return;
	}
	if (dy__secret_check(r->json, c->secret, c->host, op->d->placeholder_prefix, why,
			     sizeof(why)) != SR_OK) {
		/* Deleted only when it is the one asked for, by its name. */
		const char *got = dy__lease_str(r->json, "name");
		int named = dy__valid_id(id) && got && strcmp(got, c->secret) == 0;
		if (named)
			lease_update(op, sec->key, mark_created, &a, NULL);
		sec->absent_from = sec->i + 1;
		dy__sec_failed(op, SR_EPROTO, "daytona: credential binding '%s': the secret "
			       "Daytona made for it is not what was asked: %s%s", c->binding, why,
			       named ? "; it is deleted" : "");
		dy__sec_abort(op);
		return;
	}
	if (lease_update(op, sec->key, mark_created, &a, NULL) != SR_OK)
		op->d->host->log(op->d->host, SR_LOG_WARN, "daytona: %s: cannot record secret "
				 "'%s' (its name is recorded: `sandrun janitor` finds it)",
				 sec->key, c->secret);
	if (++sec->i < sec->n) {
		post_secret(op);
		return;
	}
	/* Linked through "secrets" ({ENV: secret name}), never "env": the
	 * sandbox sees the placeholders only. */
	json_t *links = json_array();
	for (size_t k = 0; links && k < sec->n; k++)
		json_array_append_new(links, json_pack("{s:s}", sec->creds[k].env,
						       sec->creds[k].secret));
	json_object_set_new(op->body, "secrets", links);
	sec->post_sandbox(op);
}

/* Write the lease (create-only), then create the secrets one by one, then
 * post_sandbox(op), which sends POST /sandbox with them linked. Returns
 * like dy__api (for dy__op_start). */
int dy__sec_start(dy_op *op, int (*post_sandbox)(dy_op *op))
{
	const sr_host *h = op->d->host;
	dy_sec *sec = op->sec;
	json_t *owner = owner_me(op->d);
	json_t *lease = dy__lease_new(sec->lease_id, op->d->secret_prefix, sec->runner, owner,
				      now_s());
	char *text = NULL;
	int rc = lease ? SR_OK : SR_ENOMEM;

	json_decref(owner);
	sec->post_sandbox = post_sandbox;
	for (size_t i = 0; rc == SR_OK && i < sec->n; i++)
		rc = dy__lease_plan(lease, sec->creds[i].secret, sec->creds[i].binding,
				    sec->creds[i].header, sec->creds[i].env, sec->creds[i].host);
	if (rc == SR_OK && !(text = json_dumps(lease, JSON_COMPACT)))
		rc = SR_ENOMEM;
	if (rc == SR_OK)
		rc = h->kv_cas(h, sec->key, NULL, 0, text, strlen(text));
	free(text);
	json_decref(lease);
	if (rc != SR_OK) {
		dy__op_finish(op, rc == SR_ENOMEM ? rc : SR_EIO, NULL, NULL, 0,
			      "daytona: cannot write the lease record '%s' (%s): no secret was "
			      "created", sec->key, h->strerror(rc));
		return SR_OK;
	}
	snprintf(sec->working, sizeof(sec->working), "%s", sec->key);
	return post_secret(op);
}

/* The sandbox exists: its id into the lease (state "active"). */
void dy__sec_box_created(dy_op *op, const char *sandbox_id)
{
	if (lease_update(op, op->sec->key, set_box, (void *)sandbox_id, NULL) != SR_OK)
		op->d->host->log(op->d->host, SR_LOG_WARN, "daytona: %s: cannot record sandbox "
				 "'%s' (its label %s names the lease)", op->sec->key, sandbox_id,
				 DY_LEASE_LABEL);
}

static void abort_released(dy_op *op)
{
	dy_sec *sec = op->sec;
	char note[700];

	dy__sec_note(op, note, sizeof(note));
	if (!note[0] && !json_array_size(sec->pending))
		snprintf(note, sizeof(note), "; no secret was left");
	dy__op_finish(op, sec->fail_status ? sec->fail_status : SR_EIO, NULL, NULL, 0, "%s%s",
		      sec->fail_msg, note);
}

/* The create failed before a sandbox exists (dy__sec_failed said why):
 * delete the secrets created, newest first, remove the lease, then fail. */
void dy__sec_abort(dy_op *op)
{
	dy_sec *sec = op->sec;

	lease_update(op, sec->key, mark_absent, &sec->absent_from, NULL);
	json_decref(sec->rel_keys);
	sec->rel_keys = json_pack("[s]", sec->key);
	if (!sec->rel_keys) {
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "%s; out of memory", sec->fail_msg);
		return;
	}
	release(op, abort_released);
}

/* The create failed and whether its sandbox exists is unknown: the lease
 * is left (without owner) for maintain, which finds out. */
void dy__sec_abandon(dy_op *op, const char *why)
{
	dy_sec *sec = op->sec;

	lease_update(op, sec->key, clear_owner, NULL, NULL);
	sec->working[0] = 0;
	dy__op_finish(op, sec->fail_status ? sec->fail_status : SR_EIO, NULL, NULL, 0,
		      "%s; %s: its secrets are left to `sandrun janitor` (lease %s)",
		      sec->fail_msg, why, sec->lease_id);
}

/* The placeholders of op's sandbox, for create's and reconnect's answer
 * (new reference, or NULL when it has no lease). A create's lease is done
 * with: its owner is cleared. */
json_t *dy__sec_placeholders(dy_op *op)
{
	json_t *lease = NULL, *keys, *ph;
	char why[128];

	if (op->kind == DY_CREATE && op->sec && op->sec->key[0]) {
		lease_update(op, op->sec->key, clear_owner, NULL, &lease);
		if (!lease)
			lease = lease_load(op->d, op->sec->key, why, sizeof(why));
		op->sec->working[0] = 0;
	} else if ((keys = leases_of_box(op->d, op->id, NULL))) {
		if (json_array_size(keys))
			lease = lease_load(op->d, json_string_value(json_array_get(keys, 0)), why,
					   sizeof(why));
		json_decref(keys);
	}
	if (!lease)
		return NULL;
	ph = dy__lease_placeholders(lease);
	json_decref(lease);
	return ph;
}

/* ---------------------------------------------------------- maintain */

static void m_next(dy_op *op);

static void m_done_lease(dy_op *op)
{
	op->sec->working[0] = 0;
	op->sec->li++;
	m_next(op);
}

static void m_released(dy_op *op)
{
	m_done_lease(op);
}

/* The lease's sandbox is gone (or was never made): release it, unless it
 * is younger than the grace period (a create still under way) or this is
 * a dry run. confirmed: a release already began (the deletion of the
 * sandbox was confirmed then), the grace period does not apply. */
static void m_gone(dy_op *op, int confirmed)
{
	dy_sec *sec = op->sec;
	json_t *l = sec->cur;
	const char *key = json_string_value(json_object_get(json_array_get(sec->leases, sec->li),
							    "key"));
	long long age = now_s() - (long long)json_integer_value(json_object_get(l, "created"));
	char why[200];

	if (!confirmed && age < sec->grace_s) {
		snprintf(why, sizeof(why), "its sandbox is gone, but the lease is younger than "
			 "the grace period (%llds of %llds)", age, sec->grace_s);
		lease_items(op, l, "kept", why);
		m_done_lease(op);
		return;
	}
	if (sec->dry_run) {
		lease_items(op, l, confirmed ? "pending" : "would_delete", confirmed ?
			    "a cleanup that failed; it is retried" : "its sandbox is gone");
		m_done_lease(op);
		return;
	}
	json_decref(sec->rel_keys);
	sec->rel_keys = json_pack("[s]", key);
	release(op, m_released);
}

static void m_exists(dy_op *op, const char *box, const char *state)
{
	char why[200];

	snprintf(why, sizeof(why), "its sandbox %s exists (state '%s')", box, state);
	lease_items(op, op->sec->cur, "kept", why);
	m_done_lease(op);
}

static void m_unknown(dy_op *op, const dy_resp *r)
{
	char why[600];

	resp_text(op, r, why, sizeof(why));
	lease_items(op, op->sec->cur, "failed", why);
	m_done_lease(op);
}

static void m_box(dy_op *op, const dy_resp *r)
{
	const char *state = dy__lease_str(r->json, "state");

	if (r->status == SR_OK && r->http == 200 && (!state || strcmp(state, "destroyed") != 0)) {
		m_exists(op, dy__lease_str(op->sec->cur, "sandbox"), state ? state : "unknown");
		return;
	}
	if (r->status == SR_OK && (r->http == 404 || r->http == 200)) {
		m_gone(op, 0);
		return;
	}
	m_unknown(op, r);
}

static void m_box_by_label(dy_op *op, const dy_resp *r)
{
	const char *id = dy__lease_str(op->sec->cur, "id");
	json_t *items, *it;
	size_t i;

	if (r->status != SR_OK || r->http != 200) {
		m_unknown(op, r);
		return;
	}
	items = json_is_array(r->json) ? r->json : json_object_get(r->json, "items");
	json_array_foreach(items, i, it) {
		const char *box = dy__lease_str(it, "id");
		const char *lbl = dy__lease_str(json_object_get(it, "labels"), DY_LEASE_LABEL);
		const char *state = dy__lease_str(it, "state");
		char key[64];
		if (!dy__valid_id(box) || !lbl || strcmp(lbl, id) != 0 ||
		    (state && strcmp(state, "destroyed") == 0))
			continue;
		snprintf(key, sizeof(key), "%s%s", DY_LEASE_KEY, id);
		if (!op->sec->dry_run)
			lease_update(op, key, set_box, (void *)box, NULL);
		set_str(op->sec->cur, "sandbox", box);
		m_exists(op, box, state ? state : "unknown");
		return;
	}
	m_gone(op, 0);
}

static void m_next(dy_op *op)
{
	dy_sec *sec = op->sec;
	json_t *entry, *l;
	const char *key, *state, *box;
	char *url, why[200];

	if (sec->li >= json_array_size(sec->leases)) {
		char *s;
		json_t *named = json_object(), *e, *x;
		const char *name;
		size_t i, j;

		json_array_foreach(sec->leases, i, e)
			json_array_foreach(json_object_get(json_object_get(e, "lease"), "secrets"), j, x)
				json_object_set(named, dy__lease_str(x, "name"), json_true());
		json_object_foreach(sec->listing, name, x) {
			if (json_object_get(named, name))
				continue;
			snprintf(why, sizeof(why), "has the prefix '%s' but no lease of this runner "
				 "names it: never touched", sec->stem);
			item(op, "secret", name, NULL, "foreign", why);
		}
		json_decref(named);
		e = json_pack("{s:O}", "items", sec->items);
		s = e ? json_dumps(e, JSON_COMPACT) : NULL;
		dy__op_finish(op, s ? SR_OK : SR_ENOMEM, s, NULL, 0, s ? NULL :
			      "daytona: out of memory");
		free(s);
		json_decref(e);
		return;
	}
	entry = json_array_get(sec->leases, sec->li);
	key = dy__lease_str(entry, "key");
	if (!(l = json_object_get(entry, "lease"))) {
		snprintf(why, sizeof(why), "unreadable lease record: %s; left alone",
			 dy__lease_str(entry, "error"));
		item(op, "lease", key, NULL, "failed", why);
		m_done_lease(op);
		return;
	}
	sec->cur = l;
	state = dy__lease_str(l, "state");
	box = dy__lease_str(l, "sandbox");
	if (owner_busy(op->d, l, key, op)) {
		snprintf(why, sizeof(why), "in use by a live sandrun process (pid %lld, %s)",
			 (long long)json_integer_value(json_object_get(json_object_get(l, "owner"),
								       "pid")), state);
		lease_items(op, l, "kept", why);
		m_done_lease(op);
		return;
	}
	if (strcmp(state, "releasing") == 0 || strcmp(state, "cleanup_pending") == 0) {
		m_gone(op, 1);
		return;
	}
	if (box) {
		url = dy__url(op->d, "/sandbox/%s", box);
		if (url)
			dy__api(op, "GET", url, NULL, NULL, 0, 0, m_box);
	} else {
		json_t *lbl = json_pack("{s:s}", DY_LEASE_LABEL, dy__lease_str(l, "id"));
		char *s = lbl ? json_dumps(lbl, JSON_COMPACT) : NULL;
		char *enc = s ? dy__urlenc(s) : NULL;
		url = enc ? dy__url(op->d, "/sandbox?labels=%s&limit=100", enc) : NULL;
		if (url)
			dy__api(op, "GET", url, NULL, NULL, 0, 16u << 20, m_box_by_label);
		json_decref(lbl);
		free(s);
		free(enc);
	}
	if (!url)
		dy__op_finish(op, SR_ENOMEM, NULL, NULL, 0, "daytona: out of memory");
	free(url);
}

static void m_listed(dy_op *op, int ok)
{
	dy_sec *sec = op->sec;
	json_t *keys, *k;
	size_t i;

	if (!ok) {
		dy__op_finish(op, SR_EHTTP, NULL, NULL, 0, "daytona: maintain: cannot list the "
			      "organization's secrets (%s); nothing was changed", sec->list_error);
		return;
	}
	/* The leases after the list: every secret listed that a lease names is
	 * named by the record read now. */
	if (!(keys = lease_keys(op->d))) {
		dy__op_finish(op, SR_EIO, NULL, NULL, 0, "daytona: maintain: cannot list the "
			      "lease records");
		return;
	}
	json_array_foreach(keys, i, k) {
		char why[200];
		json_t *l = lease_load(op->d, json_string_value(k), why, sizeof(why));
		json_array_append_new(sec->leases, l ? json_pack("{s:O, s:o}", "key", k, "lease", l) :
				      json_pack("{s:O, s:s}", "key", k, "error", why));
	}
	json_decref(keys);
	m_next(op);
}

static int parse_params(const char *params, int *dry_run, long long *grace, char *why,
			size_t n)
{
	json_t *j = params ? json_loads(params, 0, NULL) : json_object();
	json_t *dr = json_object_get(j, "dry_run"), *g = json_object_get(j, "grace_s");
	int rc = SR_OK;

	*dry_run = json_is_true(dr);
	*grace = 7200;
	if (!json_is_object(j) || (dr && !json_is_boolean(dr)) ||
	    (g && (!json_is_integer(g) || json_integer_value(g) < 0))) {
		snprintf(why, n, "daytona: maintain: params must be {\"dry_run\": bool, "
			 "\"grace_s\": seconds >= 0}; got '%.200s'", params ? params : "");
		rc = SR_EINVAL;
	} else if (g) {
		*grace = (long long)json_integer_value(g);
	}
	json_decref(j);
	return rc;
}

int dy__maintain(void *self, uint64_t req, const char *params_json, sr_done_fn done,
		 void *ud)
{
	dy *d = self;
	char why[400], stem[100];
	json_t *keys;
	dy_op *op;
	int rc;

	if ((rc = parse_params(params_json, &(int){ 0 }, &(long long){ 0 }, why,
			       sizeof(why))) != SR_OK)
		return dy__complete_now(d, done, ud, rc, "%s", why);
	if (!(op = dy__op_new(d, DY_MAINTAIN, req, NULL, done, ud)))
		return SR_ENOMEM;
	if (!sec_of(op) || !(op->sec->items = json_array()) ||
	    !(op->sec->leases = json_array()) || !(op->sec->pending = json_array()))
		return dy__op_start(op, SR_ENOMEM);
	parse_params(params_json, &op->sec->dry_run, &op->sec->grace_s, why, sizeof(why));
	keys = lease_keys(d);
	if (!d->secrets_on && keys && !json_array_size(keys)) {
		/* No secrets made, none left: the secret API is not asked. */
		json_decref(keys);
		dy__op_finish(op, SR_OK, "{\"items\":[]}", NULL, 0, NULL);
		return dy__op_start(op, SR_OK);
	}
	json_decref(keys);
	snprintf(stem, sizeof(stem), "%s_", d->secret_prefix);
	list_secrets(op, stem, m_listed);
	return dy__op_start(op, SR_OK);
}

/* ------------------------------------------------------------ doctor */

struct census { const dy *d; int leases, pending; };

static int count_lease(void *ud, const char *key)
{
	struct census *c = ud;
	char why[128];
	json_t *l;

	if (strncmp(key, DY_LEASE_KEY, strlen(DY_LEASE_KEY)) != 0)
		return 0;
	c->leases++;
	l = lease_load(c->d, key, why, sizeof(why));
	if (l && strcmp(dy__lease_str(l, "state"), "cleanup_pending") == 0)
		c->pending++;
	json_decref(l);
	return 0;
}

/* "; secrets on (prefix 'x'), N leases, M cleanup pending" for doctor. */
void dy__sec_doctor(dy *d, char *buf, size_t n)
{
	struct census c = { d, 0, 0 };

	d->host->kv_list(d->host, count_lease, &c);
	snprintf(buf, n, "; secrets %s (prefix '%s'); %d lease(s), %d cleanup pending%s",
		 d->secrets_on ? "on" : "off", d->secret_prefix, c.leases, c.pending,
		 c.pending ? " (`sandrun janitor` retries them)" : "");
}
