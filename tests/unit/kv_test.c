/* The plugins' key-value areas (core/store/kv.c), in the runner's
 * database: SQLite, or PostgreSQL under tests/integration/store_pg_test.sh. */
#include "harness.h"
#include <sys/stat.h>
#include <sys/wait.h>

#include "core/host/fsutil.h"
#include "core/host/kv.h"

#define NS "provider.test"

static char *dir;

static void setup(void)
{
	dir = t_tmpdir();
	t_log_capture();
	t_store();
}

TestSuite(kv, .init = setup);

static int count_keys(void *ud, const char *key)
{
	(void)key;
	(*(int *)ud)++;
	return 0;
}

Test(kv, put_get_replace_delete)
{
	char *v;
	size_t n;

	cr_assert_eq(sr__kv_put(dir, NS, "lease.1", "abc", 3), SR_OK);
	cr_assert_eq(sr__kv_get(dir, NS, "lease.1", &v, &n), SR_OK);
	cr_assert_eq(n, 3);
	cr_assert_str_eq(v, "abc");
	free(v);
	cr_assert_eq(sr__kv_put(dir, NS, "lease.1", "longer value", 12), SR_OK);
	cr_assert_eq(sr__kv_get(dir, NS, "lease.1", &v, &n), SR_OK);
	cr_assert_str_eq(v, "longer value");
	free(v);
	cr_assert_eq(sr__kv_delete(dir, NS, "lease.1"), SR_OK);
	cr_assert_eq(sr__kv_get(dir, NS, "lease.1", &v, &n), SR_ENOTFOUND);
	cr_assert_null(v);
	cr_assert_eq(sr__kv_delete(dir, NS, "lease.1"), SR_ENOTFOUND);
}

Test(kv, rejects_keys_outside_the_alphabet)
{
	char long_key[130];
	char *v;

	memset(long_key, 'a', 129);
	long_key[129] = 0;
	cr_assert_eq(sr__kv_put(dir, NS, "../escape", "x", 1), SR_EINVAL);
	cr_assert_eq(sr__kv_put(dir, NS, "a/b", "x", 1), SR_EINVAL);
	cr_assert_eq(sr__kv_put(dir, NS, "", "x", 1), SR_EINVAL);
	cr_assert_eq(sr__kv_put(dir, NS, ".hidden", "x", 1), SR_EINVAL);
	cr_assert_eq(sr__kv_put(dir, NS, long_key, "x", 1), SR_EINVAL);
	long_key[128] = 0;
	cr_assert_eq(sr__kv_put(dir, NS, long_key, "x", 1), SR_OK);
	cr_assert_eq(sr__kv_get(dir, NS, "../etc/passwd", &v, NULL), SR_EINVAL);
}

Test(kv, refuses_values_over_one_mebibyte)
{
	static char big[(1 << 20) + 1];

	cr_assert_eq(sr__kv_put(dir, NS, "big", big, sizeof(big)), SR_ETOOBIG);
	cr_assert_eq(sr__kv_put(dir, NS, "fits", big, sizeof(big) - 1), SR_OK);
}

Test(kv, lists_only_its_own_areas_keys)
{
	int n = 0;

	cr_assert_eq(sr__kv_put(dir, NS, "a", "1", 1), SR_OK);
	cr_assert_eq(sr__kv_put(dir, NS, "b", "2", 1), SR_OK);
	cr_assert_eq(sr__kv_put(dir, "provider.other", "c", "3", 1), SR_OK);
	cr_assert_eq(sr__kv_list(dir, NS, count_keys, &n), SR_OK);
	cr_assert_eq(n, 2);
	cr_assert_eq(sr__kv_get(dir, "provider.other", "a", &(char *){ NULL }, NULL), SR_ENOTFOUND,
		     "another plugin's area");
}

Test(kv, any_byte_round_trips)
{
	static const char bin[] = { 'a', 0, (char)0xff, '\n', (char)0x80, 'z' };
	char *v;
	size_t n;

	cr_assert_eq(sr__kv_put(dir, NS, "bin", bin, sizeof(bin)), SR_OK);
	cr_assert_eq(sr__kv_get(dir, NS, "bin", &v, &n), SR_OK);
	cr_assert_eq(n, sizeof(bin));
	cr_assert_eq(memcmp(v, bin, n), 0);
	cr_assert_eq(v[n], 0, "NUL-terminated");
	free(v);
	cr_assert_eq(sr__kv_cas(dir, NS, "bin", bin, sizeof(bin) - 1, "t", 1), SR_ESTATE);
	cr_assert_eq(sr__kv_cas(dir, NS, "bin", bin, sizeof(bin), "t", 1), SR_OK);
	cr_assert_eq(sr__kv_get(dir, NS, "bin", &v, &n), SR_OK);
	cr_assert_str_eq(v, "t");
	free(v);
	cr_assert_eq(sr__kv_put(dir, NS, "empty", "", 0), SR_OK);
	cr_assert_eq(sr__kv_get(dir, NS, "empty", &v, &n), SR_OK);
	cr_assert_eq(n, 0);
	free(v);
}

