#!/bin/sh
# The Daytona emulator (tests/emulators/daytona.mjs) driven by the official
# @daytonaio/sdk (tests/peers/daytona_sdk_check.mjs): sandbox CRUD and its
# state machine, toolbox, sessions, preview, secrets, fault injection; then
# SIGTERM must take every process the emulator started with it. Needs the
# SDK in $SANDRUN_NPM_DIR (scripts/npm-peers installs it); skips with a
# reason when it is absent, and fails when CI=true.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
emu="$SANDRUN_SRCDIR/tests/emulators/daytona.mjs"
check="$SANDRUN_SRCDIR/tests/peers/daytona_sdk_check.mjs"
command -v node >/dev/null || missing "node is not installed (scripts/check installs it)"
sdk_pkg="${SANDRUN_NPM_DIR:-/nonexistent}/node_modules/@daytonaio/sdk/package.json"
[ -f "$sdk_pkg" ] ||
	missing "@daytonaio/sdk is not installed in SANDRUN_NPM_DIR='${SANDRUN_NPM_DIR:-}' (scripts/npm-peers installs it)"
# The SDK runs on sandrun's pinned Node when it is there, else on the host's.
sdk_node=node
pinned="${SANDRUN_HARNESS_DIR:-/nonexistent}/node/node_modules/.bin/node"
[ -x "$pinned" ] && sdk_node=$pinned

key=emu-key-$$
node "$emu" --state-dir "$T/daytona" --api-key "$key" --transition-ms 30 >"$T/emu.out" 2>"$T/emu.err" &
EMU_PID=$!
trap 'kill $EMU_PID 2>/dev/null; rm -rf "$T"' EXIT
wait_for "$T/emu.out"
BASE=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$T/emu.out")
[ -n "$BASE" ] && ok "emulator printed its URLs" || { fail "emulator printed its URLs"; cat "$T/emu.err"; finish; exit 1; }
grep_in "output line names the api base" "$T/emu.out" "\"apiUrl\":\"$BASE/api\""
grep_in "output line names the toolbox base" "$T/emu.out" "\"toolboxUrl\":\"$BASE/toolbox\""

timeout 60 "$sdk_node" "$check" "$SANDRUN_NPM_DIR" "$BASE" "$key" >"$T/sdk.out" 2>&1
rc=$?
grep -v '^ok - ' "$T/sdk.out" | sed 's/^/  sdk: /'
n_ok=$(grep -c '^ok - ' "$T/sdk.out")
[ "$rc" -eq 0 ] && [ "$n_ok" -ge 50 ] && ok "SDK checks against the emulator ($n_ok passed)" ||
	fail "SDK checks against the emulator (exit $rc, $n_ok passed)"

# sandrun sandbox exec on Daytona: standard input as written, in whole
# lines (the toolbox appends a newline to any input that lacks one), a last
# line without its newline given one; input that is not text refused.
export SANDRUN_RUNNER_PROVIDER=daytona SANDRUN_PROVIDER_DAYTONA_API_URL="$BASE/api" \
	SANDRUN_PROVIDER_DAYTONA_API_KEY="$key" SANDRUN_PROVIDER_DAYTONA_SECRETS=off
id=$("$SANDRUN_BIN" sandbox create 2>"$T/create.err")
[ -n "$id" ] && ok "sandbox create on daytona" || { fail "sandbox create on daytona"; cat "$T/create.err"; }
{ printf 'one\ntw'; sleep 1; printf 'o\nthree'; } | timeout 60 "$SANDRUN_BIN" sandbox exec "$id" -i -- head -n 3 \
	>"$T/exec.out" 2>"$T/exec.err"
rc=$?
[ "$rc" -eq 0 ] && [ "$(cat "$T/exec.out")" = "$(printf 'one\ntwo\nthree')" ] &&
	ok "sandbox exec -i: a line cut in two arrives whole, the last one with its newline" ||
	{ fail "sandbox exec -i: a line cut in two arrives whole (exit $rc)"; od -c "$T/exec.out" | head; cat "$T/exec.err"; }
printf 'ok\n\377\n' | timeout 60 "$SANDRUN_BIN" sandbox exec "$id" -i -- cat >"$T/exec.out" 2>"$T/exec.err"
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "carries text only" "$T/exec.err" &&
	ok "sandbox exec -i: input that is not text is refused, the process ended (exit $rc)" ||
	{ fail "sandbox exec -i: input that is not text is refused (exit $rc)"; cat "$T/exec.err"; }
"$SANDRUN_BIN" sandbox destroy "$id" >/dev/null 2>&1

# SIGTERM: the emulator exits and kills the processes it started.
marker=$(sed -n 's/^# marker //p' "$T/sdk.out")
# "[m]arker-..." matches the marker but not grep's own command line.
running() { grep -l -a -e "[m]${marker#m}" /proc/[0-9]*/cmdline 2>/dev/null | head -n 1; }
[ -n "$marker" ] && [ -n "$(running)" ] && ok "a sandbox process runs before SIGTERM" || fail "a sandbox process runs before SIGTERM"
kill -TERM "$EMU_PID"
for _ in $(seq 50); do kill -0 "$EMU_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$EMU_PID" 2>/dev/null && fail "emulator exits on SIGTERM" || ok "emulator exits on SIGTERM"
wait "$EMU_PID"
[ $? -eq 0 ] && ok "exit status 0" || fail "exit status 0"
for _ in $(seq 20); do [ -z "$(running)" ] && break; sleep 0.1; done
[ -z "$(running)" ] && ok "no sandbox process left after SIGTERM" || fail "no sandbox process left after SIGTERM"
[ -s "$T/emu.err" ] && sed 's/^/  emulator stderr: /' "$T/emu.err" | head -20
finish
