/* Helpers compiled into each harness plugin (plugins link no core code). */
#ifndef SR_HARNESS_COMMON_H
#define SR_HARNESS_COMMON_H

#include <jansson.h>

#include "sandrun/plugin.h"

/* The state every harness keeps. */
typedef struct harness {
	const sr_host *host;
	const char *name;          /* the plugin's name */
	char *install_dir;         /* where install-harness puts npm packages */
	char *command;             /* the adapter, absolute, or NULL: default */
	json_t *extra_env;         /* [{"name","value"}] from the config */
	const char *const *npm;    /* pinned packages, NULL-terminated */
	const char *bin;           /* the adapter under node_modules/.bin */
} harness;

/* Read install_dir, command and env ("NAME=VALUE,NAME=VALUE") from the
 * plugin's section; SR_EINVAL after config_invalid. */
int sr_harness_init(harness *h, const sr_host *host, const char *name,
		    const char *const *npm, const char *bin);
void sr_harness_fini(harness *h);
/* The adapter's argv as a JSON array. New reference. */
json_t *sr_harness_command(const harness *h);
/* Complete an operation with json (stolen) and SR_OK, on the next loop
 * iteration (the completion rule). */
int sr_harness_reply(const harness *h, sr_done_fn done, void *ud, json_t *json);
/* A synchronous operation's answer: json (stolen) as malloc'd text in
 * *out. SR_ENOMEM when it cannot. */
int sr_harness_answer(json_t *json, char **out);
/* A doctor answer: is the adapter installed? */
int sr_harness_doctor(const harness *h, sr_done_fn done, void *ud);
/* {"name": name, "value": value} appended to env. */
void sr_harness_env(json_t *env, const char *name, const char *value);
/* {"path","content","mode"} appended to files. */
void sr_harness_file(json_t *files, const char *path, const char *content,
		     int mode);
/* Whether the run has the credential variable name (the run's
 * "credentials" names; a core without them: the environment). */
int sr_harness_has_credential(json_t *run, const char *name);
/* The sandrun-tools stdio MCP entry for run (no "type" key), or NULL when
 * the run has no platform tools. New reference. */
json_t *sr_harness_shim_entry(json_t *run);

#endif
