#!/bin/sh
# The NetBird tunnel plugin against the management API emulator
# (tests/emulators/netbird.mjs) and a fake client (tests/emulators/netbird):
# the all-to-all Default policy gone before any enrolment (or the start
# refused), a sandbox's group, one-off ephemeral key and one-way policy,
# the key only in a 0600 file, the peer verified by its exact name (the
# API's ?name= is a LIKE filter), teardown in order, an enrolment that
# fails midway undone, orphans removed by the janitor, and endpoint
# resolution to the runner's overlay address.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
command -v node >/dev/null || missing "node is not installed (scripts/check installs it)"
CLIENT="$SANDRUN_SRCDIR/tests/emulators/netbird"
# A PAT as NetBird makes them (its checksum checked like the server's).
TOKEN=$(node "$SANDRUN_SRCDIR/tests/emulators/netbird.mjs" --mint-token)
umask 077
printf '%s\n' "$TOKEN" >"$T/token"
umask 022

node "$SANDRUN_SRCDIR/tests/emulators/netbird.mjs" --token "$TOKEN" >"$T/emu.out" 2>"$T/emu.err" &
EMU_PID=$!
node -e 'const h=require("http");const s=h.createServer((q,r)=>{r.writeHead(403);r.end("denied")});s.listen(0,"127.0.0.1",()=>console.log(s.address().port))' >"$T/s3.out" &
S3_PID=$!
trap 'kill $EMU_PID $S3_PID 2>/dev/null; rm -rf "$T"' EXIT
wait_for "$T/emu.out" "$T/s3.out"
API=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$T/emu.out")
read -r S3 <"$T/s3.out"
[ -n "$API" ] && ok "the emulator listens" || { fail "the emulator listens"; cat "$T/emu.err"; finish; exit 1; }
state() { node -e 'fetch(process.argv[1]).then(r=>r.json()).then(j=>{const f=process.argv[2];console.log(JSON.stringify(f?j[f]:j))})' "$API/emu/state" "${1:-}" 2>/dev/null; }
names() { state "$1" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s).map(x=>x.name).sort().join(" ")))'; }

conf() {
	f=$1
	shift
	{
		printf '[runner]\nprovider = %s\ntunnel = netbird\n' "${PROVIDER:-local}"
		printf '[provider.daytona]\napi_url = http://127.0.0.1:1/api\napi_key = unused\n'
		printf '[tunnel.netbird]\napi_url = %s\ntoken_file = %s\nrunner_group = runners\nkey_ttl = 600\n' "$API" "${TOKEN_FILE:-$T/token}"
		for line in "$@"; do printf '%s\n' "$line"; done
	} >"$T/$f"
}
nbt() { f=$1; shift; "$SANDRUN_BIN" -c "$T/$f" tunnel "$@"; }

# ---- the Default policy first ----
conf keep.conf
expect "enrolment is refused while the all-to-all Default policy is in place" 1 \
	nbt keep.conf enrol sbx1 --port 9000 --key-file "$T/k0"
grep_in "  says why" "$T/err" "all-to-all 'Default' policy is in place"
[ "$(names groups)" = "All runners" ] && [ "$(names setup_keys)" = "" ] &&
	ok "  nothing was created" || fail "  nothing was created: $(names groups) / $(names setup_keys)"
[ ! -e "$T/k0" ] && ok "  and no key file written" || fail "  and no key file written"
SANDRUN_RUNNER_HARNESSES= "$SANDRUN_BIN" -c "$T/keep.conf" doctor >"$T/out" 2>&1
grep_in "  doctor fails the tunnel" "$T/out" "FAIL.*tunnel netbird.*Default"

conf nb.conf "delete_default = yes"
SANDRUN_RUNNER_HARNESSES= "$SANDRUN_BIN" -c "$T/nb.conf" doctor >"$T/out" 2>&1
grep_in "doctor with delete_default = yes passes" "$T/out" "ok.*tunnel netbird"
[ "$(names policies)" = "Default" ] && ok "  and changes nothing" || fail "  and changes nothing ($(names policies))"

# ---- enrol ----
expect "enrol with delete_default = yes" 0 nbt nb.conf enrol sbx1 --port 9000 --port 9443 --key-file "$T/k1"
grep_in "  the answer names the key file, the peer's name, the ports and the command" "$T/out" \
	'"management_url":"'"$API"'","hostname":"sandrun-sbx1",.*"ports":\[9000,9443\],"command":\["netbird","up","--setup-key-file","'"$T/k1"'","--management-url","'"$API"'","--hostname","sandrun-sbx1"\],"key_file":"'"$T/k1"'"'
