#!/bin/sh
# Endpoint resolution (sandrun endpoint) and the ngrok tunnel plugin, against
# the ngrok agent emulator (tests/emulators/ngrok.mjs): its local API, and
# its public edge reached as ngrok's is, over TLS, through
# https_proxy=http://127.0.0.1:EDGE, with a test CA in [runner] ca_file.
# Every source of the resolution order, every refusal and its message,
# tunnels found in each address form, created and released, and the
# failures: a service that does not answer, an agent that is not there.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
command -v node >/dev/null || missing "node is not installed (scripts/check installs it)"
command -v openssl >/dev/null || missing "openssl is not installed (scripts/deps --tests installs it)"

. "$SANDRUN_SRCDIR/tests/integration/tls.sh"
make_edge_cert "$T/tls"

# Three S3 stand-ins: 403 AccessDenied to an anonymous GET, as S3 answers.
cat >"$T/s3.mjs" <<'JS'
import http from "node:http";
const ports = [];
let n = 0;
for (let i = 0; i < 3; i++) {
  const s = http.createServer((req, res) => {
    res.writeHead(403, { "Content-Type": "application/xml" });
    res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code></Error>');
  });
  s.listen(0, "127.0.0.1", () => { ports[i] = s.address().port; if (++n === 3) console.log(ports.join(" ")); });
}
JS
node "$T/s3.mjs" >"$T/s3.out" 2>&1 &
S3_PID=$!
wait_for "$T/s3.out"
read -r S3A S3B S3C <"$T/s3.out"
# A port where nothing listens: a service that is down.
DOWN=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')

EMU_PID=
start_emu() {
	[ -s "$T/emu.err" ] && sed 's/^/  emulator stderr: /' "$T/emu.err"
	# The last emulator's line goes first: the background job truncates
	# the file only once it runs, and the wait below would read the old
	# ports (the flake of a "refused" agent after a restart).
	rm -f "$T/emu.out"
	node "$SANDRUN_SRCDIR/tests/emulators/ngrok.mjs" --cert "$T/tls/edge.pem" \
		--key "$T/tls/edge.key" "$@" >"$T/emu.out" 2>"$T/emu.err" &
	EMU_PID=$!
	for _ in $(seq 400); do [ -s "$T/emu.out" ] && break; sleep 0.05; done
	read -r _ API EDGE <"$T/emu.out"
	export https_proxy="http://127.0.0.1:$EDGE" no_proxy=127.0.0.1,localhost
}
stop_emu() { kill "$EMU_PID" 2>/dev/null; wait "$EMU_PID" 2>/dev/null; }
trap 'stop_emu; kill $S3_PID 2>/dev/null; rm -rf "$T"' EXIT
start_emu --tunnel "bare=$S3A" --tunnel "short=localhost:$S3B" \
	--http-tunnel "plain=http://localhost:$S3C" --tunnel "full=http://localhost:$S3C"
[ -n "${API:-}" ] && ok "the emulator listens" || { fail "the emulator listens"; cat "$T/emu.err"; finish; exit 1; }
tunnels() { node -e 'fetch(process.argv[1]).then(r=>r.json()).then(j=>console.log(j.tunnels.map(t=>t.name+" "+t.public_url+" "+t.config.addr).sort().join("\n")))' "http://127.0.0.1:$API/api/tunnels"; }
public_of() { tunnels | awk -v n="$1" '$1 == n { print $2 }'; }

# conf FILE PROVIDER TUNNEL [EXTRA LINES]: a configuration.
conf() {
	f=$1 provider=$2 tunnel=$3
	shift 3
	{
		printf '[runner]\nprovider = %s\ntunnel = %s\nca_file = %s\n' "$provider" "$tunnel" "$T/tls/ca.pem"
		printf '[provider.daytona]\napi_url = http://127.0.0.1:1/api\napi_key = unused\n'
		printf '[tunnel.ngrok]\napi_url = http://127.0.0.1:%s\n' "$API"
		for line in "$@"; do printf '%s\n' "$line"; done
	} >"$T/$f"
}
ep() { f=$1; shift; "$SANDRUN_BIN" -c "$T/$f" endpoint --attempts 2 "$@"; }
s3_section="[endpoint.s3]
url = http://127.0.0.1:$S3A"

# ---- 1. the configured endpoint ----
conf local.conf local none "$s3_section"
expect "local provider: the configured endpoint is used" 0 ep local.conf s3
[ "$(cat "$T/out")" = "http://127.0.0.1:$S3A" ] && ok "  and printed" || fail "  and printed ($(cat "$T/out"))"
grep_in "  the decision is shown" "$T/err" "configured: http://127.0.0.1:$S3A answers"
expect "the decisions as NDJSON" 0 ep local.conf --json s3
grep_in "  an endpoint.resolved event" "$T/out" '"type":"endpoint.resolved","service":"s3","source":"configured","url":"http://127.0.0.1:'"$S3A"'"'

