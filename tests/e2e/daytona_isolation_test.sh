#!/bin/sh
# Credentials the sandbox never sees, end to end: a claude turn on
# provider = daytona (tests/emulators/daytona.mjs, whose egress proxy
# stands for Daytona's) with the scripted model at an allowed host. The
# model receives the real key; the sandbox's environment, files, process
# list and logs, and the run's events, hold only the placeholder; the
# proxy puts the value only into requests to the exact host. Then the
# refusals that come before any secret exists.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
S=$SANDRUN_BIN
dir=${SANDRUN_HARNESS_DIR:-}/claude
command -v node >/dev/null || missing "node is not installed (scripts/check installs it)"
if [ -z "${SANDRUN_HARNESS_DIR:-}" ] || [ ! -x "$dir/node_modules/.bin/claude-agent-acp" ]; then
	missing "the claude adapter is not installed in \$SANDRUN_HARNESS_DIR/claude (scripts/check installs it)"
fi
export SANDRUN_RUNNER_HARNESSES=claude
export SANDRUN_HARNESS_CLAUDE_INSTALL_DIR="$dir"
export SANDRUN_RUNNER_REMOTE_HARNESS_DIR="$SANDRUN_HARNESS_DIR"
export SANDRUN_RUNNER_PROVIDER=daytona
drive="node $SANDRUN_SRCDIR/tests/e2e/drive.mjs"
field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p" "$2" | head -n 1; }
sha256() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

# The scripted model (a platform tool that takes its time, so the sandbox
# can be looked at while the agent runs), and an echo server for the
# hosts that must not get the value.
start_callbacks
cat >"$T/tools.json" <<JSON
[{"name":"slow","description":"Takes its time","permission":"allow",
  "input_schema":{"type":"object","properties":{"ms":{"type":"integer"}}},
  "callback":{"url":"$CB_URL","timeout_ms":30000}}]
JSON
printf '[{"tool_use":{"name":"mcp__sandrun-tools__slow","input":{"ms":4000}}},{"text":"isolated turn done"}]\n' \
	>"$T/script.json"
node "$SANDRUN_SRCDIR/tests/emulators/anthropic.mjs" --script "$T/script.json" \
	--log "$T/model.ndjson" >"$T/model.out" 2>"$T/model.err" &
model_pid=$!
cat >"$T/echo.mjs" <<'JS'
import http from 'node:http';
const s = http.createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ host: req.headers.host, headers: req.headers }) + '\n');
});
s.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: s.address().port })));
JS
node "$T/echo.mjs" >"$T/echo.out" 2>"$T/echo.err" &
echo_pid=$!
# The OpenAI emulator for codex and pi: it wants the key sandrun was
# given, and the egress proxy is what puts it in the requests.
oai_key=$(random_key sk-oai-real)
printf '[{"text":"one"},{"text":"two"},{"text":"three"},{"text":"four"}]\n' >"$T/oai.json"
node "$SANDRUN_SRCDIR/tests/emulators/openai.mjs" --key "$oai_key" --script "$T/oai.json" \
	--log "$T/oai.ndjson" >"$T/oai.out" 2>"$T/oai.err" &
oai_pid=$!
wait_for "$T/model.out" "$T/echo.out" "$T/oai.out"
model_port=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' "$T/model.out")
echo_port=$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$T/echo.out")
oai_port=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' "$T/oai.out")

node "$SANDRUN_SRCDIR/tests/emulators/daytona.mjs" --state-dir "$T/emu" --api-key dtn-test-key \
	--log "$T/emu.log" --egress-host "api.model.test=127.0.0.1:$model_port" \
	--egress-host "other.test=127.0.0.1:$echo_port" \
	--egress-host "sub.api.model.test=127.0.0.1:$echo_port" \
	--egress-host "api.oai.test=127.0.0.1:$oai_port" >"$T/emu.out" 2>"$T/emu.err" &
