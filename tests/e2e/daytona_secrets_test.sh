#!/bin/sh
# The Daytona provider's side of credential isolation, against the Daytona
# emulator (tests/emulators/daytona.mjs) with the real claude adapter and
# the scripted model behind the emulator's egress proxy: one organization
# secret per credential binding (two here: ANTHROPIC_API_KEY and
# ANTHROPIC_AUTH_TOKEN), each with exactly its one host, linked through the
# sandbox's secrets and never its env; the lease record; the sandbox
# deleted before its secrets; a partial failure; the runner killed before
# and after the sandbox exists, then `sandrun janitor` (the provider's
# maintain), twice at once, sparing foreign secrets; a secret deletion
# that fails, reported and retried until clean.
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
# J EXPR: EXPR (JavaScript, the JSON on stdin as j) printed.
cat >"$T/j.mjs" <<'JS'
let s = '';
process.stdin.on('data', (d) => { s += d; }).on('end', () => {
  const r = new Function('j', `return (${process.argv[2]});`)(JSON.parse(s || 'null'));
  console.log(typeof r === 'string' ? r : JSON.stringify(r));
});
JS
J() { node "$T/j.mjs" "$1"; }
OURS='(x) => /^sandrun_[0-9a-f]{16}_[0-9]+$/.test(x.name)'

printf '[{"text":"secrets turn done"},{"text":"two"},{"text":"three"},{"text":"four"},{"text":"five"},{"text":"six"}]\n' \
	>"$T/script.json"
node "$SANDRUN_SRCDIR/tests/emulators/anthropic.mjs" --script "$T/script.json" \
	--log "$T/model.ndjson" >"$T/model.out" 2>"$T/model.err" &
model_pid=$!
wait_for "$T/model.out"
model_port=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' "$T/model.out")
node "$SANDRUN_SRCDIR/tests/emulators/daytona.mjs" --state-dir "$T/emu" --api-key dtn-test-key \
	--log "$T/emu.log" --egress-host "api.model.test=127.0.0.1:$model_port" \
	>"$T/emu.out" 2>"$T/emu.err" &
emu_pid=$!
trap 'kill $emu_pid $model_pid 2>/dev/null; rm -rf "$T"' EXIT
wait_for "$T/emu.out"
api=$(field apiUrl "$T/emu.out")
admin=$(field adminUrl "$T/emu.out")
export SANDRUN_PROVIDER_DAYTONA_API_URL="$api"
export SANDRUN_PROVIDER_DAYTONA_API_KEY=dtn-test-key
[ -n "$admin" ] && [ -n "$model_port" ] && ok "the emulators run" ||
	{ fail "the emulators run"; cat "$T/emu.err" "$T/model.err"; finish; exit 1; }
model="http://api.model.test:$model_port"
export SANDRUN_SECRETS_ALLOW_HOSTS="api.model.test:$model_port"
KEY="sk-ant-key-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
TOKEN="sk-ant-token-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export ANTHROPIC_API_KEY="$KEY" ANTHROPIC_AUTH_TOKEN="$TOKEN"
# The plugin's key-value records (in the store): "KEY VALUE" lines.
kv() { "$SANDRUN_SESSION_TOOL" "$SANDRUN_RUNNER_STATE_DIR" kv provider.daytona; }

secrets() { curl -s -H "Authorization: Bearer dtn-test-key" "$api/secret"; }
ours() { secrets | J "j.filter($OURS).length"; }
has_secret() { secrets | J "j.some((x) => x.name === '$1')"; }
leases() { kv | grep -c '^lease\.'; }
boxes() { curl -s -H "Authorization: Bearer dtn-test-key" "$api/sandbox" | J 'j.items.length'; }
fault() { curl -s -X POST -H 'Content-Type: application/json' --data "$1" "$admin/faults" >/dev/null; }
calls() { curl -s "$admin/calls" | J "j['$1'] || 0"; }
# kill_runner PID: the driver and the sandrun it started, with SIGKILL.
kill_runner() { kill_tree "$1"; }

# ---- a turn with two bindings: two secrets, linked, never in env ----
expect "a turn with two credential bindings" 0 $drive "$T/evA" - - "$S" run --json \
	--model-url "$model" "hello"
