/* Logging with secret redaction.
 *
 * Secrets live in a small table of copies that are wiped on release. Every
 * line is formatted into a buffer first and redacted before it is written,
 * so a secret cannot leak through any format argument. The table is
 * guarded by a lock: the database's threads log too.
 *
 * A value is in the table while it is registered for good or held: the
 * values of a run (its credentials, tokens, keys) are held by what owns
 * them and released when that ends, so that a service running turn after
 * turn keeps a table the size of its live runs, not of its history.
 *
 * A hold may have a scope (a run's): its value is then hidden from the
 * log, which every run shares, and from that scope's output, but not
 * from another run's events, which a caller's choice of secret (a word
 * those events happen to contain) must not garble. */
#include "config.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host/log.h"

#define REDACTED "[REDACTED]"

static int log_level = SR_LOG_INFO;
static FILE *log_stream;
typedef struct secret_entry {
	char *value;
	unsigned holds; /* holds not yet released, scoped or not */
	unsigned open;  /* of them, the unscoped ones (shown nowhere) */
	int forever;    /* sr__secret_register()ed */
	uint64_t *scopes; /* one scope per scoped hold (a multiset) */
	size_t n_scopes;
} secret_entry;

static secret_entry *secrets;
static size_t n_secrets;
static pthread_mutex_t secrets_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

void sr__log_set_level(int level)
{
	if (level >= SR_LOG_ERROR && level <= SR_LOG_DEBUG)
		log_level = level;
}

int sr__log_level(void)
{
	return log_level;
}

int sr__log_parse_level(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (s && strcmp(s, level_names[i]) == 0)
			return i;
	return -1;
}

void sr__log_set_stream(void *file)
{
	log_stream = file;
}

static void wipe_free(char *s);

/* The entry of value, added when missing; NULL without memory. Called
 * with the lock held. */
static secret_entry *entry(const char *value)
{
	secret_entry *grown;

	for (size_t i = 0; i < n_secrets; i++)
		if (strcmp(secrets[i].value, value) == 0)
			return &secrets[i];
	grown = realloc(secrets, (n_secrets + 1) * sizeof(*secrets));
	if (!grown)
		return NULL;
	secrets = grown;
	grown[n_secrets] = (secret_entry){ strdup(value), 0, 0, 0, NULL, 0 };
	if (!grown[n_secrets].value)
		return NULL;
	return &secrets[n_secrets++];
}

void sr__secret_register(const char *value)
{
	secret_entry *e;

	if (!value || strlen(value) < 4)
		return;
	pthread_mutex_lock(&secrets_lock);
	if ((e = entry(value)))
		e->forever = 1;
	pthread_mutex_unlock(&secrets_lock);
}

static int hold_scoped(const char *value, uint64_t scope)
{
	secret_entry *e;
	uint64_t *grown = NULL;

	if (!value || strlen(value) < 4)
		return 0;
	pthread_mutex_lock(&secrets_lock);
	e = entry(value);
	if (e && scope && !(grown = realloc(e->scopes, (e->n_scopes + 1) * sizeof(*grown))))
		scope = 0; /* without memory: shown in no output at all */
	if (grown) {
		e->scopes = grown;
		e->scopes[e->n_scopes++] = scope;
	}
	if (e && e->holds < UINT_MAX) {
		e->holds++;
		if (!scope)
			e->open++;
	} else if (e) {
		e->forever = 1; /* a count that cannot grow: never released */
	}
	pthread_mutex_unlock(&secrets_lock);
	return e ? 0 : -1;
}

int sr__secret_hold(const char *value)
{
	return hold_scoped(value, 0);
}

static void release_scoped(const char *value, uint64_t scope)
{
	if (!value || strlen(value) < 4)
		return;
	pthread_mutex_lock(&secrets_lock);
	for (size_t i = 0; i < n_secrets; i++) {
		secret_entry *e = &secrets[i];
		size_t j;
		if (strcmp(e->value, value) != 0)
			continue;
		for (j = 0; scope && j < e->n_scopes && e->scopes[j] != scope; j++)
			;
		if (scope && j < e->n_scopes)
			e->scopes[j] = e->scopes[--e->n_scopes];
		else if (e->open)
			e->open--; /* (a scoped hold taken unscoped without memory) */
		if (e->holds)
			e->holds--;
		if (!e->holds && !e->forever) {
			/* The order is kept: overlapping secrets are replaced
			 * in the order they came. */
			wipe_free(e->value);
			free(e->scopes);
			memmove(e, e + 1, (n_secrets - i - 1) * sizeof(*e));
			n_secrets--;
		}
		break;
	}
	pthread_mutex_unlock(&secrets_lock);
}

void sr__secret_release(const char *value)
{
	release_scoped(value, 0);
}

static _Thread_local uint64_t current_scope;

uint64_t sr__secret_scope_enter(uint64_t scope)
{
	uint64_t was = current_scope;

	current_scope = scope;
	return was;
}

uint64_t sr__secret_scope_new(void)
{
	static uint64_t next;
	uint64_t id;

	pthread_mutex_lock(&secrets_lock);
	id = ++next;
	pthread_mutex_unlock(&secrets_lock);
	return id;
}

size_t sr__secrets_count(void)
{
	size_t n;

	pthread_mutex_lock(&secrets_lock);
	n = n_secrets;
	pthread_mutex_unlock(&secrets_lock);
	return n;
}

