#!/bin/sh
# The cloudflared tunnel plugin against a fake cloudflared
# (tests/emulators/cloudflared) that behaves as the real one does, with its
# quick tunnels on the emulated edge (tests/emulators/edge.mjs, reached over
# TLS through https_proxy): the name read from /quicktunnel once the
# metrics server listens, the quick tunnel's limits (no SSE, 200 in
# flight) against what a service needs, a slow start, a start that never
# ends, a cloudflared that fails or is missing, and a tunnel that dies
# under a resolution: a new process, a new name, resolved again.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
command -v node >/dev/null || missing "node is not installed (scripts/check installs it)"
command -v openssl >/dev/null || missing "openssl is not installed (scripts/deps --tests installs it)"
. "$SANDRUN_SRCDIR/tests/integration/tls.sh"
make_edge_cert "$T/tls"
FAKE="$SANDRUN_SRCDIR/tests/emulators/cloudflared"

node "$SANDRUN_SRCDIR/tests/emulators/edge.mjs" --cert "$T/tls/edge.pem" --key "$T/tls/edge.key" \
	>"$T/edge.out" 2>"$T/edge.err" &
EDGE_PID=$!
# The store's stand-in: it refuses everything (403, as a store would
# without credentials) and says which Host and path reached it.
node -e 'const h=require("http");const s=h.createServer((q,r)=>{r.writeHead(403,{"x-seen-host":q.headers.host,"x-seen-path":q.url});r.end("<Error><Code>AccessDenied</Code></Error>")});s.listen(0,"127.0.0.1",()=>console.log(s.address().port))' >"$T/s3.out" &
S3_PID=$!
trap 'kill $EDGE_PID $S3_PID 2>/dev/null; rm -rf "$T"' EXIT
wait_for "$T/edge.out" "$T/s3.out"
read -r _ EDGE <"$T/edge.out"
read -r S3 <"$T/s3.out"
[ -n "${EDGE:-}" ] && ok "the edge listens" || { fail "the edge listens"; cat "$T/edge.err"; finish; exit 1; }
export https_proxy="http://127.0.0.1:$EDGE" no_proxy=127.0.0.1,localhost
export CLOUDFLARED_EMU_EDGE="http://127.0.0.1:$EDGE" CLOUDFLARED_EMU_LOG="$T/argv.log"
routes() { node -e 'fetch(process.argv[1]).then(r=>r.text()).then(t=>console.log(t))' "http://127.0.0.1:$EDGE/routes" 2>/dev/null; }
running() { grep -l -a -e "--url" /proc/[0-9]*/cmdline 2>/dev/null | xargs -r grep -l -a "127.0.0.1:$S3" 2>/dev/null | head -n 1; }

conf() {
	f=$1
	shift
	{
		printf '[runner]\nprovider = daytona\ntunnel = cloudflared\nca_file = %s\n' "$T/tls/ca.pem"
		printf '[provider.daytona]\napi_url = http://127.0.0.1:1/api\napi_key = unused\n'
		printf '[tunnel.cloudflared]\nbinary = %s\n' "$FAKE"
		printf '[endpoint.s3]\nurl = http://127.0.0.1:%s\n' "$S3"
		for line in "$@"; do printf '%s\n' "$line"; done
	} >"$T/$f"
}
ep() { f=$1; shift; "$SANDRUN_BIN" -c "$T/$f" endpoint "$@"; }

conf cf.conf
expect "a quick tunnel is started and its name read" 0 ep cf.conf --json s3
grep_in "  resolved through cloudflared" "$T/out" '"source":"tunnel","url":"https://[a-z]*-[a-z]*-[a-z]*-[0-9a-f]*.trycloudflare.com","via":"cloudflared"'
grep_in "  started as a quick tunnel with its own metrics port and a short grace period" "$T/argv.log" '"argv":\["tunnel","--no-autoupdate","--grace-period","3s","--url","http://127.0.0.1:'"$S3"'","--metrics","127.0.0.1:[0-9]*"\]'
[ -z "$(running)" ] && ok "  and stopped at exit" || fail "  and stopped at exit"
[ "$(routes)" = "[]" ] && ok "  its route is gone from the edge" || fail "  its route is gone from the edge: $(routes)"
expect "--keep is refused: a quick tunnel lives with its runner" 1 ep cf.conf --keep s3
grep_in "  says why" "$T/err" "tunnel 'cloudflared' cannot be kept: its route ends with this process"
grep -q "trycloudflare.com" "$T/out" && fail "  prints no URL that dies at exit" || ok "  prints no URL that dies at exit"
for _ in $(seq 50); do [ -z "$(running)" ] && break; sleep 0.1; done
[ -z "$(running)" ] && ok "  no cloudflared left behind" || fail "  no cloudflared left behind"
grep -q "killed at exit" "$T/err" && fail "  stopped gracefully, never killed" || ok "  stopped gracefully, never killed"

