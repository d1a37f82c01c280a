/* Plugin loading. Everything here runs on the main thread before the loop
 * starts: libltdl is not thread-safe. */
#include "config.h"

#include <dirent.h>
#include <stdarg.h>
#include <ltdl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/plugins/loader.h"
#include "core/host/log.h"

static int ltdl_users;
static int quiet;

void sr__loader_quiet(int on)
{
	quiet = on;
}

static const char *const kind_names[] = { NULL, "provider", "tunnel",
					  "harness" };

const char *sr__kind_name(int kind)
{
	if (kind >= SR_PLUGIN_PROVIDER && kind <= SR_PLUGIN_HARNESS)
		return kind_names[kind];
	return "unknown";
}

int sr__kind_parse(const char *s)
{
	for (int k = SR_PLUGIN_PROVIDER; k <= SR_PLUGIN_HARNESS; k++)
		if (strcmp(s, kind_names[k]) == 0)
			return k;
	return 0;
}

sr__registry *sr__registry_new(void)
{
	sr__registry *r = calloc(1, sizeof(*r));

	if (r && ltdl_users++ == 0 && lt_dlinit() != 0) {
		sr__log(SR_LOG_ERROR, "plugins", "libltdl: %s", lt_dlerror());
		ltdl_users--;
		free(r);
		return NULL;
	}
	return r;
}


void sr__registry_free(sr__registry *r)
{
	if (!r)
		return;
	for (size_t i = r->n; i-- > 0;) {
		sr__plugin *p = r->plugins[i];
		lt_dlclose(p->handle);
		free(p->path);
		free(p);
	}
	for (size_t i = 0; i < r->n_rejected; i++) {
		free(r->rejected[i].path);
		free(r->rejected[i].reason);
	}
	free(r->plugins);
	free(r->rejected);
	free(r);
	if (--ltdl_users == 0)
		lt_dlexit();
}

static int reject(sr__registry *r, const char *path, const char *fmt, ...)
	SR_PRINTF(3, 4);

static int reject(sr__registry *r, const char *path, const char *fmt, ...)
{
	char reason[512];
	va_list ap;
	sr__rejected *grown;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (!quiet)
		sr__log(SR_LOG_WARN, "plugins", "%s: rejected: %s", path, reason);
	grown = realloc(r->rejected, (r->n_rejected + 1) * sizeof(*grown));
	if (!grown)
		return SR_ENOMEM;
	r->rejected = grown;
	grown[r->n_rejected].path = strdup(path);
	grown[r->n_rejected].reason = strdup(reason);
	r->n_rejected++;
	return SR_EINVAL;
}

const char *sr__registry_rejection(const sr__registry *r, const char *path)
{
	for (size_t i = 0; i < r->n_rejected; i++)
		if (strcmp(r->rejected[i].path, path) == 0)
			return r->rejected[i].reason;
	return NULL;
}

sr__plugin *sr__registry_find(const sr__registry *r, int kind,
			      const char *name)
{
	for (size_t i = 0; i < r->n; i++)
		if ((int)r->plugins[i]->desc->kind == kind &&
		    strcmp(r->plugins[i]->desc->name, name) == 0)
			return r->plugins[i];
	return NULL;
}

static int valid_plugin_name(const char *s)
{
	size_t n = 0;

	if (!s)
		return 0;
	for (; s[n]; n++)
		if (!((s[n] >= 'a' && s[n] <= 'z') ||
		      (s[n] >= '0' && s[n] <= '9') || s[n] == '-' ||
		      s[n] == '_'))
			return 0;
	return n >= 1 && n <= 32;
}

/* The smallest ops table each kind may declare: its first operation. */
static uint32_t ops_min(int kind)
{
	switch (kind) {
	case SR_PLUGIN_PROVIDER:
		return SR_TABLE_HAS(sr_provider_ops, capabilities);
	case SR_PLUGIN_TUNNEL:
		return SR_TABLE_HAS(sr_tunnel_ops, start);
	default:
		return SR_TABLE_HAS(sr_harness_ops, describe);
	}
}

/* Validate a descriptor; returns NULL or the reason (in buf). */
static const char *check_descriptor(const sr_plugin_descriptor *d,
				    uint32_t *ops_size, char *buf, size_t n)
{
	uint32_t min = (uint32_t)SR_TABLE_HAS(sr_plugin_descriptor, fini);

	if (d->abi_major != SR_ABI_MAJOR) {
		snprintf(buf, n,
			 "declares ABI %u.%u; this sandrun accepts ABI major %d (minor 0 to %d)",
			 d->abi_major, d->abi_minor, SR_ABI_MAJOR, SR_ABI_MINOR);
		return buf;
	}
	if (d->abi_minor > SR_ABI_MINOR) {
		snprintf(buf, n,
			 "declares ABI %u.%u, newer than this sandrun's %d.%d",
			 d->abi_major, d->abi_minor, SR_ABI_MAJOR, SR_ABI_MINOR);
		return buf;
	}
	if (d->size < min) {
		snprintf(buf, n,
			 "descriptor is %u bytes; ABI %d.%d requires at least %u",
			 d->size, SR_ABI_MAJOR, SR_ABI_MINOR, min);
		return buf;
	}
	if (d->kind < SR_PLUGIN_PROVIDER || d->kind > SR_PLUGIN_HARNESS) {
		snprintf(buf, n, "unknown plugin kind %u (1 provider, 2 tunnel, 3 harness)",
			 d->kind);
		return buf;
	}
	if (!valid_plugin_name(d->name)) {
		snprintf(buf, n, "invalid name (1 to 32 of [a-z0-9_-] required)");
		return buf;
	}
	if (!d->init) {
		snprintf(buf, n, "%s '%s' has no init function",
			 sr__kind_name((int)d->kind), d->name);
		return buf;
	}
	if (!d->ops) {
		snprintf(buf, n, "%s '%s' has no ops table",
			 sr__kind_name((int)d->kind), d->name);
		return buf;
	}
	*ops_size = *(const uint32_t *)d->ops;
	if (*ops_size < ops_min((int)d->kind)) {
		snprintf(buf, n,
			 "%s '%s': ops table is %u bytes; at least %u required",
			 sr__kind_name((int)d->kind), d->name, *ops_size,
			 ops_min((int)d->kind));
		return buf;
	}
	return NULL;
}

