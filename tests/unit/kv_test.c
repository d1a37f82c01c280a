/* The durable key-value area (core/host.c). */
#include "harness.h"
#include "core/host.h"

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
