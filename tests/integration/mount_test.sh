#!/bin/sh
# Storage mounts (sandrun run --mount s3://BUCKET/PREFIX:PATH): Debian's
# s3fs against the s3rver npm package on 127.0.0.1, on the local provider
# and on the Daytona emulator. Two mounts at once, a multipart-size write
# read back through the store, credentials only in the mounter's
# environment (never argv, the workspace, the agent or a log), a clean
# remount over a stale mount in a reconnected sandbox, unmounts at the end
# of every turn, each failure with its code, and a sandbox removed with a
# live mount never reaching into the store.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
S=$SANDRUN_BIN
s3rver="${SANDRUN_NPM_DIR:-/nonexistent}/node_modules/s3rver/bin/s3rver.js"
command -v node >/dev/null || missing "node is not installed (scripts/check installs it)"
[ -f "$s3rver" ] || missing "s3rver is not installed in SANDRUN_NPM_DIR='${SANDRUN_NPM_DIR:-}' (scripts/npm-peers installs it)"
command -v s3fs >/dev/null || missing "s3fs is not installed (scripts/deps --tests installs it)"
[ -c /dev/fuse ] || missing "this machine has no /dev/fuse: FUSE mounts cannot run here"

# Every FUSE mount this test made goes, whatever happens.
unmount_mine() {
	awk -v t="$T" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo 2>/dev/null |
		sort -r | while read -r m; do fusermount -u -z "$m" 2>/dev/null || umount -l "$m"; done
}
mounts_left() { awk -v t="$T" 'index($5, t) == 1' /proc/self/mountinfo | wc -l; }
cleanup() {
	kill ${S3_PID:-} ${EMU_PID:-} ${PROXY_PID:-} ${SVC_PID:-} 2>/dev/null
	unmount_mine
	rm -rf "$T"
}
trap cleanup EXIT

mkdir -p "$T/s3"
# Path-style only: the Daytona part reaches it by a name of its own.
node "$s3rver" -d "$T/s3" -a 127.0.0.1 -p 0 --no-vhost-buckets --configure-bucket work \
	--configure-bucket other \
	>"$T/s3.log" 2>&1 &
S3_PID=$!
# (Up to 30 s: node starts slowly on a loaded machine.)
wait_grep "$T/s3.log" "listening on"
S3_PORT=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$T/s3.log" | head -n 1)
[ -n "$S3_PORT" ] && ok "s3rver runs" || { fail "s3rver runs"; cat "$T/s3.log"; finish; exit 1; }

# The operator's credentials command: s3rver's one key pair, and a session
# token that is unique to this test, to look for everywhere it must not be.
TOKEN="tok-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')-secret"
cat >"$T/creds.sh" <<EOF
#!/bin/sh
echo "\$*" >>"$T/creds.log"
printf '{"Version":1,"AccessKeyId":"S3RVER","SecretAccessKey":"S3RVER","SessionToken":"$TOKEN","Expiration":"2099-01-01T00:00:00Z"}\n'
EOF
printf '#!/bin/sh\necho "no such role for $1/$2" >&2\nexit 3\n' >"$T/creds-fail.sh"
printf '#!/bin/sh\necho "AccessKeyId=AKIA"\n' >"$T/creds-text.sh"
printf '#!/bin/sh\necho {\\"Version\\":1,\\"AccessKeyId\\":\\"WRONGKEY\\",\\"SecretAccessKey\\":\\"WRONGSECRET\\"}\n' \
	>"$T/creds-wrong.sh"
chmod +x "$T"/creds*.sh

export SANDRUN_RUNNER_HARNESSES=claude
export SANDRUN_HARNESS_CLAUDE_COMMAND="$SANDRUN_SRCDIR/tests/emulators/fake_acp.mjs"
export SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt
export SANDRUN_ENDPOINT_S3_URL="http://127.0.0.1:$S3_PORT"
export SANDRUN_MOUNT_CREDENTIALS_COMMAND="$T/creds.sh"
boxes="$T/state/plugins/provider.local/sandboxes"

