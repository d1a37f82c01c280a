#!/bin/sh
# The Daytona emulator's egress proxy (tests/emulators/daytona.mjs): a
# sandbox process's requests leave through HTTP_PROXY; in those to a
# linked secret's hosts the placeholder becomes the value, everywhere else
# it stays; the sandbox never sees a value, nor does any log. Also the
# proxy's refusals (407, 502), CONNECT tunnels, the host map admin route,
# SSE through the proxy to the Anthropic emulator (whose log has only the
# key's SHA-256), and faults with `after`. Needs node and curl.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
emu="$SANDRUN_SRCDIR/tests/emulators/daytona.mjs"
command -v node >/dev/null || missing "node is not installed (scripts/check installs it)"
command -v curl >/dev/null || missing "curl is not installed"

# jv EXPR <JSON: the JavaScript expression EXPR over the JSON as d; a
# string printed bare, anything else as JSON.
jv() {
	node -e 'const d = JSON.parse(require("fs").readFileSync(0, "utf8") || "null");
const v = new Function("d", "return (" + process.argv[1] + ")")(d);
process.stdout.write(typeof v === "string" ? v : JSON.stringify(v) ?? "undefined");' "$1"
}
# is NAME GOT WANT
is() {
	if [ "$2" = "$3" ]; then ok "$1"; else
		fail "$1"
		printf '  got:  %s\n  want: %s\n' "$2" "$3" | cut -c1-300
	fi
}
rand() { od -An -N8 -tx1 /dev/urandom | tr -d ' \n'; }

# An upstream that answers with what it got (and logs it), and the
# scripted Anthropic API.
node -e 'const fs = require("fs");
require("http").createServer((q, s) => {
  let n = 0;
  q.on("data", (c) => (n += c.length));
  q.on("end", () => {
    const r = JSON.stringify({ method: q.method, url: q.url, headers: q.headers, bodyBytes: n });
    fs.appendFileSync(process.argv[1], r + "\n");
    s.writeHead(200, { "content-type": "application/json" });
    s.end(r);
  });
}).listen(0, "127.0.0.1", function () { console.log(this.address().port); });' "$T/echo.log" >"$T/echo.out" 2>&1 &
ECHO_PID=$!
printf '[{"text":"through the proxy"}]\n' >"$T/script.json"
node "$SANDRUN_SRCDIR/tests/emulators/anthropic.mjs" --script "$T/script.json" --log "$T/model.ndjson" \
	>"$T/model.out" 2>&1 &
