#!/bin/sh
# sandrund on provider = daytona (the Daytona emulator) with the real
# Claude Code adapter and the scripted model: a turn with a platform tool
# (through the relay bridge), then the session's next turn on the sandbox
# the warm pool kept running, with the agent it kept: no provider call to
# acquire the sandbox (no create, get or start), no new agent, the tool
# still through the bridge; then a stop that parks it stopped.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
command -v node >/dev/null || missing "node is not installed"
command -v curl >/dev/null || missing "curl is not installed"
dir=${SANDRUN_HARNESS_DIR:-}/claude
if [ -z "${SANDRUN_HARNESS_DIR:-}" ] || [ ! -x "$dir/node_modules/.bin/claude-agent-acp" ]; then
	missing "the claude adapter is not installed in \$SANDRUN_HARNESS_DIR/claude (scripts/check installs it)"
fi
export SANDRUN_RUNNER_HARNESSES=claude
export SANDRUN_HARNESS_CLAUDE_INSTALL_DIR="$dir"
export SANDRUN_RUNNER_REMOTE_HARNESS_DIR="$SANDRUN_HARNESS_DIR"
export SANDRUN_RUNNER_PROVIDER=daytona
# (The scripted model is on 127.0.0.1: no Daytona secrets, as in
# tests/e2e/daytona_test.sh.)
export SANDRUN_PROVIDER_DAYTONA_SECRETS=off
field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p" "$2" | head -n 1; }
get() {
	node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
		const v = process.argv[2].split(".").reduce((o, k) => o == null ? o : o[k], j);
		console.log(v === undefined || v === null ? "" : v)' "$1" "$2"
}

node "$SANDRUN_SRCDIR/tests/emulators/daytona.mjs" --state-dir "$T/emu" --api-key dtn-test-key \
	>"$T/emu.out" 2>"$T/emu.err" &
emu_pid=$!
start_callbacks
svc=
trap 'kill $emu_pid $model_pid $svc 2>/dev/null; stop_callbacks; rm -rf "$T"' EXIT
wait_for "$T/emu.out"
export SANDRUN_PROVIDER_DAYTONA_API_URL="$(field apiUrl "$T/emu.out")"
export SANDRUN_PROVIDER_DAYTONA_API_KEY=dtn-test-key
admin=$(field adminUrl "$T/emu.out")
[ -n "$admin" ] && ok "the emulator runs" || { fail "the emulator runs"; cat "$T/emu.err"; finish; exit 1; }
call() { printf '{"tool_use":{"name":"mcp__sandrun-tools__%s","input":%s}}' "$1" "$2"; }
cat >"$T/tools.json" <<JSON
[{"name":"echo","description":"Echo the text back","permission":"allow",
  "input_schema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},
  "callback":{"url":"$CB_URL"}}]
JSON
printf '[%s,{"text":"all done"},%s,{"text":"warm turn ok"},{"text":"replica turn ok"}]\n' \
	"$(call echo '{"text":"first"}')" "$(call echo '{"text":"from the warm agent"}')" >"$T/script.json"
# A random key, which the scripted model wants (401 to any other).
ANTHROPIC_API_KEY=$(random_key sk-ant)
export ANTHROPIC_API_KEY
node "$SANDRUN_SRCDIR/tests/emulators/anthropic.mjs" --key "$ANTHROPIC_API_KEY" --script "$T/script.json" \
	--log "$T/model.ndjson" >"$T/model.out" 2>"$T/model.err" &
model_pid=$!
wait_for "$T/model.out"
MODEL=$(field url "$T/model.out")
# The requests name the model's URL and bring no credentials: the
# service's own key goes there because the operator lists its host.
MODEL_HOST=$(echo "$MODEL" | sed 's|^http://||; s|/.*||')
SANDRUN_SERVICE_MODEL_HOSTS="other.example,$MODEL_HOST" \
	SANDRUN_SERVICE_LISTEN="unix:$T/sock" "$SANDRUN_BUILDDIR/sandrund" >"$T/svc.log" 2>&1 &
svc=$!
wait_grep "$T/svc.log" "listening on"
grep -q "listening on" "$T/svc.log" && ok "sandrund listens" || { fail "sandrund listens"; cat "$T/svc.log"; finish; exit 1; }
api() { curl -s -N --unix-socket "$T/sock" "$@"; }
body() { # body [SESSION]
	node -e 'const b = {prompt: "go", tools: JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")),
		model: {url: process.argv[2]}}; if (process.argv[3]) b.session = process.argv[3];
		console.log(JSON.stringify(b))' "$T/tools.json" "$MODEL" "${1:-}"
}

