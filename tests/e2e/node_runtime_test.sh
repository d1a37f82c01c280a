#!/bin/sh
# A machine whose node is too old for the adapters (Debian 12 ships 18):
# a fake node 18 comes first on PATH. doctor says claude and pi are not
# ready and why; install-harness installs sandrun's pinned Node.js runtime
# (into a fresh node_dir) and keeps the adapters already installed; doctor
# is then satisfied, and real pi and claude turns pass. The fake refuses to
# run anything under the harness directory, so a passing turn proves the
# adapters ran with the runtime, not with the node on PATH.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
S=$SANDRUN_BIN
H=${SANDRUN_HARNESS_DIR:-}
for pair in claude:claude-agent-acp pi:pi-acp; do
	if [ -z "$H" ] || [ ! -x "$H/${pair%%:*}/node_modules/.bin/${pair#*:}" ]; then
		echo "SKIP: the ${pair%%:*} adapter is not installed in \$SANDRUN_HARNESS_DIR (scripts/check installs it)"
		[ "${CI:-}" = true ] && { echo "FAIL: CI=true: a missing adapter is a failure"; exit 1; }
		exit 77
	fi
done
real_node=$(command -v node) || { echo "FAIL: no node to run the emulators with"; exit 1; }
mkdir -p "$T/old"
cat >"$T/old/node" <<SH
#!/bin/sh
# A stand-in for Debian 12's Node.js 18: it reports v18.20.4 and cannot run
# the adapters; npm and the test's own scripts run with the real node.
case "\${1:-}" in --version|-v) echo v18.20.4; exit 0 ;; esac
case "\${1:-}" in "$H"/*)
	echo "\$1: SyntaxError: Invalid regular expression flags (fake Node.js 18)" >&2; exit 1 ;;
esac
exec "$real_node" "\$@"
SH
chmod +x "$T/old/node"
export PATH="$T/old:$PATH"
export SANDRUN_RUNNER_NODE_DIR="$T/node"
export SANDRUN_RUNNER_HARNESSES=claude,pi
export SANDRUN_HARNESS_CLAUDE_INSTALL_DIR="$H/claude" SANDRUN_HARNESS_PI_INSTALL_DIR="$H/pi"

test "$(node --version)" = v18.20.4 && ok "the fake node 18 is first on PATH" || fail "the fake node 18 is first on PATH"
expect "doctor fails with node 18" 1 "$S" doctor
grep_in "claude is not ready, with the reason" "$T/out" \
	"harness claude .*not ready: node v18.20.4 ($T/old/node) does not satisfy '>=22'; run 'sandrun install-harness claude'"
grep_in "pi is not ready, with the reason" "$T/out" \
	"harness pi .*not ready: node v18.20.4 ($T/old/node) does not satisfy '>=20.6.0'"

# A mismatch install-harness cannot fix is an error, not a warning.
mkdir -p "$T/nonpm"
printf '#!/bin/sh\necho "npm error code ECONNREFUSED" >&2\nexit 1\n' >"$T/nonpm/npm"
chmod +x "$T/nonpm/npm"
PATH="$T/nonpm:$PATH" expect "install-harness fails when the runtime cannot be installed" 1 \
	"$S" install-harness pi
grep_in "it says why" "$T/err" "npm install failed (exit 1)"
grep_in "it says the harness is not ready" "$T/err" "harness 'pi' is not installed"

expect "install-harness pi installs the runtime" 0 "$S" install-harness pi
grep_in "it says it installs Node.js" "$T/err" "installing Node.js 22\.[0-9.]* (npm package node-linux-"
grep_in "it keeps the adapter already installed" "$T/err" "harness 'pi' is already installed"
test -x "$T/node/node_modules/.bin/node" && ok "the runtime is in node_dir" || fail "the runtime is in node_dir"
expect "install-harness claude reuses it" 0 "$S" install-harness claude
if grep -q "installing Node.js" "$T/err"; then fail "no second runtime install"; else ok "no second runtime install"; fi
grep_in "claude's node is the runtime" "$T/err" "node v22\.[0-9.]* ($T/node/node_modules/.bin/node, sandrun's runtime) satisfies '>=22'"
expect "doctor passes now" 0 "$S" doctor
grep_in "doctor names the runtime" "$T/out" "harness pi .*ready: .*sandrun's runtime"

# Real turns with the fake node 18 still first on PATH.
start_callbacks
cat >"$T/tools.json" <<JSON
[{"name":"echo","description":"Echo the text back","permission":"allow",
  "input_schema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},
  "callback":{"url":"$CB_URL"}}]
JSON
turn() { # turn HARNESS EMULATOR CALL KEY
	printf '[%s,{"text":"done on the runtime"}]\n' "$3" >"$T/$1.script"
	node "$SANDRUN_SRCDIR/tests/emulators/$2.mjs" --key "$4" --script "$T/$1.script" \
		--log "$T/$1.model" >"$T/$1.mout" 2>/dev/null &
	mpid=$!
	wait_for "$T/$1.mout"
	url=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$T/$1.mout")
	expect "a $1 turn runs" 0 node "$SANDRUN_SRCDIR/tests/e2e/drive.mjs" "$T/$1.ev" - - \
		"$S" run --json --harness "$1" --tools "$T/tools.json" --model-url "$url" "use echo"
	kill $mpid 2>/dev/null
	grep_in "the $1 turn ends end_turn" "$T/$1.ev" '"type":"run.finished","stop_reason":"end_turn"'
	grep -E 'tool_result|function_call_output' "$T/$1.model" | grep -q "from $1" &&
		ok "$1's tool result reached the model" || fail "$1's tool result reached the model"
	model_got_key "$1: the model got exactly the run's key" "$T/$1.model" "$4"
}
# Random keys: the scripted models answer 401 to any other.
ANTHROPIC_API_KEY=$(random_key sk-ant)
OPENAI_API_KEY=$(random_key sk)
export ANTHROPIC_API_KEY OPENAI_API_KEY
turn pi openai '{"function_call":{"name":"echo","arguments":{"text":"from pi"}}}' "$OPENAI_API_KEY"
turn claude anthropic '{"tool_use":{"name":"mcp__sandrun-tools__echo","input":{"text":"from claude"}}}' "$ANTHROPIC_API_KEY"
stop_callbacks
finish
