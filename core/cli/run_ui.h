/* What sandrun run shows and reads, whoever runs the turn: the run in this
 * process (cmd_run.c) or sandrund (run_server.c, --server). Events are
 * NDJSON with --json or when standard output is not a terminal, else the
 * agent's text, tool calls, permission prompts and a summary; permission
 * answers come from standard input. */
#ifndef SR_CORE_CLI_RUN_UI_H
#define SR_CORE_CLI_RUN_UI_H

#include <jansson.h>
#include <uv.h>

#include "core/cli/input.h"

typedef struct sr__run_ui sr__run_ui;

struct sr__run_ui {
	/* The driver's: answer a permission request (SR_OK, or SR_ENOTFOUND
	 * when none waits; an answer that goes out asynchronously reports its
	 * own failure), and deny every request, now and to come. NULL answer:
	 * no run to answer to (input is ignored). */
	int (*answer)(sr__run_ui *u, const char *request_id, int allow);
	void (*deny_all)(sr__run_ui *u);
	int json;
	int interactive;       /* a terminal: ask at the keyboard */
	char asking[64];       /* the permission request on screen */
	sr__input *input;
	char line[4096];
	size_t line_len;
	int tools_seen;
	int at_line_start;
	json_t *timings;
	json_t *titles;        /* tool call id -> title */
};

/* json: --json was given (or output is not a terminal, decided here). */
void sr__run_ui_init(sr__run_ui *u, int json);
void sr__run_ui_clear(sr__run_ui *u);
/* Show one event (borrowed). */
void sr__run_ui_event(sr__run_ui *u, json_t *ev);
/* Read permission answers from standard input. */
void sr__run_ui_start_input(sr__run_ui *u, uv_loop_t *loop);
void sr__run_ui_stop_input(sr__run_ui *u);

/* sandrun run --server URL: the turn on sandrund, body the request
 * (doc/api.yaml; borrowed), the token from token_file or SANDRUN_TOKEN;
 * returns the exit code. */
int sr__run_on_server(const char *server, const char *token_file, json_t *body,
		      int json);

#endif
