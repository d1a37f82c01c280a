/* Shared pieces of the command-line front end. */
#ifndef SR_CORE_CLI_H
#define SR_CORE_CLI_H

#include <jansson.h>

#include "core/host/ctx.h"

/* Exit codes, documented in sandrun(1). */
enum {
	SR_EXIT_OK = 0,
	SR_EXIT_FAIL = 1,
	SR_EXIT_USAGE = 2,
	SR_EXIT_CONFIG = 3,
	SR_EXIT_UNAVAILABLE = 4
};

/* An operation's outcome, captured for a command that waits for it. */
typedef struct sr__wait {
	int done;
	int status;
	char *message;
	char *json;
	void *data;
	size_t len;
	uv_loop_t *loop; /* set by sr__wait_run: the answer stops it */
} sr__wait;

/* A sr_done_fn that copies the result into the sr__wait at ud. */
void sr__wait_done(void *ud, const sr_result *r);
/* Run the loop until w is done; a loop that runs dry first is a failure. */
void sr__wait_run(sr__ctx *ctx, sr__wait *w);
/* After starting an operation with sr__wait_done (rc its return): wait
 * for its callback, or, when it failed at once (then no callback comes,
 * by the completion rule), record rc as its outcome. */
void sr__wait_for(sr__ctx *ctx, sr__wait *w, int rc);
void sr__wait_clear(sr__wait *w);

/* Set up ctx for a command (config, plugins). Returns an exit code. */
int sr__cli_setup(sr__ctx *ctx, const char *config_path);
/* The configured provider, started; NULL after printing why. */
sr__plugin *sr__cli_provider(sr__ctx *ctx);

/* This runner's sandboxes on provider p (labelled sandrun.runner = its id)
 * that also carry every label of extra: *out a JSON array of the
 * provider's list items. Returns an exit code, after printing why. */
int sr__cli_own_sandboxes(sr__ctx *ctx, sr__plugin *p, const sr_pair *extra,
			  size_t n_extra, json_t **out);
/* The list as a table on standard output. */
void sr__cli_print_sandboxes(json_t *list);
/* Provider p's maintain (cleanup of its secrets and leases; a dry run
 * only reports): *items the items of its answer. SR_EUNSUPPORTED when p
 * has no such operation; other failures are printed. */
int sr__cli_maintain(sr__ctx *ctx, sr__plugin *p, int dry, long long grace,
		     json_t **items);

int sr__cmd_image_recipe(int argc, char **argv, const char *config_path);
int sr__cmd_endpoint(int argc, char **argv, const char *config_path);
int sr__cmd_tunnel(int argc, char **argv, const char *config_path);
int sr__cmd_janitor(int argc, char **argv, const char *config_path);
int sr__cmd_plugins(int argc, char **argv, const char *config_path);
int sr__cmd_doctor(int argc, char **argv, const char *config_path);
int sr__cmd_sandbox(int argc, char **argv, const char *config_path);
int sr__cmd_exec(int argc, char **argv, const char *config_path);
int sr__cmd_tools(int argc, char **argv, const char *config_path);
int sr__cmd_run(int argc, char **argv, const char *config_path);
int sr__cmd_install_harness(int argc, char **argv, const char *config_path);

#endif