MODEL_PID=$!
trap 'kill $ECHO_PID $MODEL_PID ${EMU_PID:-} 2>/dev/null; rm -rf "$T"' EXIT
wait_for "$T/echo.out" "$T/model.out"
EP=$(cat "$T/echo.out")
MODEL_URL=$(sed -n 's/.*"url":"\([^"]*\)".*/\1/p' "$T/model.out")
MP=${MODEL_URL##*:}

key=emu-key-$$
node "$emu" --state-dir "$T/daytona" --api-key "$key" --transition-ms 20 --log "$T/emu.log" \
	--egress-host "api.model.test=127.0.0.1:$EP" --egress-host "sub.api.model.test=127.0.0.1:$EP" \
	--egress-host "other.test=127.0.0.1:$EP" --egress-host "*.wild.test=127.0.0.1:$EP" \
	--egress-host "wild.test=127.0.0.1:$EP" --egress-host "notwild.test=127.0.0.1:$EP" >"$T/emu.out" 2>"$T/emu.err" &
EMU_PID=$!
wait_for "$T/emu.out"
BASE=$(jv d.url <"$T/emu.out")
PROXY=$(jv d.egressProxyUrl <"$T/emu.out")
case $PROXY in
http://127.0.0.1:[0-9]*) ok "the startup line names the egress proxy" ;;
*) fail "the startup line names the egress proxy"; cat "$T/emu.out" "$T/emu.err"; finish; exit 1 ;;
esac
PP=${PROXY##*:}
AUTH="Authorization: Bearer $key"
api() { # METHOD PATH [BODY]: status on the last line
	curl -s -w '\n%{http_code}' -X "$1" -H "$AUTH" -H 'Content-Type: application/json' \
		${3:+--data "$3"} "$BASE/api$2"
}
admin() { curl -s -X "$1" -H 'Content-Type: application/json' ${3:+--data "$3"} "$BASE/_emulator$2"; }
body() { sed '$d'; }
code() { tail -n 1; }

# Three secrets: the model key (one exact host), a wildcard one, and one
# for other.test that the sandbox does not link. Values with '$&' check
# that they go in verbatim.
real_a="sk-REAL-model-\$&-$(rand)"
real_b="REAL-wild-$(rand)"
real_c="REAL-other-$(rand)"
n=egress_$$
mk_secret() { # NAME VALUE HOSTS_JSON -> the create answer
	api POST /secret "$(node -e 'console.log(JSON.stringify({ name: process.argv[1], value: process.argv[2], hosts: JSON.parse(process.argv[3]) }))' "$1" "$2" "$3")"
}
mk_secret "${n}_model" "$real_a" '["api.model.test"]' >"$T/sa"
mk_secret "${n}_wild" "$real_b" '["*.wild.test"]' >"$T/sb"
mk_secret "${n}_other" "$real_c" '["other.test"]' >"$T/sc"
is "three secrets created" "$(code <"$T/sa") $(code <"$T/sb") $(code <"$T/sc")" "201 201 201"
ph_a=$(body <"$T/sa" | jv d.placeholder)
ph_b=$(body <"$T/sb" | jv d.placeholder)
ph_c=$(body <"$T/sc" | jv d.placeholder)

new_sandbox() { # SECRETS_JSON -> id, once started
	id=$(api POST /sandbox "{\"secrets\":$1}" | body | jv d.id)
	for _ in $(seq 100); do
		[ "$(api GET "/sandbox/$id" | body | jv d.state)" = started ] && break
		sleep 0.05
	done
	echo "$id"
}
SB=$(new_sandbox "[{\"MODEL_KEY\":\"${n}_model\"},{\"WILD_KEY\":\"${n}_wild\"}]")
SB2=$(new_sandbox '[]')
[ -n "$SB" ] && [ -n "$SB2" ] && ok "two sandboxes started" || fail "two sandboxes started"
# sbx ID COMMAND: COMMAND's output, run in the sandbox by the toolbox
sbx() {
	node -e 'console.log(JSON.stringify({ command: process.argv[1] }))' "$2" >"$T/cmd.json"
	curl -s -H "$AUTH" -H 'Content-Type: application/json' --data @"$T/cmd.json" \
		"$BASE/toolbox/$1/process/execute" | jv d.result
}
# got ID COMMAND EXPR: EXPR over the echo's answer to COMMAND (a curl)
got() { sbx "$1" "$2" | jv "$3"; }

# The sandbox's environment: the placeholders, its proxy, never a value.
sbx "$SB" env >"$T/env"
grep_in "env holds the model key's placeholder" "$T/env" "^MODEL_KEY=$ph_a\$"
grep_in "env holds the wildcard key's placeholder" "$T/env" "^WILD_KEY=$ph_b\$"
grep_in "http_proxy names the sandbox" "$T/env" "^http_proxy=http://$SB:[0-9a-f]*@127.0.0.1:$PP\$"
grep_in "HTTPS_PROXY too" "$T/env" "^HTTPS_PROXY=http://$SB:[0-9a-f]*@127.0.0.1:$PP\$"
grep_in "loopback stays direct" "$T/env" '^NO_PROXY=127.0.0.1,localhost$'
grep -qF -e "$real_a" -e "$real_b" -e "$real_c" "$T/env" && fail "no value in the sandbox's env" ||
	ok "no value in the sandbox's env"
tok1=$(sed -n "s|^http_proxy=http://$SB:\([0-9a-f]*\)@.*|\1|p" "$T/env")
tok2=$(sbx "$SB2" 'printf %s "$http_proxy"' | sed -n "s|^http://$SB2:\([0-9a-f]*\)@.*|\1|p")
[ -n "$tok1" ] && [ -n "$tok2" ] && [ "$tok1" != "$tok2" ] && ok "each sandbox has its own proxy token" ||
	fail "each sandbox has its own proxy token ('$tok1' '$tok2')"

# The secret's host gets the value, in headers and the query string.
U="http://api.model.test:$EP"
got "$SB" "curl -s -H \"x-api-key: \$MODEL_KEY\" -H \"authorization: Bearer \$MODEL_KEY\" '$U/v1/a?k='\"\$MODEL_KEY\"" \
	'[d.headers["x-api-key"], d.headers.authorization, new URL(d.url, "http://x").searchParams.get("k"),
	  d.headers.host, "proxy-authorization" in d.headers].join(" ")' >"$T/r"
