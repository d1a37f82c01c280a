#!/bin/sh
# Back-pressure toward a tool endpoint: 10,000 concurrent calls, from 40
# sandrun-shim mcp processes with 250 calls in flight each, against one
# callback server (tests/helpers/callback_server, a thread per connection).
# The runner caps the callbacks per endpoint, queues the rest and reuses
# connections: every call succeeds, each with its own answer, once.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
SHIM=$SANDRUN_SHIM
PROCS=40 PER=250
# Under the sanitizers everything runs several times slower: a lighter
# load, the same checks.
grep -q '^#define SR_SANITIZE' "$SANDRUN_BUILDDIR/config.h" 2>/dev/null && PER=100
TOTAL=$((PROCS * PER))
# The calls queue for the endpoint: on a loaded 2-core machine the last of
# them may wait long, so the tool allows two minutes (a queued call's
# timeout counts from when it was queued).
start_callbacks
write_tools "$T/tools.json"
sed -i 's|"callback":{"url":"\([^"]*\)"}},|"callback":{"url":"\1","timeout_ms":120000}},|' "$T/tools.json"
grep -q '"timeout_ms":120000' "$T/tools.json" || { echo "FAIL: the tools file was not adjusted"; exit 1; }
start_serve
trap 'stop_serve; stop_callbacks; rm -rf "$T"' EXIT

shim() { # shim W: PER calls at once, stdin held open until all are answered
	w=$1
	{
		i=0
		while [ "$i" -lt "$PER" ]; do
			printf '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"w%d-%d"}}}\n' \
				"$i" "$w" "$i"
			i=$((i + 1))
		done
		end=$(($(date +%s) + 150))
		while [ "$(wc -l <"$T/shim.$w" 2>/dev/null || echo 0)" -lt "$PER" ] && [ "$(date +%s)" -lt "$end" ]; do
			sleep 0.2
		done
	} | "$SHIM" mcp --specs "$T/specs.json" --relay-dir "$RELAY" >"$T/shim.$w" 2>"$T/shim.$w.err"
}
start=$(date +%s%N)
w=0 pids=""
while [ "$w" -lt "$PROCS" ]; do
	: >"$T/shim.$w"
	shim "$w" &
	pids="$pids $!"
	w=$((w + 1))
done
# shellcheck disable=SC2086
wait $pids
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "# $TOTAL calls from $PROCS shim processes in $ms ms"
good=0
w=0
while [ "$w" -lt "$PROCS" ]; do
	n=$(sed -n 's/^{"jsonrpc":"2.0","id":\([0-9]*\),"result":{"content":\[{"type":"text","text":"w'"$w"'-\([0-9]*\)"}\],"isError":false}}$/\1 \2/p' \
		"$T/shim.$w" | awk '$1 == $2' | sort -u | wc -l)
	good=$((good + n))
	w=$((w + 1))
done
test "$good" -eq "$TOTAL" && ok "every call succeeded with its own answer" ||
	fail "every call succeeded with its own answer ($good of $TOTAL; e.g. $(grep -h -v '"isError":false' "$T"/shim.[0-9]* | head -n 2))"
test "$(wc -l <"$CB_LOG")" -eq "$TOTAL" && ok "$TOTAL executions" || fail "$TOTAL executions ($(wc -l <"$CB_LOG"))"
test -z "$(cut -d' ' -f1 "$CB_LOG" | sort | uniq -d | head -n 1)" && ok "no call ran twice" ||
	fail "no call ran twice ($(cut -d' ' -f1 "$CB_LOG" | sort | uniq -d | head -n 3))"
test "$(grep -c '"type":"tool.result"' "$T/events")" -eq "$TOTAL" && ok "$TOTAL answers" ||
	fail "$TOTAL answers ($(grep -c '"type":"tool.result"' "$T/events"))"
test "$(grep '"type":"tool.result"' "$T/events" | grep -c '"is_error":true')" -eq 0 &&
	ok "no tool errors" || fail "no tool errors ($(grep '"is_error":true' "$T/events" | head -n 1))"
test "$ms" -lt 150000 && ok "done in under 150 s" || fail "done in under 150 s ($ms ms)"
test -z "$(ls -A "$RELAY")" && ok "relay directory empty" || fail "relay directory empty: $(ls -A "$RELAY" | head -5)"
test -z "$(ls -A "$T/journal" | grep -v "^\.anchor$")" && ok "no claims left" || fail "no claims left"
finish
