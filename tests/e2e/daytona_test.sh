#!/bin/sh
# Turns on provider = daytona against the Daytona emulator
# (tests/emulators/daytona.mjs) with the real claude adapter and the
# scripted model: a platform tool through the relay bridge, a second turn
# on the parked sandbox, failed reads of the agent's output, a runner killed mid-call,
# and the janitor.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
S=$SANDRUN_BIN
HARNESS=claude
dir=${SANDRUN_HARNESS_DIR:-}/claude
command -v node >/dev/null || missing "node is not installed (scripts/check installs it)"
if [ -z "${SANDRUN_HARNESS_DIR:-}" ] || [ ! -x "$dir/node_modules/.bin/claude-agent-acp" ]; then
	missing "the claude adapter is not installed in \$SANDRUN_HARNESS_DIR/claude (scripts/check installs it)"
fi
export SANDRUN_RUNNER_HARNESSES=claude
export SANDRUN_HARNESS_CLAUDE_INSTALL_DIR="$dir"
# The emulator's sandboxes are directories on this host: the adapters are
# where install-harness put them, not in an image's /opt/sandrun.
export SANDRUN_RUNNER_REMOTE_HARNESS_DIR="$SANDRUN_HARNESS_DIR"
export SANDRUN_RUNNER_PROVIDER=daytona
# The scripted model listens on http://127.0.0.1: no credential binding
# may go there, so this test runs without Daytona secrets (the keys go
# into the sandbox's environment, as on a provider that cannot hide them;
# tests/e2e/daytona_secrets_test.sh and daytona_isolation_test.sh cover
# secrets).
export SANDRUN_PROVIDER_DAYTONA_SECRETS=off
drive="node $SANDRUN_SRCDIR/tests/e2e/drive.mjs"
field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p" "$2" | head -n 1; }

node "$SANDRUN_SRCDIR/tests/emulators/daytona.mjs" --state-dir "$T/emu" --api-key dtn-test-key \
	>"$T/emu.out" 2>"$T/emu.err" &
emu_pid=$!
start_callbacks
trap 'kill $emu_pid $model_pid 2>/dev/null; stop_callbacks; rm -rf "$T"' EXIT
wait_for "$T/emu.out"
export SANDRUN_PROVIDER_DAYTONA_API_URL="$(field apiUrl "$T/emu.out")"
export SANDRUN_PROVIDER_DAYTONA_API_KEY=dtn-test-key
admin=$(field adminUrl "$T/emu.out")
[ -n "$admin" ] && ok "the emulator runs" || { fail "the emulator runs"; cat "$T/emu.err"; finish; exit 1; }

cat >"$T/tools.json" <<JSON
[{"name":"echo","description":"Echo the text back","permission":"allow",
  "input_schema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},
  "callback":{"url":"$CB_URL"}},
 {"name":"slow","description":"Takes its time","permission":"allow",
  "input_schema":{"type":"object","properties":{"ms":{"type":"integer"}}},
  "callback":{"url":"$CB_URL","timeout_ms":30000}}]
JSON
# A random key, which the scripted models want (401 to any other).
ANTHROPIC_API_KEY=$(random_key sk-ant)
export ANTHROPIC_API_KEY
call() { printf '{"tool_use":{"name":"mcp__sandrun-tools__%s","input":%s}}' "$1" "$2"; }
printf '[%s,{"text":"all done"},{"text":"second turn ok"},%s,{"text":"slow done"},%s,{"text":"never"},{"text":"after the restart"}]\n' \
	"$(call echo '{"text":"platform says hi"}')" "$(call slow '{"ms":3000}')" \
	"$(call slow '{"ms":4000}')" >"$T/script.json"
node "$SANDRUN_SRCDIR/tests/emulators/anthropic.mjs" --key "$ANTHROPIC_API_KEY" --script "$T/script.json" \
	--log "$T/model.ndjson" >"$T/model.out" 2>"$T/model.err" &
model_pid=$!
wait_for "$T/model.out"
url=$(field url "$T/model.out")

expect "turn 1 on daytona" 0 $drive "$T/ev1" - - "$S" run --json --tools "$T/tools.json" \
	--model-url "$url" "use the tools"
grep_in "turn 1 ends end_turn" "$T/ev1" '"type":"run.finished","stop_reason":"end_turn"'
grep_in "a sandbox was created" "$T/ev1" '"type":"sandbox.acquired","how":"created"'
grep_in "the tool came through the bridge" "$T/ev1" '"relay.bridge.watch","state":"started"'
test "$(grep -c ' echo$' "$CB_LOG")" -eq 1 && ok "the platform tool ran once" || fail "the platform tool ran once"
grep 'tool_result' "$T/model.ndjson" | grep -q "platform says hi" &&
	ok "the tool's result reached the model" || fail "the tool's result reached the model"
