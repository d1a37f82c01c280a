#!/bin/sh
# sandrun run without a real agent: every plan gate refuses before any
# sandbox exists, and a misbehaving agent (tests/emulators/fake_acp.mjs)
# fails the run clearly, never hangs.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
S=$SANDRUN_BIN
export SANDRUN_RUNNER_HARNESSES=claude,pi
boxes="$T/state/plugins/provider.local/sandboxes"
count() { ls "$boxes" 2>/dev/null | wc -l; }

gate() { # gate NAME CODE ARGS...
	name=$1 code=$2
	shift 2
	before=$(count)
	expect "$name refused (exit 5)" 5 "$S" run --json "$@"
	grep_in "$name: code $code" "$T/out" "\"code\":\"$code\""
	[ "$(count)" = "$before" ] && ok "$name: no sandbox made" || fail "$name: no sandbox made"
}
start_callbacks
write_tools "$T/tools.json"
printf '[{"name":"docs","type":"http","url":"https://10.1.2.3/mcp","headers":[]}]' >"$T/private.json"
printf '[{"name":"sandrun-tools","command":"x","args":[],"env":[]}]' >"$T/reserved.json"
printf '[{"name":"docs","type":"http","url":"https://docs.example.com/mcp","headers":[]}]' >"$T/ok.json"
printf '[{"name":"a","kind":"magic"}]' >"$T/bad-tools.json"

gate "empty prompt" no_prompt ""
SANDRUN_RUNNER_PROVIDER=nosuch gate "missing provider" provider_not_enabled hi
gate "harness not enabled" harness_not_enabled --harness codex hi
SANDRUN_PROVIDER_LOCAL_BWRAP=off gate "network off without bwrap" network_unenforceable --network off hi
gate "tools with a strict restricted network" tools_bypass_network --network off --tools "$T/tools.json" hi
gate "MCP servers on pi" mcp_unsupported --harness pi --mcp-servers "$T/ok.json" hi
gate "reserved MCP server name" mcp_server_reserved --mcp-servers "$T/reserved.json" hi
gate "private MCP URL" mcp_url_refused --mcp-servers "$T/private.json" hi
SANDRUN_RUNNER_CREDENTIAL_ISOLATION=required ANTHROPIC_API_KEY=sk-ant-gate-1 \
	gate "credential isolation required on local" credential_isolation_unavailable hi
grep_in "the refusal names the provider" "$T/out" "provider 'local' cannot keep credentials out"
SANDRUN_RUNNER_CREDENTIAL_ISOLATION=sometimes expect "a bad credential_isolation is a config error" 3 \
	"$S" run --json hi
grep_in "the config error names the key" "$T/err" "key 'credential_isolation': invalid value 'sometimes'"
printf '[{"name":"shell","command":"/bin/sh","args":["-c","id"],"env":[]}]' >"$T/stdio.json"
gate "a user MCP server that launches a command" mcp_server_stdio --mcp-servers "$T/stdio.json" hi
# A name that resolves to a private or loopback address (this machine's
# name usually does; checked first).
me=$(hostname)
case "$(getent ahosts "$me" 2>/dev/null | awk 'NR == 1 { print $1 }')" in
127.*|10.*|192.168.*|172.1[6-9].*|172.2[0-9].*|172.3[01].*|::1|fe80:*)
	printf '[{"name":"me","type":"http","url":"https://%s/mcp","headers":[]}]' "$me" >"$T/me.json"
	gate "an MCP host name resolving to a private address" mcp_url_refused --mcp-servers "$T/me.json" hi
	grep_in "the address is named" "$T/out" "resolves to"
	SANDRUN_RUNNER_MCP_ALLOW_HOSTS="other.example,$me" expect "an allow-listed host passes the plan" 6 \
		"$S" run --json --mcp-servers "$T/me.json" hi
	;;
