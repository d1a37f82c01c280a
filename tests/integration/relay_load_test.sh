#!/bin/sh
# Load: 1,000 calls from 32 concurrent sandrun-shim call processes. Every
# call is answered once with its own text, none runs twice, nothing is left.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
SHIM=$SANDRUN_SHIM
serve_tools

worker() {
	w=$1 n=$2 i=0 bad=0
	while [ "$i" -lt "$n" ]; do
		out=$("$SHIM" call --relay-dir "$RELAY" echo "{\"text\":\"w$w-$i\"}")
		[ "$out" = "w$w-$i" ] || bad=$((bad + 1))
		i=$((i + 1))
	done
	echo "$bad" >"$T/worker.$w"
}
start=$(date +%s%N)
w=0 pids=""
while [ "$w" -lt 32 ]; do
	n=31; [ "$w" -lt 8 ] && n=32   # 8 x 32 + 24 x 31 = 1000
	worker "$w" "$n" &
	pids="$pids $!"
	w=$((w + 1))
done
# shellcheck disable=SC2086
wait $pids   # not a bare wait: the servers run in the background too
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "# 1000 calls from 32 processes in $ms ms"
bad=$(cat "$T"/worker.* | awk '{s += $1} END {print s}')
test "$bad" -eq 0 && ok "every call got its own answer" || fail "every call got its own answer ($bad wrong)"
test "$(wc -l <"$CB_LOG")" -eq 1000 && ok "1000 executions" || fail "1000 executions ($(wc -l <"$CB_LOG"))"
test "$(cut -d' ' -f1 "$CB_LOG" | sort -u | wc -l)" -eq 1000 && ok "no call ran twice" ||
	fail "no call ran twice"
test "$(grep -c '"type":"tool.result"' "$T/events")" -eq 1000 && ok "1000 answers" ||
	fail "1000 answers ($(grep -c '"type":"tool.result"' "$T/events"))"
test -z "$(ls -A "$RELAY")" && ok "relay directory empty" || fail "relay directory empty: $(ls -A "$RELAY" | head -5)"
test -z "$(ls -A "$T/journal" | grep -v "^\.anchor$")" && ok "no claims left" || fail "no claims left"
finish
