/* Plugin discovery and loading (libltdl), with the ABI checks of
 * doc/plugin-abi.md. */
#ifndef SR_CORE_LOADER_H
#define SR_CORE_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "sandrun/plugin.h"

struct sr__ctx;

/* Calls of one operation into a plugin, and how many failed (the metrics
 * of sandrund). */
typedef struct sr__op_stat {
	const char *op;    /* a string literal: the ops slot's name */
	uint64_t calls, errors;
} sr__op_stat;

#define SR__OP_STATS 32

typedef struct sr__plugin {
	char *path;                       /* the file it was loaded from */
	void *handle;                     /* lt_dlhandle */
	const sr_plugin_descriptor *desc; /* borrowed from the module */
	uint32_t ops_size;                /* the plugin's ops table size */
	char section[48];                 /* "provider.local" */
	struct sr__host_priv *host;       /* set by sr__plugin_start */
	void *self;                       /* the plugin's state */
	int started;                      /* 1 ok, <0 init failed */
	sr__op_stat stats[SR__OP_STATS];  /* checked calls, by operation */
	size_t n_stats;
} sr__plugin;

typedef struct sr__rejected {
	char *path;
	char *reason;
} sr__rejected;

typedef struct sr__registry {
	sr__plugin **plugins;
	size_t n;
	sr__rejected *rejected;
	size_t n_rejected;
} sr__registry;

sr__registry *sr__registry_new(void);
/* Closes every module (stop started plugins first: core/plugins/plugin.h). */
void sr__registry_free(sr__registry *r);
/* Load every module in each directory of a colon-separated list; a
 * missing directory is skipped. Rejections are recorded and logged. */
void sr__registry_scan(sr__registry *r, const char *dirs);
/* Load one file; SR_OK, or a negative status after recording why. */
int sr__registry_load(sr__registry *r, const char *path);
sr__plugin *sr__registry_find(const sr__registry *r, int kind,
			      const char *name);
/* The reason a path was rejected, or NULL. */
const char *sr__registry_rejection(const sr__registry *r, const char *path);

/* Record rejections without logging them (sandrun plugins lists them). */
void sr__loader_quiet(int on);

const char *sr__kind_name(int kind);
int sr__kind_parse(const char *s);


/* An ops slot, or NULL when the table is too small to hold it or it is
 * NULL: then the caller reports sr__unsupported(). */
#define SR__OP(p, type, slot)                                              \
	((p)->ops_size >= SR_TABLE_HAS(type, slot) ?                       \
		 ((const type *)(p)->desc->ops)->slot : NULL)

/* A descriptor slot past fini, or NULL when the plugin's descriptor is too
 * small to hold it (the loader only requires up to fini). */
#define SR__DESC(p, slot)                                                  \
	((p)->desc->size >= SR_TABLE_HAS(sr_plugin_descriptor, slot) ?     \
		 (p)->desc->slot : NULL)

/* Format "KIND 'NAME': operation 'OP' is not supported" into buf; returns
 * SR_EUNSUPPORTED. */
int sr__unsupported(const sr__plugin *p, const char *op, char *buf,
		    size_t n);

#endif
