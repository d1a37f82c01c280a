/* NetBird tunnel plugin: sandboxes join the runner's NetBird network as
 * ephemeral peers, each allowed to reach exactly the runner ports its run
 * needs, through the management REST API with a personal access token.
 *
 * start checks the token and the runner's group, and makes sure NetBird's
 * all-to-all "Default" policy is gone before any sandbox enrols (deleted
 * when [tunnel.netbird] delete_default = yes, otherwise the start is
 * refused). resolve maps a runner-side URL to the runner's overlay address.
 * enrol, for one sandbox: a group of its own, a one-off ephemeral setup key
 * (usage_limit 1, short expires_in, auto_groups that group only), and a
 * one-way TCP policy from that group to the runner's group on the ports
 * asked for; the answer carries the key once, for the core to hand to the
 * sandbox's client as a 0600 file, and the client's command line that
 * reads it ([tunnel.netbird] client, default netbird, with
 * --setup-key-file). enrol with {"verify": true} checks that
 * the peer joined, by its exact name. release deletes peer, policy, setup
 * key and group, in that order (a group a key still names cannot go).
 * Every enrolment is a durable record in the plugin's key-value area from
 * before its first creation to after its last deletion, so that
 * `sandrun janitor` finds what a crash left (enrolments). */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "sandrun/plugin.h"

#define DEFAULT_API "https://api.netbird.io"
#define API_TIMEOUT_MS 15000

typedef struct nb {
	const sr_host *h;
	char *api;             /* without a trailing slash */
	char *management_url;  /* for clients */
	char *auth;            /* "Token nbp_..." */
	const char *runner_group;
	const char *runner_peer;
	const char *client;    /* the client in the sandbox */
	char *runner_gid;      /* once started */
	char *runner_ip;       /* configured, or looked up at start */
	int delete_default;
	unsigned key_ttl;
	int started;
	struct op *ops;
} nb;

enum { OP_START, OP_ENROL, OP_VERIFY, OP_RELEASE };

typedef struct op {
	nb *n;
	int kind, step;
	int dry;               /* start for doctor: change nothing */
	uint64_t req;
	sr_done_fn done;
	void *ud;
	char *sandbox;
	json_t *rec;           /* the enrolment record */
	json_t *ports;         /* enrol: the ports */
	char *key;             /* enrol: the setup key, once */
	char *failure;         /* enrol: why it failed, while undoing */
	int failure_status;
	sr_http_call *call;
	sr_timer *kick;        /* the first step, on the loop */
	struct op *next;
} op;

static void step(op *o, const sr_result *r);

/* ------------------------------------------------------------------ ops */

static op *op_new(nb *n, int kind, uint64_t req, sr_done_fn done, void *ud)
{
	op *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->n = n;
	o->kind = kind;
	o->req = req;
	o->done = done;
	o->ud = ud;
	o->next = n->ops;
	n->ops = o;
	return o;
}

static void op_free(op *o)
{
	if (o->kick)
		o->n->h->timer_stop(o->kick);
	for (op **p = &o->n->ops; *p; p = &(*p)->next)
		if (*p == o) {
			*p = o->next;
			break;
		}
	free(o->sandbox);
	json_decref(o->rec);
	json_decref(o->ports);
	if (o->key && o->n->h->size >= SR_TABLE_HAS(sr_host, secret_release))
		o->n->h->secret_release(o->n->h, o->key); /* the run holds it now */
	free(o->key);
	free(o->failure);
	free(o);
}

static void op_end(op *o, int status, const char *json, const char *message)
{
	sr_result r = { .size = sizeof(r), .status = status, .json = json,
			.message = message };
	sr_done_fn done = o->done;
	void *ud = o->ud;

	op_free(o);
	done(ud, &r);
}

static void op_fail(op *o, int status, const char *fmt, ...) SR_PRINTF(3, 4);
static void op_fail(op *o, int status, const char *fmt, ...)
{
	char msg[900];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	op_end(o, status, NULL, msg);
}

static void on_api(void *ud, const sr_result *r)
{
	op *o = ud;

	o->call = NULL;
	step(o, r);
}

/* An API call whose answer goes to step(); SR_OK or the failure. */
static int api(op *o, const char *method, const char *path, json_t *body)
{
	sr_pair headers[] = { { "Authorization", o->n->auth },
			      { "Accept", "application/json" },
			      { "Content-Type", "application/json" } };
	char url[1024], *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	sr_http_request req = {
		.size = sizeof(req),
		.method = method,
		.url = url,
		.headers = headers,
		.n_headers = body ? 3 : 2,
		.body = text,
		.body_len = text ? strlen(text) : 0,
		.timeout_ms = API_TIMEOUT_MS,
		.max_response = (size_t)4 * 1024 * 1024,
	};
	int rc;

	json_decref(body);
	snprintf(url, sizeof(url), "%s%s", o->n->api, path);
	rc = o->n->h->http_request(o->n->h, &req, on_api, o, &o->call);
	free(text);
	return rc;
}