# ---- 2. a remote provider: private endpoints refused, each with its reason ----
conf remote.conf daytona none "$s3_section"
expect "remote provider, no override, no tunnel: no route" 1 ep remote.conf s3
grep_in "  names the service" "$T/err" "no route from the sandbox to service 's3' (http://127.0.0.1:$S3A)"
grep_in "  says why not the configured endpoint" "$T/err" "configured endpoint: http://127.0.0.1:$S3A: 127.0.0.1 is a private, loopback or link-local address, which a remote sandbox cannot reach"
grep_in "  says there is no override" "$T/err" "public override: none is set (\[endpoint.s3\] public_url)"
grep_in "  says there is no tunnel" "$T/err" "tunnel: no tunnel is configured (\[runner\] tunnel)"
for case in "http://localhost:9000|localhost is this machine" \
	"http://s3.localhost/|s3.localhost is this machine" \
	"http://nas.local:9000|nas.local is a link-local (mDNS) name" \
	"http://minio:9000|minio is a name without a domain" \
	"http://10.1.2.3:9000|10.1.2.3 is a private" \
	"http://172.20.0.1/|172.20.0.1 is a private" \
	"http://192.168.1.10/|192.168.1.10 is a private" \
	"http://169.254.169.254/|169.254.169.254 is a private" \
	"http://[::1]:9000/|::1 is a private" \
	"http://[fd00::5]/|fd00::5 is a private" \
	"http://[fe80::1]/|fe80::1 is a private" \
	"http://[::ffff:10.0.0.1]/|::ffff:10.0.0.1 is a private"; do
	url=${case%%|*} why=${case#*|}
	expect "remote provider refuses $url" 1 ep remote.conf "$url"
	grep_in "  because $why" "$T/err" "$why"
done
expect "a URL with credentials is refused" 2 ep remote.conf "http://user:secret@s3.example.com/"
grep_in "  saying why" "$T/err" "credentials"
grep -q secret "$T/err" && fail "  without repeating the password" || ok "  without repeating the password"
conf creds.conf daytona none "[endpoint.s3]" "url = http://key:secret@127.0.0.1:$S3A"
expect "an endpoint url with credentials is a configuration error" 3 ep creds.conf s3
grep -q secret "$T/err" && fail "  that does not repeat the password" || ok "  that does not repeat the password"

# ---- 3. the operator's public override ----
conf override.conf daytona none "$s3_section" "public_url = $(public_of bare)"
expect "the public override is used when the endpoint is private" 0 ep override.conf s3
[ "$(cat "$T/out")" = "$(public_of bare)" ] && ok "  and printed" || fail "  and printed ($(cat "$T/out"))"
grep_in "  the configured endpoint was skipped first" "$T/err" "configured: not used"
conf override_bad.conf daytona none "$s3_section" "public_url = http://10.0.0.8:9000"
expect "a private public_url is a configuration error" 3 ep override_bad.conf s3
grep_in "  naming the key" "$T/err" "\[endpoint.s3\] public_url: http://10.0.0.8:9000: 10.0.0.8 is a private"

# ---- 4. the tunnel: found in each address form, https preferred ----
conf ngrok.conf daytona ngrok "$s3_section" "[endpoint.b]" "url = http://127.0.0.1:$S3B" \
	"[endpoint.c]" "url = http://localhost:$S3C"
before=$(tunnels)
expect "a tunnel with addr PORT forwards http://127.0.0.1:PORT" 0 ep ngrok.conf s3
[ "$(cat "$T/out")" = "$(public_of bare)" ] && ok "  its public URL" || fail "  its public URL ($(cat "$T/out"), wanted $(public_of bare))"
expect "a tunnel with addr localhost:PORT" 0 ep ngrok.conf b
[ "$(cat "$T/out")" = "$(public_of short)" ] && ok "  its public URL" || fail "  its public URL ($(cat "$T/out"))"
expect "a tunnel with addr http://localhost:PORT, the https one of two" 0 ep ngrok.conf c
[ "$(cat "$T/out")" = "$(public_of full)" ] && ok "  its https URL, not plain's http" || fail "  its https URL ($(cat "$T/out"))"
[ "$(tunnels)" = "$before" ] && ok "tunnels it did not create are left alone" || fail "tunnels it did not create are left alone"

# ---- 5. created when missing, released at exit (or kept) ----
start_emu_plain() { stop_emu; start_emu "$@"; conf make.conf daytona ngrok "[endpoint.new]" "url = http://127.0.0.1:$S3B"; }
start_emu_plain
expect "no tunnel forwards to it: one is created" 0 ep make.conf --json new
grep_in "  resolved through ngrok" "$T/out" '"source":"tunnel","url":"https://[0-9a-f]*.ngrok-free.app","via":"ngrok"'
grep_in "  the creation is logged" "$T/err" "created ngrok tunnel 'sandrun-$S3B-"
[ -z "$(tunnels)" ] && ok "  and deleted at exit" || fail "  and deleted at exit: $(tunnels)"
expect "--keep leaves it" 0 ep make.conf --keep new
tunnels | grep -q "^sandrun-$S3B-[0-9a-f]* https://.* http://127.0.0.1:$S3B$" && ok "  in the agent" || fail "  in the agent: $(tunnels)"
expect "  and the next resolution finds it" 0 ep make.conf new
[ "$(cat "$T/out")" = "$(tunnels | awk '{print $2}')" ] && ok "  the same URL" || fail "  the same URL"
# ngrok forwards each request's path, and its public_url has none: the
# answer carries the service's path and query.
conf path.conf daytona ngrok "[endpoint.sub]" "url = http://127.0.0.1:$S3B/sub/dir?x=1"
expect "a service with a path, through the same tunnel" 0 ep path.conf sub
[ "$(cat "$T/out")" = "$(tunnels | awk '{print $2}')/sub/dir?x=1" ] && ok "  keeps its path and query" ||
	fail "  keeps its path and query ($(cat "$T/out"))"
[ "$(tunnels | wc -l)" -eq 1 ] && ok "  and does not delete what it did not create" || fail "  and does not delete what it did not create"
conf nocreate.conf daytona ngrok "[endpoint.other]" "url = http://127.0.0.1:$S3C" "[tunnel.ngrok]" "create = no"
expect "create = no: no tunnel, no route" 1 ep nocreate.conf other
grep_in "  says so" "$T/err" "no tunnel of the ngrok agent at http://127.0.0.1:$API forwards to http://127.0.0.1:$S3C, and \[tunnel.ngrok\] create is off"

# ---- 6. failures ----
start_emu_plain
conf down.conf daytona ngrok "[endpoint.down]" "url = http://127.0.0.1:$DOWN"
expect "a service that does not answer: bounded retries, then no route" 1 ep down.conf down
grep_in "  the edge's 502 is named" "$T/err" "answered HTTP 502 (after 2 tries)"
grep_in "  each retry is shown" "$T/err" "tunnel: try 1 of 2 failed"
[ -z "$(tunnels)" ] && ok "  the tunnel it made is deleted after the failure" || fail "  the tunnel it made is deleted after the failure: $(tunnels)"
conf nocert.conf daytona ngrok "[endpoint.s3]" "url = http://127.0.0.1:$S3A"
sed -i '/^ca_file/d' "$T/nocert.conf"
expect "the edge's certificate is verified (no ca_file: refused)" 1 ep nocert.conf s3
grep_in "  a TLS failure" "$T/err" "certificate"
stop_emu
expect "no agent: the tunnel fails loudly" 1 ep ngrok.conf s3
grep_in "  naming the agent's address" "$T/err" "no ngrok agent answers at http://127.0.0.1:[0-9]* (start one"
SANDRUN_RUNNER_HARNESSES= "$SANDRUN_BIN" -c "$T/ngrok.conf" doctor >"$T/out" 2>&1
grep_in "doctor fails the tunnel when the agent is gone" "$T/out" "FAIL.*tunnel ngrok"
start_emu
conf ngrok.conf daytona ngrok "$s3_section"
SANDRUN_RUNNER_HARNESSES= "$SANDRUN_BIN" -c "$T/ngrok.conf" doctor >"$T/out" 2>&1
grep_in "doctor checks the configured tunnel" "$T/out" "ok.*tunnel ngrok.*ngrok agent at http://127.0.0.1:$API with 0 tunnels"

# ---- 7. configuration errors ----
conf badurl.conf local none "[endpoint.s3]" "url = ftp://127.0.0.1/x"
expect "an endpoint url that is not http(s)" 3 ep badurl.conf s3
grep_in "  is named" "$T/err" "\[endpoint.s3\] url: 'ftp://127.0.0.1/x' is not an http or https URL"
expect "an endpoint that is not configured" 3 ep local.conf nope
grep_in "  is named" "$T/err" "no endpoint 'nope' is configured"
conf badca.conf local none "$s3_section"
sed -i "s|^ca_file = .*|ca_file = $T/none.pem|" "$T/badca.conf"
expect "an unreadable ca_file" 3 ep badca.conf s3
grep_in "  is named" "$T/err" "ca_file"
conf badtun.conf daytona ngrok "$s3_section" "[tunnel.ngrok]" "api_url = 127.0.0.1:4040"
expect "a tunnel api_url that is not a URL" 3 ep badtun.conf s3
expect "usage: no argument" 2 "$SANDRUN_BIN" -c "$T/local.conf" endpoint
expect "--help" 0 "$SANDRUN_BIN" endpoint --help
grep_in "  tells the resolution order" "$T/out" "then the operator's public override, then the configured tunnel"
finish
