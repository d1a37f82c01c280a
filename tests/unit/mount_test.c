/* Storage mount arguments (core/run/mount.c): s3://BUCKET[/PREFIX]:PATH,
 * what each part may hold, and the reason given for each bad one. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/run/mount.h"

static int parse(const char *arg, sr__mount_target *t, const char *want_why)
{
	char why[1400] = "";
	int rc = sr__mount_parse(arg, t, why, sizeof(why));

	if (want_why)
		cr_expect(strstr(why, want_why), "%s: '%s' lacks '%s'", arg, why, want_why);
	return rc;
}

Test(mount, good_arguments)
{
	sr__mount_target t;

	cr_assert_eq(parse("s3://work/run1:data", &t, NULL), SR_OK);
	cr_expect_str_eq(t.bucket, "work");
	cr_expect_str_eq(t.prefix, "run1");
	cr_expect_str_eq(t.path, "data");
	cr_assert_eq(parse("s3://my.bucket-2/a/b/c/:sub/dir", &t, NULL), SR_OK);
	cr_expect_str_eq(t.bucket, "my.bucket-2");
	cr_expect_str_eq(t.prefix, "a/b/c", "a trailing slash goes");
	cr_expect_str_eq(t.path, "sub/dir");
	cr_assert_eq(parse("s3://work:/mnt/all", &t, NULL), SR_OK);
	cr_expect_str_eq(t.prefix, "", "no prefix: the whole bucket");
	cr_expect_str_eq(t.path, "/mnt/all");
	/* The path is what follows the last colon: a prefix may hold one. */
	cr_assert_eq(parse("s3://work/2026-12-02T10:00:data", &t, NULL), SR_OK);
	cr_expect_str_eq(t.prefix, "2026-12-02T10:00");
	cr_expect_str_eq(t.path, "data");
}

Test(mount, bad_arguments_with_their_reason)
{
	sr__mount_target t;
	char long_prefix[1200];

	cr_expect_eq(parse("/data:x", &t, "expected s3://BUCKET/PREFIX:PATH"), SR_EINVAL);
	cr_expect_eq(parse("s3://work/run1", &t, "expected s3://BUCKET/PREFIX:PATH"), SR_EINVAL);
	cr_expect_eq(parse("S3://work/a:b", &t, "expected s3://"), SR_EINVAL);
	cr_expect_eq(parse("s3://ab/p:data", &t, "is not a bucket name"), SR_EINVAL);
	cr_expect_eq(parse("s3://Work/p:data", &t, "is not a bucket name"), SR_EINVAL);
	cr_expect_eq(parse("s3://-work/p:data", &t, "is not a bucket name"), SR_EINVAL);
	cr_expect_eq(parse("s3://wo_rk/p:data", &t, "is not a bucket name"), SR_EINVAL);
	cr_expect_eq(parse("s3:///p:data", &t, "is not a bucket name"), SR_EINVAL);
	cr_expect_eq(parse("s3://work/a/../b:data", &t, "'..' part"), SR_EINVAL);
	cr_expect_eq(parse("s3://work/a//b:data", &t, "empty"), SR_EINVAL);
	cr_expect_eq(parse("s3://work/a\nb:data", &t, "control character"), SR_EINVAL);
	cr_expect_eq(parse("s3://work/--profile=x:data", &t, "starts with '-'"), SR_EINVAL);
	cr_expect_eq(parse("s3://work/p:", &t, "is not a directory in the sandbox"), SR_EINVAL);
	cr_expect_eq(parse("s3://work/p:../up", &t, "is not a directory"), SR_EINVAL);
	cr_expect_eq(parse("s3://work/p:a/./b", &t, "is not a directory"), SR_EINVAL);
	cr_expect_eq(parse("s3://work/p:/", &t, "is not a directory"), SR_EINVAL);
	cr_expect_eq(parse("s3://work/p:a\\b", &t, "is not a directory"), SR_EINVAL);
	memset(long_prefix, 0, sizeof(long_prefix));
	memcpy(long_prefix, "s3://work/", 10);
	memset(long_prefix + 10, 'x', 1000);
	strcat(long_prefix, ":data");
	cr_expect_eq(parse(long_prefix, &t, "the prefix is longer than"), SR_EINVAL);
}
