#!/bin/sh
# The sandrun command line: versions, plugin listing, doctor, config
# errors, exec, exit codes.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
S=$SANDRUN_BIN

expect "--version exits 0" 0 "$S" --version
grep_in "--version names the ABI" "$T/out" "plugin ABI 2.6"
expect "--help exits 0" 0 "$S" --help
grep_in "--help lists doctor" "$T/out" "doctor"
expect "no command is a usage error" 2 "$S"
expect "unknown command is a usage error" 2 "$S" frobnicate
grep_in "unknown command is named" "$T/err" "unknown command 'frobnicate'"

expect "plugins --json" 0 "$S" plugins --json
grep_in "local provider listed" "$T/out" '"name": "local"'
grep_in "its kind" "$T/out" '"kind": "provider"'
grep_in "its path" "$T/out" '"path": ".*local.la"'

# Broken plugins beside good ones: listed as rejected, each with a reason.
SANDRUN_PLUGIN_PATH="$SANDRUN_PLUGIN_PATH:$SANDRUN_TEST_PLUGINS" \
	expect "plugins with broken ones" 0 "$S" plugins --json
grep_in "next major rejected with both versions" "$T/out" \
	'declares ABI 3.0; this sandrun accepts ABI major 2 (minor 0 to 6)'
grep_in "missing entry symbol rejected" "$T/out" "no entry symbol"
SANDRUN_PLUGIN_PATH="$SANDRUN_PLUGIN_PATH:$SANDRUN_TEST_PLUGINS" \
	expect "doctor warns on rejected plugins" 0 "$S" doctor
grep_in "one line names file, major and the core's" "$T/out" \
	"bad_major.la: declares ABI 3.0; this sandrun accepts ABI major 2 (minor 0 to 6)"
SANDRUN_PLUGIN_PATH="$SANDRUN_PLUGIN_PATH:$SANDRUN_TEST_PLUGINS" \
	expect "other commands log each rejection once" 0 "$S" sandbox create
test "$(grep -c 'bad_major.la: rejected: declares ABI 3.0' "$T/err")" -eq 1 &&
	ok "rejection logged as one line" || fail "rejection logged as one line"

# A provider whose create fails at once (returns an error, no callback).
SANDRUN_PLUGIN_PATH="$SANDRUN_PLUGIN_PATH:$SANDRUN_TEST_PLUGINS" SANDRUN_RUNNER_PROVIDER=failing \
	expect "a create that fails at once is a failure" 1 "$S" sandbox create
test ! -s "$T/out" && ok "nothing printed as the new id" || fail "nothing printed as the new id"
grep_in "the failure is named" "$T/err" "create: "

expect "doctor passes" 0 "$S" doctor
grep_in "doctor checks the provider" "$T/out" "\[\(ok  \|warn\)\] provider local"
SANDRUN_RUNNER_ID=doc-runner SANDRUN_PROVIDER_LOCAL_ROOT=$T/boxes expect "doctor with a runner id and root" 0 "$S" doctor
grep_in "doctor: which replicas continue a local provider's sessions" "$T/out" \
	"sessions .*this state directory's store: provider local keeps its sandboxes with this runner ('doc-runner' at [^ ]*:$T/boxes): only a replica with that runner id and sandbox root"
# Which credentials each harness hands its agent, and which are set here.
expect "doctor with no model key (adapters not installed: exit 1)" 1 env -u ANTHROPIC_API_KEY -u ANTHROPIC_AUTH_TOKEN \
	-u OPENAI_API_KEY -u CODEX_API_KEY SANDRUN_RUNNER_HARNESSES=claude,codex "$S" doctor
grep_in "doctor: claude's credential names, none set" "$T/out" \
	"\[warn\] harness claude keys *ANTHROPIC_API_KEY (not set), ANTHROPIC_AUTH_TOKEN (not set): none set"
grep_in "doctor: codex's credential names" "$T/out" \
	"harness codex keys *OPENAI_API_KEY (not set), CODEX_API_KEY (not set)"
expect "doctor with keys (adapters not installed: exit 1)" 1 env -u ANTHROPIC_API_KEY -u OPENAI_API_KEY \
	CODEX_API_KEY=sk-doctor-secret-value ANTHROPIC_AUTH_TOKEN=x \
	SANDRUN_RUNNER_HARNESSES=claude,codex "$S" doctor
grep_in "doctor: a set key is said" "$T/out" \
	"\[ok  \] harness codex keys *OPENAI_API_KEY (not set), CODEX_API_KEY (set)$"
grep_in "doctor: claude's token is set" "$T/out" "harness claude keys .*ANTHROPIC_AUTH_TOKEN (set)"
grep -q "sk-doctor-secret-value" "$T/out" "$T/err" && fail "doctor never prints a key's value" ||
	ok "doctor never prints a key's value"
grep -q "tool latency" "$T/out" && fail "doctor says nothing of tool_latency = normal" ||
	ok "doctor says nothing of tool_latency = normal"