api --data "$(body)" http://sandrund/v1/runs >"$T/ev1"
grep_in "turn 1 on daytona through sandrund" "$T/ev1" '"type":"run.finished","stop_reason":"end_turn"'
grep_in "a sandbox was created" "$T/ev1" '"type":"sandbox.acquired","how":"created"'
grep_in "the tool came through the bridge" "$T/ev1" '"relay.bridge.watch","state":"started"'
SES=$(field session "$T/ev1")
BOX=$(sed -n 's/.*"type":"sandbox.acquired".*"sandbox":"\([^"]*\)".*/\1/p' "$T/ev1" | head -n 1)
grep_in "kept running in the warm pool" "$T/svc.log" "session $SES: sandbox $BOX and its agent kept running"
curl -s "$admin/sandbox/$BOX" >"$T/box1.json"
[ "$(get "$T/box1.json" state)" = started ] && ok "... the sandbox still runs" ||
	fail "... the sandbox still runs ($(get "$T/box1.json" state))"

curl -s "$admin/calls" >"$T/calls1.json"
[ "$(get "$T/calls1.json" "POST /toolbox/{id}/process/session")" = 3 ] &&
	[ "$(get "$T/calls1.json" "POST /api/sandbox")" = 1 ] &&
	ok "turn 1 created the sandbox and opened three process sessions (uname, the agent, the relay bridge's watch)" ||
	fail "turn 1 created the sandbox and opened three process sessions ($(cat "$T/calls1.json"))"
curl -s -X DELETE "$admin/calls" >/dev/null
api --data "$(body "$SES")" http://sandrund/v1/runs >"$T/ev2"
curl -s "$admin/calls" >"$T/calls2.json"
echo "# the warm turn's provider API calls: $(cat "$T/calls2.json")"
grep_in "turn 2 ends" "$T/ev2" '"type":"run.finished","stop_reason":"end_turn"'
grep_in "on the warm sandbox" "$T/ev2" "\"type\":\"sandbox.acquired\",\"how\":\"warm\".*\"sandbox\":\"$BOX\""
grep_in "with the agent of turn 1, still running" "$T/ev2" '"type":"agent.starting","harness":"claude","warm":true'
grep -q '"type":"agent.session"' "$T/ev2" && fail "... no initialize, no session/load" ||
	ok "... no initialize, no session/load"
acquire=$(node -e 'const c = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
	console.log(Object.keys(c).filter(k => /^[A-Z]+ \/api\/sandbox/.test(k)).map(k => k + ": " + c[k]).join(", "))' "$T/calls2.json")
[ -z "$acquire" ] && ok "zero provider calls to acquire it (no create, get, start)" ||
	fail "zero provider calls to acquire it (made: $acquire)"
[ "$(get "$T/calls2.json" "POST /toolbox/{id}/process/session")" = 1 ] &&
	ok "... and no new agent: one process session, the relay bridge's watch" ||
	fail "... and no new agent: one process session, the relay bridge's watch"
grep_in "its platform tool still goes through the bridge" "$T/ev2" '"type":"tool.result".*"tool":"echo","status":"ok"'
test "$(grep -c ' echo$' "$CB_LOG")" -eq 2 && ok "the tool ran once per turn" || fail "the tool ran once per turn"
grep_in "turn 2 answers" "$T/ev2" '"type":"agent.message","text":"warm turn ok"'

kill -TERM $svc
wait $svc && ok "sandrund stops cleanly" || fail "sandrund stops cleanly"
svc=
grep_in "the warm sandbox is parked stopped at the stop" "$T/svc.log" "parking the 1 warm sandboxes stopped"
curl -s "$admin/sandbox/$BOX" >"$T/box2.json"
[ "$(get "$T/box2.json" state)" = stopped ] && ok "... stopped at Daytona" ||
	fail "... stopped at Daytona ($(get "$T/box2.json" state))"

# Another replica (a runner id of its own, on the same store): a Daytona
# sandbox is reached from any, so it continues the session.
SANDRUN_RUNNER_ID=replica-two SANDRUN_SERVICE_MODEL_HOSTS="$MODEL_HOST" \
	SANDRUN_SERVICE_LISTEN="unix:$T/sock" "$SANDRUN_BUILDDIR/sandrund" >"$T/svc2.log" 2>&1 &
svc=$!
wait_grep "$T/svc2.log" "listening on"
api --data "$(body "$SES")" http://sandrund/v1/runs >"$T/ev3"
grep_in "another replica continues the session" "$T/ev3" '"type":"run.finished","stop_reason":"end_turn"'
grep_in "... on the same sandbox, reconnected" "$T/ev3" \
	"\"type\":\"sandbox.acquired\",\"how\":\"reconnected\".*\"sandbox\":\"$BOX\""
grep_in "... and answers" "$T/ev3" '"type":"agent.message","text":"replica turn ok"'
kill -TERM $svc
wait $svc
svc=
model_got_key "the model got exactly the run's key" "$T/model.ndjson" "$ANTHROPIC_API_KEY"
finish
