/* sandrund's bearer tokens: the tokens file and the check of an
 * Authorization header against it. */
#ifndef SR_CORE_SERVICE_AUTH_H
#define SR_CORE_SERVICE_AUTH_H

#include <stddef.h>

typedef struct sr__tokens sr__tokens;

/* Read path: one token a line, surrounding blanks trimmed; blank lines
 * and lines whose first non-blank character is # are ignored. A token is
 * 16 to 512 characters of RFC 6750's b64token alphabet (letters, digits,
 * - . _ ~ + / and trailing =). SR_OK with *out (which may hold no token:
 * see sr__tokens_count); SR_EIO or SR_EINVAL with err naming the file
 * (and line). Each token is registered as a secret; only its SHA-256 is
 * kept. */
int sr__tokens_load(const char *path, sr__tokens **out, char *err, size_t n);
size_t sr__tokens_count(const sr__tokens *t);
/* Whether header, an Authorization value, is "Bearer" (any case), one or
 * more spaces and one of the tokens. Every token is compared, each in
 * constant time over SHA-256 digests, so neither which token matched nor
 * how much of one did shows in the time taken. t may be NULL (no tokens:
 * nothing matches). */
int sr__tokens_check(const sr__tokens *t, const char *header);
/* A set that takes no token: every check fails (NULL when out of
 * memory). */
sr__tokens *sr__tokens_none(void);
void sr__tokens_free(sr__tokens *t);

#endif
