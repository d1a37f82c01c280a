/* Version ranges in npm's syntax, enough for package.json "engines" and
 * the pins of our own npm packages: "||" alternatives of space-separated
 * comparators (>=, >, <=, <, =, ^, ~ or none) on versions of one to three
 * numbers, with x or * as a wildcard. Pre-release tags are ignored. */
#include "config.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/host/semver.h"

typedef struct ver {
	long part[3];
	int given; /* how many parts were written (0 for "*") */
} ver;

/* Parse "v1.2.3", "1.2", "1.x", "*" at *s; advance *s. 0 ok, -1 bad. */
static int parse_ver(const char **s, ver *v)
{
	const char *p = *s;

	memset(v, 0, sizeof(*v));
	if (*p == 'v' || *p == '=')
		p++;
	for (int i = 0; i < 3; i++) {
		if (*p == 'x' || *p == 'X' || *p == '*') {
			p++;
		} else if (isdigit((unsigned char)*p)) {
			char *end;
			v->part[i] = strtol(p, &end, 10);
			p = end;
			v->given = i + 1;
		} else {
			return -1;
		}
		if (*p != '.')
			break;
		p++;
	}
	if (*p == '-' || *p == '+') /* pre-release or build: ignored */
		while (*p && *p != ' ' && *p != '|')
			p++;
	if (*p && *p != ' ' && *p != '|')
		return -1;
	*s = p;
	return 0;
}

static int cmp(const long *a, const long *b)
{
	for (int i = 0; i < 3; i++)
		if (a[i] != b[i])
			return a[i] < b[i] ? -1 : 1;
	return 0;
}

/* The first version past v's wildcards: 1.2 -> 1.3.0, 1 -> 2.0.0. */
static void bump(const ver *v, int at, long out[3])
{
	memcpy(out, v->part, sizeof(v->part));
	out[at]++;
	for (int i = at + 1; i < 3; i++)
		out[i] = 0;
}

/* Does x satisfy one comparator op+v? */
static int match(const char *op, const ver *v, const long x[3])
{
	long hi[3];
	int at;

	if (v->given == 0) /* "*", ">=x" and the like */
		return strcmp(op, "<") != 0 && strcmp(op, ">") != 0;
	if (strcmp(op, ">=") == 0)
		return cmp(x, v->part) >= 0;
	if (strcmp(op, "<") == 0)
		return cmp(x, v->part) < 0;
	if (strcmp(op, ">") == 0) {
		if (v->given == 3)
			return cmp(x, v->part) > 0;
		bump(v, v->given - 1, hi);
		return cmp(x, hi) >= 0;
	}
	if (strcmp(op, "<=") == 0) {
		if (v->given == 3)
			return cmp(x, v->part) <= 0;
		bump(v, v->given - 1, hi);
		return cmp(x, hi) < 0;
	}
	if (cmp(x, v->part) < 0)
		return 0;
	if (strcmp(op, "^") == 0) {
		/* The left-most non-zero part given stays fixed. */
		for (at = 0; at < v->given - 1 && v->part[at] == 0; at++)
			;
		bump(v, at, hi);
	} else if (strcmp(op, "~") == 0) {
		bump(v, v->given >= 2 ? 1 : 0, hi);
	} else { /* exact, with wildcards for what was not given */
		if (v->given == 3)
			return cmp(x, v->part) == 0;
		bump(v, v->given - 1, hi);
	}
	return cmp(x, hi) < 0;
}

/* One alternative: space-separated comparators, all must hold. */
static int match_set(const char **s, const long x[3])
{
	const char *p = *s;
	int all = 1, any = 0;

	for (;;) {
		char op[3] = "";
		ver v;

		while (*p == ' ')
			p++;
		if (!*p || *p == '|')
			break;
		if (*p == '>' || *p == '<') {
			op[0] = *p++;
			if (*p == '=')
				op[1] = *p++;
		} else if (*p == '^' || *p == '~') {
			op[0] = *p++;
		}
		while (*p == ' ')
			p++;
		if (parse_ver(&p, &v) != 0)
			return -1;
		any = 1;
		if (!match(op, &v, x))
			all = 0;
	}
	*s = p;
	return any ? all : -1;
}

int sr__semver_satisfies(const char *range, const char *version)
{
	const char *p = version;
	int found = 0;
	ver x;

	if (!range || !version || parse_ver(&p, &x) != 0 || *p || x.given != 3)
		return -1;
	p = range;
	for (;;) {
		int r = match_set(&p, x.part);

		if (r < 0)
			return -1;
		found |= r;
		if (!*p)
			return found;
		if (strncmp(p, "||", 2) != 0)
			return -1;
		p += 2;
	}
}
