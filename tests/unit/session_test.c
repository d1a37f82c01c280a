/* Session pointers (core/run/session.c): ids, the compare-and-set on the turn
 * index, records that cannot be read, the database's schema and the import
 * of the earlier store's files; session leases (core/store/lease.c) and
 * the warm pool's record (core/store/warm.c). */
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "core/run/session.h"
#include "core/store/db.h"
#include "core/store/lease.h"
#include "core/store/warm.h"

static char *dir;
static const char id[] = "ses-0123456789abcdef";

/* The PostgreSQL store's URL (t_store), or NULL. */
static const char *pg_url;

/* Run sql on the store (the state directory's file, or the server). */
static void sql(const char *text)
{
	sr__db *db = sr__db_open(dir);

	cr_assert(db, "%s", t_log_text());
	cr_assert_geq(sr__db_exec(db, NULL, text, ""), 0, "%s: %s", text, t_log_text());
	sr__db_close(db);
}

static void setup(void)
{
	dir = t_tmpdir();
	t_log_capture();
	pg_url = t_store();
}

TestSuite(session, .init = setup);

static json_t *rec(int turn)
{
	return json_pack("{s:s, s:s, s:i}", "session", id, "sandbox", "sb-1", "turn", turn);
}

static int store(int expected, int turn)
{
	json_t *r = rec(turn);
	int rc = sr__session_store(dir, id, r, expected);

	json_decref(r);
	return rc;
}

Test(session, new_ids_are_valid_and_differ)
{
	char a[32], b[32];

	sr__session_new_id(a, sizeof(a));
	sr__session_new_id(b, sizeof(b));
	cr_assert(sr__session_valid_id(a), "%s", a);
	cr_assert_str_neq(a, b);
}

Test(session, ids_outside_the_form_are_refused)
{
	json_t *out;

	cr_assert_not(sr__session_valid_id("ses-0123456789abcde"));
	cr_assert_not(sr__session_valid_id("ses-0123456789ABCDEF"));
	cr_assert_not(sr__session_valid_id("../../etc/passwd"));
	cr_assert_not(sr__session_valid_id(NULL));
	cr_assert_eq(sr__session_load(dir, "../x", &out), SR_EINVAL);
	cr_assert_eq(sr__session_remove(dir, "ses-../../../../x"), SR_EINVAL);
}

Test(session, each_turn_is_written_once_against_the_turn_it_followed)
{
	json_t *out;

	cr_assert_eq(sr__session_load(dir, id, &out), SR_ENOTFOUND);
	cr_assert_eq(store(0, 1), SR_OK);
	cr_assert_eq(store(0, 1), SR_ESTATE, "a second first turn was written");
	cr_assert_eq(store(1, 2), SR_OK);
	cr_assert_eq(store(1, 2), SR_ESTATE, "turn 2 was written twice");
	cr_assert_eq(sr__session_load(dir, id, &out), SR_OK);
	cr_assert_eq(json_integer_value(json_object_get(out, "turn")), 2);
	json_decref(out);
}

Test(session, a_record_must_be_the_next_turn)
{
	cr_assert_eq(store(0, 5), SR_EINVAL);
	cr_assert_eq(store(0, 1), SR_OK);
	cr_assert_eq(store(1, 1), SR_EINVAL);
}