cp "$T/err" "$T/errA"
box=$(sed -n 's/.*"type":"run.finished".*"sandbox":"\([^"]*\)".*/\1/p' "$T/evA")
secrets >"$T/secA.json"
[ "$(J "j.filter($OURS).length" <"$T/secA.json")" = 2 ] && ok "two secrets, one per binding" ||
	{ fail "two secrets, one per binding"; cat "$T/secA.json"; }
[ "$(J "j.filter($OURS).every((x) => JSON.stringify(x.hosts) === '[\"api.model.test\"]')" \
	<"$T/secA.json")" = true ] && ok "each with exactly the model's host" ||
	fail "each with exactly the model's host"
lease=$(J "j.filter($OURS)[0].name.split('_')[1]" <"$T/secA.json")
[ "$(J "j.filter($OURS).map((x) => x.name).sort().join(' ')" <"$T/secA.json")" = \
	"sandrun_${lease}_1 sandrun_${lease}_2" ] && ok "named <prefix>_<lease>_<n>" ||
	fail "named <prefix>_<lease>_<n>"
kv | grep "^lease\.$lease " >"$T/lease"
grep_in "the lease record names the sandbox" "$T/lease" "\"sandbox\":\"$box\""
grep_in "the lease is active" "$T/lease" '"state":"active"'
curl -s "$admin/sandbox/$box" >"$T/boxA.json"
[ "$(J 'j.secrets.map((x) => x.env).sort().join(" ")' <"$T/boxA.json")" = \
	"ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN" ] && ok "linked through the sandbox's secrets" ||
	{ fail "linked through the sandbox's secrets"; cat "$T/boxA.json"; }
[ "$(J '"ANTHROPIC_API_KEY" in j.env || "ANTHROPIC_AUTH_TOKEN" in j.env' <"$T/boxA.json")" = false ] &&
	ok "not through its env" || fail "not through its env"
[ "$(J 'j.labels["sandrun.lease"]' <"$T/boxA.json")" = "$lease" ] &&
	ok "labelled sandrun.lease" || fail "labelled sandrun.lease"
expect "reconnect" 0 "$S" sandbox reconnect "$box" --json
cp "$T/out" "$T/reconnect.json"
ph_key=$(J 'j.placeholders.ANTHROPIC_API_KEY' <"$T/reconnect.json")
ph_token=$(J 'j.placeholders.ANTHROPIC_AUTH_TOKEN' <"$T/reconnect.json")
[ "$(J "j.filter($OURS).map((x) => x.placeholder).sort().join(' ')" <"$T/secA.json")" = \
	"$(printf '%s\n%s\n' "$ph_key" "$ph_token" | sort | tr '\n' ' ' | sed 's/ $//')" ] &&
	ok "reconnect gives the secrets' placeholders" ||
	{ fail "reconnect gives the secrets' placeholders"; cat "$T/reconnect.json"; }
expect "a process in the sandbox" 0 "$S" sandbox exec "$box" -- sh -c \
	'echo "$ANTHROPIC_API_KEY $ANTHROPIC_AUTH_TOKEN"'
grep_in "sees the placeholders" "$T/out" "^$ph_key $ph_token\$"
boxdir=$(field dir "$T/boxA.json")
grep -rqF -e "$KEY" -e "$TOKEN" "$boxdir" "$T/evA" "$T/errA" "$T/emu.log" 2>/dev/null &&
	fail "a value is in the sandbox's files, the events or a log" ||
	ok "no value in the sandbox's files, the events or the logs"
grep -q -e "\"key_sha256\":\"$(sha256 "$KEY")\"" -e "\"key_sha256\":\"$(sha256 "$TOKEN")\"" \
	"$T/model.ndjson" && ok "the model got a real value (through the proxy)" ||
	fail "the model got a real value (through the proxy)"

# ---- destroy: the sandbox's deletion confirmed first, then its secrets ----
n0=$(wc -l <"$T/emu.log")
expect "sandbox destroy" 0 "$S" sandbox destroy "$box"
tail -n +"$((n0 + 1))" "$T/emu.log" >"$T/destroy.log"
del_box=$(grep -n '"route":"DELETE /api/sandbox/{id}"' "$T/destroy.log" | head -n 1 | cut -d: -f1)
gone=$(grep -n "\"sandboxId\":\"$box\",\"state\":\"destroyed\"" "$T/destroy.log" | head -n 1 | cut -d: -f1)
del_sec=$(grep -n '"route":"DELETE /api/secret/{id}"' "$T/destroy.log" | head -n 1 | cut -d: -f1)
[ -n "$del_box" ] && [ -n "$gone" ] && [ -n "$del_sec" ] && [ "$del_box" -lt "$gone" ] &&
	[ "$gone" -lt "$del_sec" ] && ok "the sandbox was gone before a secret was deleted" ||
	{ fail "the sandbox was gone before a secret was deleted ($del_box $gone $del_sec)"; cat "$T/destroy.log"; }
