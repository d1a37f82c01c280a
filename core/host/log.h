/* Logging with secret redaction. */
#ifndef SR_CORE_LOG_H
#define SR_CORE_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sandrun/plugin.h"

/* Lines at or below this level are written (default SR_LOG_INFO). */
void sr__log_set_level(int level);
int sr__log_level(void);
/* Parse "error", "warn", "info" or "debug"; -1 when unknown. */
int sr__log_parse_level(const char *s);
/* Redirect output (tests); NULL restores stderr. Borrowed. */
void sr__log_set_stream(void *file);

void sr__log(int level, const char *who, const char *fmt, ...)
	SR_PRINTF(3, 4);
void sr__logv(int level, const char *who, const char *fmt, va_list ap);

/* Remember a secret value (copied) so that no log line shows it, for the
 * life of the process. Values shorter than 4 bytes are ignored, here and
 * below: redacting them would garble text. */
void sr__secret_register(const char *value);
/* Remember it while it is held: each hold is ended by one release of the
 * same value, and the copy is wiped when no hold is left (unless it was
 * also registered for good). 0, or -1 without memory (nothing held). */
int sr__secret_hold(const char *value);
void sr__secret_release(const char *value);
/* How many values are remembered (tests, metrics). */
size_t sr__secrets_count(void);
/* The values an owner (a run, a tool set, a server) holds, released
 * together when it ends. Zeroed to start. */
typedef struct sr__secret_holds {
	char **values;
	size_t n;
	/* 0: the values are hidden from every output; a scope
	 * (sr__secret_scope_new): from the log and that scope's output
	 * (sr__redact_json_in) only, so that what one run was given does
	 * not garble another's events. Set before the first hold. */
	uint64_t scope;
} sr__secret_holds;
/* Hold value for h; without memory it is registered for good instead. */
void sr__secret_hold_in(sr__secret_holds *h, const char *value);
/* Release every value of h; h is empty again. */
void sr__secret_holds_release(sr__secret_holds *h);
/* Replace every registered secret in s (in place) with "[REDACTED]";
 * returns a malloc'd string the caller frees. */
char *sr__redact(const char *s);
/* A copy of v in which every string value has each registered secret
 * replaced by "[REDACTED]"; keys and the structure are kept, so the result
 * is still well-formed JSON of the same shape. New reference (NULL only
 * without memory). Borrows v. */
json_t *sr__redact_json(json_t *v);
/* The same for the output of scope: the values held in no scope or
 * registered for good, and those held in that scope. */
json_t *sr__redact_json_in(json_t *v, uint64_t scope);
/* A new scope for sr__secret_holds, never 0. */
uint64_t sr__secret_scope_new(void);
/* Holds that are empty and have no scope take this thread's current one
 * at their first value (0: none, the default); returns the previous one,
 * for the caller to enter again when it is done. */
uint64_t sr__secret_scope_enter(uint64_t scope);
/* Wipe and forget every secret. */
void sr__secrets_clear(void);

/* A process's stderr kept for a message: data appended to buf (cap
 * bytes, NUL-terminated, *len used) while there is room; NULL or empty
 * data (an end of stream) adds nothing. */
void sr__text_append(char *buf, size_t cap, size_t *len, const void *data, size_t n);
/* buf as one line: line breaks become spaces, trailing blanks go. */
void sr__text_one_line(char *buf, size_t *len);

#endif