static long http_status(const sr_result *r)
{
	json_t *j;
	long s;

	if (!r || r->status != SR_OK)
		return 0;
	j = json_loads(r->json ? r->json : "", 0, NULL);
	s = (long)json_integer_value(json_object_get(j, "status"));
	json_decref(j);
	return s;
}

static json_t *body_of(const sr_result *r)
{
	if (!r)
		return NULL;
	return json_loadb(r->data ? r->data : "", r->len, 0, NULL);
}

/* What went wrong with a call, into buf. */
static const char *api_error(nb *n, const char *what, const sr_result *r, char *buf,
			     size_t len)
{
	json_t *b;

	if (!r) {
		snprintf(buf, len, "%s: no answer", what);
		return buf;
	}
	if (r->status != SR_OK) {
		snprintf(buf, len, "%s: NetBird's API at %s: %s", what, n->api,
			 r->message ? r->message : n->h->strerror(r->status));
		return buf;
	}
	b = body_of(r);
	snprintf(buf, len, "%s: NetBird answered HTTP %ld: %s", what, http_status(r),
		 json_string_value(json_object_get(b, "message")) ?
		 json_string_value(json_object_get(b, "message")) : "(no message)");
	json_decref(b);
	if (http_status(r) == 401 || (http_status(r) == 404 && strstr(buf, "invalid token")))
		snprintf(buf + strlen(buf), len - strlen(buf),
			 " (check the personal access token in [tunnel.netbird] token_file)");
	return buf;
}

static int fail_status(const sr_result *r)
{
	long s = http_status(r);

	if (!r)
		return SR_EIO;
	if (r->status != SR_OK)
		return r->status;
	return s == 401 || s == 403 || (s == 404) ? SR_EPERM : SR_EHTTP;
}

/* ------------------------------------------------------- the records */

static int save(op *o)
{
	char key[200], *text;
	int rc;

	snprintf(key, sizeof(key), "enrol.%s", o->sandbox);
	if (!(text = json_dumps(o->rec, JSON_COMPACT)))
		return SR_ENOMEM;
	rc = o->n->h->kv_put(o->n->h, key, text, strlen(text));
	free(text);
	return rc;
}

static json_t *load(nb *n, const char *sandbox)
{
	char key[200], *v = NULL;
	size_t len = 0;
	json_t *j;

	snprintf(key, sizeof(key), "enrol.%s", sandbox);
	if (n->h->kv_get(n->h, key, &v, &len) != SR_OK)
		return NULL;
	j = json_loadb(v, len, 0, NULL);
	n->h->free(v);
	return json_is_object(j) ? j : (json_decref(j), NULL);
}

static void forget(nb *n, const char *sandbox)
{
	char key[200];

	snprintf(key, sizeof(key), "enrol.%s", sandbox);
	n->h->kv_delete(n->h, key);
}

static int valid_sandbox(const char *s)
{
	size_t len = s ? strlen(s) : 0;

	return len >= 1 && len <= 64 && s[0] != '.' &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == len;
}

/* ---------------------------------------------------------------- start */

enum { S_GROUPS = 1, S_POLICIES, S_DELETE_DEFAULT, S_PEER };

/* The policy named Default that lets every peer reach every other. */
static json_t *default_policy(json_t *list)
{
	size_t i;
	json_t *p;

	json_array_foreach(list, i, p)
		if (json_is_string(json_object_get(p, "name")) &&
		    strcmp(json_string_value(json_object_get(p, "name")), "Default") == 0)
			return p;
	return NULL;
}