# cloudflared ignores the path of --url and forwards each request's own:
# the public URL carries the service's path and query.
conf path.conf "[endpoint.sub]" "url = http://127.0.0.1:$S3/sub/dir?x=1"
expect "a service with a path" 0 ep path.conf sub
grep_in "  keeps its path and query" "$T/out" '^https://[a-z]*-[a-z]*-[a-z]*-[0-9a-f]*.trycloudflare.com/sub/dir?x=1$'
# The emulated tunnel as cloudflared's: the request's own path, and the
# public Host, reach the origin (buildHTTPRequest sets req.Host to it).
"$FAKE" tunnel --no-autoupdate --url "http://127.0.0.1:$S3/ignored" --metrics 127.0.0.1:0 2>"$T/cf.err" &
cf_pid=$!
wait_grep "$T/cf.err" "https://[a-z0-9-]*.trycloudflare.com"
cf_host=$(sed -n 's/.*https:\/\/\([a-z0-9-]*\.trycloudflare\.com\).*/\1/p' "$T/cf.err" | head -n 1)
for _ in $(seq 50); do curl -s -o /dev/null --cacert "$T/tls/ca.pem" "https://$cf_host/" && break; sleep 0.1; done
curl -s -D "$T/hdr" -o /dev/null --cacert "$T/tls/ca.pem" "https://$cf_host/bucket/key?x=1"
grep -qi "^x-seen-host: $cf_host" "$T/hdr" && ok "the edge passes the public Host to the origin" ||
	{ fail "the edge passes the public Host to the origin"; cat "$T/hdr"; }
grep -qi "^x-seen-path: /bucket/key?x=1" "$T/hdr" && ok "  and the request's own path, not --url's" ||
	fail "  and the request's own path, not --url's"
kill $cf_pid 2>/dev/null; wait $cf_pid 2>/dev/null

conf sse.conf "sse = yes"
expect "a service that needs SSE is not sent through a quick tunnel" 1 ep sse.conf s3
grep_in "  says why" "$T/err" "tunnel: tunnel 'cloudflared' carries no server-sent events, which service 's3' needs"
conf many.conf "in_flight = 500"
expect "nor one that needs 500 requests in flight" 1 ep many.conf s3
grep_in "  says why" "$T/err" "carries at most 200 requests at once; service 's3' needs 500"
conf few.conf "in_flight = 100"
expect "100 in flight fit" 0 ep few.conf s3

CLOUDFLARED_EMU_DELAY_MS=1500 expect "a slow start is waited for" 0 ep cf.conf s3
conf quick.conf "[tunnel.cloudflared]" "start_timeout = 1"
CLOUDFLARED_EMU_DELAY_MS=4000 expect "a start that does not end in start_timeout fails" 1 ep quick.conf --attempts 1 s3
grep_in "  says so" "$T/err" "cloudflared had no quick tunnel to http://127.0.0.1:$S3 after 1 s"
CLOUDFLARED_EMU_EDGE= expect "a cloudflared that cannot reach its edge" 1 ep cf.conf --attempts 1 s3
grep_in "  gives its own last words" "$T/err" "exited (status 1) before its quick tunnel existed: .*Failed to request quick Tunnel"

# A tunnel that dies as its name is read: the probe fails, the
# resolution asks again, a new cloudflared gives a new name.
: >"$T/argv.log"
CLOUDFLARED_EMU_DIE_ONCE="$T/died" expect "a quick tunnel that dies under a resolution is started again" 0 ep cf.conf s3
old=$(cat "$T/died" 2>/dev/null)
[ -n "$old" ] && ! grep -q "$old" "$T/out" && ok "  under a new name" || fail "  under a new name (old $old, got $(cat "$T/out"))"
grep_in "  the dead name's probe failed first" "$T/err" "try 1 of 4 failed (https://$old answered HTTP 530)"
[ "$(grep -c '"tunnel"' "$T/argv.log")" -eq 2 ] && ok "  two cloudflared processes in all" || fail "  two cloudflared processes in all ($(grep -c '"tunnel"' "$T/argv.log"))"
grep_in "  the death is logged" "$T/err" "cloudflared for http://127.0.0.1:$S3 (https://$old) exited"