model_got_key "the model got exactly the run's key" "$T/model.ndjson" "$ANTHROPIC_API_KEY"
session=$(field session "$T/ev1")
box=$(sed -n 's/.*"type":"run.finished".*"sandbox":"\([^"]*\)".*/\1/p' "$T/ev1")

shim_file=$(find "$T/emu" -path '*/.sandrun/bin/sandrun-shim' -type f | head -n 1)
shim_inode=$(stat -c %i "$shim_file" 2>/dev/null)
curl -s -X DELETE "$admin/calls" >/dev/null
expect "turn 2 resumes" 0 $drive "$T/ev2" - - "$S" run --json --session "$session" \
	--tools "$T/tools.json" --model-url "$url" "and then?"
curl -s "$admin/calls" >"$T/calls2.json"
echo "# turn 2's provider API calls: $(cat "$T/calls2.json")"
# The session recorded which shim the sandbox has: listed, not uploaded
# again, and no 'uname -m' session.
[ -n "$shim_inode" ] && [ "$(stat -c %i "$shim_file" 2>/dev/null)" = "$shim_inode" ] &&
	ok "turn 2 kept the shim in place" || fail "turn 2 kept the shim in place ($shim_file)"
grep -q '"POST /toolbox/{id}/process/session":2,' "$T/calls2.json" &&
	ok "turn 2 opened two sessions (agent, watch), none for uname" ||
	fail "turn 2 opened two sessions (agent, watch), none for uname"
grep_in "the parked sandbox is reconnected" "$T/ev2" '"type":"sandbox.acquired","how":"reconnected"'
grep_in "it was stopped and started again" "$T/ev2" '"state":"stopped","operation":"reconnect"'
grep_in "session/load" "$T/ev2" '"method":"session/load"'
grep_in "turn 2 answers" "$T/ev2" '"text":"second turn ok"'

# Reads of the agent's output fail while a tool runs: read again, the turn
# goes on, the tool ran once. Before it, the shim the session recorded is
# removed from the sandbox: the turn finds it missing and uploads it.
rm -f "$shim_file"
$drive "$T/ev3" - - "$S" run --json --session "$session" --tools "$T/tools.json" \
	--model-url "$url" "be slow" >/dev/null 2>&1 &
runner=$!
wait_grep "$T/ev3" '"type":"tool.call"'
curl -s -X POST -H 'Content-Type: application/json' \
	--data '{"route":"GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs","status":502,"count":3}' \
	"$admin/faults" | grep -q '"status":502' && ok "reads of the agent's output fail" || fail "reads of the agent's output fail"
wait $runner; rc=$?
[ "$rc" -eq 0 ] && ok "the turn survived the drop" || fail "the turn survived the drop (exit $rc)"
[ -x "$shim_file" ] && ok "a missing shim was uploaded again" || fail "a missing shim was uploaded again"
grep_in "its answer" "$T/ev3" '"text":"slow done"'
test "$(grep -c ' slow$' "$CB_LOG")" -eq 1 && ok "the slow tool ran once" || fail "the slow tool ran once"

# The runner is killed during a call; the next turn answers what was left
# in the sandbox and never runs the tool again.
$drive "$T/ev4" - - "$S" run --json --session "$session" --tools "$T/tools.json" \
	--model-url "$url" "be slower" >/dev/null 2>&1 &
runner=$!
for _ in $(seq 300); do [ "$(grep -c ' slow$' "$CB_LOG")" -ge 2 ] && break; sleep 0.05; done
kill_tree "$runner"
sleep 4.5 # the killed call's tool finishes; had anything run it again, the log would say so
expect "a turn after the killed one" 0 $drive "$T/ev5" - - "$S" run --json --session "$session" \
	--tools "$T/tools.json" --model-url "$url" "again"
test "$(grep -c ' slow$' "$CB_LOG")" -eq 2 && ok "no tool ran twice" || fail "no tool ran twice"
grep_in "the killed runner's agent and watch were ended" "$T/err" "ended [0-9]* session(s) of an earlier runner"
grep_in "the turn after the kill answers" "$T/ev5" '"type":"run.finished"'

# The provider answers 503 while the session's sandbox is reconnected: a
# transient failure, exit 75, the session kept; the turn then goes through.
curl -s -X POST -H 'Content-Type: application/json' \
	--data '{"route":"GET /api/sandbox/{id}","status":503,"count":1}' "$admin/faults" >/dev/null