# ---- the plan's gates: nothing is made ----
gate() { # gate NAME CODE ARGS...
	name=$1 code=$2
	shift 2
	expect "$name refused (exit 5)" 5 "$S" run --json "$@"
	grep_in "$name: code $code" "$T/out" "\"code\":\"$code\""
}
gate "a mount that is not s3://" mount_invalid --mount /data:x ok
grep_in "  the form is named" "$T/out" "expected s3://BUCKET/PREFIX:PATH"
gate "a bad bucket name" mount_invalid --mount s3://Bad_Bucket/p:data ok
gate "a '..' in the path" mount_invalid --mount s3://work/p:../up ok
gate "a '..' in the prefix" mount_invalid --mount s3://work/a/../b:data ok
gate "two mounts at one path" mount_invalid --mount s3://work/a:data --mount s3://work/b:data ok
grep_in "  the path is named" "$T/out" "data is already a mount point"
gate "a mount with network off" mount_without_network --network off --mount s3://work/a:data ok
SANDRUN_MOUNT_CREDENTIALS_COMMAND= gate "no credentials_command" mount_invalid --mount s3://work/a:data ok
grep_in "  the key is named" "$T/out" "needs \[mount\] credentials_command"
SANDRUN_MOUNT_MOUNTER=rclone gate "an unknown mounter" mount_invalid --mount s3://work/a:data ok
SANDRUN_MOUNT_ENDPOINT=store gate "a store endpoint that is not configured" mount_invalid \
	--mount s3://work/a:data ok
grep_in "  the section is named" "$T/out" "\[endpoint.store\]"
[ "$(ls "$boxes" 2>/dev/null | wc -l)" -eq 0 ] && ok "the gates made no sandbox" ||
	fail "the gates made no sandbox"
nine=""
for i in 1 2 3 4 5 6 7 8 9; do nine="$nine --mount s3://work/p$i:m$i"; done
# shellcheck disable=SC2086
expect "at most 8 mounts" 2 "$S" run $nine ok

# ---- a turn with two mounts ----
script='mountpoint -q data && mountpoint -q other/two && echo both-mounted;
head -c 12000000 /dev/urandom >data/big && sha256sum data/big;
cmp data/big data/big && echo read-back;
echo hello >other/two/note && cat other/two/note;
echo "aws-vars=$(env | grep -c -i -e aws -e s3rver)";
echo "env-files=$(ls -A "$HOME/.sandrun" 2>/dev/null | grep -c mount)";
sleep 3'
"$S" run --json --mount s3://work/run1:data --mount s3://other/deep/prefix:other/two "sh:$script" \
	>"$T/t1" 2>"$T/t1.err" &
