/* Configuration: INI parsing with libinih, environment overrides, and
 * validation of the [runner] section. Plugins validate their own sections
 * through the host table (host.c). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandrun/plugin.h"
#include "core/host/conf.h"
#include "core/host/log.h"
#include "core/store/db.h"

struct entry {
	char *section, *key, *value;
	int line;
	int warned;
};

struct sr__config {
	char *path;
	FILE *reading;   /* while parsing */
	int reading_line;
	char *line;      /* the whole line just read */
	size_t line_cap;
	char *long_value; /* the value of a line too long for inih */
	int long_error;  /* the line too long for inih, not a key = value */
	int bad_line;    /* a line with a NUL or another control byte */
	struct entry *entries;
	size_t n, cap;
};

static const char *const runner_keys[] = {
	"provider", "tunnel", "harnesses", "plugin_dir", "state_dir",
	"log_level", "node_dir", "mcp_allow_hosts", "callback_allow_hosts", "callback_concurrency", "id", "relay_transport",
	"remote_harness_dir", "credential_isolation", "ca_file", "tool_latency", NULL
};

static const char *const secrets_keys[] = { "allow_hosts", NULL };

static const char *const store_keys[] = { "url", NULL };

static const char *const janitor_keys[] = { "interval", "program", "grace", NULL };

static const char *const service_keys[] = {
	"listen", "tokens_file", "max_body", "max_runs", "event_buffer", "runs_kept",
	"drain_timeout", "warm_live", "max_warm", "warm_ttl", "lease_ttl", "model_hosts",
	"max_client_connections", "header_timeout", NULL
};

/* A duration as sandrun janitor --grace takes it: digits, then s, m, h or
 * d or nothing (seconds). */
static int duration_ok(const char *v)
{
	size_t digits = strspn(v, "0123456789");
	const char *unit = v + digits;

	return digits >= 1 && digits <= 10 &&
	       (!*unit || ((*unit == 's' || *unit == 'm' || *unit == 'h' || *unit == 'd') &&
			   !unit[1]));
}

int sr__runner_id_valid(const char *id)
{
	size_t n = strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-_");

	return n >= 1 && n <= 40 && id[n] == '\0';
}

sr__config *sr__config_new(void)
{
	return calloc(1, sizeof(sr__config));
}

void sr__config_free(sr__config *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++) {
		free(c->entries[i].section);
		free(c->entries[i].key);
		free(c->entries[i].value);
	}
	free(c->entries);
	free(c->path);
	free(c);
}

const char *sr__config_path(const sr__config *c)
{
	return c->path ? c->path : "(built-in defaults)";
}

const char *sr__config_file(const sr__config *c)
{
	return c->path;
}

static struct entry *find(const sr__config *c, const char *section,
			  const char *key)
{
	for (size_t i = c->n; i-- > 0;)
		if (strcmp(c->entries[i].section, section) == 0 &&
		    strcmp(c->entries[i].key, key) == 0)
			return &c->entries[i];
	return NULL;
}

#define LONG_VALUE "\x01" /* stands for the value kept in long_value */

/* A line longer than inih's buffer (Debian builds inih with a 200-byte
 * line on the stack and no heap), as one inih can take: "key = value"
 * passes as "key =" and a marker, the value (trimmed, without an inline
 * comment, as inih would) kept for on_entry; a comment passes empty;
 * anything else passes as a syntax error on this line. */
static char *long_line(sr__config *c, char *buf, size_t size)
{
	char *p = c->line, *eq, *v, *end;

	while (isspace((unsigned char)*p))
		p++;
	if (*p == ';' || *p == '#') {
		snprintf(buf, size, ";\n");
		return buf;
	}
	eq = strpbrk(p, "=:");
	if (*p == '[' || !eq || (size_t)(eq - p) + 4 > size) {
		c->long_error = c->reading_line;
		snprintf(buf, size, "%s\n", LONG_VALUE);
		return buf;
	}
	for (v = eq + 1; isspace((unsigned char)*v); v++)
		;
	for (end = v; *end; end++)
		if (*end == ';' && end > v && isspace((unsigned char)end[-1]))
			break;
	while (end > v && isspace((unsigned char)end[-1]))
		end--;
	free(c->long_value);
	c->long_value = strndup(v, (size_t)(end - v));
	snprintf(buf, size, "%.*s=%s\n", (int)(eq - p), p, LONG_VALUE);
	return buf;
}