is "api.model.test got the value (header, bearer, query), Host kept, no Proxy-Authorization" \
	"$(cat "$T/r")" "$real_a Bearer $real_a $real_a api.model.test:$EP false"
# Every other host, a subdomain of the exact host included, gets the placeholder.
for h in other.test sub.api.model.test; do
	is "$h got the placeholder" \
		"$(got "$SB" "curl -s -H \"x-api-key: \$MODEL_KEY\" 'http://$h:$EP/v1/b?k='\"\$MODEL_KEY\"" \
			'd.headers["x-api-key"] + " " + new URL(d.url, "http://x").searchParams.get("k")')" "$ph_a $ph_a"
done
# A wildcard matches subdomains, not the domain itself.
is "x.wild.test got the wildcard secret's value" \
	"$(got "$SB" "curl -s -H \"x-k: \$WILD_KEY\" http://x.wild.test:$EP/" 'd.headers["x-k"]')" "$real_b"
is "a.b.wild.test too" \
	"$(got "$SB" "curl -s -H \"x-k: \$WILD_KEY\" http://a.b.wild.test:$EP/" 'd.headers["x-k"]')" "$real_b"
is "wild.test (the domain itself) got the placeholder" \
	"$(got "$SB" "curl -s -H \"x-k: \$WILD_KEY\" http://wild.test:$EP/" 'd.headers["x-k"]')" "$ph_b"
is "notwild.test (a name that merely ends alike) got the placeholder" \
	"$(got "$SB" "curl -s -H \"x-k: \$WILD_KEY\" http://notwild.test:$EP/" 'd.headers["x-k"]')" "$ph_b"
# Only the secrets the host is listed for; a secret the sandbox does not link never.
is "one request, two placeholders: only api.model.test's secret swapped" \
	"$(got "$SB" "curl -s -H \"x-k: \$MODEL_KEY \$WILD_KEY\" $U/" 'd.headers["x-k"]')" "$real_a $ph_b"
is "an unlinked secret's placeholder stays, even at its own host" \
	"$(got "$SB" "curl -s -H 'x-k: $ph_c' http://other.test:$EP/" 'd.headers["x-k"]')" "$ph_c"
is "another sandbox's request carrying the placeholder: not swapped" \
	"$(got "$SB2" "curl -s -H 'x-k: $ph_a' $U/" 'd.headers["x-k"]')" "$ph_a"
is "a request body goes through" \
	"$(got "$SB" "head -c 100000 /dev/zero | curl -s --data-binary @- $U/upload" 'd.method + " " + d.bodyBytes')" "POST 100000"

# Refusals: no or wrong proxy credentials (407), a host not in the map (502).
is "no proxy credentials: 407" \
	"$(sbx "$SB" "curl -s -o /dev/null -w '%{http_code}' --proxy http://127.0.0.1:$PP $U/")" 407