static void start_step(op *o, const sr_result *r)
{
	nb *n = o->n;
	char err[700], path[300];
	json_t *b, *e;
	size_t i;
	int rc = SR_OK;

	switch (o->step) {
	case 0:
		o->step = S_GROUPS;
		rc = api(o, "GET", "/api/groups", NULL);
		break;
	case S_GROUPS:
		if (http_status(r) != 200) {
			op_fail(o, fail_status(r), "%s",
				api_error(n, "cannot list the groups", r, err, sizeof(err)));
			return;
		}
		b = body_of(r);
		json_array_foreach(b, i, e)
			if (json_is_string(json_object_get(e, "name")) &&
			    strcmp(json_string_value(json_object_get(e, "name")), n->runner_group) == 0) {
				free(n->runner_gid);
				n->runner_gid = strdup(json_string_value(json_object_get(e, "id")) ?
						       json_string_value(json_object_get(e, "id")) : "");
			}
		json_decref(b);
		if (!n->runner_gid || !*n->runner_gid) {
			op_fail(o, SR_ENOTFOUND, "NetBird has no group '%s' ([tunnel.netbird] "
				"runner_group: the group of the runner's own peer)", n->runner_group);
			return;
		}
		o->step = S_POLICIES;
		rc = api(o, "GET", "/api/policies", NULL);
		break;
	case S_POLICIES:
		if (http_status(r) != 200) {
			op_fail(o, fail_status(r), "%s",
				api_error(n, "cannot list the policies", r, err, sizeof(err)));
			return;
		}
		b = body_of(r);
		e = default_policy(b);
		if (e && o->dry) {
			json_decref(b);
			if (!n->delete_default) {
				op_fail(o, SR_EPERM, "NetBird's all-to-all 'Default' policy is in "
					"place: delete it, or set [tunnel.netbird] delete_default = yes");
				return;
			}
			e = NULL; /* the first start deletes it */
			b = NULL;
		}
		if (e && !n->delete_default) {
			json_decref(b);
			op_fail(o, SR_EPERM, "NetBird's all-to-all 'Default' policy is in place: "
				"every peer could reach every other, sandboxes included. Delete it "
				"(or set [tunnel.netbird] delete_default = yes) before sandboxes enrol");
			return;
		}
		if (e) {
			snprintf(path, sizeof(path), "/api/policies/%s",
				 json_string_value(json_object_get(e, "id")) ?
				 json_string_value(json_object_get(e, "id")) : "");
			json_decref(b);
			n->h->log(n->h, SR_LOG_WARN, "deleting NetBird's all-to-all 'Default' policy "
				  "(delete_default = yes)");
			o->step = S_DELETE_DEFAULT;
			rc = api(o, "DELETE", path, NULL);
			break;
		}
		json_decref(b);
		/* fall through */
	case S_DELETE_DEFAULT:
		if (o->step == S_DELETE_DEFAULT && http_status(r) != 200 && http_status(r) != 404) {
			op_fail(o, fail_status(r), "%s", api_error(n, "cannot delete the 'Default' "
								   "policy", r, err, sizeof(err)));
			return;
		}
		if (n->runner_ip) {
			n->started = n->started || !o->dry;
			op_end(o, SR_OK, NULL, NULL);
			return;
		}
		o->step = S_PEER;
		snprintf(path, sizeof(path), "/api/peers?name=%s", n->runner_peer);
		rc = api(o, "GET", path, NULL);
		break;
	case S_PEER:
		if (http_status(r) != 200) {
			op_fail(o, fail_status(r), "%s",
				api_error(n, "cannot list the peers", r, err, sizeof(err)));
			return;
		}
		b = body_of(r);
		/* ?name= is a LIKE filter: the exact name is checked here. */
		json_array_foreach(b, i, e)
			if (json_is_string(json_object_get(e, "name")) &&
			    strcmp(json_string_value(json_object_get(e, "name")), n->runner_peer) == 0 &&
			    json_is_string(json_object_get(e, "ip")))
				n->runner_ip = strdup(json_string_value(json_object_get(e, "ip")));
		json_decref(b);
		if (!n->runner_ip) {
			op_fail(o, SR_ENOTFOUND, "NetBird has no peer named '%s' ([tunnel.netbird] "
				"runner_peer, or set runner_ip)", n->runner_peer);
			return;
		}
		n->started = n->started || !o->dry;
		op_end(o, SR_OK, NULL, NULL);
		return;
	}
	if (rc != SR_OK)
		op_fail(o, rc, "cannot reach NetBird's API at %s", n->api);
}

static void on_kick(void *ud)
{
	op *o = ud;

	o->n->h->timer_stop(o->kick);
	o->kick = NULL;
	step(o, NULL);
}

/* Start op's first step on the next loop iteration: whatever it meets,
 * done never runs from inside the call that began it. */
static int kick(op *o)
{
	if (!(o->kick = o->n->h->timer_start(o->n->h, 0, 0, on_kick, o))) {
		op_free(o);
		return SR_ENOMEM;
	}
	return SR_OK;
}

static int nb_start(void *self, uint64_t req, sr_done_fn done, void *ud)
{
	nb *n = self;
	op *o;

	if (!(o = op_new(n, OP_START, req, done, ud)))
		return SR_ENOMEM;
	return kick(o);
}

/* -------------------------------------------------------------- resolve */

static int nb_resolve(void *self, uint64_t req, const char *local_url, sr_done_fn done,
		      void *ud)
{
	nb *n = self;
	const char *h = local_url ? strstr(local_url, "://") : NULL, *end;
	char url[600];
	json_t *j;
	char *s;
	sr_result r = { .size = sizeof(r), .status = SR_OK };
	int rc;

	(void)req;
	if (!n->started || !n->runner_ip)
		return SR_ESTATE;
	if (!h || (strncmp(local_url, "http://", 7) != 0 && strncmp(local_url, "https://", 8) != 0))
		return SR_EINVAL;
	h += 3;
	if (*h == '[')
		end = strchr(h, ']') ? strchr(h, ']') + 1 : h + strlen(h);
	else
		end = h + strcspn(h, ":/?#");
	snprintf(url, sizeof(url), "%.*s%s%s", (int)(h - local_url), local_url, n->runner_ip, end);
	/* Only an enrolled sandbox has a route to the overlay address. */
	j = json_pack("{s:s, s:b, s:{s:b}}", "url", url, "enrolment", 1, "limits", "sse", 1);
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return SR_ENOMEM;
	r.json = s;
	rc = n->h->complete(n->h, done, ud, &r);
	free(s);
	return rc;
}

