# A real agent turn through sandrun, sourced by claude_test.sh, codex_test.sh
# and pi_test.sh (which set HARNESS, BIN, EMULATOR, MODEL_URL_SUFFIX and the
# call() that writes a scripted tool call in the model's wire format).
# Turn 1: the model calls echo (allowed), careful_ok (asked, approved) and
# careful_no (asked, denied), then ends; turn 2 resumes the session.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
S=$SANDRUN_BIN
dir=${SANDRUN_HARNESS_DIR:-}/$HARNESS
command -v node >/dev/null || missing "node is not installed (scripts/check installs it)"
if [ -z "${SANDRUN_HARNESS_DIR:-}" ] || [ ! -x "$dir/node_modules/.bin/$BIN" ]; then
	missing "the $HARNESS adapter is not installed in \$SANDRUN_HARNESS_DIR/$HARNESS (scripts/check installs it with 'sandrun install-harness $HARNESS')"
fi
export SANDRUN_RUNNER_HARNESSES=claude,codex,pi
export "SANDRUN_HARNESS_$(echo "$HARNESS" | tr a-z A-Z)_INSTALL_DIR=$dir"
# sandrun's Node.js runtime, where scripts/harnesses put it when needed.
export SANDRUN_RUNNER_NODE_DIR="$SANDRUN_HARNESS_DIR/node"
drive="node $SANDRUN_SRCDIR/tests/e2e/drive.mjs"
start_callbacks
cat >"$T/tools.json" <<JSON
[{"name":"echo","description":"Echo the text back","permission":"allow",
  "input_schema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},
  "callback":{"url":"$CB_URL"}},
 {"name":"careful_ok","description":"Needs approval","permission":"ask",
  "input_schema":{"type":"object","properties":{}},"callback":{"url":"$CB_URL"}},
 {"name":"careful_no","description":"Needs approval","permission":"ask",
  "input_schema":{"type":"object","properties":{}},"callback":{"url":"$CB_URL"}},
 {"name":"slow","description":"Takes its time","permission":"allow",
  "input_schema":{"type":"object","properties":{"ms":{"type":"integer"}}},"callback":{"url":"$CB_URL"}}]
JSON
printf '[%s,%s,%s,{"text":"all done"},{"text":"second turn ok"},%s,{"text":"after the cancel"}]\n' \
	"$(call echo '{"text":"platform says hi"}')" "$(call careful_ok '{}')" \
	"$(call careful_no '{}')" "$(call slow '{"ms":8000}')" >"$T/script.json"
KEY=$(random_key sk-e2e)
unset ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN OPENAI_API_KEY CODEX_API_KEY
export "$KEY_ENV=$KEY"
# model SCRIPT LOG: the scripted model in the background, wanting $KEY.
# Always started with &: exec makes $! the model's own pid, which the
# kills below reach (the subshell's would leave node running).
model() {
	exec node "$SANDRUN_SRCDIR/tests/emulators/$EMULATOR.mjs" --key "$KEY" --script "$1" --log "$2"
}
model "$T/script.json" "$T/model.ndjson" >"$T/model.out" 2>"$T/model.err" &
model_pid=$!
trap 'kill $model_pid 2>/dev/null; stop_callbacks; rm -rf "$T"' EXIT
wait_for "$T/model.out"
url=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$T/model.out")$MODEL_URL_SUFFIX

start=$(date +%s%N)
expect "turn 1 runs" 0 $drive "$T/ev1" careful_ok careful_no "$S" run --json \
	--harness "$HARNESS" --tools "$T/tools.json" --model-url "$url" "use the tools"
echo "# turn 1: $(( ($(date +%s%N) - start) / 1000000 )) ms"
grep_in "turn 1 ends end_turn" "$T/ev1" '"type":"run.finished","stop_reason":"end_turn"'
test "$(grep -c ' echo$' "$CB_LOG")" -eq 1 && ok "the platform tool ran once" || fail "the platform tool ran once"
test "$(grep -c ' careful_ok$' "$CB_LOG")" -eq 1 && ok "the approved ask ran" || fail "the approved ask ran"
test "$(grep -c ' careful_no$' "$CB_LOG")" -eq 0 && ok "the denied ask did not run" || fail "the denied ask did not run"
grep -E 'tool_result|function_call_output' "$T/model.ndjson" | grep -q "platform says hi" &&
	ok "the tool's result reached the model" || fail "the tool's result reached the model"
grep -E 'tool_result|function_call_output' "$T/model.ndjson" | grep -q "permission denied" &&
	ok "the model saw the refusal" || fail "the model saw the refusal"