Test(session, concurrent_writers_of_one_turn_have_one_winner)
{
	int wins = 0, st;
	pid_t kids[8];

	for (int i = 0; i < 8; i++) {
		kids[i] = fork();
		cr_assert_neq(kids[i], -1);
		if (kids[i] == 0)
			_exit(store(0, 1) == SR_OK ? 0 : 1);
	}
	for (int i = 0; i < 8; i++) {
		waitpid(kids[i], &st, 0);
		wins += WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	cr_assert_eq(wins, 1, "%d writers won turn 1", wins);
}

Test(session, remove_forgets)
{
	json_t *out;

	cr_assert_eq(store(0, 1), SR_OK);
	cr_assert_eq(sr__session_remove(dir, id), SR_OK);
	cr_assert_eq(sr__session_load(dir, id, &out), SR_ENOTFOUND);
	cr_assert_eq(sr__session_remove(dir, id), SR_ENOTFOUND);
	cr_assert_eq(store(0, 1), SR_OK, "a fresh session after removal");
}

Test(session, a_gone_sandbox_is_forgotten_only_while_the_session_names_it)
{
	json_t *out;

	cr_assert_eq(store(0, 1), SR_OK);
	cr_assert_eq(sr__session_forget_sandbox(dir, id, "sb-other"), SR_ENOTFOUND);
	cr_assert_eq(sr__session_load(dir, id, &out), SR_OK, "another sandbox's end forgot it");
	json_decref(out);
	cr_assert_eq(sr__session_forget_sandbox(dir, id, "sb-1"), SR_OK);
	cr_assert_eq(sr__session_load(dir, id, &out), SR_ENOTFOUND);
	cr_assert_eq(sr__session_forget_sandbox(dir, id, "sb-1"), SR_ENOTFOUND);
	cr_assert_eq(sr__session_forget_sandbox(dir, "../x", "sb-1"), SR_EINVAL);
}

Test(session, an_unreadable_record_is_an_error_and_is_left_alone)
{
	json_t *out;
	sr__db *db;
	sr__db_rows *r;

	cr_assert_eq(store(0, 1), SR_OK);
	sql("UPDATE sessions SET record = '{\"turn\": 1, trunc'");
	cr_assert_eq(sr__session_load(dir, id, &out), SR_EIO);
	cr_assert_null(out);
	cr_assert(strstr(t_log_text(), "its record does not read as JSON"), "%s", t_log_text());
	cr_assert_eq(store(0, 1), SR_EIO, "a broken record was overwritten as if absent");
	cr_assert_eq(store(1, 2), SR_EIO, "a broken record was overwritten");
	cr_assert((db = sr__db_open(dir)));
	cr_assert_geq(sr__db_exec(db, &r, "SELECT record FROM sessions", ""), 0);
	cr_assert_eq(sr__db_nrows(r), 1);
	cr_assert_str_eq(sr__db_text(r, 0, 0), "{\"turn\": 1, trunc");
	sr__db_rows_free(r);
	sr__db_close(db);
}

Test(session, a_file_that_is_not_a_database_is_an_error_and_is_left_alone)
{
	const char *path = t_write(dir, "sandrun.db", "these are not the pointers you want\n");
	char buf[64] = "";
	json_t *out;
	FILE *f;

	cr_assert_eq(sr__session_load(dir, id, &out), SR_EIO);
	cr_assert_eq(store(0, 1), SR_EIO);
	cr_assert_eq(sr__session_remove(dir, id), SR_EIO);
	cr_assert(strstr(t_log_text(), "is not a SQLite database; it is left as it is"), "%s",
		  t_log_text());
	f = fopen(path, "r");
	cr_assert_not_null(f);
	cr_assert(fgets(buf, sizeof(buf), f));
	fclose(f);
	cr_assert_str_eq(buf, "these are not the pointers you want\n");
}

Test(session, a_newer_schema_is_refused)
{
	json_t *out;

	/* (By another connection, before this process keeps its own.) */
	sql(pg_url ? "UPDATE sandrun_schema SET version = 99" : "PRAGMA user_version = 99");
	cr_assert_eq(sr__session_load(dir, id, &out), SR_EIO);
	cr_assert(strstr(t_log_text(), "schema version 99 is newer than this sandrun's (5)"), "%s",
		  t_log_text());
}

Test(session, the_earlier_stores_files_are_imported_once)
{
	char sessions[4200];
	json_t *out;

	snprintf(sessions, sizeof(sessions), "%s/sessions", dir);
	cr_assert_eq(mkdir(sessions, 0700), 0);
	t_write(sessions, "ses-0123456789abcdef.json",
		"{\"session\":\"ses-0123456789abcdef\",\"sandbox\":\"sb-old\",\"turn\":3}");
	t_write(sessions, "ses-00000000000000ff.json", "{\"turn\": trunc");
	t_write(sessions, "notes.json", "{}");
	t_write(sessions, ".ses-0123456789abcdef.lock", "");
	cr_assert_eq(sr__session_load(dir, id, &out), SR_OK, "%s", t_log_text());
	cr_assert_str_eq(json_string_value(json_object_get(out, "sandbox")), "sb-old");
	json_decref(out);
	cr_assert(strstr(t_log_text(), "imported 1 session pointers"), "%s", t_log_text());
	cr_assert(strstr(t_log_text(), "ses-00000000000000ff.json does not read as a session "
			 "record; not imported (left as it is)"), "%s", t_log_text());
	/* The compare-and-set goes on from the imported turn. */
	cr_assert_eq(store(0, 1), SR_ESTATE);
	cr_assert_eq(store(3, 4), SR_OK);
	/* Once: a pointer removed later is not imported again. */
	cr_assert_eq(sr__session_remove(dir, id), SR_OK);
	cr_assert_eq(sr__session_load(dir, id, &out), SR_ENOTFOUND);
}

/* ------------------------------------------------------------- leases */

Test(session, a_lease_is_one_services_until_it_expires)
{
	sr__db *db = sr__db_open(dir);
	char holder[400] = "";

	cr_assert(db, "%s", t_log_text());
	cr_assert_eq(sr__lease_acquire(db, id, "h:1", 1, 1000, 2000, holder, sizeof(holder)), SR_OK);
	cr_assert_eq(sr__lease_acquire(db, id, "h:1", 1, 1500, 2000, holder, sizeof(holder)), SR_OK,
		     "its owner's again");
	cr_assert_eq(sr__lease_acquire(db, id, "h:2", 1, 2000, 2000, holder, sizeof(holder)),
		     SR_ESTATE);
	cr_assert(strstr(holder, "sandrund h:1 (a turn going on; its lease runs 1500 ms"), "%s",
		  holder);
	/* Past its expiry (1500 + 2000), anyone's. */
	cr_assert_eq(sr__lease_acquire(db, id, "h:2", 1, 3501, 2000, holder, sizeof(holder)),
		     SR_OK);
	cr_assert_eq(sr__lease_acquire(db, id, "h:1", 1, 3600, 2000, holder, sizeof(holder)),
		     SR_ESTATE);
	sr__db_close(db);
}

/* The first column of the first row sql (with $1 = arg) answers, or ""
 * (a static buffer). */
static const char *one(sr__db *db, const char *sql, const char *arg)
{
	static char out[200];
	sr__db_rows *r;

	out[0] = 0;
	cr_assert_geq(sr__db_exec(db, &r, sql, arg ? "t" : "", arg), 0, "%s", t_log_text());
	if (sr__db_nrows(r) && sr__db_text(r, 0, 0))
		snprintf(out, sizeof(out), "%s", sr__db_text(r, 0, 0));
	sr__db_rows_free(r);
	return out;
}

/* The owner of session's lease, or "". */
static const char *lease_owner(sr__db *db, const char *session)
{
	return one(db, "SELECT owner FROM leases WHERE session = $1", session);
}

Test(session, a_heartbeat_renews_what_is_held_and_releases_the_rest)
{
	sr__db *db = sr__db_open(dir);
	char holder[400];
	const char *b = "ses-000000000000000b", *c = "ses-000000000000000c";
	const char *d = "ses-000000000000000d";
	char held[300];

	cr_assert(db);
	cr_assert_eq(sr__lease_acquire(db, id, "h:1", 1, 1000, 2000, holder, sizeof(holder)), SR_OK);
	cr_assert_eq(sr__lease_acquire(db, b, "h:1", 1, 1000, 2000, holder, sizeof(holder)), SR_OK);
	cr_assert_eq(sr__lease_acquire(db, c, "h:2", 1, 1000, 2000, holder, sizeof(holder)), SR_OK);
	/* Taken after the heartbeat's list was made (at 2500): kept. */
	cr_assert_eq(sr__lease_acquire(db, d, "h:1", 1, 2600, 2000, holder, sizeof(holder)), SR_OK);
	/* At 3100 h:1 holds id (warm now) and is taking c, whose lease
	 * (h:2's) expired at 3000: a pending one is not taken; b is no
	 * longer h:1's. */
	snprintf(held, sizeof(held), "[{\"session\":\"%s\",\"busy\":false},"
		 "{\"session\":\"%s\",\"pending\":true}]", id, c);
	cr_assert_eq(sr__lease_beat(db, "h:1", held, 3100, 2500, 2000), 0);
	cr_assert_str_eq(lease_owner(db, c), "h:2", "a pending one was taken by the heartbeat");
	cr_assert_str_eq(lease_owner(db, b), "", "released by the heartbeat");
	cr_assert_str_eq(lease_owner(db, d), "h:1", "taken since the list: released");
	cr_assert_eq(sr__lease_acquire(db, id, "h:3", 1, 5000, 2000, holder, sizeof(holder)),
		     SR_ESTATE, "renewed to 5100");
	cr_assert(strstr(holder, "kept warm"), "%s", holder);
	/* Taken over while h:1 did not beat: the next beat says so. */
	cr_assert_eq(sr__lease_acquire(db, id, "h:3", 1, 5200, 2000, holder, sizeof(holder)), SR_OK);
	cr_assert_eq(sr__lease_beat(db, "h:1", held, 5300, 5300, 2000), 1);
	cr_assert(strstr(t_log_text(), "its lease was taken over by another service"), "%s",
		  t_log_text());
	cr_assert_eq(sr__lease_release_all(db, "h:3"), SR_OK);
	cr_assert_str_eq(lease_owner(db, id), "");
	sr__db_close(db);
}

Test(session, taking_a_lease_makes_another_services_warm_record_stale)
{
	sr__db *db = sr__db_open(dir);
	char holder[400];

	cr_assert(db);
	cr_assert_eq(sr__warm_record(db, id, "sb-a", "local", 1, 0, "h:1"), SR_OK);
	cr_assert_eq(sr__lease_acquire(db, id, "h:2", 1, 1000, 2000, holder, sizeof(holder)), SR_OK);
	cr_assert_str_eq(one(db, "SELECT count(*) FROM warm", NULL), "0");
	sr__db_close(db);
}

/* ------------------------------------------------------- warm record */

Test(session, warm_sandboxes_of_a_service_that_is_gone_are_adopted)
{
	sr__db *db = sr__db_open(dir);
	char me[320], alive[400], dead[400], dead2[400];
	json_t *rows;

	cr_assert(db);
	sr__db_owner(me, sizeof(me));
	/* On this host: the parent of this test, a service that still runs,
	 * and a pid that runs nothing. */
	snprintf(alive, sizeof(alive), "%.*s:%ld", (int)(strchr(me, ':') - me), me,
		 (long)getppid());
	snprintf(dead, sizeof(dead), "%.*s:999999999:1", (int)(strchr(me, ':') - me), me);
	snprintf(dead2, sizeof(dead2), "%.*s:999999998:1", (int)(strchr(me, ':') - me), me);
	cr_assert_eq(sr__warm_record(db, "ses-a", "sb-a", "local", 1, 0, dead), SR_OK);
	cr_assert_eq(sr__warm_record(db, "ses-b", "sb-b", "daytona", 0, 5000, dead), SR_OK);
	cr_assert_eq(sr__warm_record(db, "ses-c", "sb-c", "local", 1, 0, alive), SR_OK);
	cr_assert_eq(sr__warm_record(db, "ses-d", "sb-d", "local", 1, 0, dead), SR_OK);
	/* Taken over since by a service that runs (its lease): stale, gone;
	 * by one that is gone too, or whose lease expired: still adopted. */
	cr_assert_eq(sr__warm_record(db, "ses-e", "sb-e", "local", 1, 0, dead), SR_OK);
	cr_assert_eq(sr__warm_record(db, "ses-f", "sb-f", "local", 1, 0, dead), SR_OK);
	/* A service of another host (a shared store) runs while it holds the
	 * session's lease: ses-g's is left to it, ses-h's (no lease) adopted;
	 * ses-i was taken over by a service of another host, whose lease
	 * expired: adopted. */
	cr_assert_eq(sr__warm_record(db, "ses-g", "sb-g", "daytona", 1, 0, "elsewhere:1:1"), SR_OK);
	cr_assert_eq(sr__warm_record(db, "ses-h", "sb-h", "daytona", 1, 0, "elsewhere:2:1"), SR_OK);
	cr_assert_eq(sr__warm_record(db, "ses-i", "sb-i", "daytona", 1, 0, dead), SR_OK);
	cr_assert_geq(sr__db_exec(db, NULL, "INSERT INTO leases VALUES ('ses-e', $1, 1, $3, 0), "
				  "('ses-f', $2, 1, $3, 0), ('ses-g', 'elsewhere:1:1', 0, $3, 0), "
				  "('ses-i', 'elsewhere:3:1', 0, 1, 0)", "tti", alive, dead2,
				  (int64_t)4102444800000), 0, "%s", t_log_text());
	/* A record that names another sandbox now is not forgotten. */
	cr_assert_eq(sr__warm_forget(db, "ses-d", "sb-old"), SR_OK);
	cr_assert_eq(sr__warm_forget(db, "ses-a", "sb-a"), SR_OK);
	rows = sr__warm_adopt(db, me, NULL, NULL);
	cr_assert(json_is_array(rows));
	cr_assert_eq(json_array_size(rows), 5, "ses-b, d, f, h and i: %s", json_dumps(rows, 0));
	for (size_t i = 0; i < 5; i++) {
		json_t *r = json_array_get(rows, i);
		const char *s = json_string_value(json_object_get(r, "session"));
		cr_assert(strcmp(s, "ses-b") == 0 || strcmp(s, "ses-d") == 0 ||
			  strcmp(s, "ses-f") == 0 || strcmp(s, "ses-h") == 0 ||
			  strcmp(s, "ses-i") == 0, "%s", s);
		if (strcmp(s, "ses-b") == 0) {
			cr_assert_str_eq(json_string_value(json_object_get(r, "provider")), "daytona");
			cr_assert(json_is_false(json_object_get(r, "running")));
			cr_assert_eq(json_integer_value(json_object_get(r, "ttl_at")), 5000);
		}
	}
	json_decref(rows);
	cr_assert_str_eq(one(db, "SELECT count(*) FROM warm WHERE session = 'ses-e'", NULL), "0",
			 "the stale record is gone");
	cr_assert_str_eq(one(db, "SELECT owner FROM warm WHERE session = 'ses-g'", NULL),
			 "elsewhere:1:1", "another host's running service's record was taken");
	/* Adopted: this process's now, not adopted twice. */
	rows = sr__warm_adopt(db, me, NULL, NULL);
	cr_assert_eq(json_array_size(rows), 0);
	json_decref(rows);
	sr__db_close(db);
}

/* Where a session's sandbox lives: a runner that does not reach it says
 * where it is, and whether another runner may continue it. */
Test(session, a_sandbox_of_another_runner_or_provider_is_elsewhere)
{
	json_t *r = json_pack("{s:s, s:s, s:s, s:o}", "session", id, "sandbox", "sb-1",
			      "provider", "local", "home",
			      sr__session_home("r-a", "hostA:/var/a/sandboxes"));
	json_t *old = json_pack("{s:s, s:s, s:s}", "session", id, "sandbox", "sb-1",
				"provider", "local");
	char msg[1024];
	int retry = -1;

	cr_assert_eq(sr__session_elsewhere(r, "local", 0, "hostA:/var/a/sandboxes", "r-a", msg,
					   sizeof(msg), &retry), 0, "the runner that made it");
	cr_assert_eq(retry, 0);
	/* Another root, or the same root with another runner id. */
	cr_assert_eq(sr__session_elsewhere(r, "local", 0, "hostA:/var/b/sandboxes", "r-b", msg,
					   sizeof(msg), &retry), 1);
	cr_assert_eq(retry, 1);
	cr_assert(strstr(msg, "'r-a' at hostA:/var/a/sandboxes") && strstr(msg, id), "%s", msg);
	cr_assert_eq(sr__session_elsewhere(r, "local", 0, "hostA:/var/a/sandboxes", "r-b", msg,
					   sizeof(msg), &retry), 1);
	cr_assert_eq(sr__session_elsewhere(r, "local", 0, "hostB:/var/a/sandboxes", "r-a", msg,
					   sizeof(msg), &retry), 1);
	/* Another provider: not a runner of this configuration's. */
	cr_assert_eq(sr__session_elsewhere(r, "daytona", 1, NULL, "r-a", msg, sizeof(msg),
					   &retry), SR__SESSION_PROVIDER_CHANGED);
	cr_assert_eq(retry, 0);
	cr_assert(strstr(msg, "provider 'local'"), "%s", msg);
	cr_assert_str_eq(sr__session_elsewhere_code(SR__SESSION_PROVIDER_CHANGED),
			 "session_provider_changed");
	cr_assert_str_eq(sr__session_elsewhere_code(SR__SESSION_ELSEWHERE), "session_elsewhere");
	cr_assert_eq(sr__session_elsewhere(old, "daytona", 1, NULL, "r-a", msg, sizeof(msg),
					   &retry), SR__SESSION_PROVIDER_CHANGED,
		     "also for a record without a home");
	/* A remote provider's sandboxes: any runner of its configuration. */
	json_object_set_new(r, "provider", json_string("daytona"));
	json_object_set_new(r, "home", sr__session_home("r-a", NULL));
	cr_assert_eq(sr__session_elsewhere(r, "daytona", 1, NULL, "r-b", msg, sizeof(msg),
					   &retry), 0);
	/* Recorded before homes were: reconnected as before. */
	cr_assert_eq(sr__session_elsewhere(old, "local", 0, "hostA:/x", "r-b", msg, sizeof(msg),
					   &retry), 0);
	json_decref(r);
	json_decref(old);
}

static int reaches_not_b(void *ud, const json_t *rec, const char *provider)
{
	(*(int *)ud)++;
	cr_assert_str_eq(provider, "local");
	return !rec || strcmp(json_string_value(json_object_get(rec, "sandbox")), "sb-b") != 0;
}

/* A dead service's warm sandbox that this one does not reach is left for
 * the runner that does: not adopted, not forgotten. */
Test(session, a_warm_sandbox_this_service_does_not_reach_is_left_for_its_runner)
{
	sr__db *db = sr__db_open(dir);
	char me[320], dead[400];
	json_t *rows, *rb = json_pack("{s:s, s:s, s:s, s:i}", "session", "ses-00000000000000bb",
				      "sandbox", "sb-b", "provider", "local", "turn", 1);
	int asked = 0;

	cr_assert(db);
	sr__db_owner(me, sizeof(me));
	snprintf(dead, sizeof(dead), "%.*s:999999999:1", (int)(strchr(me, ':') - me), me);
	cr_assert_eq(sr__session_store(dir, "ses-00000000000000bb", rb, 0), SR_OK);
	cr_assert_eq(sr__warm_record(db, "ses-00000000000000aa", "sb-a", "local", 1, 0, dead),
		     SR_OK);
	cr_assert_eq(sr__warm_record(db, "ses-00000000000000bb", "sb-b", "local", 1, 0, dead),
		     SR_OK);
	rows = sr__warm_adopt(db, me, reaches_not_b, &asked);
	cr_assert_eq(asked, 2);
	cr_assert_eq(json_array_size(rows), 1, "%s", json_dumps(rows, 0));
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(rows, 0), "session")),
			 "ses-00000000000000aa");
	json_decref(rows);
	cr_assert_str_eq(one(db, "SELECT owner FROM warm WHERE session = $1",
			     "ses-00000000000000bb"), dead, "still the dead runner's");
	json_decref(rb);
	sr__db_close(db);
}
