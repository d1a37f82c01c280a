#!/bin/sh
# sandrun-shim against a running relay: MCP over stdio and one-shot calls.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
SHIM=$SANDRUN_SHIM
serve_tools

file "$SHIM" | grep -q "statically linked" && ok "shim is static" || fail "shim is static"
test "$(stat -c %s "$SHIM")" -lt 1572864 && ok "shim under 1.5 MB" || fail "shim under 1.5 MB"
expect "--help" 0 "$SHIM" --help
grep_in "--help documents exit codes" "$T/out" "3 no answer in time"
expect "no relay directory is a usage error" 2 env -u SANDRUN_RELAY_DIR "$SHIM" call noop
expect "a missing relay directory" 5 "$SHIM" call --relay-dir "$T/none" noop

# one-shot calls
expect "call ok" 0 "$SHIM" call --relay-dir "$RELAY" echo '{"text":"hi there"}'
grep_in "call prints the text" "$T/out" "^hi there$"
echo '{"text":"from stdin"}' | expect "arguments from stdin" 0 "$SHIM" call --relay-dir "$RELAY" echo
grep_in "stdin arguments used" "$T/out" "^from stdin$"
expect "tool error exits 1" 1 "$SHIM" call --relay-dir "$RELAY" fail '{}'
expect "unknown tool exits 1" 1 "$SHIM" call --relay-dir "$RELAY" nosuch '{}'
grep_in "unknown tool named" "$T/err" "unknown tool 'nosuch'"
expect "paused exits 4" 4 "$SHIM" call --relay-dir "$RELAY" pick '{}'
expect "bad arguments exit 2" 2 "$SHIM" call --relay-dir "$RELAY" echo '[1]'
mkdir "$T/dead"
SANDRUN_SHIM_TIMEOUT_MS=300 expect "no runner: timeout exits 3" 3 "$SHIM" call --relay-dir "$T/dead" noop '{}'
grep_in "withdrawn" "$T/err" "withdrawn"
test -z "$(ls -A "$T/dead")" && ok "timed-out request withdrawn" || fail "timed-out request withdrawn"

SANDRUN_SHIM_NAMED_TMP=1 expect "call ok through a named temporary (no O_TMPFILE)" 0 \
	"$SHIM" call --relay-dir "$RELAY" echo '{"text":"named"}'
grep_in "named temporary: the text" "$T/out" "^named$"
mkdir "$T/dead2"
printf '%s\n' \
 '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"noop","arguments":{}}}' \
 '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"noop","arguments":{}}}' |
	SANDRUN_SHIM_TIMEOUT_MS=300 "$SHIM" mcp --specs "$T/specs.json" --relay-dir "$T/dead2" >"$T/dead2.out"
test "$(grep -c withdrawn "$T/dead2.out")" -eq 2 && ok "mcp: two calls in flight both withdrawn at their deadline" ||
	fail "mcp: two calls in flight both withdrawn ($(cat "$T/dead2.out"))"
test -z "$(ls -A "$T/dead2")" && ok "mcp: withdrawn requests leave nothing" || fail "mcp: withdrawn requests leave nothing"

# MCP over stdio
mcp() { "$SHIM" mcp --specs "$T/specs.json" --relay-dir "$RELAY" >"$T/mcp.out" 2>"$T/mcp.err"; }
line() { grep -F "\"id\":$1," "$T/mcp.out"; }
printf '%s\n' \
 '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05"}}' \
 '{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2030-01-01"}}' \
 '{"jsonrpc":"2.0","id":3,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}' \
 'this is not json' \
 '{"jsonrpc":"2.0","id":4,"method":"ping"}' \
 '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
 '{"jsonrpc":"2.0","id":5,"method":"no/such"}' \
 '[{"jsonrpc":"2.0","id":6,"method":"ping"}]' \
 '{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"echo","arguments":{"text":"zero"}}}' \
 '{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"nope"}}' | mcp
line 1 | grep -q '"protocolVersion":"2024-11-05"' && ok "known version echoed" || fail "known version echoed"
line 2 | grep -q '"protocolVersion":"2025-11-25"' && ok "unknown version: latest" || fail "unknown version: latest"
line 3 | grep -q '"code":-32601' && ok "server/discover answered -32601" || fail "server/discover answered -32601"
grep -q '"id":null,"error":{"code":-32700' "$T/mcp.out" && ok "bad line -32700" || fail "bad line -32700"
line 4 | grep -q '"result":{}' && ok "ping after a bad line" || fail "ping after a bad line"
line 5 | grep -q '"code":-32601' && ok "unknown method -32601" || fail "unknown method -32601"
grep -q '"code":-32600' "$T/mcp.out" && ok "batch refused -32600" || fail "batch refused -32600"
line 0 | grep -q '"text":"zero"' && ok "id 0 call answered" || fail "id 0 call answered"
grep -F '"id":"s",' "$T/mcp.out" | grep -q -- '-32602' && ok "unknown tool -32602" || fail "unknown tool -32602"
test "$(wc -l <"$T/mcp.out")" -eq 9 && ok "notification not answered" || fail "notification not answered ($(wc -l <"$T/mcp.out") lines)"

