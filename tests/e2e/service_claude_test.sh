#!/bin/sh
# sandrund with the real Claude Code adapter against the scripted Anthropic
# API, on the local provider: a run with platform tools whose 'ask' tool is
# answered over the API, the model key given in the request (not in
# sandrund's environment) and never shown in an event, then a second turn
# on the session with another key, resumed with session/load (a new
# agent: the key is part of how it was started), and a third with the
# same key on the agent the warm pool kept running.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
command -v node >/dev/null || missing "node is not installed"
command -v curl >/dev/null || missing "curl is not installed"
dir=${SANDRUN_HARNESS_DIR:-}/claude
if [ -z "${SANDRUN_HARNESS_DIR:-}" ] || [ ! -x "$dir/node_modules/.bin/claude-agent-acp" ]; then
	missing "the claude adapter is not installed in \$SANDRUN_HARNESS_DIR/claude (scripts/check installs it)"
fi
export SANDRUN_RUNNER_HARNESSES=claude
export SANDRUN_HARNESS_CLAUDE_INSTALL_DIR="$dir"
export SANDRUN_RUNNER_NODE_DIR="$SANDRUN_HARNESS_DIR/node"
unset ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN
call() { printf '{"tool_use":{"name":"mcp__sandrun-tools__%s","input":%s}}' "$1" "$2"; }
sha256() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
get() {
	node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
		const v = process.argv[2].split(".").reduce((o, k) => o == null ? o : o[k], j);
		console.log(v === undefined || v === null ? "" : v)' "$1" "$2"
}
start_callbacks
cat >"$T/tools.json" <<JSON
[{"name":"echo","description":"Echo the text back","permission":"allow",
  "input_schema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},
  "callback":{"url":"$CB_URL"}},
 {"name":"careful","description":"Needs approval","permission":"ask",
  "input_schema":{"type":"object","properties":{}},"callback":{"url":"$CB_URL"}}]
JSON
printf '[%s,%s,{"text":"all done"},{"text":"second turn ok"},%s,{"text":"third turn ok"}]\n' \
	"$(call echo '{"text":"through the service"}')" "$(call careful '{}')" \
	"$(call echo '{"text":"from the warm agent"}')" >"$T/script.json"
node "$SANDRUN_SRCDIR/tests/emulators/anthropic.mjs" --script "$T/script.json" \
	--log "$T/model.ndjson" >"$T/model.out" 2>"$T/model.err" &
model_pid=$!
wait_for "$T/model.out"
MODEL=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$T/model.out")
TOKEN=tok-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
printf '%s\n' "$TOKEN" >"$T/tokens"
chmod 600 "$T/tokens"
AUTH="Authorization: Bearer $TOKEN"
SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens" \
	"$SANDRUN_BUILDDIR/sandrund" >"$T/svc.log" 2>&1 &
svc=$!
trap 'kill $svc $model_pid 2>/dev/null; stop_callbacks; rm -rf "$T"' EXIT
wait_grep "$T/svc.log" "listening on"
URL=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$T/svc.log")
KEY1=sk-ant-request-one-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
KEY2=sk-ant-request-two-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')

body=$(node -e 'console.log(JSON.stringify({prompt: "use the tools", tools: JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")),
	model: {url: process.argv[2], credentials: {ANTHROPIC_API_KEY: process.argv[3]}}}))' "$T/tools.json" "$MODEL" "$KEY1")
curl -s -H "$AUTH" --data "$body" "$URL/v1/runs?wait=false" >"$T/accepted"
RUN=$(get "$T/accepted" run)
[ -n "$RUN" ] && ok "the run started ($RUN)" || { fail "the run started"; cat "$T/accepted" "$T/svc.log"; finish; exit 1; }
asked=
for _ in $(seq 120); do
	curl -s -N --max-time 0.5 -H "$AUTH" "$URL/v1/runs/$RUN/events" >"$T/ev" 2>/dev/null
	if grep '"type":"permission.request"' "$T/ev" | grep '"source":"tool"' | grep -q '"tool":"careful"'; then
		asked=1
		break
	fi
	grep -q '"type":"run.f' "$T/ev" && break
done
[ -n "$asked" ] && ok "the ask tool's permission request reached the API" || fail "the ask tool's permission request reached the API"
rid=$(grep '"type":"permission.request"' "$T/ev" | sed -n 's/.*"request_id":"\([^"]*\)".*/\1/p' | head -n 1)
code=$(curl -s -o "$T/body" -w '%{http_code}' -H "$AUTH" --data "{\"request_id\":\"$rid\",\"allow\":true}" \
	"$URL/v1/runs/$RUN/permissions")