emu_pid=$!
trap 'kill $emu_pid $model_pid $echo_pid $oai_pid 2>/dev/null; stop_callbacks; rm -rf "$T"' EXIT
wait_for "$T/emu.out"
api=$(field apiUrl "$T/emu.out")
admin=$(field adminUrl "$T/emu.out")
export SANDRUN_PROVIDER_DAYTONA_API_URL="$api"
export SANDRUN_PROVIDER_DAYTONA_API_KEY=dtn-test-key
[ -n "$admin" ] && [ -n "$model_port" ] && [ -n "$echo_port" ] && ok "the emulators run" ||
	{ fail "the emulators run"; cat "$T/emu.err" "$T/model.err"; finish; exit 1; }
secrets() { curl -s -H "Authorization: Bearer dtn-test-key" "$api/secret"; }
nsecrets() { secrets | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).length))'; }
nboxes() { curl -s -H "Authorization: Bearer dtn-test-key" "$api/sandbox" |
	node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).items.length))'; }

key="sk-ant-real-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export ANTHROPIC_API_KEY="$key"
unset ANTHROPIC_AUTH_TOKEN
model="http://api.model.test:$model_port"

# ---- refusals: before any secret or sandbox exists ----
refused() { # refused NAME MODEL_URL [ALLOW]
	SANDRUN_SECRETS_ALLOW_HOSTS=${3:-} expect "$1 refused (exit 5)" 5 "$S" run --json \
		--model-url "$2" "hi"
	grep_in "$1: code credential_host_refused" "$T/out" '"code":"credential_host_refused"'
	grep_in "$1: the message names the binding" "$T/out" 'credential ANTHROPIC_API_KEY'
	[ "$(nsecrets)" = 0 ] && [ "$(nboxes)" = 0 ] && ok "$1: no secret, no sandbox" ||
		fail "$1: no secret, no sandbox"
}
refused "a wildcard host" "https://*.model.test/v1"
refused "an IP address" "https://203.0.113.7/v1"
refused "localhost" "https://localhost/v1"
refused "http without an exception" "$model"
refused "an exception for another port" "$model" "api.model.test:1"

# Allowed on one port, which a Daytona secret cannot be bound to: refused
# when isolation is required.
SANDRUN_RUNNER_CREDENTIAL_ISOLATION=required SANDRUN_SECRETS_ALLOW_HOSTS="api.model.test:$model_port" \
	expect "a host allowed on one port, isolation required: refused (exit 5)" 5 "$S" run --json \
	--model-url "$model" "hi"
grep_in "... code credential_port_unbound, naming the binding and the port" "$T/out" \
	"\"code\":\"credential_port_unbound\".*ANTHROPIC_API_KEY may go to api.model.test:$model_port only"
[ "$(nsecrets)" = 0 ] && [ "$(nboxes)" = 0 ] && ok "... no secret, no sandbox" ||
	fail "... no secret, no sandbox"

# ---- the turn: the value only at the exact host ----
export SANDRUN_SECRETS_ALLOW_HOSTS="api.model.test:$model_port"
$drive "$T/ev" - - "$S" run --json --tools "$T/tools.json" --model-url "$model" "isolate" \
	>"$T/run.out" 2>"$T/run.err" &
runner=$!
wait_grep "$T/ev" '"type":"tool.call"'
grep_in "the platform tool was called" "$T/ev" '"type":"tool.call"'
grep_in "preferred isolation: the port the secret is not bound to is reported" "$T/ev" \
	"\"type\":\"credentials.port_unbound\".*\"port\":\"$model_port\""

box=$(field sandbox "$T/ev")
curl -s "$admin/sandbox/$box" >"$T/box.json"
boxdir=$(field dir "$T/box.json")
# While the agent runs: every process of the sandbox, its environment and
# command line.
pids=$(node -e 'const b=JSON.parse(require("fs").readFileSync(process.argv[1]));console.log(b.pids.join(" "))' "$T/box.json")
: >"$T/procs.txt"
for p in $pids; do
	for q in $p $(descendants "$p"); do
		tr '\0' '\n' <"/proc/$q/environ" >>"$T/procs.txt" 2>/dev/null
		tr '\0' ' ' <"/proc/$q/cmdline" >>"$T/procs.txt" 2>/dev/null
		echo >>"$T/procs.txt"
	done
