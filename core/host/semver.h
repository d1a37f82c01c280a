/* npm-style version ranges ("engines", package pins). */
#ifndef SR_CORE_SEMVER_H
#define SR_CORE_SEMVER_H

/* 1 when version ("22.1.0" or "v22.1.0", all three numbers) satisfies
 * range (">=20.6.0", "^20.19.0 || >=22", "0.101", "*"), 0 when it does
 * not, -1 when either cannot be parsed. */
int sr__semver_satisfies(const char *range, const char *version);

#endif