/* libinih reads through this, one whole line a call, so the handler knows
 * which line it is on (Debian builds inih without INI_HANDLER_LINENO). */
static char *read_line(char *buf, int size, void *ud)
{
	sr__config *c = ud;
	ssize_t n = getline(&c->line, &c->line_cap, c->reading);

	if (n < 0)
		return NULL;
	c->reading_line++;
	/* Text only: a NUL would cut the value short where inih reads it, and
	 * control bytes mean a binary file. The parse stops here. */
	for (ssize_t i = 0; i < n; i++) {
		unsigned char b = (unsigned char)c->line[i];
		if ((b < 0x20 && b != '\t' && b != '\n' && b != '\r') || b == 0x7f) {
			c->bad_line = c->reading_line;
			return NULL;
		}
	}
	if (n < size) {
		memcpy(buf, c->line, (size_t)n + 1);
		return buf;
	}
	return long_line(c, buf, (size_t)size);
}

static int on_entry(void *ud, const char *section, const char *key,
		    const char *value)
{
	sr__config *c = ud;
	int line = c->reading_line;
	struct entry *e;

	if (!key) /* a section header alone */
		return 1;
	if (find(c, section, key))
		sr__log(SR_LOG_WARN, "config",
			"%s:%d: [%s] key '%s' set again; the last value wins",
			c->path, line, section, key);
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct entry *grown = realloc(c->entries, cap * sizeof(*grown));
		if (!grown)
			return 0;
		c->entries = grown;
		c->cap = cap;
	}
	e = &c->entries[c->n];
	e->section = strdup(section);
	e->key = strdup(key);
	if (value && strcmp(value, LONG_VALUE) == 0 && c->long_value) {
		e->value = c->long_value;
		c->long_value = NULL;
	} else {
		e->value = strdup(value ? value : "");
	}
	e->line = line;
	e->warned = 0;
	if (!e->section || !e->key || !e->value) {
		free(e->section);
		free(e->key);
		free(e->value);
		return 0;
	}
	c->n++;
	return 1;
}

#define CONFIG_MAX (1u << 20)

