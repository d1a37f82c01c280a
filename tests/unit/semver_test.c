/* npm-style version ranges (core/host/semver.c): the "engines" requirements of
 * the harness adapters and the pins of their packages. */
#include <criterion/criterion.h>

#include "core/host/semver.h"

#define YES(r, v) cr_expect_eq(sr__semver_satisfies(r, v), 1, "'%s' should accept %s", r, v)
#define NO(r, v) cr_expect_eq(sr__semver_satisfies(r, v), 0, "'%s' should refuse %s", r, v)
#define BAD(r, v) cr_expect_eq(sr__semver_satisfies(r, v), -1, "'%s' / %s should be unreadable", r, v)

Test(semver, at_least)
{
	YES(">=22", "v22.0.0");
	YES(">=22", "22.23.5");
	NO(">=22", "v20.20.2");
	NO(">=22", "v18.20.4");
	YES(">=20.6.0", "v20.6.0");
	NO(">=20.6.0", "v20.5.9");
	YES(">= 16", "v18.20.4");
}

Test(semver, strict_bounds_on_partial_versions)
{
	NO(">22", "22.9.0");
	YES(">22", "23.0.0");
	YES("<=22", "22.9.9");
	NO("<=22", "23.0.0");
	YES("<22.1.0", "22.0.9");
	NO("<22.1.0", "22.1.0");
	YES(">22.1.0", "22.1.1");
}

Test(semver, caret_and_tilde)
{
	YES("^20.19.0", "20.20.2");
	NO("^20.19.0", "22.0.0");
	NO("^20.19.0", "20.18.9");
	YES("^0.101.0", "0.101.7");
	NO("^0.101.0", "0.102.0");
	YES("~1.2.3", "1.2.9");
	NO("~1.2.3", "1.3.0");
	YES("~1", "1.9.0");
}

Test(semver, bare_versions_pin_what_they_name)
{
	YES("0.101", "0.101.3");
	NO("0.101", "0.102.0");
	NO("0.101", "0.100.9");
	YES("2.6.0", "2.6.0");
	NO("2.6.0", "2.6.1");
	YES("1.x", "1.4.2");
	YES("*", "0.0.1");
}

Test(semver, alternatives_and_intersections)
{
	YES("^20.19.0 || >=22.12.0", "20.19.1");
	YES("^20.19.0 || >=22.12.0", "22.12.0");
	NO("^20.19.0 || >=22.12.0", "22.11.0");
	NO("^20.19.0 || >=22.12.0", "18.20.4");
	YES(">=18 <21", "20.0.0");
	NO(">=18 <21", "21.0.0");
}

Test(semver, prerelease_tags_are_ignored)
{
	YES(">=22", "22.0.0-rc.1");
	YES(">=22.0.0-0", "22.1.0");
}

Test(semver, unreadable_input_is_an_error_not_a_match)
{
	BAD(">=22", "v22");
	BAD(">=22", "node");
	BAD(">=22", "");
	BAD("", "22.0.0");
	BAD(">=twenty", "22.0.0");
	BAD(">=22 ||", "22.0.0");
	BAD("1.2.3.4", "1.2.3");
	BAD(NULL, "1.2.3");
	BAD(">=1", NULL);
}