grep_in "permission asked for careful_no" "$T/ev1" '"type":"permission.request".*"tool":"careful_no"'
grep_in "the final text arrives" "$T/ev1" '"type":"agent.message","text":"all done"'
session=$(sed -n 's/.*"type":"run.started","session":"\([^"]*\)".*/\1/p' "$T/ev1")
model_got_key "turn 1: the model got exactly the run's $KEY_ENV" "$T/model.ndjson" "$KEY"

expect "turn 2 resumes the session" 0 $drive "$T/ev2" - - "$S" run --json \
	--session "$session" --tools "$T/tools.json" --model-url "$url" "and then?"
grep_in "turn 2 is turn 2" "$T/ev2" '"turn":2'
grep_in "same sandbox" "$T/ev2" '"how":"reconnected"'
grep_in "turn 2 answers" "$T/ev2" '"type":"agent.message","text":"second turn ok"'
if [ "$LOADS" = yes ]; then
	grep_in "resumed with session/load" "$T/ev2" '"method":"session/load"'
fi

if [ "${HTTP_TOOLS:-}" = yes ]; then
	# Tools through the loopback MCP server (Streamable HTTP, bearer).
	printf '[%s,{"text":"http done"}]\n' "$(call echo '{"text":"over http"}')" >"$T/script2.json"
	model "$T/script2.json" "$T/model2.ndjson" >"$T/model2.out" 2>/dev/null &
	model2_pid=$!
	wait_for "$T/model2.out"
	url2=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$T/model2.out")$MODEL_URL_SUFFIX
	SANDRUN_HARNESS_CLAUDE_TOOLS=http expect "a turn with tools over HTTP" 0 $drive "$T/ev4" - - \
		"$S" run --json --tools "$T/tools.json" --model-url "$url2" "use http"
	kill $model2_pid 2>/dev/null
	grep -E 'tool_result' "$T/model2.ndjson" | grep -q "over http" &&
		ok "the HTTP tool's result reached the model" || fail "the HTTP tool's result reached the model"
	test "$(grep -c ' echo$' "$CB_LOG")" -eq 2 && ok "it ran through the relay" || fail "it ran through the relay"
	grep -q '"call_id":"h' "$T/ev4" && ok "as an in-process relay call" || fail "as an in-process relay call"
fi

# The relay through the provider's operations (as for a remote sandbox):
# the shim uploaded, the relay directory in the sandbox, the bridge.
printf '[%s,{"text":"bridged done"}]\n' "$(call echo '{"text":"through the bridge"}')" >"$T/script5.json"
model "$T/script5.json" "$T/model5.ndjson" >"$T/model5.out" 2>/dev/null &
model5_pid=$!
wait_for "$T/model5.out"
url5=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$T/model5.out")$MODEL_URL_SUFFIX
calls=$(grep -c ' echo$' "$CB_LOG")
SANDRUN_RUNNER_RELAY_TRANSPORT=provider expect "a turn with the relay through the provider" 0 \
	$drive "$T/ev5" - - "$S" run --json --harness "$HARNESS" --tools "$T/tools.json" \
	--model-url "$url5" "use the bridge"
kill $model5_pid 2>/dev/null
grep -E 'tool_result|function_call_output' "$T/model5.ndjson" | grep -q "through the bridge" &&
	ok "the bridged tool's result reached the model" || fail "the bridged tool's result reached the model"
test "$(grep -c ' echo$' "$CB_LOG")" -eq $((calls + 1)) && ok "it ran once" || fail "it ran once"
grep_in "the shim's watch ran in the sandbox" "$T/ev5" '"relay.bridge.watch","state":"started"'

# Each other credential name the harness declares reaches the model too.
for other in ${OTHER_KEY_ENVS:-}; do
	printf '[{"text":"%s works"}]\n' "$other" >"$T/script6.json"
	model "$T/script6.json" "$T/model6.ndjson" >"$T/model6.out" 2>/dev/null &
	model6_pid=$!
	wait_for "$T/model6.out"
	url6=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$T/model6.out")$MODEL_URL_SUFFIX
	expect "a turn with only $other" 0 env -u "$KEY_ENV" "$other=$KEY" $drive "$T/ev6" - - \
		"$S" run --json --harness "$HARNESS" --model-url "$url6" "which key?"
	kill $model6_pid 2>/dev/null
	grep_in "it ends end_turn" "$T/ev6" '"type":"run.finished","stop_reason":"end_turn"'
	model_got_key "only $other: the model got exactly it" "$T/model6.ndjson" "$KEY"
	rm -f "$T/model6.ndjson"
done

# Ctrl-C while a platform tool runs.
INTERRUPT_ON=tool.call expect "Ctrl-C during a tool call" 130 $drive "$T/ev3" - - "$S" run --json \
	--session "$session" --tools "$T/tools.json" --model-url "$url" "be slow"
grep_in "the turn ends cancelled" "$T/ev3" '"stop_reason":"cancelled"'
finish