done
placeholder=$(sed -n 's/^ANTHROPIC_API_KEY=\(dtn_secret_[0-9a-f]*\)$/\1/p' "$T/procs.txt" | head -n 1)
[ -n "$placeholder" ] && ok "the agent's environment holds a placeholder" ||
	{ fail "the agent's environment holds a placeholder"; head -c 2000 "$T/procs.txt"; }
grep -q "$key" "$T/procs.txt" && fail "the key is in a sandbox process's environment or command line" ||
	ok "no sandbox process has the key in its environment or command line"
# From inside the sandbox, with the placeholder: another host and a
# subdomain of the exact host get the placeholder.
exec_in() {
	curl -s -H "Authorization: Bearer dtn-test-key" -H 'Content-Type: application/json' \
		-X POST "$(field url "$T/emu.out")/toolbox/$box/process/execute" \
		-d "{\"command\":\"curl -s -H 'x-api-key: $placeholder' $1\",\"timeout\":20}"
}
exec_in "http://other.test/" >"$T/other.json"
grep_in "another host gets the placeholder" "$T/other.json" "$placeholder"
exec_in "http://sub.api.model.test/" >"$T/sub.json"
grep_in "a subdomain gets the placeholder" "$T/sub.json" "$placeholder"
grep -q "$key" "$T/other.json" "$T/sub.json" && fail "the value went to another host" ||
	ok "the value went to no other host"
wait $runner
rc=$?
[ "$rc" -eq 0 ] && ok "the isolated turn succeeded" ||
	{ fail "the isolated turn succeeded (exit $rc)"; tail -5 "$T/run.err"; tail -3 "$T/ev"; }
grep_in "the turn ended" "$T/ev" '"text":"isolated turn done"'
grep -q '"type":"credentials.exposed"' "$T/ev" && fail "credentials.exposed on an isolating provider" ||
	ok "no credentials.exposed"
grep -q "\"key_sha256\":\"$(sha256 "$key")\"" "$T/model.ndjson" &&
	ok "the model received the real key (through the proxy)" ||
	{ fail "the model received the real key (through the proxy)"; head -c 600 "$T/model.ndjson"; }
grep -q "\"key_sha256\":\"$(sha256 "$placeholder")\"" "$T/model.ndjson" &&
	fail "the model got the placeholder" || ok "the model never got the placeholder"
# Files, logs, events: the placeholder at most, never the value.
grep -rqF "$key" "$boxdir" 2>/dev/null && fail "the key is in the sandbox's files" ||
	ok "the sandbox's files do not hold the key"
grep -qF "$key" "$T/ev" "$T/run.err" "$T/run.out" 2>/dev/null && fail "the key is in the run's events or logs" ||
	ok "the run's events and logs do not hold the key"
curl -s "$admin/egress?sandboxId=$box" >"$T/egress.json"
grep -qF "$key" "$T/egress.json" && fail "the key is in the proxy's record" || ok "the proxy's record has no value"
node -e '
const log = JSON.parse(require("fs").readFileSync(process.argv[1]));
const model = log.filter((e) => e.host === "api.model.test" && e.path.startsWith("/v1/messages"));
const others = log.filter((e) => e.host !== "api.model.test");
if (!model.length || !model.every((e) => e.secrets.length === 1 && e.secrets[0].startsWith("sandrun_"))) process.exit(1);
if (others.length < 2 || others.some((e) => e.secrets.length)) process.exit(2);
' "$T/egress.json" && ok "the proxy substituted sandrun's secret for the model's host, for no other" ||
	{ fail "the proxy substituted sandrun's secret for the model's host, for no other"; head -c 800 "$T/egress.json"; }
grep_in "the secret is bound to the sandbox's ANTHROPIC_API_KEY" "$T/box.json" \
	'"secrets":\[{"env":"ANTHROPIC_API_KEY","secretName":"sandrun_'
grep -q '"ANTHROPIC_API_KEY":' "$T/box.json" && fail "the key went into the sandbox's env field" ||
	ok "nothing of the key in the sandbox's env field"