/* The files of the areas before the database: imported once, each key
 * of its plugin; the lock, temporaries and links are not. */
Test(kv, the_earlier_files_are_imported_once)
{
	char area[4200], link[4400];
	static const char bin[] = { 'x', 0, 'y' };
	char *v;
	size_t n;
	FILE *f;
	int keys = 0;

	snprintf(area, sizeof(area), "%s/plugins/provider.daytona/kv", dir);
	cr_assert_eq(sr__mkdirs(area, 0700), SR_OK);
	t_write(area, "lease.abc", "{\"state\":\"active\"}");
	t_write(area, ".lock", "");
	t_write(area, ".lease.abc.tmp.12", "partial");
	snprintf(link, sizeof(link), "%s/evil", area);
	cr_assert_eq(symlink("/etc/hostname", link), 0);
	snprintf(link, sizeof(link), "%s/binary", area);
	cr_assert((f = fopen(link, "w")));
	fwrite(bin, 1, sizeof(bin), f);
	fclose(f);
	cr_assert_eq(sr__kv_get(dir, "provider.daytona", "lease.abc", &v, &n), SR_OK, "%s",
		     t_log_text());
	cr_assert_str_eq(v, "{\"state\":\"active\"}");
	free(v);
	cr_assert_eq(sr__kv_get(dir, "provider.daytona", "binary", &v, &n), SR_OK);
	cr_assert(n == sizeof(bin) && memcmp(v, bin, n) == 0);
	free(v);
	cr_assert_eq(sr__kv_list(dir, "provider.daytona", count_keys, &keys), SR_OK);
	cr_assert_eq(keys, 2, "only the two records");
	cr_assert(strstr(t_log_text(), "evil is not a key-value record; not imported"), "%s",
		  t_log_text());
	cr_assert(strstr(t_log_text(), "imported 2 key-value records"), "%s", t_log_text());
	/* Once: a record deleted later is not imported again; the files
	 * are left where they were. */
	cr_assert_eq(sr__kv_delete(dir, "provider.daytona", "lease.abc"), SR_OK);
	sr__db_shared_close();
	cr_assert_eq(sr__kv_get(dir, "provider.daytona", "lease.abc", &v, &n), SR_ENOTFOUND);
	snprintf(link, sizeof(link), "%s/lease.abc", area);
	cr_assert_eq(access(link, F_OK), 0, "the file was not left where it was");
}

Test(kv, compare_and_set_replaces_only_the_expected_value)
{
	char *v;
	size_t n;

	/* NULL expected: only when the key does not exist. */
	cr_assert_eq(sr__kv_cas(dir, NS, "lease.2", NULL, 0, "v1", 2), SR_OK);
	cr_assert_eq(sr__kv_cas(dir, NS, "lease.2", NULL, 0, "v9", 2), SR_ESTATE);
	cr_assert_eq(sr__kv_cas(dir, NS, "lease.2", "v0", 2, "v2", 2), SR_ESTATE);
	cr_assert_eq(sr__kv_cas(dir, NS, "lease.2", "v", 1, "v2", 2), SR_ESTATE,
		     "a prefix of the value is not the value");
	cr_assert_eq(sr__kv_get(dir, NS, "lease.2", &v, &n), SR_OK);
	cr_assert_str_eq(v, "v1", "a refused set changed the value");
	free(v);
	cr_assert_eq(sr__kv_cas(dir, NS, "lease.2", "v1", 2, "v2", 2), SR_OK);
	cr_assert_eq(sr__kv_get(dir, NS, "lease.2", &v, &n), SR_OK);
	cr_assert_str_eq(v, "v2");
	free(v);
	cr_assert_eq(sr__kv_delete(dir, NS, "lease.2"), SR_OK);
	cr_assert_eq(sr__kv_cas(dir, NS, "lease.2", "v2", 2, "v3", 2), SR_ESTATE,
		     "a deleted key matched an expected value");
	cr_assert_eq(sr__kv_cas(dir, NS, "../x", NULL, 0, "v", 1), SR_EINVAL);
}

/* Two processes race to take the same key: exactly one wins. */
Test(kv, compare_and_set_has_one_winner_across_processes)
{
	int wins = 0;

	for (int round = 0; round < 20; round++) {
		char key[32];
		pid_t kids[4];
		int st;

		snprintf(key, sizeof(key), "race.%d", round);
		for (int i = 0; i < 4; i++) {
			kids[i] = fork();
			cr_assert_neq(kids[i], -1);
			if (kids[i] == 0)
				_exit(sr__kv_cas(dir, NS, key, NULL, 0, "mine", 4) == SR_OK ? 0 : 1);
		}
		for (int i = 0; i < 4; i++) {
			waitpid(kids[i], &st, 0);
			wins += WIFEXITED(st) && WEXITSTATUS(st) == 0;
		}
	}
	cr_assert_eq(wins, 20, "%d winners in 20 races", wins);
}