[ "$(grep -c '"route":"DELETE /api/secret/{id}"' "$T/destroy.log")" = 2 ] &&
	ok "both secrets deleted, once each" || fail "both secrets deleted, once each"
[ "$(ours)" = 0 ] && [ "$(leases)" = 0 ] && ok "no secret, no lease left" ||
	fail "no secret, no lease left"

# ---- the 2nd of 2 secret creations fails ----
curl -s -X DELETE "$admin/calls" >/dev/null
fault '{"route":"POST /api/secret","status":500,"count":1,"after":1}'
$drive "$T/evC" - - "$S" run --json --model-url "$model" "partial" >/dev/null 2>"$T/errC"
rc=$?
[ "$rc" -ne 0 ] && ok "the run fails (exit $rc)" || fail "the run fails"
grep_in "run.failed, sandbox_failed" "$T/evC" '"type":"run.failed","code":"sandbox_failed"'
grep_in "the message names the binding and says the 1st went" "$T/evC" \
	"credential binding 'ANTHROPIC_[A-Z_]*': secret 'sandrun_[0-9a-f]*_2' not created.*HTTP 500.*1 secret(s) created for it were deleted"
[ "$(calls 'POST /api/secret')" = 2 ] && [ "$(calls 'POST /api/sandbox')" = 0 ] &&
	ok "two secret creations, no sandbox" || fail "two secret creations, no sandbox"
[ "$(ours)" = 0 ] && [ "$(leases)" = 0 ] && ok "the 1st secret is deleted, no lease remains" ||
	fail "the 1st secret is deleted, no lease remains"

# Foreign secrets: one with the prefix that no lease names, one without.
for n in sandrun_foreign_1 team_api_key; do
	curl -s -X POST -H "Authorization: Bearer dtn-test-key" -H 'Content-Type: application/json' \
		--data "{\"name\":\"$n\",\"value\":\"theirs\",\"hosts\":[\"api.other.test\"]}" \
		"$api/secret" >/dev/null
done

# ---- killed after creating the secrets, before the sandbox exists ----
fault '{"route":"POST /api/sandbox","status":500,"count":1,"latencyMs":3000}'
curl -s -X DELETE "$admin/calls" >/dev/null
$drive "$T/evD" - - "$S" run --json --model-url "$model" "killed early" >/dev/null 2>&1 &
runner=$!
for _ in $(seq 200); do [ "$(calls 'POST /api/sandbox')" -ge 1 ] && break; sleep 0.05; done
kill_runner "$runner"
[ "$(ours)" = 2 ] && [ "$(leases)" = 1 ] && [ "$(boxes)" = 0 ] &&
	ok "killed before the sandbox: 2 secrets and their lease are left" ||
	fail "killed before the sandbox: 2 secrets and their lease are left ($(ours), $(leases), $(boxes))"
sleep 3 # the hung POST /sandbox ends (500): nothing was created
expect "janitor --dry-run" 0 "$S" janitor --dry-run --grace 0 --json
grep_in "would delete our secrets" "$T/out" '"kind":"secret","name":"sandrun_[0-9a-f]*_1","verdict":"would_delete"'
grep_in "and the lease" "$T/out" '"kind":"lease","name":"[0-9a-f]*","verdict":"would_delete"'
grep_in "reports the foreign one" "$T/out" '"name":"sandrun_foreign_1","verdict":"foreign"'
grep -q team_api_key "$T/out" && fail "a secret without the prefix was reported" ||
	ok "a secret without the prefix is not even reported"
[ "$(ours)" = 2 ] && [ "$(leases)" = 1 ] && ok "the dry run changed nothing" ||
	fail "the dry run changed nothing"
