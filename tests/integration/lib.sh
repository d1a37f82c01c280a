# Shared by the integration tests: temporary state, and checks that count.
set -u
: "${SANDRUN_BIN:?run under make check}"
T=$(mktemp -d /tmp/sandrun-it-XXXXXX)
trap 'rm -rf "$T"' EXIT
export SANDRUN_RUNNER_STATE_DIR="$T/state"
export SANDRUN_RUNNER_PLUGIN_DIR="$T/no-installed-plugins"
# No harness unless a test enables one: doctor would check its adapter.
export SANDRUN_RUNNER_HARNESSES=
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
# missing WHAT: a test cannot run because WHAT (an adapter, a peer) is
# absent: a skip (exit 77), but with CI=true a failure, so that CI never
# passes on tests that did not run.
missing() {
	if [ "${CI:-}" = true ]; then
		echo "FAIL: $1 (CI=true: a missing adapter or peer is a failure, not a skip)"
		exit 1
	fi
	echo "SKIP: $1"
	exit 77
}
# children PID: the processes whose parent is PID, read from /proc (a
# minimal Debian has no pgrep or pkill). descendants PID: all below it.
children() {
	cat /proc/[0-9]*/stat 2>/dev/null |
		awk -v p="$1" '{ pid = $1; sub(/^.*\) /, ""); if ($2 == p) print pid }'
}
descendants() {
	for c in $(children "$1"); do
		echo "$c"
		descendants "$c"
	done
}
# kill_tree PID: SIGKILL to PID's descendants, then to PID, and reap it.
kill_tree() {
	for c in $(descendants "$1"); do kill -9 "$c" 2>/dev/null; done
	kill -9 "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}
finish() {
	echo "# $checks checks, $failed failed"
	[ "$failed" -eq 0 ]
}
# wait_for FILE...: until every FILE has something in it (what a server
# started in the background prints once it listens), for up to 30 s: node
# starts slowly on a loaded machine. The caller checks what it read.
wait_for() {
	for _ in $(seq 600); do
		ready=yes
		for f in "$@"; do [ -s "$f" ] || ready=no; done
		[ $ready = yes ] && return 0
		sleep 0.05
	done
	return 0
}
# wait_grep FILE PATTERN: until FILE has a line that matches PATTERN
# (grep's basic syntax), for up to 30 s; 1 when it never came. A FILE that
# an earlier step wrote is removed before the background command that
# writes it anew starts: its shell truncates it only once it runs, and
# until then the old lines would match (a Ctrl-C sent that early is lost:
# a background job of sh ignores SIGINT until sandrun handles it).
wait_grep() {
	for _ in $(seq 600); do
		grep -qs -- "$2" "$1" && return 0
		sleep 0.05
	done
	return 1
}

# ---- scripted models (tests/emulators/anthropic.mjs, openai.mjs) ----
# random_key PREFIX: a fresh key, for a model started with --key.
random_key() { printf '%s-%s' "$1" "$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"; }
# model_got_key NAME LOG KEY: the model answered requests of the main
# conversation, refused none, and each one it logged carried exactly KEY
# (its key_sha256).
model_got_key() {
	mk_want=$(printf '%s' "$3" | sha256sum | cut -d' ' -f1)
	if grep -q '"kind":"main"' "$2" && ! grep -q '"kind":"refused"' "$2" &&
		[ "$(grep -v '"kind":"other"' "$2" | grep -vc "\"key_sha256\":\"$mk_want\"")" -eq 0 ]; then
		ok "$1"
	else
		fail "$1"
		grep -o '"kind":"[a-z]*"\|"key_sha256":[^,]*' "$2" | sort | uniq -c | sed 's/^/  /'
	fi
}

# ---- tool delivery: a callback server, a tools file, a relay runner ----
# start_callbacks: starts tests/helpers/callback_server; sets CB_URL, CB_LOG.
start_callbacks() {
	CB_LOG="$T/calls.log"
	"$SANDRUN_CALLBACK_SERVER" --log "$CB_LOG" >"$T/cb.out" &
	CB_PID=$!
	wait_for "$T/cb.out"
	CB_URL=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$T/cb.out")
	: >"$CB_LOG"
}
# write_tools FILE: echo, fail, noop, slow, pick (client), careful (asks)
write_tools() {
	cat >"$1" <<JSON
[{"name":"echo","description":"Echo the text back","permission":"allow",
  "input_schema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},
  "callback":{"url":"$CB_URL"}},
 {"name":"fail","description":"Always fails","permission":"allow",
  "input_schema":{"type":"object","properties":{}},"callback":{"url":"$CB_URL"}},
 {"name":"noop","description":"Does nothing","read_only":true,
  "input_schema":{"type":"object","properties":{}},"callback":{"url":"$CB_URL"}},
 {"name":"slow","permission":"allow","callback":{"url":"$CB_URL","timeout_ms":20000}},
 {"name":"pick","kind":"client","permission":"allow"},
 {"name":"careful","callback":{"url":"$CB_URL"}}]
JSON
}
# start_serve [ARGS...]: sandrun tools serve on $T/relay, its events
# appended to $T/events, its stdin held open; sets SERVE_PID, MCP_URL,
# MCP_TOKEN.
start_serve() {
	RELAY="$T/relay"
	[ -p "$T/ctl" ] || mkfifo "$T/ctl"
	sleep 600 >"$T/ctl" &
	CTL_PID=$!
	ready=$(grep -c relay.ready "$T/events" 2>/dev/null || true)
	"$SANDRUN_BIN" tools serve --tools "$T/tools.json" --relay-dir "$RELAY" \
		--journal "$T/journal" --specs-out "$T/specs.json" "$@" \
		<"$T/ctl" >>"$T/events" 2>>"$T/serve.err" &
	SERVE_PID=$!
	for _ in $(seq 200); do
		[ "$(grep -c relay.ready "$T/events" 2>/dev/null)" -gt "${ready:-0}" ] && break
		sleep 0.05
	done
	MCP_URL=$(sed -n 's/.*"type":"mcp.http","url":"\([^"]*\)".*/\1/p' "$T/events" | tail -n 1)
	MCP_TOKEN=$(sed -n 's/.*"type":"mcp.http".*"token":"\([^"]*\)".*/\1/p' "$T/events" | tail -n 1)
}
stop_serve() {
	kill "${1:--TERM}" "$SERVE_PID" 2>/dev/null
	wait "$SERVE_PID" 2>/dev/null
	kill "$CTL_PID" 2>/dev/null
}
stop_callbacks() {
	kill "$CB_PID" 2>/dev/null
	wait "$CB_PID" 2>/dev/null
}
# serve_tools [ARGS...]: callbacks, the standard tools file and a relay
# runner, all stopped when the test exits.
serve_tools() {
	start_callbacks
	write_tools "$T/tools.json"
	start_serve "$@"
	trap 'stop_serve; stop_callbacks; rm -rf "$T"' EXIT
}