int sr__config_load(sr__config *c, const char *path)
{
	/* Not blocking on a FIFO's open; only a regular file is read. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	struct stat st = { 0 };
	FILE *f;
	int line;

	if (fd < 0)
		return errno == ENOENT ? SR_ENOTFOUND : SR_EIO;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		sr__log(SR_LOG_ERROR, "config", "%s: not a configuration file (%s)", path,
			S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" :
			S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" :
			"not a regular file");
		close(fd);
		return SR_EINVAL;
	}
	if ((unsigned long long)st.st_size > CONFIG_MAX) {
		sr__log(SR_LOG_ERROR, "config", "%s: %lld bytes, over the %u a configuration "
			"file may have", path, (long long)st.st_size, CONFIG_MAX);
		close(fd);
		return SR_EINVAL;
	}
	if (!(f = fdopen(fd, "r"))) {
		close(fd);
		return SR_EIO;
	}
	free(c->path);
	c->path = strdup(path);
	c->reading = f;
	c->reading_line = 0;
	c->long_error = 0;
	c->bad_line = 0;
	line = ini_parse_stream(read_line, c, on_entry, c);
	c->reading = NULL;
	fclose(f);
	free(c->line);
	c->line = NULL;
	c->line_cap = 0;
	free(c->long_value);
	c->long_value = NULL;
	if (line < 0) {
		sr__log(SR_LOG_ERROR, "config", "%s: out of memory", path);
		return SR_ENOMEM;
	}
	if (c->bad_line) {
		sr__log(SR_LOG_ERROR, "config", "%s:%d: a NUL or another control byte: a "
			"configuration file is text", path, c->bad_line);
		return SR_EINVAL;
	}
	if (line > 0 && line == c->long_error) {
		sr__log(SR_LOG_ERROR, "config",
			"%s:%d: syntax error in a long line (expected key = value, or a comment)",
			path, line);
		return SR_EINVAL;
	}
	if (line > 0) {
		sr__log(SR_LOG_ERROR, "config",
			"%s:%d: syntax error (expected [section], key = value, or a comment)",
			path, line);
		return SR_EINVAL;
	}
	return SR_OK;
}

char *sr__config_env_name(const char *section, const char *key)
{
	size_t n = strlen("SANDRUN_") + strlen(section) + 1 + strlen(key) + 1;
	char *name = malloc(n), *p;

	if (!name)
		return NULL;
	snprintf(name, n, "SANDRUN_%s_%s", section, key);
	for (p = name; *p; p++)
		*p = (*p == '.' || *p == '-') ? '_' :
			(char)toupper((unsigned char)*p);
	return name;
}

const char *sr__config_get(const sr__config *c, const char *section,
			   const char *key)
{
	char *name = sr__config_env_name(section, key);
	const char *v = name ? getenv(name) : NULL;
	struct entry *e;

	free(name);
	if (v)
		return v;
	e = find(c, section, key);
	return e ? e->value : NULL;
}

const char *sr__config_origin(const sr__config *c, const char *section,
			      const char *key, char *buf, size_t n)
{
	char *name = sr__config_env_name(section, key);
	struct entry *e;

	if (name && getenv(name))
		snprintf(buf, n, "environment %s", name);
	else if ((e = find(c, section, key)))
		snprintf(buf, n, "%s:%d", c->path, e->line);
	else
		snprintf(buf, n, "default");
	free(name);
	return buf;
}

int sr__config_invalid(const sr__config *c, const char *section,
		       const char *key, const char *why)
{
	char origin[512];
	const char *v = sr__config_get(c, section, key);

	sr__config_origin(c, section, key, origin, sizeof(origin));
	sr__log(SR_LOG_ERROR, "config",
		"%s: [%s] key '%s': invalid value '%s': %s", origin, section,
		key, v ? v : "", why);
	return SR_EINVAL;
}

static int in_list(const char *const *list, const char *s)
{
	for (; list && *list; list++)
		if (strcmp(*list, s) == 0)
			return 1;
	return 0;
}

int sr__config_warn_unknown(const sr__config *c, const char *section,
			    const char *const *known)
{
	int count = 0;

	for (size_t i = 0; i < c->n; i++) {
		struct entry *e = &c->entries[i];
		if (strcmp(e->section, section) != 0 || in_list(known, e->key))
			continue;
		count++;
		if (e->warned++)
			continue;
		sr__log(SR_LOG_WARN, "config",
			"%s:%d: [%s] unknown key '%s' ignored", c->path,
			e->line, section, e->key);
	}
	return count;
}

static int valid_name(const char *s);

int sr__config_warn_sections(const sr__config *c,
			     int (*is_known)(const char *section, void *ud),
			     void *ud)
{
	int count = 0;

	for (size_t i = 0; i < c->n; i++) {
		struct entry *e = &c->entries[i];
		int seen = 0;
		if (strcmp(e->section, "runner") == 0 || strcmp(e->section, "secrets") == 0 ||
		    strcmp(e->section, "service") == 0 || strcmp(e->section, "store") == 0 ||
		    strcmp(e->section, "mount") == 0 ||
		    (strncmp(e->section, "endpoint.", 9) == 0 && valid_name(e->section + 9)) ||
		    is_known(e->section, ud))
			continue;
		for (size_t j = 0; j < i; j++)
			if (strcmp(c->entries[j].section, e->section) == 0)
				seen = 1;
		if (seen)
			continue;
		count++;
		sr__log(SR_LOG_WARN, "config",
			"%s:%d: unknown section [%s] ignored (no such plugin is loaded)",
			c->path, e->line, e->section);
	}
	return count;
}

static int valid_name(const char *s)
{
	size_t n = 0;

	for (; *s; s++, n++)
		if (!islower((unsigned char)*s) && !isdigit((unsigned char)*s) &&
		    *s != '-' && *s != '_')
			return 0;
	return n > 0 && n <= 32;
}

static int valid_name_list(const char *s)
{
	char buf[512], *tok, *save;

	if (strlen(s) >= sizeof(buf))
		return 0;
	memcpy(buf, s, strlen(s) + 1);
	for (tok = strtok_r(buf, ", ", &save); tok;
	     tok = strtok_r(NULL, ", ", &save))
		if (!valid_name(tok))
			return 0;
	return 1;
}

static int valid_abs_paths(const char *s)
{
	const char *p = s;

	if (!*s)
		return 0;
	while (*p) {
		if (*p != '/')
			return 0;
		p = strchr(p, ':');
		if (!p)
			break;
		p++;
	}
	return 1;
}

/* An allow-list key: comma-separated exact hosts (HOST or HOST:PORT), no
 * wildcards; "" when absent. */
static int host_list(const sr__config *c, const char *section, const char *key,
		     const char **out)
{
	*out = sr__config_get(c, section, key);
	if (!*out)
		*out = "";
	else if (strpbrk(*out, "/@*?[] \t"))
		return sr__config_invalid(c, section, key,
			"a comma-separated list of exact host names or addresses (no wildcards)");
	return SR_OK;
}

int sr__config_runner(const sr__config *c, sr__runner_conf *rc)
{
	const char *v;

	sr__config_warn_unknown(c, "runner", runner_keys);
	sr__config_warn_unknown(c, "secrets", secrets_keys);
	sr__config_warn_unknown(c, "store", store_keys);
	rc->provider = sr__config_get(c, "runner", "provider");
	if (!rc->provider)
		rc->provider = "local";
	else if (!valid_name(rc->provider))
		return sr__config_invalid(c, "runner", "provider",
			"a plugin name is 1 to 32 of [a-z0-9_-]");
	rc->tunnel = sr__config_get(c, "runner", "tunnel");
	if (rc->tunnel && (!*rc->tunnel || strcmp(rc->tunnel, "none") == 0))
		rc->tunnel = NULL;
	else if (rc->tunnel && !valid_name(rc->tunnel))
		return sr__config_invalid(c, "runner", "tunnel",
			"a plugin name is 1 to 32 of [a-z0-9_-], or none");
	rc->harnesses = sr__config_get(c, "runner", "harnesses");
	if (!rc->harnesses)
		rc->harnesses = "claude";
	else if (*rc->harnesses && !valid_name_list(rc->harnesses))
		return sr__config_invalid(c, "runner", "harnesses",
			"a comma-separated list of plugin names");
	rc->plugin_dir = sr__config_get(c, "runner", "plugin_dir");
	if (!rc->plugin_dir)
		rc->plugin_dir = SR_PLUGINDIR;
	else if (!valid_abs_paths(rc->plugin_dir))
		return sr__config_invalid(c, "runner", "plugin_dir",
			"a colon-separated list of absolute directories");
	rc->state_dir = sr__config_get(c, "runner", "state_dir");
	if (!rc->state_dir)
		rc->state_dir = SR_STATEDIR;
	else if (rc->state_dir[0] != '/' || strchr(rc->state_dir, ':'))
		return sr__config_invalid(c, "runner", "state_dir",
			"an absolute directory");
	v = sr__config_get(c, "runner", "relay_transport");
	rc->relay_via_provider = 0;
	if (v && strcmp(v, "provider") == 0)
		rc->relay_via_provider = 1;
	else if (v && strcmp(v, "auto") != 0)
		return sr__config_invalid(c, "runner", "relay_transport",
			"'auto' (the default) or 'provider'");
	rc->remote_harness_dir = sr__config_get(c, "runner", "remote_harness_dir");
	if (!rc->remote_harness_dir)
		rc->remote_harness_dir = "/opt/sandrun/harness";
	else if (rc->remote_harness_dir[0] != '/' || strpbrk(rc->remote_harness_dir, ": \t"))
		return sr__config_invalid(c, "runner", "remote_harness_dir",
			"an absolute directory (in a remote sandbox)");
	rc->id = sr__config_get(c, "runner", "id");
	if (rc->id && !sr__runner_id_valid(rc->id))
		return sr__config_invalid(c, "runner", "id",
			"1 to 40 characters of a-z, 0-9, '-' and '_'");
	rc->node_dir = sr__config_get(c, "runner", "node_dir");
	if (rc->node_dir && rc->node_dir[0] != '/')
		return sr__config_invalid(c, "runner", "node_dir",
			"an absolute directory");
	v = sr__config_get(c, "runner", "callback_concurrency");
	rc->callback_concurrency = 16;
	if (v) {
		char *end = NULL;
		unsigned long n = strtoul(v, &end, 10);
		if (!*v || *end || n < 1 || n > 1024)
			return sr__config_invalid(c, "runner", "callback_concurrency",
				"a whole number from 1 to 1024");
		rc->callback_concurrency = (unsigned)n;
	}
	if (host_list(c, "runner", "mcp_allow_hosts", &rc->mcp_allow_hosts) != SR_OK ||
	    host_list(c, "runner", "callback_allow_hosts", &rc->callback_allow_hosts) != SR_OK)
		return SR_EINVAL;
	v = sr__config_get(c, "runner", "tool_latency");
	rc->tool_latency_low = v && strcmp(v, "low") == 0;
	if (v && !rc->tool_latency_low && strcmp(v, "normal") != 0)
		return sr__config_invalid(c, "runner", "tool_latency",
			"normal (the default) or low");
	v = sr__config_get(c, "runner", "credential_isolation");
	rc->credential_isolation = 0; /* preferred */
	if (v && strcmp(v, "required") == 0)
		rc->credential_isolation = 1;
	else if (v && strcmp(v, "none") == 0)
		rc->credential_isolation = 2;
	else if (v && strcmp(v, "preferred") != 0)
		return sr__config_invalid(c, "runner", "credential_isolation",
			"one of required, preferred (the default), none");
	rc->ca_file = sr__config_get(c, "runner", "ca_file");
	if (rc->ca_file && (rc->ca_file[0] != '/' || access(rc->ca_file, R_OK) != 0))
		return sr__config_invalid(c, "runner", "ca_file",
			"the absolute path of a readable file of PEM certificates");
	rc->secrets_allow_hosts = sr__config_get(c, "secrets", "allow_hosts");
	if (!rc->secrets_allow_hosts)
		rc->secrets_allow_hosts = "";
	else if (strpbrk(rc->secrets_allow_hosts, "/@*?[]\t"))
		return sr__config_invalid(c, "secrets", "allow_hosts",
			"a comma-separated list of exact host names, each with an optional "
			":port (no wildcards, no scheme)");
	rc->store_url = sr__config_get(c, "store", "url");
	if (!rc->store_url)
		rc->store_url = "";
	if (!sr__db_url_valid(rc->store_url)) {
		/* Not echoed: it may hold a password. */
		char origin[512];
		sr__config_origin(c, "store", "url", origin, sizeof(origin));
		sr__log(SR_LOG_ERROR, "config", "%s: [store] key 'url': invalid value: a "
			"PostgreSQL URI (postgresql://USER@HOST/DB) or libpq key=value string, or "
			"empty for the SQLite file in the state directory", origin);
		return SR_EINVAL;
	}
	v = sr__config_get(c, "runner", "log_level");
	rc->log_level = SR_LOG_INFO;
	if (v && (rc->log_level = sr__log_parse_level(v)) < 0)
		return sr__config_invalid(c, "runner", "log_level",
			"one of error, warn, info, debug");
	return SR_OK;
}

/* A whole number in [min, max], with an optional K or M suffix (powers of
 * 1024) when sized. */
static int parse_count(const char *v, int sized, unsigned long long min,
		       unsigned long long max, unsigned long long *out)
{
	char *end = NULL;
	unsigned long long n;

	if (!v || !isdigit((unsigned char)*v))
		return 0;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno)
		return 0;
	if (sized && (*end == 'K' || *end == 'k') && end[1] == 0 && n <= max / 1024) {
		n *= 1024;
		end++;
	} else if (sized && (*end == 'M' || *end == 'm') && end[1] == 0 &&
		   n <= max / (1024ull * 1024)) {
		n *= 1024ull * 1024;
		end++;
	}
	if (*end || n < min || n > max)
		return 0;
	*out = n;
	return 1;
}