int sr__registry_load(sr__registry *r, const char *path)
{
	lt_dladvise advise;
	lt_dlhandle h = NULL;
	sr_plugin_entry_fn entry;
	const sr_plugin_descriptor *d;
	const char *why;
	char buf[512];
	uint32_t ops_size = 0;
	sr__plugin *p, *dup, **grown;

	if (lt_dladvise_init(&advise) == 0 && lt_dladvise_local(&advise) == 0
#ifdef SR_SANITIZE
	    /* Unloaded plugins would leave sanitizer reports unsymbolised. */
	    && lt_dladvise_resident(&advise) == 0
#endif
	   )
		h = lt_dlopenadvise(path, advise);
	lt_dladvise_destroy(&advise);
	if (!h)
		return reject(r, path, "cannot load: %s", lt_dlerror());
	*(void **)&entry = lt_dlsym(h, SR_PLUGIN_ENTRY_SYMBOL);
	if (!entry) {
		lt_dlclose(h);
		return reject(r, path, "no entry symbol '%s'",
			      SR_PLUGIN_ENTRY_SYMBOL);
	}
	d = entry();
	if (!d) {
		lt_dlclose(h);
		return reject(r, path, "entry symbol returned no descriptor");
	}
	why = check_descriptor(d, &ops_size, buf, sizeof(buf));
	if (why) {
		lt_dlclose(h);
		return reject(r, path, "%s", why);
	}
	dup = sr__registry_find(r, (int)d->kind, d->name);
	if (dup) {
		snprintf(buf, sizeof(buf), "duplicate %s '%s' (already loaded from %s)",
			 sr__kind_name((int)d->kind), d->name, dup->path);
		lt_dlclose(h);
		return reject(r, path, "%s", buf);
	}
	p = calloc(1, sizeof(*p));
	grown = realloc(r->plugins, (r->n + 1) * sizeof(sr__plugin *));
	if (!p || !grown) {
		free(p);
		if (grown)
			r->plugins = grown;
		lt_dlclose(h);
		return SR_ENOMEM;
	}
	r->plugins = grown;
	p->path = strdup(path);
	p->handle = h;
	p->desc = d;
	p->ops_size = ops_size;
	snprintf(p->section, sizeof(p->section), "%s.%s",
		 sr__kind_name((int)d->kind), d->name);
	r->plugins[r->n++] = p;
	sr__log(SR_LOG_DEBUG, "plugins", "%s: loaded %s %s", path, p->section,
		d->version ? d->version : "");
	return SR_OK;
}

static int has_suffix(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a > b && strcmp(s + a - b, suffix) == 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A .so is loaded only when no .la beside it describes it. */
static int wanted(const char *dir, const char *name)
{
	char la[4096];
	struct stat st;

	if (name[0] == '.')
		return 0;
	if (has_suffix(name, ".la"))
		return 1;
	if (!has_suffix(name, ".so"))
		return 0;
	snprintf(la, sizeof(la), "%s/%.*s.la", dir, (int)(strlen(name) - 3),
		 name);
	return stat(la, &st) != 0;
}

static void scan_dir(sr__registry *r, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL, **grown;
	size_t n = 0;

	if (!d) {
		sr__log(SR_LOG_DEBUG, "plugins", "%s: not a readable directory; skipped",
			dir);
		return;
	}
	while ((e = readdir(d))) {
		if (!wanted(dir, e->d_name))
			continue;
		grown = realloc(names, (n + 1) * sizeof(*names));
		if (!grown)
			break;
		names = grown;
		if ((names[n] = strdup(e->d_name)))
			n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		sr__registry_load(r, path);
		free(names[i]);
	}
	free(names);
}

void sr__registry_scan(sr__registry *r, const char *dirs)
{
	char *copy, *dir, *save;

	if (!dirs || !(copy = strdup(dirs)))
		return;
	for (dir = strtok_r(copy, ":", &save); dir;
	     dir = strtok_r(NULL, ":", &save))
		scan_dir(r, dir);
	free(copy);
}

int sr__unsupported(const sr__plugin *p, const char *op, char *buf,
		    size_t n)
{
	snprintf(buf, n, "%s '%s': operation '%s' is not supported",
		 sr__kind_name((int)p->desc->kind), p->desc->name, op);
	return SR_EUNSUPPORTED;
}
