/* Bearer tokens (auth.h). */
#include "config.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/host/log.h"
#include "core/service/auth.h"

#define TOKEN_MIN 16
#define TOKEN_MAX 512

struct sr__tokens {
	unsigned char (*digest)[32];
	size_t n;
};

static int sha256(const char *s, size_t len, unsigned char out[32])
{
	unsigned int n = 0;

	return EVP_Digest(s, len, out, &n, EVP_sha256(), NULL) == 1 && n == 32;
}

/* RFC 6750 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" /
 * "/" ) *"=" */
static int valid_token(const char *s, size_t len)
{
	size_t i = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			     "0123456789-._~+/");

	if (i == 0 || i > len)
		return 0;
	while (i < len && s[i] == '=')
		i++;
	return i == len;
}

static char *trim(char *s)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' ||
			   end[-1] == '\r'))
		*--end = 0;
	return s;
}

static void wipe(char *s, size_t n)
{
	volatile char *p = s;

	while (n--)
		*p++ = 0;
}

int sr__tokens_load(const char *path, sr__tokens **out, char *err, size_t n)
{
	sr__tokens *t;
	FILE *f;
	char *line = NULL, *tok;
	size_t cap = 0, len;
	struct stat st;
	int lineno = 0, rc = SR_OK;

	*out = NULL;
	f = fopen(path, "re");
	if (!f) {
		snprintf(err, n, "%s: cannot read the tokens file: %s", path, strerror(errno));
		return SR_EIO;
	}
	if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
		sr__log(SR_LOG_WARN, "service", "%s: the tokens file is readable by others "
			"(mode %03o); chmod 600 it", path, (unsigned)(st.st_mode & 0777));
	if (!(t = calloc(1, sizeof(*t)))) {
		fclose(f);
		snprintf(err, n, "out of memory");
		return SR_ENOMEM;
	}
	while (getline(&line, &cap, f) >= 0) {
		unsigned char (*grown)[32];
		lineno++;
		tok = trim(line);
		if (!*tok || *tok == '#')
			continue;
		len = strlen(tok);
		if (len < TOKEN_MIN || len > TOKEN_MAX || !valid_token(tok, len)) {
			snprintf(err, n, "%s:%d: not a token: %d to %d characters of letters, digits, "
				 "- . _ ~ + / (and trailing =), one a line", path, lineno,
				 TOKEN_MIN, TOKEN_MAX);
			rc = SR_EINVAL;
			break;
		}
		grown = realloc(t->digest, (t->n + 1) * sizeof(*t->digest));
		if (!grown || !sha256(tok, len, grown[t->n])) {
			if (grown)
				t->digest = grown;
			snprintf(err, n, "out of memory");
			rc = SR_ENOMEM;
			break;
		}
		t->digest = grown;
		t->n++;
		sr__secret_register(tok);
	}
	if (line) {
		wipe(line, cap);
		free(line);
	}
	fclose(f);
	if (rc != SR_OK) {
		sr__tokens_free(t);
		return rc;
	}
	*out = t;
	return SR_OK;
}

size_t sr__tokens_count(const sr__tokens *t)
{
	return t ? t->n : 0;
}

int sr__tokens_check(const sr__tokens *t, const char *header)
{
	unsigned char d[32];
	int match = 0;

	if (!t || !header || strncasecmp(header, "Bearer ", 7) != 0)
		return 0;
	for (header += 7; *header == ' '; header++)
		;
	if (!sha256(header, strlen(header), d))
		return 0;
	for (size_t i = 0; i < t->n; i++)
		match |= CRYPTO_memcmp(d, t->digest[i], sizeof(d)) == 0;
	return match;
}

sr__tokens *sr__tokens_none(void)
{
	return calloc(1, sizeof(sr__tokens));
}

void sr__tokens_free(sr__tokens *t)
{
	if (!t)
		return;
	if (t->digest)
		wipe((char *)t->digest, t->n * sizeof(*t->digest));
	free(t->digest);
	free(t);
}