printf '[{"text":"retried ok"}]\n' >"$T/script-retry.json"
node "$SANDRUN_SRCDIR/tests/emulators/anthropic.mjs" --key "$ANTHROPIC_API_KEY" --script "$T/script-retry.json" \
	>"$T/model-retry.out" 2>/dev/null &
retry_pid=$!
wait_for "$T/model-retry.out"
expect "a 503 on reconnect is transient (exit 75)" 75 $drive "$T/ev6" - - "$S" run --json \
	--session "$session" --model-url "$(field url "$T/model-retry.out")" "once more"
grep_in "run.failed says retryable" "$T/ev6" '"code":"sandbox_unavailable".*"retryable":true'
"$SANDRUN_SESSION_TOOL" "$SANDRUN_RUNNER_STATE_DIR" get "$session" >/dev/null && ok "the session is kept" ||
	fail "the session is kept"
expect "the same turn again" 0 $drive "$T/ev7" - - "$S" run --json --session "$session" \
	--model-url "$(field url "$T/model-retry.out")" "once more"
grep_in "it answers" "$T/ev7" '"text":"retried ok"'
kill $retry_pid 2>/dev/null

# The toolbox fails (500) while the bridge puts and publishes a call's
# answer: retried, answered once, the tool run once.
printf '[%s,{"text":"faulted done"}]\n' "$(call slow '{"ms":2000}')" >"$T/script-fault.json"
node "$SANDRUN_SRCDIR/tests/emulators/anthropic.mjs" --key "$ANTHROPIC_API_KEY" --script "$T/script-fault.json" \
	--log "$T/model-fault.ndjson" >"$T/model-fault.out" 2>/dev/null &
fault_pid=$!
wait_for "$T/model-fault.out"
slows=$(grep -c ' slow$' "$CB_LOG")
$drive "$T/ev8" - - "$S" run --json --session "$session" --tools "$T/tools.json" \
	--model-url "$(field url "$T/model-fault.out")" "despite faults" >/dev/null 2>"$T/err8" &
runner=$!
for _ in $(seq 400); do [ "$(grep -c ' slow$' "$CB_LOG")" -gt "$slows" ] && break; sleep 0.05; done
curl -s -X POST -H 'Content-Type: application/json' \
	--data '[{"route":"POST /toolbox/{id}/files/bulk-upload","status":500,"count":1},{"route":"POST /toolbox/{id}/files/move","status":503,"count":2}]' \
	"$admin/faults" >/dev/null
wait $runner; rc=$?
kill $fault_pid 2>/dev/null
[ "$rc" -eq 0 ] && ok "a tool call answered through toolbox faults" ||
	{ fail "a tool call answered through toolbox faults (exit $rc)"; tail -5 "$T/err8"; }
grep 'tool_result' "$T/model-fault.ndjson" | grep -q '"ok"' &&
	ok "its result reached the model" || fail "its result reached the model"
test "$(grep -c ' slow$' "$CB_LOG")" -eq $((slows + 1)) && ok "the tool ran once" || fail "the tool ran once"
curl -s "$admin/faults" | grep -q '"count":[1-9]' && fail "every fault was hit" || ok "every fault was hit"

# The sandbox is stopped (through the API, as an operator or auto-stop
# would) while a tool runs: the turn fails loudly and does not hang; the
# next turn starts it again, answers the call left there, and nothing ran
# twice.
printf '[%s,{"text":"after the stop"},{"text":"after the stop"}]\n' "$(call slow '{"ms":2500}')" >"$T/script-stop.json"
node "$SANDRUN_SRCDIR/tests/emulators/anthropic.mjs" --key "$ANTHROPIC_API_KEY" --script "$T/script-stop.json" \
	>"$T/model-stop.out" 2>/dev/null &
stop_pid=$!
wait_for "$T/model-stop.out"
slows=$(grep -c ' slow$' "$CB_LOG")
start=$(date +%s)
$drive "$T/ev9" - - "$S" run --json --session "$session" --tools "$T/tools.json" \
	--model-url "$(field url "$T/model-stop.out")" "slow, then stopped" >/dev/null 2>&1 &
runner=$!
for _ in $(seq 400); do [ "$(grep -c ' slow$' "$CB_LOG")" -gt "$slows" ] && break; sleep 0.05; done
curl -s -X POST -H "Authorization: Bearer dtn-test-key" \
	"$SANDRUN_PROVIDER_DAYTONA_API_URL/sandbox/$box/stop" >/dev/null