SANDRUN_RUNNER_TOOL_LATENCY=low expect "doctor passes with tool_latency = low" 0 "$S" doctor
if [ -w /dev/cpu_dma_latency ]; then
	grep_in "doctor: the CPU latency device can be written" "$T/out" \
		"\[ok  \] tool latency  *low: /dev/cpu_dma_latency is writable"
else
	grep_in "doctor: the CPU latency device cannot be written" "$T/out" \
		"\[warn\] tool latency  *low, but /dev/cpu_dma_latency is not writable"
fi
SANDRUN_RUNNER_PROVIDER=nosuch expect "doctor fails on a missing provider" 1 "$S" doctor
grep_in "doctor names it" "$T/out" "no provider plugin 'nosuch'"

printf '[runner]\nlog_level = loud\n' >"$T/bad.conf"
expect "invalid value is a config error" 3 "$S" --config "$T/bad.conf" plugins
grep_in "error names file line key value" "$T/err" \
	"$T/bad.conf:2: \[runner\] key 'log_level': invalid value 'loud'"
printf '[runner]\nprovidr = local\n' >"$T/typo.conf"
expect "unknown key still runs" 0 "$S" --config "$T/typo.conf" plugins
grep_in "unknown key warned" "$T/err" "typo.conf:2: \[runner\] unknown key 'providr' ignored"
expect "missing --config file is a config error" 3 "$S" --config "$T/none.conf" plugins
grep_in "missing file named" "$T/err" "none.conf: cannot read"
expect "doctor fails on a missing --config file" 1 "$S" --config "$T/none.conf" doctor
grep_in "doctor says the config failed" "$T/out" "FAIL.*config"

before=$(ls "$T/state/plugins/provider.local/sandboxes" | wc -l)
expect "exec propagates the exit code" 5 "$S" exec -- sh -c 'echo out; exit 5'
grep_in "exec output" "$T/out" "^out$"
test "$(ls "$T/state/plugins/provider.local/sandboxes" | wc -l)" -eq "$before" &&
	ok "exec removed its sandbox" || fail "exec removed its sandbox"
expect "exec without a command" 2 "$S" exec
expect "exec of a missing program" 127 "$S" exec -- /nonexistent/prog
printf 'from stdin\n' | expect "exec -i forwards stdin" 0 "$S" exec -i -- cat
grep_in "stdin arrived" "$T/out" "from stdin"
expect "bad --network value" 2 "$S" exec --network maybe -- true
if command -v bwrap >/dev/null; then
	expect "network off" 0 "$S" exec --network off -- cat /proc/net/dev
	test "$(grep -c ':' "$T/out")" -eq 1 && ok "only loopback" || fail "only loopback"
	expect "network off: a missing program" 127 "$S" exec --network off -- /nonexistent
	expect "network off: a missing program in PATH" 127 "$S" exec --network off -- no-such-program-here
	expect "network off: exit codes pass through" 7 "$S" exec --network off -- sh -c 'exit 7'
else
	echo "skip - network off: bubblewrap not installed (.ci/run installs it)"
fi
# image-recipe: a build context for a remote provider's image.
SANDRUN_RUNNER_HARNESSES=claude,pi expect "image-recipe" 0 "$S" image-recipe --shim "$SANDRUN_SHIM" "$T/img"
grep_in "it says where the Dockerfile is" "$T/out" "$T/img/Dockerfile"
cmp -s "$SANDRUN_SHIM" "$T/img/sandrun-shim" && ok "the shim is in the context" || fail "the shim is in the context"
grep_in "the pinned Node.js" "$T/img/Dockerfile" "npm install --prefix /opt/sandrun/harness/node .*'node-linux-\(x64\|arm64\)@[0-9.]*'$"
grep_in "claude's adapter" "$T/img/Dockerfile" "prefix /opt/sandrun/harness/claude .*claude-agent-acp@"
grep_in "pi's packages" "$T/img/Dockerfile" "prefix /opt/sandrun/harness/pi .*'pi-acp@.*pi-coding-agent@"
grep -q codex "$T/img/Dockerfile" && fail "only the enabled harnesses" || ok "only the enabled harnesses"
grep_in "the shim copied in" "$T/img/Dockerfile" "^COPY sandrun-shim /opt/sandrun/bin/sandrun-shim$"
expect "image-recipe with a dynamic executable as shim" 1 "$S" image-recipe --shim /bin/sh "$T/img2"
grep_in "said it must be static" "$T/err" "must be static"
expect "image-recipe with a non-executable as shim" 1 "$S" image-recipe --shim /etc/hostname "$T/img2"
expect "image-recipe with an unknown harness" 4 "$S" image-recipe --shim "$SANDRUN_SHIM" --harness nosuch "$T/img2"
test ! -e "$T/img2" && ok "a refused recipe writes nothing" || fail "a refused recipe writes nothing"
expect "image-recipe with a bad base" 2 "$S" image-recipe --base 'x y' "$T/img2"
expect "image-recipe without a directory" 2 "$S" image-recipe
finish