RUN_PID=$!
wait_grep "$T/t1" agent.prompt_sent
sleep 1
# While mounted: the token is in no process's argv, and is in s3fs's
# environment (it came the way it should).
# cmdline PID: its argv, spaced ("" once it is gone).
cmdline() { { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null; }
in_argv=0 in_env=0
for p in /proc/[0-9]*; do
	cmdline "${p#/proc/}" | grep -q "$TOKEN" && in_argv=$((in_argv + 1))
	case "$(cmdline "${p#/proc/}")" in
	s3fs*) { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -q "^AWSSESSIONTOKEN=$TOKEN" &&
		in_env=$((in_env + 1)) ;;
	esac
done
[ "$in_argv" -eq 0 ] && ok "the credentials are in no process's argv" ||
	fail "the credentials are in no process's argv ($in_argv)"
[ "$in_env" -eq 2 ] && ok "each s3fs has them in its environment" ||
	fail "each s3fs has them in its environment ($in_env)"
wait $RUN_PID
rc=$?
[ "$rc" -eq 0 ] && ok "the turn with two mounts ends (exit 0)" || { fail "the turn with two mounts ends (exit $rc)"; cat "$T/t1" "$T/t1.err"; }
grep_in "  mounted before the agent starts" "$T/t1" \
	'"type":"mount.ready","bucket":"work","prefix":"run1","path":"[^"]*/workspace/data","mounter":"s3fs"}.*' 
[ "$(grep -n mount.ready "$T/t1" | tail -n 1 | cut -d: -f1)" -lt "$(grep -n agent.starting "$T/t1" | cut -d: -f1)" ] &&
	ok "  both before agent.starting" || fail "  both before agent.starting"
grep_in "  the agent sees both" "$T/t1" "both-mounted"
grep_in "  and reads back what it wrote" "$T/t1" "read-back.*hello"
grep_in "  no AWS variable reaches the agent" "$T/t1" "aws-vars=0"
grep_in "  no credentials file is left in the sandbox" "$T/t1" "env-files=0"
sum=$(sed -n 's/.*\\n\([0-9a-f]\{64\}\)  data\/big.*/\1/p' "$T/t1")
obj="$T/s3/work/run1/big._S3rver_object"
[ -n "$sum" ] && [ "$(sha256sum <"$obj" | cut -d' ' -f1)" = "$sum" ] &&
	ok "the 12 MB file is in the store under work/run1, byte for byte" ||
	fail "the 12 MB file is in the store under work/run1, byte for byte ($sum)"
grep -q "uploadId=" "$T/s3.log" && ok "  written as a multipart upload" ||
	fail "  written as a multipart upload"
[ "$(cat "$T/s3/other/deep/prefix/note._S3rver_object" 2>/dev/null)" = hello ] &&
	ok "the second mount writes under other/deep/prefix" ||
	fail "the second mount writes under other/deep/prefix"
[ "$(grep -c mount.unmounted "$T/t1")" -eq 2 ] && ok "both unmounted at the end of the turn" ||
	fail "both unmounted at the end of the turn"
[ "$(mounts_left)" -eq 0 ] && ok "  nothing stays mounted" || fail "  nothing stays mounted"
grep -qx "work run1" "$T/creds.log" && grep -qx "other deep/prefix" "$T/creds.log" &&
	ok "credentials asked per bucket and prefix" || fail "credentials asked per bucket and prefix"
grep -rqs "$TOKEN" "$T/t1" "$T/t1.err" "$T/state" && fail "the token is in no event, log or state file" ||
	ok "the token is in no event, log or state file"
find "$boxes" -name 'mount-*.env' | grep -q . && fail "no credentials file anywhere in the sandbox" ||
	ok "no credentials file anywhere in the sandbox"
session=$(sed -n 's/.*"type":"run.started","session":"\([^"]*\)".*/\1/p' "$T/t1")
ws=$(sed -n 's/.*"type":"sandbox.acquired".*"workspace":"\([^"]*\)".*/\1/p' "$T/t1")

# ---- the next turn, over a stale mount ----
# Something is still mounted at data (a mounter from a crashed runner):
# the turn unmounts it and mounts what it was asked for.
mkdir -p "$T/stale-seed"
AWSACCESSKEYID=S3RVER AWSSECRETACCESSKEY=S3RVER s3fs work:/stale "$ws/data" \
	-o url="http://127.0.0.1:$S3_PORT" -o use_path_request_style &&
	echo x >"$ws/data/stale-marker" && ok "a stale mount is planted" || fail "a stale mount is planted"
expect "the next turn" 0 "$S" run --json --session "$session" --mount s3://work/run1:data \
	'sh:ls data; echo "size=$(wc -c <data/big)"'
grep_in "  reconnected the sandbox" "$T/out" '"how":"reconnected"'
grep_in "  sees work/run1 again" "$T/out" 'big\\nsize=12000000'
grep -q stale-marker "$T/out" && fail "  not the stale mount" || ok "  not the stale mount"
[ "$(mounts_left)" -eq 0 ] && ok "  nothing stays mounted" || fail "  nothing stays mounted"

# ---- through sandrund: the request's "mounts" ----
printf '%s\n' "svc-$TOKEN" >"$T/svc-tokens"
chmod 600 "$T/svc-tokens"
# start_sandrund LOG: sandrund on a port of its own; sets SVC_PID, SVC_URL.
start_sandrund() {
	rm -f "$1"
	SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/svc-tokens" \
		"$SANDRUN_BUILDDIR/sandrund" >"$1" 2>&1 &
	SVC_PID=$!
	wait_grep "$1" "listening on"
	SVC_URL=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$1")
}
svc_run() { "$S" run --server "$SVC_URL" --token-file "$T/svc-tokens" --json "$@"; }
start_sandrund "$T/svc.log"
expect "a turn through sandrund with a mount" 0 svc_run --mount s3://work/run1:data \
	'sh:wc -c <data/big'
grep_in "  mounted by the service" "$T/out" '"type":"mount.ready","bucket":"work","prefix":"run1"'
grep_in "  the agent sees the store" "$T/out" '"text":"exit 0: 12000000"'
grep_in "  unmounted at the end" "$T/out" '"type":"mount.unmounted"'
expect "a bad mount through sandrund is refused by the plan" 5 svc_run \
	--mount s3://work/a:../x ok
grep_in "  mount_invalid" "$T/out" '"code":"mount_invalid"'
kill "$SVC_PID"
wait "$SVC_PID" 2>/dev/null
[ "$(mounts_left)" -eq 0 ] && ok "  nothing stays mounted" || fail "  nothing stays mounted"

# ---- what the agent does to its mounts ----
# It renames the directory its mount is in and puts a link to /tmp in its
# place: the mount is still found and unmounted where it is now, and
# nothing is unmounted through the link.
mkdir -p "$T/decoy/sub/data"
expect "a turn whose agent moves its mount away" 0 "$S" run --json --session "$session" \
	--mount s3://work/run1:sub/data "sh:mv sub sub2 && ln -s $T/decoy sub && mountpoint -q sub2/data && echo moved"
grep_in "  (it moved it)" "$T/out" '"text":"exit 0: moved"'
grep_in "  unmounted where it is now" "$T/out" '"type":"mount.unmounted","path":"[^"]*/workspace/sub/data"'
[ "$(mounts_left)" -eq 0 ] && ok "  nothing stays mounted" || fail "  nothing stays mounted"
test -d "$T/decoy/sub/data" && ok "  the link's target is untouched" || fail "  the link's target is untouched"
rm -f "$ws/sub"
# A mounter that died left a dead mount behind: the next turn clears it.
AWSACCESSKEYID=S3RVER AWSSECRETACCESSKEY=S3RVER s3fs work:/stale "$ws/data" \
	-o url="http://127.0.0.1:$S3_PORT" -o use_path_request_style
for p in /proc/[0-9]*; do
	case "$(cmdline "${p#/proc/}")" in "s3fs work:/stale $ws/data"*) kill -9 "${p#/proc/}" ;; esac
done
sleep 0.3
expect "a turn over a dead mount" 0 "$S" run --json --session "$session" --mount s3://work/run1:data \
	'sh:ls data'
grep_in "  mounts what it was asked for" "$T/out" '"text":"exit 0: big"'
[ "$(mounts_left)" -eq 0 ] && ok "  nothing stays mounted" || fail "  nothing stays mounted"
# Mount points that would swallow the sandbox's own files.
expect "a mount over the sandbox's .sandrun is refused" 6 "$S" run --json --session "$session" \
	--mount "s3://work/p:${ws%/workspace}/home/.sandrun" ok
grep_in "  saying why" "$T/out" '"code":"mount_failed","message":"mount [^"]*/home/.sandrun: refused: [^"]* would cover '
expect "a mount over the workspace is refused" 6 "$S" run --json --session "$session" \
	--mount "s3://work/p:$ws" ok
grep_in "  saying why" "$T/out" "would cover $ws\""
expect "mounts one inside the other are refused" 6 "$S" run --json --session "$session" \
	--mount s3://work/a:nest --mount s3://work/b:nest/in ok
grep_in "  saying why" "$T/out" "are one inside the other"
[ "$(mounts_left)" -eq 0 ] && ok "  nothing stays mounted" || fail "  nothing stays mounted"

# ---- failures ----
SANDRUN_MOUNT_CREDENTIALS_COMMAND="$T/creds-fail.sh" expect "a failing credentials command fails the run" 6 \
	"$S" run --json --mount s3://work/p:data ok
grep_in "  mount_failed, naming the command and its stderr" "$T/out" \
	'"code":"mount_failed","message":"mount [^"]*/data: \[mount\] credentials_command [^"]*creds-fail.sh failed: no such role for work/p (exit status 3)'
grep -q agent.starting "$T/out" && fail "  no agent started" || ok "  no agent started"
SANDRUN_MOUNT_CREDENTIALS_COMMAND="$T/creds-text.sh" expect "credentials that are not JSON fail the run" 6 \
	"$S" run --json --mount s3://work/p:data ok
grep_in "  saying what was expected" "$T/out" '"code":"mount_failed".*did not print a JSON object with \\"Version\\": 1'
SANDRUN_MOUNT_CREDENTIALS_COMMAND="$T/creds-wrong.sh" expect "credentials the store refuses fail the run" 6 \
	"$S" run --json --mount s3://work/p:data ok
grep_in "  naming the mounter" "$T/out" '"code":"mount_failed","message":"mount [^"]*/data: s3fs '
grep -q WRONGSECRET "$T/out" "$T/err" && fail "  the secret is not echoed" || ok "  the secret is not echoed"
find "$boxes" -name 'mount-*.env' | grep -q . && fail "  no credentials file is left" ||
	ok "  no credentials file is left"
[ "$(mounts_left)" -eq 0 ] && ok "  nothing stays mounted" || fail "  nothing stays mounted"
printf '#!/bin/sh\nexec sleep 30\n' >"$T/creds-slow.sh"
chmod +x "$T/creds-slow.sh"
rm -f "$T/out"
SANDRUN_MOUNT_CREDENTIALS_COMMAND="$T/creds-slow.sh" "$S" run --json --mount s3://work/p:data ok \
	>"$T/out" 2>"$T/err" &
RUN_PID=$!
wait_grep "$T/out" endpoint.resolved
sleep 0.3
start=$(date +%s)
kill -INT $RUN_PID
wait $RUN_PID
rc=$?
[ "$rc" -eq 130 ] && [ $(( $(date +%s) - start )) -lt 5 ] &&
	ok "Ctrl-C while the credentials command runs ends the run at once (exit 130)" ||
	fail "Ctrl-C while the credentials command runs ends the run at once (exit $rc)"
[ "$(mounts_left)" -eq 0 ] && ok "  nothing is mounted" || fail "  nothing is mounted"
# A store that answers the endpoint's probe and then nothing: the mount
# waits on it (s3fs's own timeouts are minutes) until Ctrl-C.
node -e 'const s = require("http").createServer((q, r) => { if (q.url === "/") r.end("ok"); });
	s.listen(0, "127.0.0.1", () => console.log("port " + s.address().port))' >"$T/hang.out" &
HANG_PID=$!
wait_grep "$T/hang.out" port
rm -f "$T/out"
SANDRUN_ENDPOINT_S3_URL="http://127.0.0.1:$(sed -n 's/port //p' "$T/hang.out")" \
	"$S" run --json --mount s3://work/p:data ok >"$T/out" 2>"$T/err" &
RUN_PID=$!
wait_grep "$T/out" mount.mounting
sleep 1
grep -q mount.mounting "$T/out" && ! grep -q '"mount.ready"\|run.failed' "$T/out" &&
	ok "a mount waiting on a store that does not answer" ||
	fail "a mount waiting on a store that does not answer ($(tail -n 2 "$T/out"))"
start=$(date +%s)
kill -INT $RUN_PID
wait $RUN_PID
rc=$?
[ "$rc" -eq 130 ] && [ $(( $(date +%s) - start )) -lt 5 ] &&
	ok "  Ctrl-C ends the run at once (exit 130)" ||
	fail "  Ctrl-C ends the run at once (exit $rc after $(( $(date +%s) - start )) s)"
[ "$(mounts_left)" -eq 0 ] && ok "  nothing is mounted" || fail "  nothing is mounted"
kill $HANG_PID 2>/dev/null
SANDRUN_ENDPOINT_S3_URL=http://127.0.0.1:1 expect "a store that does not answer fails the run" 6 \
	"$S" run --json --mount s3://work/p:data ok
grep_in "  endpoint_unreachable, naming the service" "$T/out" '"code":"endpoint_unreachable","message":"no route from the sandbox to service .s3.'
expect "a path outside the sandbox is refused by the local provider" 6 \
	"$S" run --json --mount s3://work/p:/etc/sandrun-mount ok
grep_in "  saying why" "$T/out" "provider 'local' refuses it as a mount point"
test ! -e /etc/sandrun-mount && ok "  and nothing was made there" || fail "  and nothing was made there"
ln -s /tmp "$ws/link"
expect "a mount point through a symbolic link is refused" 6 "$S" run --json --session "$session" \
	--mount s3://work/p:link/x ok
grep_in "  saying why" "$T/out" "refuses it as a mount point"

# ---- a sandbox removed while something is mounted in it ----
expect "a sandbox for the removal" 0 "$S" sandbox create --json
box=$(sed -n 's/.*"id":"\([^"]*\)".*/\1/p' "$T/out" | head -n 1)
mkdir -p "$boxes/$box/workspace/m"
AWSACCESSKEYID=S3RVER AWSSECRETACCESSKEY=S3RVER s3fs work:/keep "$boxes/$box/workspace/m" \
	-o url="http://127.0.0.1:$S3_PORT" -o use_path_request_style &&
	echo precious >"$boxes/$box/workspace/m/file" && ok "  a live mount in it" || fail "  a live mount in it"
expect "removing it" 0 "$S" sandbox destroy "$box"
[ "$(cat "$T/s3/work/keep/file._S3rver_object" 2>/dev/null)" = precious ] &&
	ok "  does not reach into the store" || fail "  does not reach into the store"
test ! -e "$boxes/$box" && ok "  and the sandbox is gone" || fail "  and the sandbox is gone"
[ "$(mounts_left)" -eq 0 ] && ok "  and nothing stays mounted" || fail "  and nothing stays mounted"

# ---- on the Daytona emulator ----
# Its sandboxes reach the store as s3.mount.test, through Daytona's egress
# proxy (the emulator's host map), as a remote sandbox reaches a public
# store; the runner checks that route through a forward proxy that knows
# the same name (the public internet's DNS, for this test).
cat >"$T/proxy.js" <<'EOF'
const http = require("http");
const [name, port] = [process.argv[2], Number(process.argv[3])];
http.createServer((q, s) => {
  const u = new URL(q.url);
  if (u.hostname !== name) { s.writeHead(502); return s.end("unknown host\n"); }
  const up = http.request({ host: "127.0.0.1", port, method: q.method, path: u.pathname + u.search,
    headers: q.headers }, (r) => { s.writeHead(r.statusCode, r.headers); r.pipe(s); });
  up.on("error", () => { s.writeHead(502); s.end(); });
  q.pipe(up);
}).listen(0, "127.0.0.1", function () { console.log(this.address().port); });
EOF
node "$T/proxy.js" s3.mount.test "$S3_PORT" >"$T/proxy.out" 2>&1 &
PROXY_PID=$!
# Its sandboxes find fusermount, fusermount3 and umount in $T/failbin
# first: they refuse, in a sandbox, while $T/fail-unmount exists.
mkdir "$T/failbin"
for c in fusermount fusermount3 umount; do
	cat >"$T/failbin/$c" <<EOF
#!/bin/sh
[ -n "\${DAYTONA_SANDBOX_ID:-}" ] && [ -e "$T/fail-unmount" ] && { echo "$c: refused by the test" >&2; exit 1; }
PATH='$PATH' exec $c "\$@"
EOF
	chmod +x "$T/failbin/$c"
done
PATH="$T/failbin:$PATH" node "$SANDRUN_SRCDIR/tests/emulators/daytona.mjs" --state-dir "$T/emu" \
	--api-key dtn-mount-key --transition-ms 20 --log "$T/emu.log" --egress-host "s3.mount.test=127.0.0.1:$S3_PORT" \
	>"$T/emu.out" 2>"$T/emu.err" &
EMU_PID=$!
wait_for "$T/emu.out" "$T/proxy.out"
export SANDRUN_RUNNER_PROVIDER=daytona SANDRUN_PROVIDER_DAYTONA_SECRETS=off
export SANDRUN_PROVIDER_DAYTONA_API_KEY=dtn-mount-key
SANDRUN_PROVIDER_DAYTONA_API_URL=$(sed -n 's/.*"apiUrl":"\([^"]*\)".*/\1/p' "$T/emu.out")
export SANDRUN_PROVIDER_DAYTONA_API_URL
export SANDRUN_ENDPOINT_S3_PUBLIC_URL="http://s3.mount.test:$S3_PORT"
http_proxy="http://127.0.0.1:$(cat "$T/proxy.out")"
export http_proxy no_proxy=127.0.0.1,localhost
expect "a Daytona turn with two mounts" 0 "$S" run --json --mount s3://work/day:data \
	--mount "s3://other/day2:$T/d2" 'sh:mountpoint -q data && echo mounted; echo day >data/f;
cat data/f; ls -A "$HOME/.sandrun" | grep -c mount; env | grep -c -i -e aws -e s3rver'
grep_in "  the store through the override, not 127.0.0.1" "$T/out" \
	'"type":"endpoint.resolved","service":"s3","source":"override","url":"http://s3.mount.test:'
grep_in "  both mounted before the agent" "$T/out" "\"type\":\"mount.ready\",\"bucket\":\"other\",\"prefix\":\"day2\",\"path\":\"$T/d2\""
grep_in "  the agent writes through the mount" "$T/out" 'mounted\\nday\\n0\\n0'
[ "$(cat "$T/s3/work/day/f._S3rver_object" 2>/dev/null)" = day ] && ok "  into the store" ||
	fail "  into the store"
[ "$(grep -c mount.unmounted "$T/out")" -eq 2 ] && ok "  both unmounted at the end" ||
	fail "  both unmounted at the end"
[ "$(mounts_left)" -eq 0 ] && ok "  nothing stays mounted" || fail "  nothing stays mounted"
grep -rqs "$TOKEN" "$T/emu.log" "$T/emu" "$T/out" "$T/err" && fail "  the token is in no Daytona record or log" ||
	ok "  the token is in no Daytona record or log"
session=$(sed -n 's/.*"type":"run.started","session":"\([^"]*\)".*/\1/p' "$T/out")
expect "the next Daytona turn mounts again in the reconnected sandbox" 0 "$S" run --json \
	--session "$session" --mount s3://work/day:data 'sh:cat data/f'
grep_in "  reconnected" "$T/out" '"how":"reconnected"'
grep_in "  and the mount has the first turn's file" "$T/out" '"text":"exit 0: day"'
[ "$(mounts_left)" -eq 0 ] && ok "  nothing stays mounted" || fail "  nothing stays mounted"
# The mounter runs in the sandbox: an agent of the same user can read its
# environment. What it prints of it is redacted, all through the turn.
# (/proc read directly: a fresh Debian has no pgrep.)
expect "an agent that reads the mounter's environment" 0 "$S" run --json --session "$session" \
	--mount s3://work/day:data 'sh:for p in /proc/[0-9]*; do
tr "\0" " " <$p/cmdline 2>/dev/null | grep -q "^s3fs .* $PWD/data $" &&
tr "\0" "\n" <$p/environ; done | grep AWSSESSIONTOKEN='
grep_in "  sees the token redacted in the events" "$T/out" 'AWSSESSIONTOKEN=\[REDACTED\]'
grep -qs "$TOKEN" "$T/out" "$T/err" && fail "  never in plain text" || ok "  never in plain text"

# ---- a mount that does not come down, through sandrund's warm pool ----
# A clean turn keeps its Daytona sandbox running in the pool; one whose
# mount could not be unmounted parks it stopped instead, which ends the
# mounter and the turn's credentials in its environment; the next turn
# reconnects it and mounts over what is left.
mounters() {
	for p in /proc/[0-9]*; do
		tr "\0" " " 2>/dev/null <"$p/cmdline" | grep -q "^s3fs .* $T/emu/" && echo "$p"
	done | wc -l
}
start_sandrund "$T/svc2.log"
expect "a Daytona turn with a mount through sandrund" 0 svc_run --mount s3://work/day:data \
	'sh:cat data/f'
session=$(sed -n 's/.*"type":"run.started","session":"\([^"]*\)".*/\1/p' "$T/out")
grep_in "  unmounted at the end" "$T/out" '"type":"mount.unmounted"'
touch "$T/fail-unmount"
expect "the next turn, whose mount does not come down" 0 svc_run --session "$session" \
	--mount s3://work/day:data 'sh:cat data/f'
grep_in "  took the sandbox warm from the pool" "$T/out" '"how":"warm"'
grep_in "  the unmount failed" "$T/out" '"type":"mount.unmount_failed"'
rm -f "$T/fail-unmount"
for _ in $(seq 300); do [ "$(mounters)" -eq 0 ] && break; sleep 0.05; done
[ "$(mounters)" -eq 0 ] && ok "  the mounter ended with the sandbox's stop" ||
	fail "  the mounter ended with the sandbox's stop"
grep_in "  sandrund says why" "$T/svc2.log" "a mount did not come down"
expect "the turn after" 0 svc_run --session "$session" --mount s3://work/day:data 'sh:cat data/f'
grep_in "  reconnected: the sandbox was parked stopped, not kept warm" "$T/out" '"how":"reconnected"'
grep_in "  the mount has the file" "$T/out" '"text":"exit 0: day"'
kill "$SVC_PID"
wait "$SVC_PID" 2>/dev/null
[ "$(mounts_left)" -eq 0 ] && ok "  nothing stays mounted" || fail "  nothing stays mounted"

finish
