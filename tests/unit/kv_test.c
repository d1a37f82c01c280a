/* The durable key-value area (core/plugins/host.c). */
#include "harness.h"
#include <sys/wait.h>

#include "core/host/kv.h"

static char *dir;

static void setup(void)
{
	dir = t_tmpdir();
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

	cr_assert_eq(sr__kv_put(dir, "lease.1", "abc", 3), SR_OK);
	cr_assert_eq(sr__kv_get(dir, "lease.1", &v, &n), SR_OK);
	cr_assert_eq(n, 3);
	cr_assert_str_eq(v, "abc");
	free(v);
	cr_assert_eq(sr__kv_put(dir, "lease.1", "longer value", 12), SR_OK);
	cr_assert_eq(sr__kv_get(dir, "lease.1", &v, &n), SR_OK);
	cr_assert_str_eq(v, "longer value");
	free(v);
	cr_assert_eq(sr__kv_delete(dir, "lease.1"), SR_OK);
	cr_assert_eq(sr__kv_get(dir, "lease.1", &v, &n), SR_ENOTFOUND);
	cr_assert_null(v);
	cr_assert_eq(sr__kv_delete(dir, "lease.1"), SR_ENOTFOUND);
}

Test(kv, rejects_keys_outside_the_alphabet)
{
	char long_key[130];
	char *v;

	memset(long_key, 'a', 129);
	long_key[129] = 0;
	cr_assert_eq(sr__kv_put(dir, "../escape", "x", 1), SR_EINVAL);
	cr_assert_eq(sr__kv_put(dir, "a/b", "x", 1), SR_EINVAL);
	cr_assert_eq(sr__kv_put(dir, "", "x", 1), SR_EINVAL);
	cr_assert_eq(sr__kv_put(dir, ".hidden", "x", 1), SR_EINVAL);
	cr_assert_eq(sr__kv_put(dir, long_key, "x", 1), SR_EINVAL);
	long_key[128] = 0;
	cr_assert_eq(sr__kv_put(dir, long_key, "x", 1), SR_OK);
	cr_assert_eq(sr__kv_get(dir, "../etc/passwd", &v, NULL), SR_EINVAL);
}

Test(kv, refuses_values_over_one_mebibyte)
{
	static char big[(1 << 20) + 1];

	cr_assert_eq(sr__kv_put(dir, "big", big, sizeof(big)), SR_ETOOBIG);
	cr_assert_eq(sr__kv_put(dir, "fits", big, sizeof(big) - 1), SR_OK);
}

Test(kv, lists_only_valid_keys_and_no_temporaries)
{
	int n = 0;

	sr__kv_put(dir, "a", "1", 1);
	sr__kv_put(dir, "b", "2", 1);
	t_write(dir, ".b.tmp.123", "partial");
	cr_assert_eq(sr__kv_list(dir, count_keys, &n), SR_OK);
	cr_assert_eq(n, 2);
}

Test(kv, does_not_follow_a_planted_symlink)
{
	char link[4200];
	char *v;

	snprintf(link, sizeof(link), "%s/evil", dir);
	cr_assert_eq(symlink("/etc/hostname", link), 0);
	/* O_NOFOLLOW: ELOOP, an I/O error, and nothing read. */
	cr_assert_eq(sr__kv_get(dir, "evil", &v, NULL), SR_EIO);
	cr_assert_null(v);
}

Test(kv, compare_and_set_replaces_only_the_expected_value)
{
	char *v;
	size_t n;

	/* NULL expected: only when the key does not exist. */
	cr_assert_eq(sr__kv_cas(dir, "lease.2", NULL, 0, "v1", 2), SR_OK);
	cr_assert_eq(sr__kv_cas(dir, "lease.2", NULL, 0, "v9", 2), SR_ESTATE);
	cr_assert_eq(sr__kv_cas(dir, "lease.2", "v0", 2, "v2", 2), SR_ESTATE);
	cr_assert_eq(sr__kv_cas(dir, "lease.2", "v", 1, "v2", 2), SR_ESTATE,
		     "a prefix of the value is not the value");
	cr_assert_eq(sr__kv_get(dir, "lease.2", &v, &n), SR_OK);
	cr_assert_str_eq(v, "v1", "a refused set changed the value");
	free(v);
	cr_assert_eq(sr__kv_cas(dir, "lease.2", "v1", 2, "v2", 2), SR_OK);
	cr_assert_eq(sr__kv_get(dir, "lease.2", &v, &n), SR_OK);
	cr_assert_str_eq(v, "v2");
	free(v);
	cr_assert_eq(sr__kv_delete(dir, "lease.2"), SR_OK);
	cr_assert_eq(sr__kv_cas(dir, "lease.2", "v2", 2, "v3", 2), SR_ESTATE,
		     "a deleted key matched an expected value");
	cr_assert_eq(sr__kv_cas(dir, "../x", NULL, 0, "v", 1), SR_EINVAL);
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
				_exit(sr__kv_cas(dir, key, NULL, 0, "mine", 4) == SR_OK ? 0 : 1);
		}
		for (int i = 0; i < 4; i++) {
			waitpid(kids[i], &st, 0);
			wins += WIFEXITED(st) && WEXITSTATUS(st) == 0;
		}
	}
	cr_assert_eq(wins, 20, "%d winners in 20 races", wins);
}