/* ------------------------------------------------------------- release */

enum { R_PEERS = 1, R_DELETE };

static const char *rec_str(op *o, const char *k)
{
	return json_string_value(json_object_get(o->rec, k));
}

/* A release (or an enrolment's undo) is over: its outcome. */
static void release_done(op *o, int status, const char *message)
{
	if (status == SR_OK) {
		forget(o->n, o->sandbox);
		o->n->h->log(o->n->h, SR_LOG_INFO, "released the NetBird enrolment of %s",
			     o->sandbox);
	} else {
		save(o); /* what is left, for the janitor */
	}
	if (o->failure) { /* an enrolment undone: its own failure */
		char msg[900];
		snprintf(msg, sizeof(msg), "%s%s%s", o->failure,
			 status == SR_OK ? "" : "; and cleaning up failed: ",
			 status == SR_OK ? "" : message);
		op_end(o, o->failure_status, NULL, msg);
		return;
	}
	op_end(o, status, NULL, status == SR_OK ? NULL : message);
}

/* Gone: deleted now, or not there. A 404 is also how NetBird answers a
 * token it does not know ("invalid token: pat: HASH not found",
 * checkPATFromRequest and util.WriteError): that is not gone. A group that
 * is not there is a 400 "group: ID not found" (deleteGroup answers every
 * error of DeleteGroups with 400): that is gone. */
static int deleted(const sr_result *r)
{
	long s = http_status(r);
	const char *msg;
	json_t *b;
	int gone = 0;

	if (s == 200 || s == 204)
		return 1;
	if (s != 404 && s != 400)
		return 0;
	b = body_of(r);
	msg = json_string_value(json_object_get(b, "message"));
	if (s == 404)
		gone = !msg || strncasecmp(msg, "invalid token", 13) != 0;
	else
		gone = msg && strncmp(msg, "group: ", 7) == 0 &&
		       strlen(msg) > 10 && strcmp(msg + strlen(msg) - 10, " not found") == 0;
	json_decref(b);
	return gone;
}

/* What a release deletes, in this order (a group a key still names
 * cannot go), each by the id its record holds. */
static const struct {
	const char *key, *path, *what;
} teardown[] = {
	{ "peer", "/api/peers/", "cannot delete the peer" },
	{ "policy", "/api/policies/", "cannot delete the policy" },
	{ "key", "/api/setup-keys/", "cannot delete the setup key" },
	{ "group", "/api/groups/", "cannot delete the group" },
};
#define N_TEARDOWN (sizeof(teardown) / sizeof(*teardown))

/* Steps: 0 finds the peer by name when none is recorded; R_PEERS takes
 * that answer; R_DELETE + i takes the answer to deleting teardown[i]. */
static void release_step(op *o, const sr_result *r)
{
	nb *n = o->n;
	char path[400], err[700];
	const char *id;
	json_t *b, *e;
	size_t i;

	if (o->step == 0) {
		o->step = R_PEERS;
		if (!rec_str(o, "peer")) {
			/* The peer by its exact name (?name= is a LIKE filter). */
			snprintf(path, sizeof(path), "/api/peers?name=%s", rec_str(o, "name"));
			if (api(o, "GET", path, NULL) != SR_OK)
				release_done(o, SR_ENETWORK, "cannot reach NetBird's API");
			return;
		}
		r = NULL;
	}
	if (o->step == R_PEERS) {
		if (r && http_status(r) != 200) {
			release_done(o, fail_status(r), api_error(n, "cannot list the peers", r, err,
								  sizeof(err)));
			return;
		}
		b = r ? body_of(r) : NULL;
		json_array_foreach(b, i, e)
			if (json_is_string(json_object_get(e, "name")) &&
			    strcmp(json_string_value(json_object_get(e, "name")),
				   rec_str(o, "name")) == 0)
				json_object_set(o->rec, "peer", json_object_get(e, "id"));
		json_decref(b);
		i = 0;
	} else {
		/* The answer to deleting teardown[i]. */
		i = (size_t)(o->step - R_DELETE);
		if (!deleted(r)) {
			release_done(o, fail_status(r), api_error(n, teardown[i].what, r, err,
								  sizeof(err)));
			return;
		}
		json_object_del(o->rec, teardown[i].key);
		i++;
	}
	for (; i < N_TEARDOWN; i++) {
		if (!(id = rec_str(o, teardown[i].key)))
			continue;
		o->step = R_DELETE + (int)i;
		snprintf(path, sizeof(path), "%s%s", teardown[i].path, id);
		if (api(o, "DELETE", path, NULL) != SR_OK)
			release_done(o, SR_ENETWORK, "cannot reach NetBird's API");
		return;
	}
	release_done(o, SR_OK, NULL);
}