expect "janitor --grace 2h keeps the young lease" 0 "$S" janitor --json
grep_in "kept: younger than the grace period" "$T/out" '"kind":"lease".*"verdict":"kept".*younger than the grace period'
expect "janitor" 0 "$S" janitor --grace 0 --json
grep_in "deleted our secrets" "$T/out" '"kind":"secret","name":"sandrun_[0-9a-f]*_2","verdict":"deleted"'
[ "$(ours)" = 0 ] && [ "$(leases)" = 0 ] && ok "nothing of ours is left" || fail "nothing of ours is left"
[ "$(has_secret sandrun_foreign_1)" = true ] && [ "$(has_secret team_api_key)" = true ] &&
	ok "the foreign secrets are untouched" || fail "the foreign secrets are untouched"

# ---- killed after the sandbox exists; two janitors at once ----
$drive "$T/evE" - - "$S" run --json --model-url "$model" "killed late" >/dev/null 2>&1 &
runner=$!
wait_grep "$T/evE" '"type":"sandbox.acquired"'
kill_runner "$runner"
boxE=$(sed -n 's/.*"type":"sandbox.acquired".*"sandbox":"\([^"]*\)".*/\1/p' "$T/evE" | head -n 1)
[ -n "$boxE" ] && [ "$(ours)" = 2 ] && kv | grep -q "^lease\..*\"sandbox\":\"$boxE\"" &&
	ok "killed after the sandbox: its lease names it" ||
	fail "killed after the sandbox: its lease names it ($boxE, $(ours))"
curl -s -X DELETE "$admin/calls" >/dev/null
"$S" janitor --grace 0 --json >"$T/j1.out" 2>"$T/j1.err" &
j1=$!
"$S" janitor --grace 0 --json >"$T/j2.out" 2>"$T/j2.err"
rc2=$?
wait $j1
rc1=$?
[ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] && ok "two janitors at once both succeed" ||
	{ fail "two janitors at once both succeed ($rc1, $rc2)"; cat "$T/j1.out" "$T/j1.err" "$T/j2.out" "$T/j2.err"; }
[ "$(boxes)" = 0 ] && [ "$(ours)" = 0 ] && [ "$(leases)" = 0 ] &&
	ok "nothing is left behind: no sandbox, secret or lease" ||
	fail "nothing is left behind ($(boxes) sandboxes, $(ours) secrets, $(leases) leases)"
[ "$(calls 'DELETE /api/secret/{id}')" = 2 ] && ok "each secret was deleted once" ||
	fail "each secret was deleted once ($(calls 'DELETE /api/secret/{id}') deletions)"
[ "$(has_secret sandrun_foreign_1)" = true ] && [ "$(has_secret team_api_key)" = true ] &&
	ok "the foreign secrets are still untouched" || fail "the foreign secrets are still untouched"

# ---- a secret deletion fails after the sandbox is deleted ----
expect "a turn" 0 $drive "$T/evF" - - "$S" run --json --model-url "$model" "once more"
boxF=$(sed -n 's/.*"type":"run.finished".*"sandbox":"\([^"]*\)".*/\1/p' "$T/evF")
fault '{"route":"DELETE /api/secret/{id}","status":500,"count":3}'
expect "sandbox destroy (its secrets' deletion fails)" 0 "$S" sandbox destroy "$boxF"
grep_in "reported" "$T/err" "the deletion of 2 secret(s) failed"
kv | grep -q '^lease\..*"state":"cleanup_pending"' && ok "the lease is cleanup_pending" ||
	fail "the lease is cleanup_pending"
[ "$(ours)" = 2 ] && ok "the secrets are still there" || fail "the secrets are still there"
# (doctor's exit status also covers the harness's node: not checked here)
"$S" doctor >"$T/doctor.out" 2>&1
grep_in "doctor reports the pending cleanup" "$T/doctor.out" "cleanup pending.*lease"
expect "janitor retries: one deletion fails again" 1 "$S" janitor --grace 0
grep_in "reported pending" "$T/out" "^pending .*secret"
[ "$(ours)" = 1 ] && ok "one secret is left" || fail "one secret is left ($(ours))"
expect "janitor again" 0 "$S" janitor --grace 0
[ "$(ours)" = 0 ] && [ "$(leases)" = 0 ] && ok "finally cleaned" || fail "finally cleaned"
[ "$(has_secret sandrun_foreign_1)" = true ] && [ "$(has_secret team_api_key)" = true ] &&
	ok "the foreign secrets survived it all" || fail "the foreign secrets survived it all"
curl -s "$admin/calls" >"$T/calls.json"
echo "# provider API calls of the last part: $(cat "$T/calls.json")"
finish