grep -q setup_key "$T/out" && fail "  the key is not printed" || ok "  the key is not printed"
[ "$(stat -c %a "$T/k1")" = 600 ] && ok "  the key file is 0600" || fail "  the key file is 0600 ($(stat -c %a "$T/k1"))"
KEY=$(cat "$T/k1")
grep -q "$KEY" "$T/out" "$T/err" && fail "  the key is in no output" || ok "  the key is in no output"
order=$(state log | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const l=JSON.parse(s);console.log(l.findIndex(x=>/^DELETE \/api\/policies\//.test(x))<l.findIndex(x=>x==="POST /api/groups")?"ok":"wrong")})')
[ "$order" = ok ] && ok "  the Default policy was deleted before the first group" || fail "  the Default policy was deleted before the first group"
[ "$(names policies)" = "sandrun-sbx1" ] && ok "  Default is gone, the sandbox's policy is there" || fail "  policies: $(names policies)"
state setup_keys >"$T/keys.json"
grep_in "  a one-off ephemeral key for one use, in the sandbox's group only" "$T/keys.json" \
	'"name":"sandrun-sbx1","key":"'"$(printf %s "$KEY" | head -c 5)"'\*\*\*\*","type":"one-off".*"auto_groups":\["[0-9a-f]*"\],"usage_limit":1,"ephemeral":true'
node -e 'const k=JSON.parse(require("fs").readFileSync(process.argv[1]))[0];const s=(Date.parse(k.expires)-Date.now())/1000;process.exit(s>500&&s<=600?0:1)' "$T/keys.json" &&
	ok "  expiring within key_ttl" || fail "  expiring within key_ttl"
state policies >"$T/pol.json"
grep_in "  a one-way TCP policy to the runner's group on exactly the ports" "$T/pol.json" \
	'"action":"accept","bidirectional":false,"protocol":"tcp","ports":\["9000","9443"\],"sources":\[{"id":"[0-9a-f]*","name":"sandrun-sbx1".*"destinations":\[{"id":"[0-9a-f]*","name":"runners"'
expect "a second enrolment of the same sandbox is refused" 1 nbt nb.conf enrol sbx1 --port 9000 --key-file "$T/k1b"
expect "enrol without --key-file is a usage error" 2 nbt nb.conf enrol sbx2 --port 9000

# ---- the client joins; verify by exact name ----
expect "verify before the peer joined fails" 1 nbt nb.conf verify sbx1
grep_in "  naming the peer" "$T/err" "no connected NetBird peer named 'sandrun-sbx1'"
expect "a decoy sandbox is enrolled (sandrun-sbx1x contains sandrun-sbx1)" 0 nbt nb.conf enrol sbx1x --port 9000 --key-file "$T/k2"
expect "  and its peer joins" 0 "$CLIENT" up --setup-key-file "$T/k2" --management-url "$API" --hostname sandrun-sbx1x
expect "verify does not take the decoy for sbx1's peer" 1 nbt nb.conf verify sbx1
expect "the client joins with the key from the file" 0 "$CLIENT" up --setup-key-file "$T/k1" --management-url "$API" --hostname sandrun-sbx1
expect "the one-off key does not work twice" 1 "$CLIENT" up --setup-key-file "$T/k1" --management-url "$API" --hostname again
grep_in "  the server says so" "$T/err" "usage limit"
expect "verify finds the peer" 0 nbt nb.conf verify sbx1
grep_in "  with its overlay address" "$T/out" '"ip":"100.64.[0-9]*.[0-9]*"'
NB_SETUP_KEY=x expect "(the fake client refuses a key in the environment)" 3 "$CLIENT" up --setup-key-file "$T/k1" --management-url "$API"
expect "list shows both enrolments" 0 nbt nb.conf list
grep_in "  sbx1" "$T/out" "^sbx1 *sandrun-sbx1 "
grep_in "  sbx1x" "$T/out" "^sbx1x *sandrun-sbx1x "

# ---- release ----
expect "release sbx1" 0 nbt nb.conf release sbx1
[ "$(names peers)" = "runner sandrun-sbx1x" ] && ok "  its peer is gone, the decoy's kept" || fail "  peers: $(names peers)"
[ "$(names groups)" = "All runners sandrun-sbx1x" ] && ok "  its group is gone" || fail "  groups: $(names groups)"
[ "$(names setup_keys)" = "sandrun-sbx1x" ] && ok "  its key is gone" || fail "  keys: $(names setup_keys)"
[ "$(names policies)" = "sandrun-sbx1x" ] && ok "  its policy is gone" || fail "  policies: $(names policies)"
state log | grep -o 'DELETE /api/[a-z-]*/' | tail -4 | tr '\n' ' ' >"$T/order"
grep_in "  in order: peer, policy, key, group" "$T/order" "DELETE /api/peers/ DELETE /api/policies/ DELETE /api/setup-keys/ DELETE /api/groups/"
expect "releasing it again is a no-op" 0 nbt nb.conf release sbx1

# ---- the janitor removes orphans ----
"$SANDRUN_BIN" -c "$T/nb.conf" janitor --dry-run --grace 0s >"$T/out" 2>&1
grep_in "janitor --dry-run would release the orphan" "$T/out" "would delete *enrol *sbx1x *its sandbox is gone (tunnel netbird)"
[ "$(names groups)" = "All runners sandrun-sbx1x" ] && ok "  and changes nothing" || fail "  and changes nothing"
"$SANDRUN_BIN" -c "$T/nb.conf" janitor >"$T/out" 2>&1
grep_in "janitor keeps an orphan younger than the grace period" "$T/out" "kept *enrol *sbx1x *younger than the grace period"
expect "janitor --grace 0s releases it" 0 "$SANDRUN_BIN" -c "$T/nb.conf" janitor --grace 0s
grep_in "  says so" "$T/out" "deleted *enrol *sbx1x"
[ "$(names groups) / $(names setup_keys) / $(names policies) / $(names peers)" = "All runners /  /  / runner" ] &&
	ok "  the emulator's state is empty of sandrun's" || fail "  what is left: $(names groups) / $(names setup_keys) / $(names policies) / $(names peers)"

# ---- an enrolment that fails midway is undone ----
node -e 'fetch(process.argv[1]+"/emu/fail",{method:"POST",body:JSON.stringify({method:"POST",path:"/api/policies",status:500,message:"database is locked"})})' "$API" 2>/dev/null
expect "the policy cannot be made: the enrolment fails" 1 nbt nb.conf enrol sbx3 --port 9000 --key-file "$T/k3"
grep_in "  saying why" "$T/err" "cannot create the policy: NetBird answered HTTP 500: database is locked"
[ "$(names groups) / $(names setup_keys)" = "All runners / " ] && ok "  its group and key are deleted" || fail "  left: $(names groups) / $(names setup_keys)"
[ ! -e "$T/k3" ] && ok "  no key file" || fail "  no key file"
expect "  and no record is left" 0 nbt nb.conf list --json
grep_in "  (list is empty)" "$T/out" '{"items":\[\]}'

# ---- endpoint resolution to the runner's overlay address ----
PROVIDER=daytona conf ep.conf "delete_default = yes" "runner_ip = 127.0.0.1" "[endpoint.s3]" "url = http://127.0.0.1:$S3"
expect "an endpoint resolves through NetBird to the runner's address" 0 "$SANDRUN_BIN" -c "$T/ep.conf" endpoint --json s3
grep_in "  from the tunnel" "$T/out" '"source":"tunnel","url":"http://127.0.0.1:'"$S3"'","via":"netbird"'
PROVIDER=daytona conf ep2.conf "delete_default = yes" "[endpoint.s3]" "url = http://127.0.0.1:$S3"
expect "the runner's overlay address is looked up by its peer name" 1 "$SANDRUN_BIN" -c "$T/ep2.conf" endpoint --attempts 1 s3
grep_in "  (100.64.0.1 here, which this machine does not route)" "$T/err" "http://100.64.0.1:$S3"

# ---- a run enrols its sandbox (on the Daytona emulator) ----
# The emulator's sandboxes run the fake client as `netbird` (first in
# their PATH); the store answers on the runner's "overlay address"
# (runner_ip = 127.0.0.1 here).
mkdir -p "$T/nbbin"
ln -s "$CLIENT" "$T/nbbin/netbird"
PATH="$T/nbbin:$PATH" node "$SANDRUN_SRCDIR/tests/emulators/daytona.mjs" --state-dir "$T/dtn" \
	--api-key dtn-nb-key --transition-ms 20 >"$T/dtn.out" 2>"$T/dtn.err" &
DTN_PID=$!
trap 'kill $EMU_PID $S3_PID $DTN_PID 2>/dev/null; rm -rf "$T"' EXIT
wait_for "$T/dtn.out"
DTN_API=$(sed -n 's/.*"apiUrl":"\([^"]*\)".*/\1/p' "$T/dtn.out")
PROVIDER=daytona conf run.conf "delete_default = yes" "runner_ip = 127.0.0.1" \
	"[endpoint.s3]" "url = http://127.0.0.1:$S3"
sed -i "s|^api_url = http://127.0.0.1:1/api|api_url = $DTN_API|; s|^api_key = unused|api_key = dtn-nb-key\nsecrets = off|" "$T/run.conf"
run_nb() { # run_nb NAME EXIT PROMPT
	SANDRUN_RUNNER_HARNESSES=claude SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt \
		SANDRUN_HARNESS_CLAUDE_COMMAND="$SANDRUN_SRCDIR/tests/emulators/fake_acp.mjs" \
		expect "$1" "$2" "$SANDRUN_BIN" -c "$T/run.conf" run --json --endpoint s3 "$3"
}
sandruns() { echo "$(names groups) / $(names setup_keys) / $(names policies) / $(names peers)"; }
run_nb "a run whose endpoint goes through NetBird" 0 \
	'sh:echo "url=$SANDRUN_ENDPOINT_S3"; ls -A "$HOME/.sandrun" | grep -c key; env | grep -c -i -e setup -e nb_'
grep_in "  the endpoint resolves through NetBird, for an enrolled sandbox" "$T/out" \
	'"type":"endpoint.resolved","service":"s3","source":"tunnel","url":"http://127.0.0.1:'"$S3"'","via":"netbird","enrolment":true'
grep_in "  the sandbox joined, for exactly the store's port" "$T/out" \
	'"type":"tunnel.enrolled","tunnel":"netbird","peer":"[^"]*","ip":"100.64.[0-9.]*","ports":\['"$S3"'\]'
[ "$(grep -n tunnel.enrolled "$T/out" | cut -d: -f1)" -lt "$(grep -n agent.starting "$T/out" | cut -d: -f1)" ] &&
	ok "  before the agent started" || fail "  before the agent started"
grep_in "  the agent has the URL, no key file and no key in its environment" "$T/out" \
	'"text":"exit 1: url=http://127.0.0.1:'"$S3"'\\n0\\n0"'
grep_in "  released at the end of the turn" "$T/out" '"type":"tunnel.released","tunnel":"netbird"'
[ "$(sandruns)" = "All runners /  /  / runner" ] && ok "  peer, key, policy and group are gone" ||
	fail "  left: $(sandruns)"
run_nb "a run that fails after the enrolment" 6 exit_mid_turn
grep_in "  had enrolled" "$T/out" '"type":"tunnel.enrolled"'
grep_in "  and released" "$T/out" '"type":"tunnel.released"'
[ "$(sandruns)" = "All runners /  /  / runner" ] && ok "  leaves nothing in NetBird" || fail "  left: $(sandruns)"
rm "$T/nbbin/netbird"
printf '#!/bin/sh\necho "netbird: daemon not running" >&2\nexit 1\n' >"$T/nbbin/netbird"
chmod +x "$T/nbbin/netbird"
run_nb "a sandbox that cannot join fails the run" 6 ok
grep_in "  tunnel_enrol_failed with the client's words" "$T/out" \
	'"code":"tunnel_enrol_failed","message":"tunnel .netbird.: the sandbox could not join: netbird: daemon not running'
grep -q agent.starting "$T/out" && fail "  no agent started" || ok "  no agent started"
[ "$(sandruns)" = "All runners /  /  / runner" ] && ok "  and leaves nothing in NetBird" || fail "  left: $(sandruns)"
find "$T/dtn" -name 'tunnel.key' | grep -q . && fail "  no key file is left in the sandbox" ||
	ok "  no key file is left in the sandbox"

# ---- bad configuration and a bad token ----
node "$SANDRUN_SRCDIR/tests/emulators/netbird.mjs" --mint-token >"$T/wrong"
TOKEN_FILE=$T/wrong conf wrong.conf "delete_default = yes"
expect "a token the server does not know" 1 nbt wrong.conf enrol sbx4 --port 9000 --key-file "$T/k4"
grep_in "  is named as the likely cause" "$T/err" "HTTP 404: invalid token: pat: .* not found (check the personal access token in \[tunnel.netbird\] token_file)"
grep -q "$TOKEN" "$T/err" "$T/out" && fail "  the token is in no output" || ok "  the token is in no output"
printf 'nbp_%036d\n' 7 >"$T/malformed"
TOKEN_FILE=$T/malformed conf malformed.conf "delete_default = yes"
expect "a token that is no PAT" 1 nbt malformed.conf enrol sbx4 --port 9000 --key-file "$T/k4"
grep_in "  is refused as NetBird does (401)" "$T/err" "HTTP 401: token invalid (check the personal access token in \[tunnel.netbird\] token_file)"
printf 'not-a-token\n' >"$T/bad"
# NetBird answers an unknown token with 404 "invalid token: pat: HASH not
# found" (a token revoked meanwhile): that is not "already gone", and the
# record stays.
expect "enrol sbx5" 0 nbt nb.conf enrol sbx5 --port 9000 --key-file "$T/k5"
gid=$(state groups | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s).find(g=>g.name==="sandrun-sbx5").id))')
node -e 'fetch(process.argv[1]+"/emu/fail",{method:"POST",body:JSON.stringify({method:"DELETE",path:"/api/groups/"+process.argv[2],status:404,message:"invalid token: pat: x9Zq4fYc1J6yQb2X8p0vT3n5K7m1L2d4R6s8U0w2Y4A= not found"})})' "$API" "$gid" 2>/dev/null
expect "a 404 invalid token on a delete fails the release" 1 nbt nb.conf release sbx5
grep_in "  naming the token" "$T/err" "cannot delete the group: NetBird answered HTTP 404: invalid token: pat:"
expect "  and the record is kept" 0 nbt nb.conf list
grep_in "  (sbx5 listed)" "$T/out" "^sbx5 "
[ "$(names groups)" = "All runners sandrun-sbx5" ] && ok "  the group is still there" || fail "  groups: $(names groups)"
# A group someone deleted already: NetBird answers 400 "group: ID not
# found" (not 404); the release takes it as gone and drops the record.
expect "enrol sbx7" 0 nbt nb.conf enrol sbx7 --port 9000 --key-file "$T/k7"
gid7=$(state groups | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s).find(g=>g.name==="sandrun-sbx7").id))')
node -e 'fetch(process.argv[1]+"/emu/fail",{method:"POST",body:JSON.stringify({method:"DELETE",path:"/api/groups/"+process.argv[2],status:400,message:"group: "+process.argv[2]+" not found"})})' "$API" "$gid7" 2>/dev/null
expect "a group that is gone already (400 not found)" 0 nbt nb.conf release sbx7
expect "  the record is dropped" 0 nbt nb.conf list
grep -q "^sbx7 " "$T/out" && fail "  (sbx7 not listed)" || ok "  (sbx7 not listed)"
node -e 'fetch(process.argv[1]+"/api/groups/"+process.argv[2],{method:"DELETE",headers:{authorization:"Token "+process.argv[3]}}).then(r=>process.exit(r.status===200?0:1))' \
	"$API" "$gid7" "$TOKEN" && ok "  (its group removed by hand)" || fail "  (its group removed by hand)"
