#!/bin/sh
# Back-pressure toward a tool endpoint: 10,000 concurrent calls, from 40
# sandrun-shim mcp processes with 250 calls in flight each, against one
# callback server (tests/helpers/callback_server, a thread per connection).
# The runner caps the callbacks per endpoint, queues the rest and reuses
# connections: every call succeeds, each with its own answer, once.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
SHIM=$SANDRUN_SHIM
PROCS=40 PER=250
TOTAL=$((PROCS * PER))
serve_tools

shim() { # shim W: PER calls at once, stdin held open until all are answered
	w=$1
	{
		i=0
		while [ "$i" -lt "$PER" ]; do
			printf '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"w%d-%d"}}}\n' \
				"$i" "$w" "$i"
			i=$((i + 1))
		done
		end=$(($(date +%s) + 50))
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
test "$(cut -d' ' -f1 "$CB_LOG" | sort -u | wc -l)" -eq "$TOTAL" && ok "no call ran twice" ||
	fail "no call ran twice"
test "$(grep -c '"type":"tool.result"' "$T/events")" -eq "$TOTAL" && ok "$TOTAL answers" ||
	fail "$TOTAL answers ($(grep -c '"type":"tool.result"' "$T/events"))"
test "$(grep '"type":"tool.result"' "$T/events" | grep -c '"is_error":true')" -eq 0 &&
	ok "no tool errors" || fail "no tool errors ($(grep '"is_error":true' "$T/events" | head -n 1))"
test "$ms" -lt 50000 && ok "done in under 50 s" || fail "done in under 50 s ($ms ms)"
test -z "$(ls -A "$RELAY")" && ok "relay directory empty" || fail "relay directory empty: $(ls -A "$RELAY" | head -5)"
test -z "$(ls -A "$T/journal" | grep -v "^\.anchor$")" && ok "no claims left" || fail "no claims left"
finish
