#!/bin/sh
# Switching tunnel backend is one line: the same endpoint, in three
# configuration files that differ only in [runner] tunnel, resolves through
# ngrok, cloudflared and NetBird (each against its emulator, the first two
# behind one emulated public edge), and sandrun doctor checks each.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
command -v node >/dev/null || missing "node is not installed (scripts/check installs it)"
command -v openssl >/dev/null || missing "openssl is not installed (scripts/deps --tests installs it)"
. "$SANDRUN_SRCDIR/tests/integration/tls.sh"
make_edge_cert "$T/tls"
E="$SANDRUN_SRCDIR/tests/emulators"
TOKEN=$(node "$SANDRUN_SRCDIR/tests/emulators/netbird.mjs" --mint-token)
umask 077
printf '%s\n' "$TOKEN" >"$T/token"
umask 022

node "$E/edge.mjs" --cert "$T/tls/edge.pem" --key "$T/tls/edge.key" >"$T/edge.out" 2>&1 &
PIDS=$!
node -e 'const h=require("http");const s=h.createServer((q,r)=>{r.writeHead(403);r.end("denied")});s.listen(0,"127.0.0.1",()=>console.log(s.address().port))' >"$T/s3.out" &
PIDS="$PIDS $!"
node "$E/netbird.mjs" --token "$TOKEN" >"$T/nb.out" 2>&1 &
PIDS="$PIDS $!"
trap 'kill $PIDS 2>/dev/null; rm -rf "$T"' EXIT
wait_for "$T/edge.out" "$T/s3.out" "$T/nb.out"
read -r _ EDGE <"$T/edge.out"
read -r S3 <"$T/s3.out"
NB=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$T/nb.out")
node "$E/ngrok.mjs" --edge "http://127.0.0.1:$EDGE" >"$T/ng.out" 2>&1 &
PIDS="$PIDS $!"
wait_for "$T/ng.out"
read -r _ NGROK _ <"$T/ng.out"
[ -n "${EDGE:-}" ] && [ -n "${NGROK:-}" ] && [ -n "$NB" ] && ok "the emulators listen" ||
	{ fail "the emulators listen"; cat "$T"/*.out; finish; exit 1; }
export https_proxy="http://127.0.0.1:$EDGE" no_proxy=127.0.0.1,localhost
export CLOUDFLARED_EMU_EDGE="http://127.0.0.1:$EDGE"

# One configuration, the tunnel line left to fill in.
cat >"$T/base.conf" <<CONF
[runner]
provider = daytona
tunnel = @TUNNEL@
ca_file = $T/tls/ca.pem
harnesses =

[provider.daytona]
api_url = http://127.0.0.1:1/api
api_key = unused

[endpoint.s3]
url = http://127.0.0.1:$S3

[tunnel.ngrok]
api_url = http://127.0.0.1:$NGROK

[tunnel.cloudflared]
binary = $E/cloudflared

[tunnel.netbird]
api_url = $NB
token_file = $T/token
runner_group = runners
runner_ip = 127.0.0.1
delete_default = yes
CONF
for t in ngrok cloudflared netbird; do
	sed "s/@TUNNEL@/$t/" "$T/base.conf" >"$T/$t.conf"
done
[ "$(diff "$T/ngrok.conf" "$T/netbird.conf" | grep -c '^[<>]')" -eq 2 ] &&
	ok "the three files differ in one line" || fail "the three files differ in one line"
expect "tunnel = ngrok resolves" 0 "$SANDRUN_BIN" -c "$T/ngrok.conf" endpoint --json s3
grep_in "  through ngrok" "$T/out" '"source":"tunnel","url":"https://[0-9a-f]*.ngrok-free.app","via":"ngrok"'
expect "tunnel = cloudflared resolves" 0 "$SANDRUN_BIN" -c "$T/cloudflared.conf" endpoint --json s3
grep_in "  through cloudflared" "$T/out" '"source":"tunnel","url":"https://[a-z0-9-]*.trycloudflare.com","via":"cloudflared"'
expect "tunnel = netbird resolves" 0 "$SANDRUN_BIN" -c "$T/netbird.conf" endpoint --json s3
grep_in "  through netbird" "$T/out" '"source":"tunnel","url":"http://127.0.0.1:'"$S3"'","via":"netbird"'
for t in ngrok cloudflared netbird; do
	"$SANDRUN_BIN" -c "$T/$t.conf" doctor >"$T/out" 2>&1
	grep_in "doctor checks tunnel $t" "$T/out" "^\[ok  \] tunnel $t"
done
finish