/* "unix:/absolute/path", or HOST:PORT with HOST a name, an IPv4 address
 * or a bracketed IPv6 one, and PORT 0 to 65535 (0: any free one). */
static int valid_listen(const char *v)
{
	const char *colon;
	char *end = NULL;
	unsigned long port;

	if (strncmp(v, "unix:", 5) == 0)
		return v[5] == '/' && strlen(v + 5) < 108 && !strpbrk(v + 5, "\n");
	colon = strrchr(v, ':');
	if (!colon || colon == v || !isdigit((unsigned char)colon[1]))
		return 0;
	port = strtoul(colon + 1, &end, 10);
	if (*end || port > 65535)
		return 0;
	if (v[0] == '[')
		return colon[-1] == ']' && colon - v > 2;
	for (const char *p = v; p < colon; p++)
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-')
			return 0;
	return 1;
}

/* Whether every key of want's section has the same value in c. */
static int section_within(const sr__config *c, const sr__config *want,
			  const char *section)
{
	for (size_t i = 0; i < want->n; i++) {
		const struct entry *e = &want->entries[i], *o;

		if (strcmp(e->section, section) != 0)
			continue;
		o = find(c, section, e->key);
		if (!o || strcmp(o->value, find(want, section, e->key)->value) != 0)
			return 0;
	}
	return 1;
}