*) echo "skip - $me does not resolve to a private address here" ;;
esac
SANDRUN_RUNNER_MCP_ALLOW_HOSTS=10.1.2.3 expect "the allow-list is configurable" 6 \
	"$S" run --json --mcp-servers "$T/private.json" hi
grep -q mcp_url_refused "$T/out" && fail "allow-listed host refused" || ok "allow-listed host not refused"
gate "unknown session" unknown_session --session ses-0000000000000000 hi
gate "bad session id" unknown_session --session ../../etc hi
gate "invalid tools file" tools_invalid --tools "$T/bad-tools.json" hi
# A callback at the cloud metadata address (written in hex), or with
# credentials in its URL: refused before any sandbox exists.
printf '[{"name":"meta","description":"x","permission":"allow","input_schema":{"type":"object"},"callback":{"url":"http://0xa9fea9fe/latest/"}}]' >"$T/meta-tools.json"
gate "a tool callback at a link-local address" tool_callback_refused --tools "$T/meta-tools.json" hi
grep_in "the refusal names the tool and why" "$T/out" "tool 'meta': callback: 'http://0xa9fea9fe/latest/' is a link-local address"
printf '[{"name":"cred","description":"x","permission":"allow","input_schema":{"type":"object"},"callback":{"url":"http://u:secret-pw@127.0.0.1:9/"}}]' >"$T/cred-tools.json"
gate "a tool callback with credentials in its URL" tool_callback_refused --tools "$T/cred-tools.json" hi
SANDRUN_RUNNER_CALLBACK_ALLOW_HOSTS=0xa9fea9fe expect "an allow-listed callback host passes the plan" 6 \
	"$S" run --json --tools "$T/meta-tools.json" hi
grep -q tool_callback_refused "$T/out" && fail "allow-listed callback refused" || ok "allow-listed callback not refused"
expect "tools serve refuses it too" 3 "$S" tools serve --tools "$T/meta-tools.json" --relay-dir "$T/relay-meta"
grep_in "  naming it" "$T/err" "tool 'meta': callback: .* link-local"
SANDRUN_RUNNER_CALLBACK_ALLOW_HOSTS='a/b' expect "a bad callback_allow_hosts is a config error" 3 "$S" run --json hi
expect "no prompt at all is a usage error" 2 "$S" run
expect "--help documents the gates' exit code" 0 "$S" run --help
grep_in "help: exit 5" "$T/out" "5 refused before any sandbox existed"

# A misbehaving agent in place of the adapter.
export SANDRUN_HARNESS_CLAUDE_COMMAND="$SANDRUN_SRCDIR/tests/emulators/fake_acp.mjs"
start=$(date +%s)
SANDRUN_ACP_TIMEOUT_MS=1500 SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=silent \
	expect "an agent that never answers initialize" 6 "$S" run --json go
grep_in "bounded wait, clear error" "$T/out" '"code":"agent_timeout".*initialize'
[ $(( $(date +%s) - start )) -lt 10 ] && ok "the wait is bounded" || fail "the wait is bounded"
SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=exit_mid_turn \
	expect "an agent that exits mid-turn" 6 "$S" run --json go
grep_in "run.failed agent_exited" "$T/out" '"code":"agent_exited"'
grep_in "with the tail of its stderr" "$T/out" '"stderr_tail":"fake agent: the model backend crashed'
SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=fs expect "fs requests" 0 "$S" run --json go
grep_in "outside the workspace refused" "$T/out" "'/etc/hostname' is outside the workspace"
grep_in "../ escape refused" "$T/out" "meta.json' is outside the workspace"
grep_in "writing outside refused" "$T/out" "sandrun-fake-acp-outside.txt' is outside the workspace"
test ! -e /tmp/sandrun-fake-acp-outside.txt && ok "nothing written outside" || fail "nothing written outside"
grep_in "writing inside works" "$T/out" '\\"write_inside\\":{\\"result\\":null}'
rm -f "$T/out"
SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=cancel "$S" run --json go >"$T/out" 2>"$T/err" &
pid=$!
wait_grep "$T/out" agent.message
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 130 ] && ok "Ctrl-C: exit 130" || fail "Ctrl-C: exit 130 (got $rc)"
grep_in "Ctrl-C: session/cancel ends the turn" "$T/out" '"stop_reason":"cancelled"'
# A reader of the events that goes away (| head): sandrun is not killed
# by SIGPIPE mid-turn; the turn ends and is recorded.
( SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt "$S" run --json slow:300 2>"$T/err"
  echo $? >"$T/rc" ) | head -c 1 >/dev/null
