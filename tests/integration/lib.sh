# Shared by the integration tests: temporary state, and checks that count.
set -u
: "${SANDRUN_BIN:?run under make check}"
T=$(mktemp -d /tmp/sandrun-it-XXXXXX)
trap 'rm -rf "$T"' EXIT
export SANDRUN_RUNNER_STATE_DIR="$T/state"
export SANDRUN_RUNNER_PLUGIN_DIR="$T/no-installed-plugins"
failed=0
checks=0

ok() { checks=$((checks + 1)); echo "ok - $1"; }
fail() { checks=$((checks + 1)); failed=$((failed + 1)); echo "FAIL - $1"; }
# expect NAME WANT_EXIT CMD...: run CMD, output in $T/out and $T/err
expect() {
	name=$1 want=$2
	shift 2
	"$@" >"$T/out" 2>"$T/err"
	got=$?
	if [ "$got" -eq "$want" ]; then ok "$name"; else
		fail "$name (exit $got, wanted $want)"
		sed 's/^/  out: /' "$T/out" | head -20
		sed 's/^/  err: /' "$T/err" | head -20
	fi
}
# grep_in NAME FILE PATTERN
grep_in() {
	if grep -q -- "$3" "$2"; then ok "$1"; else
		fail "$1 (no '$3' in $2)"
		sed 's/^/  | /' "$2" | head -20
	fi
}
finish() {
	echo "# $checks checks, $failed failed"
	[ "$failed" -eq 0 ]
}