# One binding, one secret, exactly the model's host.
secrets >"$T/secrets.json"
node -e '
const s = JSON.parse(require("fs").readFileSync(process.argv[1]));
const mine = s.filter((x) => x.placeholder === process.argv[2]);
if (mine.length !== 1 || JSON.stringify(mine[0].hosts) !== JSON.stringify(["api.model.test"])) process.exit(1);
' "$T/secrets.json" "$placeholder" && ok "the secret names exactly api.model.test" ||
	{ fail "the secret names exactly api.model.test"; cat "$T/secrets.json"; }

# A changed key: the next turn gets a fresh sandbox and a fresh secret.
session=$(field session "$T/ev")
printf '[{"text":"second"}]\n' >"$T/script.json"
export ANTHROPIC_API_KEY="${key}-rotated"
expect "a turn after the key changed" 0 $drive "$T/ev2" - - "$S" run --json --session "$session" \
	--tools "$T/tools.json" --model-url "$model" "again"
grep_in "the sandbox was replaced" "$T/ev2" '"type":"sandbox.replaced"'
grep_in "a fresh one was created" "$T/ev2" '"how":"created"'
box2=$(sed -n 's/.*"type":"sandbox.acquired".*"sandbox":"\([^"]*\)".*/\1/p' "$T/ev2" | head -n 1)
[ -n "$box2" ] && [ "$box2" != "$box" ] && ok "a new sandbox id" || fail "a new sandbox id ($box2)"
curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer dtn-test-key" "$api/sandbox/$box" |
	grep -q 404 && ok "the old sandbox is gone" || fail "the old sandbox is gone"
secrets | grep -q "$placeholder" && fail "the old secret is left" || ok "the old secret went with it"

# Codex with each credential name it declares for an OpenAI endpoint, and
# Pi (whose HTTP client reaches even an http:// endpoint through CONNECT):
# the model gets exactly the key, through the proxy.
for hk in codex:OPENAI_API_KEY codex:CODEX_API_KEY pi:OPENAI_API_KEY; do
	h=${hk%%:*} k=${hk#*:}
	if [ ! -x "$SANDRUN_HARNESS_DIR/$h/node_modules/.bin/$h-acp" ]; then
		[ "${CI:-}" = true ] && fail "the $h adapter is installed (CI=true)" ||
			echo "skip - $h on daytona: the adapter is not installed"
		continue
	fi
	sfx=; [ "$h" = codex ] && sfx=/v1
	: >"$T/oai.ndjson"
	expect "$h with $k on daytona, isolated" 0 env -u ANTHROPIC_API_KEY "$k=$oai_key" \
		SANDRUN_RUNNER_HARNESSES=claude,codex,pi \
		"SANDRUN_HARNESS_$(echo "$h" | tr a-z A-Z)_INSTALL_DIR=$SANDRUN_HARNESS_DIR/$h" \
		SANDRUN_SECRETS_ALLOW_HOSTS="api.oai.test:$oai_port" \
		$drive "$T/ev-$h" - - "$S" run --json --harness "$h" --model-url "http://api.oai.test:$oai_port$sfx" "hi"
	grep_in "$h with $k: the turn ends" "$T/ev-$h" '"type":"run.finished","stop_reason":"end_turn"'
	model_got_key "$h with $k: the model got exactly the key" "$T/oai.ndjson" "$oai_key"
	grep -qF "$oai_key" "$T/ev-$h" "$T/err" && fail "$h with $k: the key is in the run's output" ||
		ok "$h with $k: not in the run's output"
	grep -q '"type":"credentials.exposed"' "$T/ev-$h" && fail "$h with $k: credentials.exposed" ||
		ok "$h with $k: isolated (no credentials.exposed)"
	b=$(sed -n 's/.*"type":"run.finished".*"sandbox":"\([^"]*\)".*/\1/p' "$T/ev-$h")
	[ -n "$b" ] && "$S" sandbox destroy "$b" >/dev/null 2>&1
done
finish
