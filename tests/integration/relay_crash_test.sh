#!/bin/sh
# Crash cases: a shim killed after publishing, a runner killed after
# claiming. Every published request is answered once; no tool runs twice.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
SHIM=$SANDRUN_SHIM
serve_tools

# 1. The shim dies after publishing, while the tool runs.
"$SHIM" call --relay-dir "$RELAY" slow '{"ms":1200}' >/dev/null 2>&1 &
shim=$!
for _ in $(seq 100); do [ -s "$CB_LOG" ] && break; sleep 0.02; done
kill -9 "$shim"
wait "$shim" 2>/dev/null
id=$(cut -d' ' -f1 "$CB_LOG")
sleep 1.6
test "$(wc -l <"$CB_LOG")" -eq 1 && ok "tool ran once" || fail "tool ran once ($(wc -l <"$CB_LOG"))"
test -f "$RELAY/$id.res" && ok "the orphan request was still answered" || fail "the orphan request was still answered"
test "$(grep -c "\"tool.result\",\"call_id\":\"$id\"" "$T/events")" -eq 1 &&
	ok "answered exactly once" || fail "answered exactly once"

# 2. The runner dies after claiming; a restarted one answers, never re-runs.
: >"$CB_LOG"
"$SHIM" call --relay-dir "$RELAY" slow '{"ms":1500}' >"$T/call.out" 2>"$T/call.err" &
shim=$!
for _ in $(seq 100); do [ -n "$(ls "$T/journal" 2>/dev/null)" ] && [ -s "$CB_LOG" ] && break; sleep 0.02; done
test -n "$(ls "$T/journal")" && ok "claim recorded in the journal" || fail "claim recorded in the journal"
stop_serve -KILL
sleep 1.8   # the callback finishes on its own; nobody is there to answer
start_serve
wait "$shim"
rc=$?
test "$rc" -eq 1 && ok "the waiting shim got an answer (exit 1)" || fail "the waiting shim got an answer (exit $rc)"
grep_in "the answer says interrupted" "$T/call.err" "interrupted"
sleep 0.5
test "$(wc -l <"$CB_LOG")" -eq 1 && ok "the tool was not run again" || fail "the tool was not run again ($(wc -l <"$CB_LOG"))"
test -z "$(ls -A "$T/journal" | grep -v "^\.anchor$")" && ok "no claim left" || fail "no claim left"
grep -q tool.interrupted "$T/events" && ok "interrupted event" || fail "interrupted event"

# 3. The restarted runner works normally.
expect "calls after the restart" 0 "$SHIM" call --relay-dir "$RELAY" echo '{"text":"after"}'
grep_in "and answer" "$T/out" "^after$"
finish