node -e 'fetch(process.argv[1]+"/api/groups/"+process.argv[2],{method:"DELETE",headers:{authorization:"Token "+process.argv[3]}}).then(r=>r.json().then(b=>process.exit(r.status===400&&b.message==="group: "+process.argv[2]+" not found"?0:1)))' \
	"$API" "$gid7" "$TOKEN" && ok "the emulator answers a gone group's delete 400 not found" ||
	fail "the emulator answers a gone group's delete 400 not found"
expect "enrol sbx6" 0 nbt nb.conf enrol sbx6 --port 9000 --key-file "$T/k6"
expect "release --all releases every enrolment" 0 nbt nb.conf release --all
grep_in "  sbx5" "$T/out" "released sbx5"
grep_in "  sbx6" "$T/out" "released sbx6"
[ "$(names groups) / $(names setup_keys) / $(names policies)" = "All runners /  / " ] &&
	ok "  nothing of sandrun's is left" || fail "  left: $(names groups) / $(names setup_keys) / $(names policies)"
TOKEN_FILE=$T/bad conf bad.conf
expect "a token file without a token" 3 nbt bad.conf list
TOKEN_FILE=$T/none conf nofile.conf
expect "a missing token file" 3 nbt nofile.conf list
conf nogroup.conf
sed -i '/^runner_group/d' "$T/nogroup.conf"
expect "runner_group is required" 3 nbt nogroup.conf list
finish