# A collected response is kept (under .spare/) as the next request's file:
# a long request, then a short one written over it (truncated, or the
# runner would read the long one's tail), and nothing kept after exit. A
# spare a killed shim left (no lock on it) is removed at start; one a
# running shim holds (locked) stays.
mkdir -p "$RELAY/.spare"
: >"$RELAY/.spare/left"
: >"$RELAY/.spare/held"
flock -x "$RELAY/.spare/held" sleep 60 &
holder=$!
# until the lock is held
for _ in $(seq 100); do flock -n "$RELAY/.spare/held" true 2>/dev/null || break; sleep 0.05; done
longtext=$(printf 'x%.0s' $(seq 2000))
rm -f "$T/mcp.out"
{ echo "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"$longtext\"}}}"
  wait_grep "$T/mcp.out" '"id":1,'
  sleep 0.1; ls "$RELAY/.spare" >"$T/spare.ls"
  echo '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"short"}}}'
  sleep 0.5; } | mcp
line 1 | grep -q "\"text\":\"$longtext\"" && ok "spare: long call answered" || fail "spare: long call answered"
line 2 | grep -q '"text":"short"' && ok "spare: short call over a reused file answered" ||
	fail "spare: short call over a reused file ($(line 2 | cut -c1-200))"
test "$(grep -c "^[0-9a-f]\{16\}$" "$T/spare.ls")" -eq 1 && grep -q "^held$" "$T/spare.ls" &&
	! grep -q "^left$" "$T/spare.ls" && ok "spare: one kept between calls, a dead shim's removed" ||
	fail "spare: one kept between calls, a dead shim's removed ($(tr '\n' ' ' <"$T/spare.ls"))"
test "$(ls "$RELAY/.spare")" = "held" && ok "spare: dropped at exit" ||
	fail "spare: dropped at exit ($(ls "$RELAY/.spare" | tr '\n' ' '))"
# A spare whose name another process took over (a file moved over it) is
# not written into: the call is published from a fresh file, the other
# file left as it is.
rm -f "$T/mcp.out" "$T/moved"
{ echo '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"one"}}}'
  wait_grep "$T/mcp.out" '"id":1,'
  sleep 0.1
  for f in "$RELAY"/.spare/*; do
	[ "${f##*/}" = held ] && continue
	printf 'not yours' >"$T/foreign" && mv "$T/foreign" "$f" && echo "${f##*/}" >"$T/moved"
  done
  echo '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"two"}}}'
  sleep 0.5; } | mcp
line 2 | grep -q '"text":"two"' && ok "spare: taken over by another file: the call still answered" ||
	fail "spare: taken over by another file: the call still answered ($(line 2 | cut -c1-200))"
moved=$(cat "$T/moved" 2>/dev/null)
[ -n "$moved" ] && [ "$(cat "$RELAY/.spare/$moved" 2>/dev/null)" = "not yours" ] &&
	ok "... and the other file left as it was" || fail "... and the other file left as it was ($moved)"
pkill -P "$holder" 2>/dev/null; kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
test -z "$(ls "$RELAY" | grep '\.re[qs]$')" && ok "spare: no request or response left" ||
	fail "spare: no request or response left"
rm -rf "$RELAY/.spare"

# Names of non-ASCII characters, quoted in errors cut at a byte count: every
# request is still answered.
e=$(printf '\303\251')
# 'a' first: a quote of an even number of bytes cuts a character.
long=a$(for _ in $(seq 150); do printf '%s' "$e"; done)
printf '%s\n' \
 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$long\"}" \
 "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"$long\"}}" | mcp
line 1 | grep -q '"code":-32601' && ok "non-ASCII method answered" || fail "non-ASCII method answered"
line 2 | grep -q -- '-32602' && ok "non-ASCII tool answered" || fail "non-ASCII tool answered"

# pagination
printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' \
 '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"4"}}' \
 '{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"x"}}' | SANDRUN_SHIM_PAGE_SIZE=4 mcp
line 1 | grep -q '"nextCursor":"4"' && ok "first page has a cursor" || fail "first page has a cursor"
line 2 | grep -q '"name":"careful"' && ! line 2 | grep -q nextCursor && ok "last page" || fail "last page"
line 3 | grep -q -- '-32602' && ok "invalid cursor -32602" || fail "invalid cursor -32602"

# a slow call does not hold up ping, tools/list or another call
{ echo '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1500}}}'
  sleep 0.3
  echo '{"jsonrpc":"2.0","id":2,"method":"ping"}'
  echo '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"fast"}}}'
  sleep 2.5; } | mcp
first=$(head -n 1 "$T/mcp.out" | sed 's/.*"id":\([0-9]*\).*/\1/')
last=$(tail -n 1 "$T/mcp.out" | sed 's/.*"id":\([0-9]*\).*/\1/')
[ "$first" != 1 ] && [ "$last" = 1 ] && ok "slow call answered last" || fail "slow call answered last (order: $(cut -c1-40 "$T/mcp.out" | tr '\n' ' '))"

# a call that times out while others are in flight: each has its own deadline
{ echo '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1500}}}'
  for i in 2 3 4 5; do
	echo "{\"jsonrpc\":\"2.0\",\"id\":$i,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"e$i\"}}}"
  done; } | SANDRUN_SHIM_TIMEOUT_MS=700 mcp
line 1 | grep -q 'did not answer within 700 ms' && ok "slow call timed out (taken, not withdrawn)" ||
	fail "slow call timed out ($(line 1))"
n=0; for i in 2 3 4 5; do line $i | grep -q "\"text\":\"e$i\"" && n=$((n + 1)); done
[ "$n" = 4 ] && ok "calls in flight beside it answered" || fail "calls in flight beside it answered ($n of 4)"
finish
