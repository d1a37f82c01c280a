/* Session pointers from the shell, for the integration tests (the store
 * is a database now, not files a test can move):
 *   session_tool STATE_DIR get ID        the record on stdout (exit 1: none)
 *   session_tool STATE_DIR rm ID         forget it
 *   session_tool STATE_DIR put ID FILE   write FILE's record (its turn: the
 *                                        next after the stored one, or 1)
 *   session_tool STATE_DIR lease ID      who holds its lease (exit 1: none)
 *   session_tool STATE_DIR warm ID       who keeps its sandbox warm (exit 1: none)
 *   session_tool STATE_DIR kv NS         a plugin's key-value records, one
 *                                        "KEY VALUE" line each (NS: its
 *                                        section, provider.daytona)
 * Through core/run/session.c, as sandrun does, on the store
 * SANDRUN_STORE_URL names when it is set. Exit 1: there is none; 2: an
 * error (said). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/host/status.h"
#include "core/host/kv.h"
#include "core/run/session.h"
#include "core/store/db.h"

/* The area kv lists. */
static const char *ns_dumped;

/* The first row of a one-row, two-column query on session id, printed. */
static int row(const char *state, const char *query, const char *id)
{
	sr__db *db = sr__db_open(state);
	sr__db_rows *r = NULL;
	int rc = SR_EIO;

	if (db && sr__db_exec(db, &r, query, "t", id) >= 0) {
		rc = SR_ENOTFOUND;
		if (sr__db_nrows(r)) {
			printf("%s %s\n", sr__db_text(r, 0, 0), sr__db_int(r, 0, 1) ? "busy" : "warm");
			rc = SR_OK;
		}
	}
	sr__db_rows_free(r);
	sr__db_close(db);
	return rc;
}

static int dump_one(void *ud, const char *key)
{
	char *v = NULL;

	if (sr__kv_get(ud, ns_dumped, key, &v, NULL) == SR_OK)
		printf("%s %s\n", key, v);
	free(v);
	return 0;
}

int main(int argc, char **argv)
{
	json_t *rec = NULL;
	int rc;

	if (argc < 4 || (strcmp(argv[2], "put") == 0 && argc != 5)) {
		fprintf(stderr, "usage: session_tool STATE_DIR get|rm|put|lease|warm|kv ID [FILE]\n");
		return 2;
	}
	sr__db_use(getenv("SANDRUN_STORE_URL"));
	if (strcmp(argv[2], "get") == 0) {
		rc = sr__session_load(argv[1], argv[3], &rec);
		if (rc == SR_OK) {
			json_dumpf(rec, stdout, JSON_COMPACT);
			putchar('\n');
		}
	} else if (strcmp(argv[2], "lease") == 0) {
		rc = row(argv[1], "SELECT owner, busy FROM leases WHERE session = $1", argv[3]);
	} else if (strcmp(argv[2], "warm") == 0) {
		rc = row(argv[1], "SELECT owner, running FROM warm WHERE session = $1", argv[3]);
	} else if (strcmp(argv[2], "kv") == 0) {
		ns_dumped = argv[3];
		rc = sr__kv_list(argv[1], argv[3], dump_one, argv[1]);
	} else if (strcmp(argv[2], "rm") == 0) {
		rc = sr__session_remove(argv[1], argv[3]);
	} else if (strcmp(argv[2], "put") == 0) {
		if (!(rec = json_load_file(argv[4], 0, NULL))) {
			fprintf(stderr, "session_tool: %s: not JSON\n", argv[4]);
			return 2;
		}
		json_t *cur = NULL;
		int turn = 0;
		if (sr__session_load(argv[1], argv[3], &cur) == SR_OK)
			turn = (int)json_integer_value(json_object_get(cur, "turn"));
		json_decref(cur);
		json_object_set_new(rec, "turn", json_integer(turn + 1));
		rc = sr__session_store(argv[1], argv[3], rec, turn);
	} else {
		fprintf(stderr, "session_tool: unknown command '%s'\n", argv[2]);
		return 2;
	}
	json_decref(rec);
	if (rc != SR_OK)
		fprintf(stderr, "session_tool: %s %s: %s\n", argv[2], argv[3], sr__strerror(rc));
	/* 1: there is none; 2: it could not be told. */
	return rc == SR_OK ? 0 : rc == SR_ENOTFOUND ? 1 : 2;
}