static int collect(void *ud, const char *key)
{
	json_t *keys = ud;

	if (strncmp(key, "enrol.", 6) == 0)
		json_array_append_new(keys, json_string(key + 6));
	return 0;
}

static int nb_release(void *self, uint64_t req, const char *sandbox_id, sr_done_fn done,
		      void *ud)
{
	nb *n = self;
	sr_result ok = { .size = sizeof(ok), .status = SR_OK };
	op *o;

	/* Nothing runner-wide: enrolments are released one sandbox at a
	 * time (sandrun tunnel release --all lists them first). */
	if (!sandbox_id)
		return n->h->complete(n->h, done, ud, &ok);
	if (!valid_sandbox(sandbox_id))
		return SR_EINVAL;
	if (!(o = op_new(n, OP_RELEASE, req, done, ud)))
		return SR_ENOMEM;
	if (!(o->sandbox = strdup(sandbox_id))) {
		op_free(o);
		return SR_ENOMEM;
	}
	o->rec = load(n, sandbox_id); /* none: nothing enrolled, nothing to do */
	return kick(o);
}

/* ---------------------------------------------------------------- enrol */

enum { E_GROUP = 1, E_KEY, E_POLICY };

/* An enrolment failed midway: undo what it made, then fail with why. */
static void enrol_failed(op *o, int status, const char *why)
{
	if (!(o->failure = strdup(why))) {
		op_end(o, status, NULL, why);
		return;
	}
	o->failure_status = status;
	o->kind = OP_RELEASE;
	o->step = 0;
	release_step(o, NULL);
}

static void enrol_step(op *o, const sr_result *r)
{
	nb *n = o->n;
	char err[700];
	json_t *b, *j;
	const char *id;
	char *out;
	int rc = SR_OK;

	switch (o->step) {
	case 0:
		if (!n->started) {
			op_fail(o, SR_ESTATE, "NetBird's tunnel is not started (the 'Default' policy "
				"is checked first)");
			return;
		}
		o->step = E_GROUP;
		rc = api(o, "POST", "/api/groups",
			 json_pack("{s:s, s:[]}", "name", rec_str(o, "name"), "peers"));
		break;
	case E_GROUP:
		b = body_of(r);
		if (http_status(r) != 200 || !(id = json_string_value(json_object_get(b, "id")))) {
			json_decref(b);
			enrol_failed(o, fail_status(r), api_error(n, "cannot create the sandbox's group",
								  r, err, sizeof(err)));
			return;
		}
		json_object_set_new(o->rec, "group", json_string(id));
		json_decref(b);
		if ((rc = save(o)) != SR_OK) {
			enrol_failed(o, rc, "cannot record the enrolment");
			return;
		}
		o->step = E_KEY;
		rc = api(o, "POST", "/api/setup-keys",
			 json_pack("{s:s, s:s, s:i, s:[s], s:i, s:b}", "name", rec_str(o, "name"),
				   "type", "one-off", "expires_in", (int)n->key_ttl, "auto_groups",
				   rec_str(o, "group"), "usage_limit", 1, "ephemeral", 1));
		break;
	case E_KEY:
		b = body_of(r);
		if (http_status(r) != 200 || !(id = json_string_value(json_object_get(b, "id"))) ||
		    !json_string_value(json_object_get(b, "key"))) {
			json_decref(b);
			enrol_failed(o, fail_status(r), api_error(n, "cannot create the setup key", r,
								  err, sizeof(err)));
			return;
		}
		json_object_set_new(o->rec, "key", json_string(id));
		o->key = strdup(json_string_value(json_object_get(b, "key")));
		json_decref(b);
		if (!o->key) {
			enrol_failed(o, SR_ENOMEM, "out of memory");
			return;
		}
		if (n->h->size >= SR_TABLE_HAS(sr_host, secret_hold))
			n->h->secret_hold(n->h, o->key);
		else
			n->h->secret_register(n->h, o->key);
		if ((rc = save(o)) != SR_OK) {
			enrol_failed(o, rc, "cannot record the enrolment");
			return;
		}
		{
			json_t *ports = json_array();
			size_t i;
			json_t *p;
			json_array_foreach(o->ports, i, p) {
				char buf[16];
				snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(p));
				json_array_append_new(ports, json_string(buf));
			}
			o->step = E_POLICY;
			rc = api(o, "POST", "/api/policies",
				 json_pack("{s:s, s:s, s:b, s:[{s:s, s:b, s:s, s:b, s:s, s:o, s:[s], s:[s]}]}",
					   "name", rec_str(o, "name"), "description",
					   "sandrun: one sandbox to the runner's ports", "enabled", 1,
					   "rules", "name", rec_str(o, "name"), "enabled", 1, "action",
					   "accept", "bidirectional", 0, "protocol", "tcp", "ports", ports,
					   "sources", rec_str(o, "group"), "destinations", n->runner_gid));
		}
		break;
	case E_POLICY:
		b = body_of(r);
		if (http_status(r) != 200 || !(id = json_string_value(json_object_get(b, "id")))) {
			json_decref(b);
			enrol_failed(o, fail_status(r), api_error(n, "cannot create the policy", r,
								  err, sizeof(err)));
			return;
		}
		json_object_set_new(o->rec, "policy", json_string(id));
		json_decref(b);
		if ((rc = save(o)) != SR_OK) {
			enrol_failed(o, rc, "cannot record the enrolment");
			return;
		}
		j = json_pack("{s:s, s:s, s:s, s:s, s:O, s:[s, s, s, s, s, s, s, s]}", "setup_key",
			      o->key, "management_url", n->management_url, "hostname",
			      rec_str(o, "name"), "group", rec_str(o, "group"), "ports", o->ports,
			      "command", n->client, "up", "--setup-key-file", "{setup_key_file}",
			      "--management-url", n->management_url, "--hostname",
			      rec_str(o, "name"));
		out = j ? json_dumps(j, JSON_COMPACT) : NULL;
		json_decref(j);
		n->h->log(n->h, SR_LOG_INFO, "enrolled %s: group, one-off key and a policy to "
			  "the runner's group", o->sandbox);
		if (!out) {
			enrol_failed(o, SR_ENOMEM, "out of memory");
			return;
		}
		op_end(o, SR_OK, out, NULL);
		free(out);
		return;
	}
	if (rc != SR_OK)
		enrol_failed(o, rc, "cannot reach NetBird's API");
}