void sr__secret_hold_in(sr__secret_holds *h, const char *value)
{
	char **grown;
	char *copy;

	if (!value || strlen(value) < 4)
		return;
	if (!h->n && !h->scope)
		h->scope = current_scope;
	grown = realloc(h->values, (h->n + 1) * sizeof(*grown));
	if (grown)
		h->values = grown;
	copy = grown ? strdup(value) : NULL;
	if (!copy || hold_scoped(value, h->scope) != 0) {
		/* Without memory to remember it, it stays for good: a secret
		 * is never let out for want of bookkeeping. */
		free(copy);
		sr__secret_register(value);
		return;
	}
	h->values[h->n++] = copy;
}

void sr__secret_holds_release(sr__secret_holds *h)
{
	for (size_t i = 0; i < h->n; i++) {
		release_scoped(h->values[i], h->scope);
		wipe_free(h->values[i]);
	}
	free(h->values);
	h->values = NULL;
	h->n = 0;
}

static void wipe_free(char *s)
{
	if (!s)
		return;
	volatile char *p = s;
	while (*p)
		*p++ = 0;
	free(s);
}

void sr__secrets_clear(void)
{
	pthread_mutex_lock(&secrets_lock);
	for (size_t i = 0; i < n_secrets; i++) {
		wipe_free(secrets[i].value);
		free(secrets[i].scopes);
	}
	free(secrets);
	secrets = NULL;
	n_secrets = 0;
	pthread_mutex_unlock(&secrets_lock);
}

/* Replace each occurrence of one secret; returns a new string or NULL. */
static char *replace_all(const char *s, const char *secret)
{
	size_t slen = strlen(secret), len = 0;
	const char *p;
	char *out = NULL;
	FILE *m = open_memstream(&out, &len);

	if (!m)
		return NULL;
	while ((p = strstr(s, secret))) {
		fwrite(s, 1, (size_t)(p - s), m);
		fputs(REDACTED, m);
		s = p + slen;
	}
	fputs(s, m);
	fclose(m);
	return out;
}

#define ALL_SCOPES UINT64_MAX

/* Whether entry e is hidden in the output of scope (ALL_SCOPES: every
 * output, the log). Called with the lock held. */
static int shown_to(const secret_entry *e, uint64_t scope)
{
	if (scope == ALL_SCOPES || e->forever || e->open)
		return 1;
	for (size_t j = 0; j < e->n_scopes; j++)
		if (e->scopes[j] == scope)
			return 1;
	return 0;
}

static char *redact_in(const char *s, uint64_t scope)
{
	char *cur = strdup(s ? s : "");

	pthread_mutex_lock(&secrets_lock);
	for (size_t i = 0; cur && i < n_secrets; i++) {
		char *next;
		if (!shown_to(&secrets[i], scope) || !strstr(cur, secrets[i].value))
			continue; /* the usual case: nothing to copy */
		next = replace_all(cur, secrets[i].value);
		wipe_free(cur);
		cur = next;
	}
	pthread_mutex_unlock(&secrets_lock);
	return cur;
}

char *sr__redact(const char *s)
{
	return redact_in(s, ALL_SCOPES);
}

/* Whether s contains a secret hidden from scope's output. */
static int has_secret(const char *s, uint64_t scope)
{
	int found = 0;

	pthread_mutex_lock(&secrets_lock);
	for (size_t i = 0; !found && i < n_secrets; i++)
		found = shown_to(&secrets[i], scope) && strstr(s, secrets[i].value) != NULL;
	pthread_mutex_unlock(&secrets_lock);
	return found;
}

/* Redact each string of v in place (v is a private deep copy). */
static void redact_strings(json_t *v, uint64_t scope)
{
	const char *key;
	json_t *item;
	size_t i;

	if (json_is_string(v)) {
		char *clean;
		if (!has_secret(json_string_value(v), scope))
			return;
		clean = redact_in(json_string_value(v), scope);
		if (clean && strcmp(clean, json_string_value(v)) != 0)
			json_string_set(v, clean);
		wipe_free(clean);
	} else if (json_is_object(v)) {
		json_object_foreach(v, key, item)
			redact_strings(item, scope);
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, item)
			redact_strings(item, scope);
	}
}

json_t *sr__redact_json(json_t *v)
{
	return sr__redact_json_in(v, ALL_SCOPES);
}

json_t *sr__redact_json_in(json_t *v, uint64_t scope)
{
	json_t *copy = json_deep_copy(v);

	if (copy && sr__secrets_count())
		redact_strings(copy, scope);
	return copy;
}

void sr__logv(int level, const char *who, const char *fmt, va_list ap)
{
	char buf[4096];
	char *clean;
	FILE *out = log_stream ? log_stream : stderr;

	if (level > log_level)
		return;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	clean = sr__redact(buf);
	if (level < 0 || level > SR_LOG_DEBUG)
		level = SR_LOG_ERROR;
	fprintf(out, "sandrun: %s%s%s: %s\n", who ? who : "", who ? ": " : "",
		level_names[level], clean ? clean : "(out of memory)");
	fflush(out);
	wipe_free(clean);
	memset(buf, 0, sizeof(buf));
}

void sr__log(int level, const char *who, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sr__logv(level, who, fmt, ap);
	va_end(ap);
}

void sr__text_append(char *buf, size_t cap, size_t *len, const void *data, size_t n)
{
	size_t room = *len + 1 < cap ? cap - 1 - *len : 0;

	if (!data || !n || !room)
		return;
	if (n > room)
		n = room;
	memcpy(buf + *len, data, n);
	*len += n;
	buf[*len] = 0;
}

void sr__text_one_line(char *buf, size_t *len)
{
	for (size_t i = 0; i < *len; i++)
		if (buf[i] == '\n' || buf[i] == '\r')
			buf[i] = ' ';
	while (*len && buf[*len - 1] == ' ')
		buf[--*len] = 0;
}
