#!/bin/sh
# The relay bridge (core/tools/relay_bridge.c) on the local provider, used
# as a provider that is reached only through its operations: `sandrun
# tools serve --sandbox` serves a relay directory inside a sandbox, picks
# requests up through `sandrun-shim watch` over an exec channel (or by
# listing), and answers what an earlier runner left without running a
# tool twice.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
S=$SANDRUN_BIN
SHIM=$SANDRUN_SHIM
start_callbacks
write_tools "$T/tools.json"
trap 'kill $SV 2>/dev/null; stop_callbacks; rm -rf "$T"' EXIT
SV=

expect "a sandbox" 0 "$S" sandbox create --json
ID=$(sed -n 's/.*"id":"\([^"]*\)".*/\1/p' "$T/out")
H=$(sed -n 's/.*"home":"\([^"]*\)".*/\1/p' "$T/out")
D="$H/.relay"
J="$T/journal"

# serve [ARGS]: the bridge on $D, events in $T/ev.N (N counts starts)
n=0
serve() {
	n=$((n + 1))
	"$S" tools serve --tools "$T/tools.json" --relay-dir "$D" --journal "$J" \
		--sandbox "$ID" "$@" </dev/null >"$T/ev.$n" 2>"$T/err.$n" &
	SV=$!
	wait_grep "$T/ev.$n" relay.ready
	grep -q relay.ready "$T/ev.$n" && ok "serve $n is ready" ||
		{ fail "serve $n is ready"; cat "$T/err.$n"; }
}
# The shim the agent would run, in the sandbox (a confined sandbox sees
# none of the build tree).
cp "$SHIM" "$H/sandrun-shim"
call() { # call TOOL ARGS: the shim, inside the sandbox
	"$S" sandbox exec "$ID" -- "$H/sandrun-shim" call --relay-dir "$D" --timeout-ms 20000 "$@"
}
stop() { kill "$SV"; wait "$SV" 2>/dev/null; SV=; }

serve --shim "$SHIM" --sweep
wait_grep "$T/ev.1" '"relay.bridge.watch","state":"started"'
grep_in "the shim's watch runs in the sandbox" "$T/ev.1" '"relay.bridge.watch","state":"started"'
expect "a call through the bridge" 0 call echo '{"text":"over the bridge"}'
grep_in "its answer" "$T/out" "over the bridge"
start=$(date +%s%N)
expect "a second call" 0 call echo '{"text":"two"}'
ms=$(( ($(date +%s%N) - start) / 1000000 ))
# Picked up by the watch: far less than the 10 s listing interval.
[ "$ms" -lt 5000 ] && ok "picked up by the watch ($ms ms)" || fail "picked up by the watch ($ms ms)"
expect "a tool error passes through" 1 call fail '{}'
[ "$(ls -A "$D" | grep -v '^\.' | wc -l)" -eq 0 ] && ok "nothing left in the sandbox's directory" ||
	{ fail "nothing left in the sandbox's directory"; ls -la "$D"; }
[ -z "$(ls "$J" | grep -v anchor)" ] && ok "no markers left" || { fail "no markers left"; ls -la "$J"; }

# The watch dies: the bridge says so, lists meanwhile, and watches again.
wpid=
for p in /proc/[0-9]*; do
	case "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" in
	"$SHIM watch --for 3600 $D ") wpid=${p#/proc/}; break ;;
	esac
done
if [ -n "$wpid" ]; then
	kill -9 "$wpid"
	wait_grep "$T/ev.1" '"state":"lost"'
	grep_in "a lost watch is an event" "$T/ev.1" '"relay.bridge.watch","state":"lost"'
	expect "a call while the watch is down" 0 call echo '{"text":"listed"}'
	grep_in "answered" "$T/out" listed
	for _ in $(seq 200); do [ "$(grep -c '"state":"started"' "$T/ev.1")" -ge 2 ] && break; sleep 0.05; done
	[ "$(grep -c '"state":"started"' "$T/ev.1")" -ge 2 ] && ok "the watch is started again" ||
		fail "the watch is started again"
else
	fail "found the shim's watch process"
fi

# The runner dies during a call: the tool ran once; the next runner answers
# the waiting shim with an error and never runs it again.
call slow '{"ms":3000}' >"$T/slow.out" 2>&1 &
CALLER=$!
wait_grep "$CB_LOG" slow
grep_in "the slow call reached its endpoint" "$CB_LOG" slow
kill -9 "$SV"; wait "$SV" 2>/dev/null
ls -a "$D" | grep -q '\.taken$' && ok "the taken request is still there" || fail "the taken request is still there"
serve --shim "$SHIM" --sweep
wait "$CALLER"; rc=$?
[ "$rc" -eq 1 ] && ok "the waiting call got an error (exit 1)" || fail "the waiting call got an error (exit $rc)"
grep_in "saying it is not run again" "$T/slow.out" "not run again"
sleep 3.5 # past the slow tool's 3 s: had it been run again, the log would say so
[ "$(grep -c slow "$CB_LOG")" -eq 1 ] && ok "the tool ran once" || fail "the tool ran once ($(grep -c slow "$CB_LOG"))"
stop

# Leftovers of an earlier runner, planted: a request nobody took, a taken
# one whose answer was delivered (marker), stale answers and temporaries.
printf '{"v":1,"id":"left1","tool":"echo","args":{"text":"x"}}' >"$D/left1.req"
printf '{"v":1,"id":"done1","tool":"echo","args":{"text":"x"}}' >"$D/.done1.taken"
: >"$J/done1.answered"
printf 'old' >"$D/stale.res"
printf 'old' >"$D/.stale.res.tmp"
calls=$(wc -l <"$CB_LOG")
serve --sweep
grep_in "left1 answered" "$D/left1.res" '"status":"error".*not run'
test ! -e "$D/left1.req" && test ! -e "$D/.left1.taken" && ok "left1 taken and cleaned" ||
	fail "left1 taken and cleaned"
test ! -e "$D/.done1.taken" && test ! -e "$D/done1.res" && ok "a delivered one only cleaned" ||
	fail "a delivered one only cleaned"
test ! -e "$D/stale.res" && test ! -e "$D/.stale.res.tmp" && ok "stale files gone" || fail "stale files gone"
[ "$(wc -l <"$CB_LOG")" -eq "$calls" ] && ok "no leftover was run" || fail "no leftover was run"
test ! -e "$J/done1.answered" && ok "markers gone" || fail "markers gone"
rm -f "$D/left1.res"
# Without --shim: listing only (every 10 s while... no watch: every second).
expect "a call found by listing" 0 call echo '{"text":"polled"}'
grep_in "answered" "$T/out" polled
stop

expect "--sandbox needs an absolute directory" 2 "$S" tools serve --tools "$T/tools.json" --relay-dir rel --sandbox "$ID"
expect "--shim needs --sandbox" 2 "$S" tools serve --tools "$T/tools.json" --relay-dir "$D" --shim "$SHIM"
expect "an unknown sandbox" 4 "$S" tools serve --tools "$T/tools.json" --relay-dir "$D" --sandbox sb-0000000000000000
grep_in "names it" "$T/err" "sb-0000000000000000"
expect "destroy" 0 "$S" sandbox destroy "$ID"
finish