/* enrol {"verify": true}: the peer that joined, by its exact name. */
static void verify_step(op *o, const sr_result *r)
{
	nb *n = o->n;
	char err[700], path[300];
	json_t *b, *e, *g, *found = NULL;
	size_t i, k;
	char *out;
	int in_group = 0;

	if (o->step == 0) {
		o->step = 1;
		snprintf(path, sizeof(path), "/api/peers?name=%s", rec_str(o, "name"));
		if (api(o, "GET", path, NULL) != SR_OK)
			op_fail(o, SR_ENETWORK, "cannot reach NetBird's API at %s", n->api);
		return;
	}
	if (http_status(r) != 200) {
		op_fail(o, fail_status(r), "%s", api_error(n, "cannot list the peers", r, err,
							   sizeof(err)));
		return;
	}
	b = body_of(r);
	json_array_foreach(b, i, e)
		if (json_is_string(json_object_get(e, "name")) &&
		    strcmp(json_string_value(json_object_get(e, "name")), rec_str(o, "name")) == 0)
			found = e;
	if (found)
		json_array_foreach(json_object_get(found, "groups"), k, g)
			if (json_is_string(json_object_get(g, "id")) && rec_str(o, "group") &&
			    strcmp(json_string_value(json_object_get(g, "id")), rec_str(o, "group")) == 0)
				in_group = 1;
	if (!found || !json_is_true(json_object_get(found, "connected")) || !in_group) {
		op_fail(o, SR_ENOTFOUND, "no connected NetBird peer named '%s' in the sandbox's "
			"group has joined", rec_str(o, "name"));
		json_decref(b);
		return;
	}
	json_object_set(o->rec, "peer", json_object_get(found, "id"));
	save(o);
	e = json_pack("{s:O, s:O}", "peer", json_object_get(found, "id"), "ip",
		      json_object_get(found, "ip"));
	out = e ? json_dumps(e, JSON_COMPACT) : NULL;
	json_decref(e);
	json_decref(b);
	op_end(o, out ? SR_OK : SR_ENOMEM, out, out ? NULL : "out of memory");
	free(out);
}

static int nb_enrol(void *self, uint64_t req, const char *sandbox_id, const char *params_json,
		    sr_done_fn done, void *ud)
{
	nb *n = self;
	json_t *params = json_loads(params_json ? params_json : "{}", 0, NULL), *p;
	char name[80];
	size_t i;
	op *o;
	int verify = json_is_true(json_object_get(params, "verify"));

	if (!valid_sandbox(sandbox_id) || !json_is_object(params)) {
		json_decref(params);
		return SR_EINVAL;
	}
	if (!verify) {
		json_t *ports = json_object_get(params, "ports");
		if (!json_is_array(ports) || !json_array_size(ports)) {
			n->h->log(n->h, SR_LOG_ERROR, "enrol: \"ports\" must list the runner ports "
				  "the sandbox may reach");
			json_decref(params);
			return SR_EINVAL;
		}
		json_array_foreach(ports, i, p)
			if (!json_is_integer(p) || json_integer_value(p) < 1 ||
			    json_integer_value(p) > 65535) {
				json_decref(params);
				return SR_EINVAL;
			}
	}
	if (!(o = op_new(n, verify ? OP_VERIFY : OP_ENROL, req, done, ud))) {
		json_decref(params);
		return SR_ENOMEM;
	}
	o->sandbox = strdup(sandbox_id);
	if (verify) {
		o->rec = load(n, sandbox_id);
		if (!o->rec) {
			json_decref(params);
			op_free(o);
			n->h->log(n->h, SR_LOG_ERROR, "sandbox %s is not enrolled", sandbox_id);
			return SR_ENOTFOUND;
		}
	} else {
		if ((o->rec = load(n, sandbox_id))) {
			json_decref(params);
			op_free(o);
			n->h->log(n->h, SR_LOG_ERROR, "sandbox %s is enrolled already", sandbox_id);
			return SR_EEXIST;
		}
		snprintf(name, sizeof(name), "sandrun-%s", sandbox_id);
		o->rec = json_pack("{s:s, s:s, s:I, s:O*}", "sandbox", sandbox_id, "name", name,
				   "created", (json_int_t)time(NULL), "runner",
				   json_object_get(params, "runner"));
		o->ports = json_incref(json_object_get(params, "ports"));
	}
	json_decref(params);
	if (!o->sandbox || !o->rec) {
		op_free(o);
		return SR_ENOMEM;
	}
	/* Recorded before anything exists, so that a crash leaves a trace. */
	if (!verify && save(o) != SR_OK) {
		op_free(o);
		return SR_EIO;
	}
	return kick(o);
}