is "another sandbox's id with this one's token: 407" \
	"$(sbx "$SB" "curl -s -o /dev/null -w '%{http_code}' --proxy http://$SB2:$tok1@127.0.0.1:$PP $U/")" 407
sbx "$SB" "curl -s -w '\n%{http_code}' http://unmapped.example.test/x" >"$T/r"
is "an unmapped host: 502" "$(code <"$T/r")" 502
grep_in "the 502 names the host" "$T/r" "host unmapped.example.test is not in the egress host map"
# CONNECT: a tunnel to the mapped upstream. Plain HTTP in it (as Node's
# proxy agents send http:// requests) is read like a proxied request, with
# the same substitution; other bytes (TLS) pass untouched.
is "plain HTTP through CONNECT is substituted like a proxied request" \
	"$(got "$SB" "curl -s -p -H \"x-api-key: \$MODEL_KEY\" $U/tunnel" 'd.url + " " + d.headers["x-api-key"]')" "/tunnel $real_a"
is "... and to another host through CONNECT, the placeholder stays" \
	"$(got "$SB" "curl -s -p -H \"x-api-key: \$MODEL_KEY\" http://other.test:$EP/t2" 'd.headers["x-api-key"]')" "$ph_a"
# Loopback stays direct (NO_PROXY): the upstream sees no proxy at all.
is "127.0.0.1 is reached directly" \
	"$(got "$SB" "curl -s -H \"x-api-key: \$MODEL_KEY\" http://127.0.0.1:$EP/direct" 'd.headers["x-api-key"]')" "$ph_a"
node -e 'const fs = require("fs");
const [log, real, ph] = process.argv.slice(1);
const bad = fs.readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l))
  .filter((r) => JSON.stringify(r).includes(real) && !/^api\.model\.test(:|$)/.test(r.headers.host));
process.exit(bad.length ? 1 : 0);' "$T/echo.log" "$real_a" && ok "the model key's value reached api.model.test only" ||
	fail "the model key's value reached api.model.test only"

# The record of proxied requests: secret names, never a value.
admin GET /egress >"$T/egress.json"
is "the api.model.test call is recorded with its secret's name" \
	"$(jv "d.filter((e) => e.host === 'api.model.test' && /^\\/v1\\/a/.test(e.path)).map((e) => [e.sandboxId, e.method, e.status, e.secrets.join()].join(' ')).join()" <"$T/egress.json")" \
	"$SB GET 200 ${n}_model"
is "calls elsewhere used no secret" \
	"$(jv "d.filter((e) => ['other.test', 'wild.test', 'notwild.test', 'sub.api.model.test'].includes(e.host)).every((e) => !e.secrets.length)" <"$T/egress.json")" true
is "the 407s are recorded without a sandbox" "$(jv "d.filter((e) => e.status === 407 && e.sandboxId === null).length" <"$T/egress.json")" 2
is "the 502 is recorded" "$(jv "d.filter((e) => e.status === 502).map((e) => e.host).join()" <"$T/egress.json")" unmapped.example.test
is "the CONNECT is recorded as a tunnel" \
	"$(jv "d.filter((e) => e.method === 'CONNECT').map((e) => e.host + ':' + e.port + ' ' + e.tunnel + ' ' + e.status).join()" <"$T/egress.json")" \
	"api.model.test:$EP true 200,other.test:$EP true 200"
is "... and the requests in them, with the secret swapped in" \
	"$(jv "d.filter((e) => e.path === '/tunnel').map((e) => e.method + ' ' + e.host + ' ' + e.secrets.length).join()" <"$T/egress.json")" \
	"GET api.model.test 1"
is "?sandboxId= filters" "$(admin GET "/egress?sandboxId=$SB2" | jv "d.length + ' ' + d.every((e) => e.sandboxId === '$SB2')")" "1 true"

