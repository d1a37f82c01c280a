/* Session pointers (core/run/session.c): ids, the compare-and-set on the turn
 * index, and records that cannot be read. */
#include <sys/wait.h>

#include <jansson.h>

#include "harness.h"
#include "core/run/session.h"

static char *dir;
static const char id[] = "ses-0123456789abcdef";

static void setup(void)
{
	dir = t_tmpdir();
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

Test(session, remove_forgets_and_keeps_the_lock)
{
	char lock[4200];
	json_t *out;

	cr_assert_eq(store(0, 1), SR_OK);
	cr_assert_eq(sr__session_remove(dir, id), SR_OK);
	cr_assert_eq(sr__session_load(dir, id, &out), SR_ENOTFOUND);
	cr_assert_eq(sr__session_remove(dir, id), SR_ENOTFOUND);
	snprintf(lock, sizeof(lock), "%s/sessions/.%s.lock", dir, id);
	cr_assert_eq(access(lock, F_OK), 0, "the lock file was unlinked");
	cr_assert_eq(store(0, 1), SR_OK, "a fresh session after removal");
}

Test(session, an_unreadable_record_is_an_error_and_is_left_alone)
{
	char path[4200], buf[64] = "";
	json_t *out;
	FILE *f;

	cr_assert_eq(store(0, 1), SR_OK);
	snprintf(path, sizeof(path), "%s/sessions/%s.json", dir, id);
	f = fopen(path, "w");
	fputs("{\"turn\": 1, trunc", f);
	fclose(f);
	cr_assert_eq(sr__session_load(dir, id, &out), SR_EIO);
	cr_assert_null(out);
	cr_assert_eq(store(0, 1), SR_EIO, "a broken record was overwritten as if absent");
	f = fopen(path, "r");
	cr_assert(fgets(buf, sizeof(buf), f));
	fclose(f);
	cr_assert_str_eq(buf, "{\"turn\": 1, trunc");
}