[ "$code" = 200 ] && ok "answered over the API" || { fail "answered over the API ($code)"; cat "$T/body"; }
for _ in $(seq 300); do
	curl -s -H "$AUTH" "$URL/v1/runs/$RUN" >"$T/sum"
	case "$(get "$T/sum" state)" in running|cancelling) sleep 0.1 ;; *) break ;; esac
done
[ "$(get "$T/sum" state)/$(get "$T/sum" stop_reason)" = finished/end_turn ] && ok "the turn ended" ||
	fail "the turn ended ($(cat "$T/sum"))"
curl -s -H "$AUTH" "$URL/v1/runs/$RUN/events" >"$T/ev1"
test "$(grep -c ' echo$' "$CB_LOG")" -eq 1 && ok "the allowed tool ran once" || fail "the allowed tool ran once"
test "$(grep -c ' careful$' "$CB_LOG")" -eq 1 && ok "the approved tool ran once" || fail "the approved tool ran once"
grep_in "its result was an event" "$T/ev1" '"type":"tool.result".*"tool":"careful","status":"ok"'
grep_in "the final text" "$T/ev1" '"type":"agent.message","text":"all done"'
grep_in "the key is exposed by name on the local provider" "$T/ev1" '"type":"credentials.exposed","names":\["ANTHROPIC_API_KEY"\]'
grep -q "$KEY1" "$T/ev1" "$T/sum" "$T/svc.log" && fail "the key never shows" || ok "the key never shows"
grep '"kind":"main"' "$T/model.ndjson" | grep -q "\"key_sha256\":\"$(sha256 "$KEY1")\"" &&
	ok "the model got the request's key" || fail "the model got the request's key"
SES=$(get "$T/sum" session)

body=$(node -e 'console.log(JSON.stringify({prompt: "and then?", session: process.argv[1], tools: JSON.parse(require("fs").readFileSync(process.argv[2], "utf8")),
	model: {url: process.argv[3], credentials: {ANTHROPIC_API_KEY: process.argv[4]}}}))' "$SES" "$T/tools.json" "$MODEL" "$KEY2")
n=$(grep -c '"kind":"main"' "$T/model.ndjson")
curl -s -N -H "$AUTH" --data "$body" "$URL/v1/runs" >"$T/ev2"
grep_in "turn 2 on the session" "$T/ev2" '"type":"run.started".*"turn":2'
grep_in "in the same sandbox, still running in the warm pool" "$T/ev2" '"how":"warm"'
grep_in "resumed with session/load" "$T/ev2" '"method":"session/load"'
grep_in "turn 2 answers" "$T/ev2" '"type":"agent.message","text":"second turn ok"'
tail -n +"$((n + 1))" "$T/model.ndjson" | grep '"kind":"main"' | grep -q "\"key_sha256\":\"$(sha256 "$KEY2")\"" &&
	ok "turn 2's model calls used turn 2's key" || fail "turn 2's model calls used turn 2's key"

# Turn 3 with the same key, tools and model: the agent of turn 2 is still
# running in the warm pool, and the turn goes straight to session/prompt.
curl -s -N -H "$AUTH" --data "$body" "$URL/v1/runs" >"$T/ev3"
grep_in "turn 3 on the session" "$T/ev3" '"type":"run.started".*"turn":3'
grep_in "in the warm sandbox" "$T/ev3" '"how":"warm"'
grep_in "with the agent of turn 2, still running" "$T/ev3" '"type":"agent.starting","harness":"claude","warm":true'
grep -q '"type":"agent.session"' "$T/ev3" && fail "... no initialize, no session/load" ||
	ok "... no initialize, no session/load"
grep_in "its platform tool still goes through the relay" "$T/ev3" '"type":"tool.result".*"tool":"echo","status":"ok"'
test "$(grep -c ' echo$' "$CB_LOG")" -eq 2 && ok "the tool ran once more" || fail "the tool ran once more"
grep_in "turn 3 answers" "$T/ev3" '"type":"agent.message","text":"third turn ok"'
echo "# warm turn: stages before the prompt took $(node -e 'const ev = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
	console.log(ev.filter(e => e.type === "timing" && e.stage !== "turn").map(e => e.stage + " " + e.ms + " ms").join(", "))' "$T/ev3")"
kill -TERM $svc
wait $svc && ok "sandrund stops cleanly" || fail "sandrund stops cleanly"
grep_in "the warm agent is stopped with the service" "$T/svc.log" "parking the 1 warm sandboxes stopped"
finish