/* ---------------------------------------------------------- dispatch */

static void step(op *o, const sr_result *r)
{
	switch (o->kind) {
	case OP_START:
		start_step(o, r);
		return;
	case OP_ENROL:
		enrol_step(o, r);
		return;
	case OP_VERIFY:
		verify_step(o, r);
		return;
	case OP_RELEASE:
		if (!o->rec) { /* nothing was enrolled */
			op_end(o, SR_OK, NULL, NULL);
			return;
		}
		release_step(o, r);
		return;
	}
}

/* enrolments: every record, for the janitor. */
static int nb_enrolments(void *self, uint64_t req, sr_done_fn done, void *ud)
{
	nb *n = self;
	json_t *keys = json_array(), *items = json_array(), *k, *rec, *out;
	sr_result r = { .size = sizeof(r), .status = SR_OK };
	size_t i;
	char *s;
	int rc;

	(void)req;
	if (!keys || !items) {
		json_decref(keys);
		json_decref(items);
		return SR_ENOMEM;
	}
	n->h->kv_list(n->h, collect, keys);
	json_array_foreach(keys, i, k)
		if ((rec = load(n, json_string_value(k))))
			json_array_append_new(items, json_pack("{s:O, s:O, s:O, s:O*}", "sandbox",
				json_object_get(rec, "sandbox"), "name", json_object_get(rec, "name"),
				"created", json_object_get(rec, "created"), "runner",
				json_object_get(rec, "runner"))), json_decref(rec);
	json_decref(keys);
	out = json_pack("{s:o}", "items", items);
	s = out ? json_dumps(out, JSON_COMPACT) : NULL;
	json_decref(out);
	if (!s)
		return SR_ENOMEM;
	r.json = s;
	rc = n->h->complete(n->h, done, ud, &r);
	free(s);
	return rc;
}

static int nb_cancel(void *self, uint64_t req)
{
	nb *n = self;

	for (op *o = n->ops; o; o = o->next)
		if (o->req == req && o->call) {
			n->h->http_cancel(o->call);
			return SR_OK;
		}
	return SR_ENOTFOUND;
}

/* doctor: the token works and the runner's group is there (a start, without
 * deleting anything). */
static void doctor_done(void *ud, const sr_result *r)
{
	op *o = ud;
	char detail[900];
	json_t *j;
	char *s;
	sr_result out = { .size = sizeof(out), .status = SR_OK };

	if (r->status == SR_OK)
		snprintf(detail, sizeof(detail), "NetBird at %s, runner group '%s' at %s, no "
			 "all-to-all Default policy", o->n->api, o->n->runner_group,
			 o->n->runner_ip ? o->n->runner_ip : "?");
	else
		snprintf(detail, sizeof(detail), "%s", r->message ? r->message : "failed");
	j = json_pack("{s:b, s:s}", "ok", r->status == SR_OK, "detail", detail);
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	out.json = s;
	o->done(o->ud, &out);
	free(s);
	free(o);
}

static int nb_doctor(void *self, sr_done_fn done, void *ud)
{
	nb *n = self;
	op *w = calloc(1, sizeof(*w)), *o;

	if (!w)
		return SR_ENOMEM;
	w->n = n;
	w->done = done;
	w->ud = ud;
	if (!(o = op_new(n, OP_START, 0, doctor_done, w))) {
		free(w);
		return SR_ENOMEM;
	}
	o->dry = 1;
	return kick(o) == SR_OK ? SR_OK : (free(w), SR_ENOMEM);
}

/* ------------------------------------------------------------ lifecycle */