int sr__config_same_section(const sr__config *a, const sr__config *b,
			    const char *section)
{
	return section_within(a, b, section) && section_within(b, a, section);
}

int sr__config_service(const sr__config *c, sr__service_conf *sc)
{
	unsigned long long n;
	const char *v;

	sr__config_warn_unknown(c, "service", service_keys);
	sc->listen = sr__config_get(c, "service", "listen");
	if (!sc->listen)
		sc->listen = "127.0.0.1:8470";
	else if (!valid_listen(sc->listen))
		return sr__config_invalid(c, "service", "listen",
			"HOST:PORT (an IPv6 address in brackets) or unix:/absolute/path");
	if (host_list(c, "service", "model_hosts", &sc->model_hosts) != SR_OK)
		return SR_EINVAL;
	sc->tokens_file = sr__config_get(c, "service", "tokens_file");
	if (sc->tokens_file && !*sc->tokens_file)
		sc->tokens_file = NULL;
	else if (sc->tokens_file && sc->tokens_file[0] != '/')
		return sr__config_invalid(c, "service", "tokens_file", "an absolute file name");
	v = sr__config_get(c, "service", "max_body");
	sc->max_body = (size_t)1024 * 1024;
	if (v) {
		if (!parse_count(v, 1, 1024, 64ull * 1024 * 1024, &n))
			return sr__config_invalid(c, "service", "max_body",
				"a size from 1K to 64M (bytes, or with a K or M suffix)");
		sc->max_body = (size_t)n;
	}
	v = sr__config_get(c, "service", "max_runs");
	sc->max_runs = 8;
	if (v) {
		if (!parse_count(v, 0, 1, 10000, &n))
			return sr__config_invalid(c, "service", "max_runs",
				"a whole number from 1 to 10000");
		sc->max_runs = (unsigned)n;
	}
	v = sr__config_get(c, "service", "event_buffer");
	sc->event_buffer = 10000;
	if (v) {
		if (!parse_count(v, 0, 16, 1000000, &n))
			return sr__config_invalid(c, "service", "event_buffer",
				"a whole number from 16 to 1000000");
		sc->event_buffer = (unsigned)n;
	}
	v = sr__config_get(c, "service", "drain_timeout");
	sc->drain_timeout_s = 60;
	if (v) {
		if (!parse_count(v, 0, 0, 86400, &n))
			return sr__config_invalid(c, "service", "drain_timeout",
				"a whole number of seconds from 0 to 86400");
		sc->drain_timeout_s = (unsigned)n;
	}
	v = sr__config_get(c, "service", "warm_live");
	sc->warm_live_s = 120;
	if (v) {
		if (!parse_count(v, 0, 0, 86400, &n))
			return sr__config_invalid(c, "service", "warm_live",
				"a whole number of seconds from 0 (no live parking) to 86400");
		sc->warm_live_s = (unsigned)n;
	}
	v = sr__config_get(c, "service", "max_warm");
	sc->max_warm = 20;
	if (v) {
		if (!parse_count(v, 0, 0, 10000, &n))
			return sr__config_invalid(c, "service", "max_warm",
				"a whole number from 0 to 10000");
		sc->max_warm = (unsigned)n;
	}
	v = sr__config_get(c, "service", "warm_ttl");
	sc->warm_ttl_s = 0;
	if (v) {
		if (!parse_count(v, 0, 0, 31536000, &n))
			return sr__config_invalid(c, "service", "warm_ttl",
				"a whole number of seconds from 0 (off) to 31536000");
		sc->warm_ttl_s = (unsigned)n;
	}
	v = sr__config_get(c, "service", "lease_ttl");
	sc->lease_ttl_s = 30;
	if (v) {
		if (!parse_count(v, 0, 2, 3600, &n))
			return sr__config_invalid(c, "service", "lease_ttl",
				"a whole number of seconds from 2 to 3600");
		sc->lease_ttl_s = (unsigned)n;
	}
	v = sr__config_get(c, "service", "max_client_connections");
	sc->max_client_connections = 256;
	if (v) {
		if (!parse_count(v, 0, 1, 100000, &n))
			return sr__config_invalid(c, "service", "max_client_connections",
				"a whole number from 1 to 100000");
		sc->max_client_connections = (unsigned)n;
	}
	sr__config_warn_unknown(c, "janitor", janitor_keys);
	v = sr__config_get(c, "janitor", "interval");
	sc->janitor_interval_s = 600;
	if (v) {
		if (!parse_count(v, 0, 0, 604800, &n) || (n > 0 && n < 10))
			return sr__config_invalid(c, "janitor", "interval",
				"a whole number of seconds from 10 to 604800, or 0 (no sweeps)");
		sc->janitor_interval_s = (unsigned)n;
	}
	sc->janitor_program = sr__config_get(c, "janitor", "program");
	if (sc->janitor_program && sc->janitor_program[0] != '/')
		return sr__config_invalid(c, "janitor", "program",
			"the absolute file name of the sandrun command");
	sc->janitor_grace = sr__config_get(c, "janitor", "grace");
	if (sc->janitor_grace && !duration_ok(sc->janitor_grace))
		return sr__config_invalid(c, "janitor", "grace",
			"a duration such as 90s, 30m, 2h or 1d (how old a leftover must be)");
	v = sr__config_get(c, "service", "header_timeout");
	sc->header_timeout_s = 10;
	if (v) {
		if (!parse_count(v, 0, 1, 600, &n))
			return sr__config_invalid(c, "service", "header_timeout",
				"a whole number of seconds from 1 to 600");
		sc->header_timeout_s = (unsigned)n;
	}
	v = sr__config_get(c, "service", "runs_kept");
	sc->runs_kept = 1000;
	if (v) {
		if (!parse_count(v, 0, 0, 100000, &n))
			return sr__config_invalid(c, "service", "runs_kept",
				"a whole number from 0 to 100000");
		sc->runs_kept = (unsigned)n;
	}
	return SR_OK;
}