rc=$(cat "$T/rc")
[ "$rc" != 141 ] && ok "a reader gone: no SIGPIPE death (exit $rc)" ||
	fail "a reader gone: killed by SIGPIPE (exit $rc)"

# The sandbox's directory is its agent's: links it plants where the runner
# writes the tool specs or keeps the relay are removed, never followed (a
# sweep emptied, and a chmod changed, the host directory a relay link named;
# the specs were written through a link into a host file).
SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt expect "a turn with tools" 0 \
	"$S" run --json --tools "$T/tools.json" ok
hses=$(sed -n 's/.*"type":"run.finished".*"session":"\([^"]*\)".*/\1/p' "$T/out" | head -n 1)
hbox=$(sed -n 's/.*"type":"run.finished".*"sandbox":"\([^"]*\)".*/\1/p' "$T/out" | head -n 1)
mkdir -p "$T/hostdir" && chmod 755 "$T/hostdir"
echo keep >"$T/hostdir/host-1.req"; echo keep >"$T/hostdir/host-2.res"
echo host-specs >"$T/host-specs"
"$S" sandbox exec "$hbox" -- sh -c "cd .. && rm -rf relay tool-specs.json && ln -s '$T/hostdir' relay &&
	ln -s '$T/host-specs' tool-specs.json && echo planted" >"$T/plant" 2>&1
grep -q planted "$T/plant" && ok "the agent planted its links" || { fail "the agent planted its links"; cat "$T/plant"; }
SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt expect "the next turn" 0 \
	"$S" run --json --session "$hses" --tools "$T/tools.json" ok
[ -f "$T/hostdir/host-1.req" ] && [ -f "$T/hostdir/host-2.res" ] &&
	ok "no host file was swept through the relay link" || fail "no host file was swept through the relay link"
[ "$(stat -c %a "$T/hostdir")" = 755 ] && ok "the host directory's mode is unchanged" ||
	fail "the host directory's mode is unchanged ($(stat -c %a "$T/hostdir"))"
[ "$(cat "$T/host-specs")" = host-specs ] && ok "the specs were not written through the link" ||
	fail "the specs were not written through the link"
"$S" sandbox destroy "$hbox" >/dev/null 2>&1

# Two turns on one session at once (two sandrun processes, no service to
# lease it): both run from turn 1's pointer; the one that writes second
# loses the compare-and-set, says so, and exits 6; the pointer is the
# winner's turn 2.
SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt expect "a first turn" 0 "$S" run --json ok
ses=$(sed -n 's/.*"type":"run.finished".*"session":"\([^"]*\)".*/\1/p' "$T/out" | head -n 1)
SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt "$S" run --json --session "$ses" slow:2500 \
	>"$T/slow.out" 2>"$T/slow.err" &
slow=$!
wait_grep "$T/slow.out" '"text":"working..."'
SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt expect "a turn at once on the session" 0 \
	"$S" run --json --session "$ses" ok
wait $slow
rc=$?
[ "$rc" -eq 6 ] && ok "the turn that wrote second fails (exit 6)" ||
	fail "the turn that wrote second fails (exit $rc, wanted 6)"