# The host map through the admin API: api.model.test now goes to the
# Anthropic emulator; SSE comes back through the proxy, and the model's
# log has the real key's SHA-256, not the key.
admin POST /egress/hosts "{\"api.model.test\":\"127.0.0.1:$MP\",\"wild.test\":null}" >"$T/hosts.json"
is "POST /egress/hosts remaps and removes" "$(jv 'd["api.model.test"] + " " + ("wild.test" in d) + " " + d["*.wild.test"]' <"$T/hosts.json")" \
	"127.0.0.1:$MP false 127.0.0.1:$EP"
is "GET /egress/hosts reads the map" "$(admin GET /egress/hosts | jv 'd["api.model.test"]')" "127.0.0.1:$MP"
is "a public upstream is refused" \
	"$(curl -s -o /dev/null -w '%{http_code}' -X POST --data '{"x.test":"93.184.216.34:80"}' "$BASE/_emulator/egress/hosts")" 400
sbx "$SB" "curl -sN -H \"x-api-key: \$MODEL_KEY\" -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' \
	--data '{\"model\":\"m\",\"max_tokens\":9,\"stream\":true,\"tools\":[{\"name\":\"t\",\"input_schema\":{\"type\":\"object\"}}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' \
	http://api.model.test/v1/messages" >"$T/sse"
grep_in "SSE came back through the proxy" "$T/sse" "^event: message_stop"
grep_in "with the scripted text" "$T/sse" '"text":"through the'
want=$(printf %s "$real_a" | sha256sum | cut -d' ' -f1)
is "the Anthropic emulator logs the real key's SHA-256" "$(head -n 1 "$T/model.ndjson" | jv d.key_sha256)" "$want"
grep -qF "$real_a" "$T/model.ndjson" && fail "the model's log has no key" || ok "the model's log has no key"

# No value anywhere the emulator writes or answers.
admin GET /egress >"$T/egress.json"
api GET /secret >"$T/secrets.json"
admin GET "/sandbox/$SB" >"$T/sandbox.json"
leaks=$(grep -lF -e "$real_a" -e "$real_b" -e "$real_c" "$T/egress.json" "$T/secrets.json" "$T/sandbox.json" \
	"$T/emu.out" "$T/emu.err" "$T/emu.log")
is "no secret value in the egress record, the API, the admin view or the emulator's logs" "$leaks" ""
grep_in "the --log file records egress" "$T/emu.log" '"event":"egress"'

# Faults with `after`: the first create passes, the second gets the fault,
# the third passes again.
admin POST /faults '{"route":"POST /api/secret","status":500,"count":1,"after":1}' >"$T/f.json"
is "the fault is armed with after" "$(jv 'd["POST /api/secret"].after + " " + d["POST /api/secret"].count' <"$T/f.json")" "1 1"
c1=$(mk_secret "${n}_f1" v1 '["a.test"]' | code)
c2=$(mk_secret "${n}_f2" v2 '["a.test"]' | code)
c3=$(mk_secret "${n}_f3" v3 '["a.test"]' | code)
is "after=1: 1st create passes, 2nd faulted, 3rd passes" "$c1 $c2 $c3" "201 500 201"
is "the faulted create made no secret" "$(api GET /secret | body | jv "d.filter((s) => s.name === '${n}_f2').length")" 0
is "the fault is used up" "$(admin GET /faults)" "{}"
admin POST /faults '{"route":"GET /api/config","status":503,"count":2}' >/dev/null
is "without after, unchanged: the next count calls" \
	"$(api GET /config | code) $(api GET /config | code) $(api GET /config | code)" "503 503 200"

kill -TERM "$EMU_PID"
wait "$EMU_PID"
is "the emulator exits 0 on SIGTERM" $? 0
[ -s "$T/emu.err" ] && sed 's/^/  emulator stderr: /' "$T/emu.err" | head -20
finish
