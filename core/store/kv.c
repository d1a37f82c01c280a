/* The plugins' key-value areas in the runner's database (core/host/kv.h;
 * table kv, schema version 5 of core/store/db.c). A value is kept as text
 * when it is plain ASCII (readable with any SQL client), else as hex (hex
 * = 1): values may hold any byte. Each call is one statement, so that put,
 * delete and compare-and-set exclude each other across processes and
 * services: the compare-and-set is an UPDATE ... WHERE value = expected,
 * or an INSERT ... ON CONFLICT DO NOTHING for a key that must not exist. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/host/kv.h"
#include "core/store/db.h"

#define KV_MAX_VALUE (1u << 20)

int sr__kv_valid_key(const char *key)
{
	size_t n = 0;

	if (!key || key[0] == '.')
		return 0;
	for (; key[n]; n++) {
		char c = key[n];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return n >= 1 && n <= 128;
}

/* value as the column holds it (malloc'd), and whether as hex. */
static char *encode(const void *value, size_t len, int *hex)
{
	const unsigned char *v = value;
	static const char digits[] = "0123456789abcdef";
	char *out;

	*hex = 0;
	for (size_t i = 0; i < len; i++)
		if (v[i] == 0 || v[i] >= 0x80)
			*hex = 1;
	if (!*hex) {
		if ((out = malloc(len + 1))) {
			memcpy(out, v, len);
			out[len] = 0;
		}
		return out;
	}
	if (!(out = malloc(2 * len + 1)))
		return NULL;
	for (size_t i = 0; i < len; i++) {
		out[2 * i] = digits[v[i] >> 4];
		out[2 * i + 1] = digits[v[i] & 15];
	}
	out[2 * len] = 0;
	return out;
}

static int nibble(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The stored text back into bytes (NUL-terminated, malloc'd). */
static char *decode(const char *text, int hex, size_t *len)
{
	size_t n = strlen(text);
	char *out;

	if (!hex) {
		*len = n;
		return strdup(text);
	}
	if (n % 2 || !(out = malloc(n / 2 + 1)))
		return NULL;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
		if (hi < 0 || lo < 0) {
			free(out);
			return NULL;
		}
		out[i] = (char)(hi << 4 | lo);
	}
	out[n / 2] = 0;
	*len = n / 2;
	return out;
}

int sr__kv_get(const char *state, const char *ns, const char *key, char **value,
	       size_t *len)
{
	sr__db_rows *r = NULL;
	size_t n = 0;
	sr__db *db;
	int rc;

	*value = NULL;
	if (len)
		*len = 0;
	if (!sr__kv_valid_key(key))
		return SR_EINVAL;
	if (!(db = sr__db_shared(state)))
		return SR_EIO;
	if (sr__db_exec(db, &r, "SELECT value, hex FROM kv WHERE ns = $1 AND key = $2", "tt", ns,
			key) < 0)
		rc = sr__db_error(db, ns, "cannot read a key-value record");
	else if (!sr__db_nrows(r))
		rc = SR_ENOTFOUND;
	else if (!(*value = decode(sr__db_text(r, 0, 0) ? sr__db_text(r, 0, 0) : "",
				   (int)sr__db_int(r, 0, 1), &n)))
		rc = SR_EIO;
	else
		rc = SR_OK;
	sr__db_rows_free(r);
	sr__db_release(db);
	if (rc == SR_OK && len)
		*len = n;
	return rc;
}

int sr__kv_put(const char *state, const char *ns, const char *key, const void *value,
	       size_t len)
{
	sr__db *db;
	char *text;
	int rc = SR_OK, hex;

	if (!sr__kv_valid_key(key))
		return SR_EINVAL;
	if (len > KV_MAX_VALUE)
		return SR_ETOOBIG;
	if (!(text = encode(value, len, &hex)))
		return SR_ENOMEM;
	if (!(db = sr__db_shared(state))) {
		free(text);
		return SR_EIO;
	}
	if (sr__db_exec(db, NULL, "INSERT INTO kv (ns, key, value, hex) VALUES ($1, $2, $3, $4) "
			"ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value, hex = "
			"excluded.hex", "ttti", ns, key, text, (int64_t)hex) < 0)
		rc = sr__db_error(db, ns, "cannot write a key-value record");
	sr__db_release(db);
	free(text);
	return rc;
}

int sr__kv_cas(const char *state, const char *ns, const char *key, const void *expected,
	       size_t expected_len, const void *value, size_t len)
{
	char *text, *was = NULL;
	int hex, was_hex = 0, n;
	sr__db *db;

	if (!sr__kv_valid_key(key))
		return SR_EINVAL;
	if (len > KV_MAX_VALUE)
		return SR_ETOOBIG;
	if (!(text = encode(value, len, &hex)) ||
	    (expected && !(was = encode(expected, expected_len, &was_hex)))) {
		free(text);
		return SR_ENOMEM;
	}
	if (!(db = sr__db_shared(state))) {
		free(text);
		free(was);
		return SR_EIO;
	}
	if (!expected)
		n = sr__db_exec(db, NULL, "INSERT INTO kv (ns, key, value, hex) VALUES ($1, $2, $3, "
				"$4) ON CONFLICT (ns, key) DO NOTHING", "ttti", ns, key, text,
				(int64_t)hex);
	else
		n = sr__db_exec(db, NULL, "UPDATE kv SET value = $3, hex = $4 WHERE ns = $1 AND "
				"key = $2 AND value = $5 AND hex = $6", "tttiti", ns, key, text,
				(int64_t)hex, was, (int64_t)was_hex);
	if (n < 0)
		n = sr__db_error(db, ns, "cannot write a key-value record");
	sr__db_release(db);
	free(text);
	free(was);
	return n < 0 ? n : n == 1 ? SR_OK : SR_ESTATE;
}

int sr__kv_delete(const char *state, const char *ns, const char *key)
{
	sr__db *db;
	int n;

	if (!sr__kv_valid_key(key))
		return SR_EINVAL;
	if (!(db = sr__db_shared(state)))
		return SR_EIO;
	n = sr__db_exec(db, NULL, "DELETE FROM kv WHERE ns = $1 AND key = $2", "tt", ns, key);
	if (n < 0)
		n = sr__db_error(db, ns, "cannot delete a key-value record");
	sr__db_release(db);
	return n < 0 ? n : n ? SR_OK : SR_ENOTFOUND;
}

int sr__kv_list(const char *state, const char *ns, sr_kv_visit_fn visit, void *ud)
{
	sr__db_rows *r = NULL;
	sr__db *db;
	int rc = SR_OK;

	if (!(db = sr__db_shared(state)))
		return SR_EIO;
	if (sr__db_exec(db, &r, "SELECT key FROM kv WHERE ns = $1 ORDER BY key", "t", ns) < 0)
		rc = sr__db_error(db, ns, "cannot list the key-value records");
	/* Visited after the connection is let go: a visitor may call again. */
	sr__db_release(db);
	for (size_t i = 0; rc == SR_OK && i < sr__db_nrows(r); i++)
		if (visit(ud, sr__db_text(r, i, 0)))
			break;
	sr__db_rows_free(r);
	return rc;
}
