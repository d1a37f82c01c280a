/* The service's record of runs: each run's summary (what GET /v1/runs/ID
 * answers) and its events (what /events replays), numbered from 1.
 *
 * Two: runlog_mem.c keeps runs in memory; runlog_db.c keeps the same in
 * memory and writes it, on a thread of its own, to the runner's database
 * (core/store/db.c), from which it is read back when the service starts.
 *
 * The calls are synchronous and made on the loop; none of them waits for
 * a disk. */
#ifndef SR_CORE_SERVICE_RUNLOG_H
#define SR_CORE_SERVICE_RUNLOG_H

#include <jansson.h>
#include <stdint.h>

typedef struct sr__runlog sr__runlog;

typedef struct sr__runlog_ops {
	/* A new run, with its first summary (borrowed). SR_EEXIST when id
	 * is taken. */
	int (*create)(sr__runlog *l, const char *id, json_t *summary);
	/* One event, as its NDJSON line (with the newline; copied): *seq is
	 * its number. Beyond the log's capacity per run, the oldest lines
	 * are dropped. SR_ENOTFOUND for an unknown run. */
	int (*append)(sr__runlog *l, const char *id, const char *line, size_t len,
		      uint64_t *seq);
	/* The line numbered seq: SR_OK with *line (borrowed until the next
	 * call on this log) and *len; SR_ENOTFOUND when there is none (yet,
	 * or no such run); SR_ESTATE when it was dropped, *first then the
	 * oldest kept. */
	int (*line)(sr__runlog *l, const char *id, uint64_t seq, const char **line,
		    size_t *len, uint64_t *first);
	/* Replace the summary (borrowed). */
	int (*set_summary)(sr__runlog *l, const char *id, json_t *summary);
	/* The run is over and no one follows it live any more: the log may
	 * forget it, the oldest retired first, beyond what it keeps. */
	int (*retire)(sr__runlog *l, const char *id);
	/* The summary (new reference), or SR_ENOTFOUND. */
	int (*summary)(sr__runlog *l, const char *id, json_t **out);
	/* How many runs it holds, ended or not (for the metrics). */
	size_t (*count)(sr__runlog *l);
	/* Each run's summary (borrowed for the call), in no set order. */
	void (*foreach)(sr__runlog *l, void (*fn)(void *ud, json_t *summary), void *ud);
	void (*free)(sr__runlog *l);
} sr__runlog_ops;

struct sr__runlog {
	const sr__runlog_ops *ops;
};

/* The in-memory log: at most per_run events each, and at most kept
 * retired runs (the oldest retired forgotten first; the others are
 * always kept). */
sr__runlog *sr__runlog_mem_new(size_t per_run, size_t kept);
/* Into a memory log: a run from before, its first summary (borrowed),
 * its next event numbered first (the ones before it were dropped). */
int sr__runlog_mem_load(sr__runlog *l, const char *id, json_t *summary, uint64_t first);

/* The database log: the memory log's bounds, written to <state>/
 * sandrun.db behind the memory log, and loaded from it now. A run that
 * was not over when its service stopped is loaded as failed, unless the
 * process that ran it still runs (another service on the same state
 * directory). NULL with err set when the database cannot be used. */
sr__runlog *sr__runlog_db_new(const char *state, size_t per_run, size_t kept, char *err,
			      size_t errlen);

#endif