conf missing.conf "[tunnel.cloudflared]" "binary = $T/no-such-cloudflared"
expect "a missing cloudflared binary" 1 ep missing.conf --attempts 1 s3
grep_in "  is named in the failure itself" "$T/err" "^sandrun: .*tunnel 'cloudflared' could not resolve the service: cannot start '$T/no-such-cloudflared' (set \[tunnel.cloudflared\] binary)"
grep -q "input/output error" "$T/err" && fail "  not as an I/O error" || ok "  not as an I/O error"
grep -q "try 1 of" "$T/err" && fail "  and not tried again" || ok "  and not tried again"
SANDRUN_RUNNER_HARNESSES= "$SANDRUN_BIN" -c "$T/missing.conf" doctor >"$T/out" 2>&1
grep_in "  doctor fails it" "$T/out" "FAIL.*tunnel cloudflared"
SANDRUN_RUNNER_HARNESSES= "$SANDRUN_BIN" -c "$T/cf.conf" doctor >"$T/out" 2>&1
grep_in "doctor checks cloudflared's version" "$T/out" "ok.*tunnel cloudflared.*cloudflared version 2024.8.2"
conf bad.conf "[tunnel.cloudflared]" "start_timeout = 0"
expect "a bad start_timeout is a configuration error" 3 ep bad.conf s3
# ---- a quick tunnel that dies in the middle of a run ----
# On the Daytona emulator (a remote provider: the store goes through the
# tunnel); the turn goes on, its stream says which endpoint went with the
# tunnel, and the next turn resolves a new one.
node "$SANDRUN_SRCDIR/tests/emulators/daytona.mjs" --state-dir "$T/dtn" --api-key dtn-cf-key \
	--transition-ms 20 >"$T/dtn.out" 2>"$T/dtn.err" &
DTN_PID=$!
trap 'kill $EDGE_PID $S3_PID $DTN_PID 2>/dev/null; rm -rf "$T"' EXIT
wait_for "$T/dtn.out"
conf run.conf
sed -i "s|^api_url = http://127.0.0.1:1/api|api_url = $(sed -n 's/.*"apiUrl":"\([^"]*\)".*/\1/p' "$T/dtn.out")|; s|^api_key = unused|api_key = dtn-cf-key\nsecrets = off|" "$T/run.conf"
export SANDRUN_RUNNER_HARNESSES=claude SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt \
	SANDRUN_HARNESS_CLAUDE_COMMAND="$SANDRUN_SRCDIR/tests/emulators/fake_acp.mjs"
"$SANDRUN_BIN" -c "$T/run.conf" run --json --endpoint s3 slow:3000 >"$T/run1" 2>"$T/run1.err" &
RUN_PID=$!
wait_grep "$T/run1" agent.prompt_sent
pid=$(running | cut -d/ -f3)
[ -n "$pid" ] && kill -9 "$pid" && ok "the run's cloudflared is killed mid-turn" ||
	fail "the run's cloudflared is killed mid-turn"
wait $RUN_PID
rc=$?
[ "$rc" -eq 0 ] && ok "  the turn still ends (exit 0)" || { fail "  the turn still ends (exit $rc)"; cat "$T/run1" "$T/run1.err"; }
first=$(sed -n 's/.*"type":"endpoint.resolved".*"url":"\(https:[^"]*\)".*/\1/p' "$T/run1")
grep_in "  its stream has the tunnel's failure" "$T/run1" '"url":"http://127.0.0.1:'"$S3"'".*"type":"tunnel.failed"'
grep_in "  and which endpoint went with it" "$T/run1" '"type":"endpoint.lost","service":"s3","url":"'"$first"'"'
expect "the next turn resolves again" 0 "$SANDRUN_BIN" -c "$T/run.conf" run --json --endpoint s3 ok
second=$(sed -n 's/.*"type":"endpoint.resolved".*"url":"\(https:[^"]*\)".*/\1/p' "$T/out")
[ -n "$second" ] && [ "$second" != "$first" ] && ok "  through a new quick tunnel" ||
	fail "  through a new quick tunnel ($first, then $second)"
grep -q endpoint.lost "$T/out" && fail "  which nothing takes away" || ok "  which nothing takes away"
unset SANDRUN_RUNNER_HARNESSES
finish