wait $runner; rc=$?
[ "$rc" -ne 0 ] && ok "a sandbox stopped mid-call fails the turn (exit $rc)" ||
	fail "a sandbox stopped mid-call fails the turn"
[ $(( $(date +%s) - start )) -lt 90 ] && ok "without hanging" || fail "without hanging"
grep_in "the failure is said" "$T/ev9" '"type":"run.failed"'
expect "the next turn starts it again" 0 $drive "$T/ev10" - - "$S" run --json --session "$session" \
	--tools "$T/tools.json" --model-url "$(field url "$T/model-stop.out")" "go on"
grep_in "and answers" "$T/ev10" '"text":"after the stop"'
sleep 3 # past the slow tool's 2.5 s: had anything run it again, the log would say so
test "$(grep -c ' slow$' "$CB_LOG")" -eq $((slows + 1)) && ok "the stopped call's tool ran once" ||
	fail "the stopped call's tool ran once"
kill $stop_pid 2>/dev/null

# Codex and Pi on Daytona: one turn each with a platform tool (Pi through
# its extension, which runs the uploaded shim's `call`).
for h in codex pi; do
	if [ ! -x "$SANDRUN_HARNESS_DIR/$h/node_modules/.bin/$h-acp" ]; then
		[ "${CI:-}" = true ] && fail "the $h adapter is installed (CI=true)" ||
			echo "skip - $h on daytona: the adapter is not installed"
		continue
	fi
	case $h in
	codex) fc='{"function_call":{"namespace":"mcp__sandrun-tools","name":"echo","arguments":{"text":"from codex on daytona"}}}'
		sfx=/v1 ;;
	pi) fc='{"function_call":{"name":"echo","arguments":{"text":"from pi on daytona"}}}'
		sfx= ;;
	esac
	printf '[%s,{"text":"%s done"}]\n' "$fc" "$h" >"$T/script-$h.json"
	oai_key=$(random_key "sk-dtn-$h")
	node "$SANDRUN_SRCDIR/tests/emulators/openai.mjs" --key "$oai_key" --script "$T/script-$h.json" \
		--log "$T/model-$h.ndjson" >"$T/model-$h.out" 2>/dev/null &
	oai_pid=$!
	wait_for "$T/model-$h.out"
	HARNESS_UP=$(echo "$h" | tr a-z A-Z)
	env OPENAI_API_KEY="$oai_key" SANDRUN_RUNNER_HARNESSES=claude,codex,pi \
		"SANDRUN_HARNESS_${HARNESS_UP}_INSTALL_DIR=$SANDRUN_HARNESS_DIR/$h" \
		$drive "$T/ev-$h" - - "$S" run --json --harness "$h" --tools "$T/tools.json" \
		--model-url "$(field url "$T/model-$h.out")$sfx" "use the tool" >"$T/out" 2>"$T/err"
	rc=$?
	kill $oai_pid 2>/dev/null
	[ "$rc" -eq 0 ] && ok "a $h turn on daytona" || { fail "a $h turn on daytona (exit $rc)"; tail -5 "$T/err"; }
	grep -E 'function_call_output|tool_result' "$T/model-$h.ndjson" | grep -q "from $h on daytona" &&
		ok "$h: the tool's result reached the model" || fail "$h: the tool's result reached the model"
	model_got_key "$h: the model got exactly the run's key" "$T/model-$h.ndjson" "$oai_key"
	[ -n "$(field sandbox "$T/ev-$h")" ] && "$S" sandbox destroy "$(sed -n 's/.*"type":"run.finished".*"sandbox":"\([^"]*\)".*/\1/p' "$T/ev-$h")" >/dev/null 2>&1
done

# Cleanup: the session's sandbox is kept, then, once nothing points at it,
# deleted by the janitor.
expect "sandbox list" 0 "$S" sandbox list
grep_in "the run's sandbox is listed" "$T/out" "^$box .*$session"
expect "janitor keeps what a session points at" 0 "$S" janitor --grace 0
grep_in "kept" "$T/out" "^kept  *$box .*its session points at it"
"$SANDRUN_SESSION_TOOL" "$SANDRUN_RUNNER_STATE_DIR" rm "$session" || fail "the session is forgotten"
expect "janitor deletes the rest" 0 "$S" janitor --grace 0
grep_in "deleted" "$T/out" "^deleted  *$box"
expect "nothing of this runner is left" 0 "$S" sandbox list --json
grep_in "an empty list" "$T/out" '^\[\]$'
curl -s "$admin/calls" >"$T/calls.json"
echo "# provider API calls over the whole test: $(cat "$T/calls.json")"
finish