static char *read_token(const sr_host *h, const char *file)
{
	char buf[512];
	struct stat st;
	size_t len;
	FILE *f;

	if (!(f = fopen(file, "r"))) {
		h->config_invalid(h, "token_file", "cannot be read");
		return NULL;
	}
	if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
		h->log(h, SR_LOG_WARN, "%s: the token file is readable by others (chmod 600 it)",
		       file);
	len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = 0;
	buf[strcspn(buf, "\r\n")] = 0;
	if (strncmp(buf, "nbp_", 4) != 0 || strlen(buf) < 20) {
		h->config_invalid(h, "token_file", "does not hold a NetBird personal access token "
				  "(nbp_...)");
		return NULL;
	}
	return strdup(buf);
}

static int nb_init(const sr_host *h, void **self)
{
	const char *api = h->config_get(h, "api_url"), *tf = h->config_get(h, "token_file");
	const char *mu = h->config_get(h, "management_url"), *dd = h->config_get(h, "delete_default");
	const char *ttl = h->config_get(h, "key_ttl"), *ip = h->config_get(h, "runner_ip");
	nb *n;
	char *tok;
	unsigned long secs = 600;
	size_t len;

	if (api && strncmp(api, "http://", 7) != 0 && strncmp(api, "https://", 8) != 0)
		return h->config_invalid(h, "api_url", "an http(s) URL of NetBird's management API");
	if (!tf)
		return h->config_invalid(h, "token_file", "required: a file holding a personal "
					 "access token");
	if (dd && strcmp(dd, "yes") != 0 && strcmp(dd, "no") != 0)
		return h->config_invalid(h, "delete_default", "yes or no");
	if (ttl) {
		char *end;
		secs = strtoul(ttl, &end, 10);
		if (!*ttl || *end || secs < 60 || secs > 86400)
			return h->config_invalid(h, "key_ttl", "seconds, 60 to 86400");
	}
	if (!h->config_get(h, "runner_group"))
		return h->config_invalid(h, "runner_group", "required: the group of the runner's "
					 "own peer");
	if (!(tok = read_token(h, tf)))
		return SR_EINVAL;
	h->secret_register(h, tok);
	if (!(n = calloc(1, sizeof(*n)))) {
		free(tok);
		return SR_ENOMEM;
	}
	n->h = h;
	n->api = strdup(api ? api : DEFAULT_API);
	n->auth = malloc(strlen(tok) + 7);
	if (n->auth)
		sprintf(n->auth, "Token %s", tok);
	h->secret_register(h, n->auth ? n->auth : tok);
	free(tok);
	n->management_url = strdup(mu ? mu : api ? api : DEFAULT_API);
	n->runner_group = h->config_get(h, "runner_group");
	n->runner_peer = h->config_get(h, "runner_peer") ? h->config_get(h, "runner_peer") : "runner";
	n->runner_ip = ip ? strdup(ip) : NULL;
	n->client = h->config_get(h, "client") ? h->config_get(h, "client") : "netbird";
	n->delete_default = dd && strcmp(dd, "yes") == 0;
	n->key_ttl = (unsigned)secs;
	if (!n->api || !n->auth || !n->management_url || (ip && !n->runner_ip)) {
		free(n->api);
		free(n->auth);
		free(n->management_url);
		free(n->runner_ip);
		free(n);
		return SR_ENOMEM;
	}
	len = strlen(n->api);
	while (len && n->api[len - 1] == '/')
		n->api[--len] = 0;
	*self = n;
	return SR_OK;
}

static void nb_fini(void *self)
{
	nb *n = self;

	while (n->ops) {
		op *o = n->ops;
		if (o->call) {
			n->h->http_cancel(o->call); /* ends it, or moves it on */
			if (n->ops == o && !o->call)
				op_fail(o, SR_ECANCELED, "the plugin is stopping");
		} else {
			op_fail(o, SR_ECANCELED, "the plugin is stopping");
		}
	}
	free(n->api);
	free(n->auth);
	free(n->management_url);
	free(n->runner_gid);
	free(n->runner_ip);
	free(n);
}

static const sr_tunnel_ops netbird_ops = {
	.size = sizeof(sr_tunnel_ops),
	.start = nb_start,
	.resolve = nb_resolve,
	.enrol = nb_enrol,
	.release = nb_release,
	.cancel = nb_cancel,
	.enrolments = nb_enrolments,
};

static const char *const netbird_keys[] = {
	"api_url", "token_file", "management_url", "runner_group", "runner_peer", "runner_ip",
	"delete_default", "key_ttl", "client", NULL
};

static const sr_plugin_descriptor netbird_descriptor = {
	.abi_major = SR_ABI_MAJOR,
	.abi_minor = SR_ABI_MINOR,
	.size = sizeof(sr_plugin_descriptor),
	.kind = SR_PLUGIN_TUNNEL,
	.name = "netbird",
	.version = "0.1.0",
	.description = "sandboxes as ephemeral NetBird peers, each let to the runner's ports only",
	.ops = &netbird_ops,
	.config_keys = netbird_keys,
	.init = nb_init,
	.fini = nb_fini,
	.doctor = nb_doctor,
};

SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void);
SR_PLUGIN_EXPORT const sr_plugin_descriptor *sandrun_plugin_entry(void)
{
	return &netbird_descriptor;
}