grep_in "... with session_conflict" "$T/slow.out" '"code":"session_conflict"'
"$SANDRUN_SESSION_TOOL" "$SANDRUN_RUNNER_STATE_DIR" get "$ses" >"$T/rec" 2>&1
grep_in "the pointer is the winner's turn 2" "$T/rec" '"turn":2'
# The configuration's provider changed (local to daytona): the session is
# refused, naming the provider that continues it, and nothing is deleted.
SANDRUN_RUNNER_PROVIDER=daytona SANDRUN_PROVIDER_DAYTONA_API_URL=http://127.0.0.1:9/api \
	SANDRUN_PROVIDER_DAYTONA_API_KEY=k expect "another provider: the turn is refused (exit 5)" 5 \
	"$S" run --json --session "$ses" ok
grep_in "... as session_provider_changed" "$T/out" '"code":"session_provider_changed".*provider .local.'
"$SANDRUN_SESSION_TOOL" "$SANDRUN_RUNNER_STATE_DIR" get "$ses" >"$T/rec" 2>&1
grep_in "... and the session is kept" "$T/rec" '"turn":2'
SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt expect "... which local continues" 0 \
	"$S" run --json --session "$ses" ok
grep_in "... as turn 3" "$T/out" '"type":"run.started".*"turn":3'
# Endpoints: a runner-side service reaches the agent as an environment
# variable, at the URL the sandbox reaches it by; one the sandbox cannot
# reach fails the run, naming why; one not configured is refused first.
SANDRUN_ENDPOINT_DOCS_URL=$CB_URL SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt \
	expect "a run with an endpoint" 0 "$S" run --json --endpoint docs env:SANDRUN_ENDPOINT_DOCS
grep_in "  the agent has its URL" "$T/out" "SANDRUN_ENDPOINT_DOCS=$CB_URL"
grep_in "  the decision is an event of the run" "$T/out" '"type":"endpoint.resolved","service":"docs","source":"configured","url":"'"$CB_URL"'"'
gate "an endpoint that is not configured" endpoint_invalid --endpoint nope hi
SANDRUN_ENDPOINT_DOCS_URL=$CB_URL gate "an endpoint with network off" endpoint_without_network \
	--network off --endpoint docs hi
before=$(count)
SANDRUN_ENDPOINT_DOWN_URL=http://127.0.0.1:1 SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt \
	expect "an endpoint that does not answer fails the run" 6 "$S" run --json --endpoint down ok
grep_in "  with endpoint_unreachable, naming every source" "$T/out" '"code":"endpoint_unreachable","message":"no route from the sandbox to service .down.*public override: none is set.*tunnel: no tunnel is configured'
grep_in "  after bounded retries, each an event" "$T/out" '"type":"endpoint.retry","service":"down","source":"configured","attempt":3,"of":4'
[ "$(count)" = "$before" ] && ok "  and its sandbox is removed" || fail "  and its sandbox is removed ($(count) vs $before)"
# Ctrl-C while an endpoint is being retried: the resolution is cancelled
# and the run ends at once, as a cancelled turn.
rm -f "$T/out"
SANDRUN_ENDPOINT_DOWN_URL=http://127.0.0.1:1 SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt \
	"$S" run --json --endpoint down ok >"$T/out" 2>"$T/err" &
pid=$!
wait_grep "$T/out" endpoint.retry
t0=$(date +%s%N)
kill -INT "$pid"
wait "$pid"
rc=$?
t1=$(date +%s%N)
[ "$rc" -eq 130 ] && ok "Ctrl-C during endpoint retries: exit 130" || fail "Ctrl-C during endpoint retries: exit 130 (got $rc)"
[ $(( (t1 - t0) / 1000000 )) -lt 1500 ] && ok "  at once ($(( (t1 - t0) / 1000000 )) ms)" ||
	fail "  at once ($(( (t1 - t0) / 1000000 )) ms)"
grep_in "  as a cancelled turn" "$T/out" '"stop_reason":"cancelled"'
grep -q endpoint.failed "$T/out" && fail "  not as an endpoint failure" || ok "  not as an endpoint failure"
expect "--endpoint goes to the server (here one that is not there: 4)" 4 "$S" run \
	--server http://127.0.0.1:1 --endpoint docs hi
stop_callbacks
finish
