#!/bin/sh
# sandrund end to end on the local provider, with the scripted ACP agent
# (tests/emulators/fake_acp.mjs; each prompt names what it does: ok,
# permission, cancel, slow:MS, chatty:N) in place of the adapter: runs
# streamed, a second turn, permissions over the API, cancel, replay after
# the client went away, runs at once, sessions, auth, limits, malformed
# bodies, metrics, sandrun run --server, a Unix socket, SIGHUP reload,
# SIGTERM drain (runs finish within drain_timeout, then are cancelled).
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
command -v node >/dev/null || missing "node is not installed (the scripted agent needs it)"
command -v curl >/dev/null || missing "curl is not installed"
S=$SANDRUN_BIN
D=$SANDRUN_BUILDDIR/sandrund
export SANDRUN_RUNNER_HARNESSES=claude
export SANDRUN_HARNESS_CLAUDE_COMMAND="$SANDRUN_SRCDIR/tests/emulators/fake_acp.mjs"
export SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt
boxes="$T/state/plugins/provider.local/sandboxes"
TOKEN=tok-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
printf '# the tests\n\n%s\n' "$TOKEN" >"$T/tokens"
chmod 600 "$T/tokens"
AUTH="Authorization: Bearer $TOKEN"
PIDS=
trap 'for p in $PIDS; do kill -9 $p 2>/dev/null; done; rm -rf "$T"' EXIT

# start_svc NAME [VAR=value...]: sandrund with that environment (and the
# arguments in SVC_ARGS); sets URL and SVC_PID (its log in $T/NAME.log).
SVC_ARGS=
start_svc() {
	name=$1
	shift
	rm -f "$T/$name.log"
	# shellcheck disable=SC2086
	env "$@" "$D" $SVC_ARGS >"$T/$name.log" 2>&1 &
	SVC_PID=$!
	PIDS="$PIDS $SVC_PID"
	wait_grep "$T/$name.log" "listening on"
	URL=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$T/$name.log")
}
# api METHOD PATH [BODY]: CODE, the body in $T/body, headers in $T/headers.
api() {
	if [ $# -ge 3 ]; then
		CODE=$(curl -s -o "$T/body" -D "$T/headers" -w '%{http_code}' -X "$1" -H "$AUTH" \
			-H 'Content-Type: application/json' --data-binary "$3" "$URL$2")
	else
		CODE=$(curl -s -o "$T/body" -D "$T/headers" -w '%{http_code}' -X "$1" -H "$AUTH" "$URL$2")
	fi
}
# code NAME WANT: the last answer's status.
code() {
	if [ "$CODE" = "$2" ]; then ok "$1"; else
		fail "$1 (HTTP $CODE, wanted $2)"
		sed 's/^/  | /' "$T/body" | head -5
	fi
}
# get FILE PATH.TO.KEY: a JSON value (objects as JSON), "" when absent.
get() {
	node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
		const v = process.argv[2].split(".").reduce((o, k) => o == null ? o : o[k], j);
		console.log(v === undefined || v === null ? "" : typeof v === "object" ? JSON.stringify(v) : v)' "$1" "$2"
}
box_in() { # box_in FILE: the sandbox its sandbox.acquired event names
	sed -n 's/.*"type":"sandbox.acquired".*"sandbox":"\([^"]*\)".*/\1/p' "$1"
}
start_run() { # start_run BODY: RUN (wait=false)
	api POST '/v1/runs?wait=false' "$1"
	RUN=$(get "$T/body" run)
}
# wait_state RUN STATE: poll GET /v1/runs/RUN until its state (10 s).
wait_state() {
	for _ in $(seq 200); do
		api GET "/v1/runs/$1"
		[ "$(get "$T/body" state)" = "$2" ] && return 0
		sleep 0.05
	done
	return 1
}
# events RUN [AFTER]: what the run has sent so far, into $T/ev (a live run
# is followed for half a second).
events() {
	curl -s -N --max-time 0.5 -H "$AUTH" "$URL/v1/runs/$1/events?after=${2:-0}" >"$T/ev" 2>/dev/null
	true
}
wait_event() { # wait_event RUN PATTERN
	for _ in $(seq 40); do
		events "$1"
		grep -q -- "$2" "$T/ev" && return 0
	done
	return 1
}

# Two services on one store (the same state directory: one SQLite
# database, or SANDRUN_STORE_URL's PostgreSQL server), leases of 3 s: a
# session's lease.
replicas() {
	lease_svc() { # lease_svc NAME: URL, SVC_PID
		start_svc "$1" SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens" \
			SANDRUN_SERVICE_LEASE_TTL=3
	}
	lease_svc r1
	R1=$URL R1_PID=$SVC_PID
	lease_svc r2
	R2=$URL R2_PID=$SVC_PID
	URL=$R1
	start_run '{"prompt":"ok"}'
	wait_state "$RUN" finished || fail "replicas: the first turn"
	SES2=$(get "$T/body" session)
	URL=$R2
	api POST '/v1/runs?wait=false' "{\"prompt\":\"ok\",\"session\":\"$SES2\"}"
	code "replicas: a session kept warm by the other service is refused" 409
	grep_in "... session_leased, naming the holder" "$T/body" "\"session_leased\".*:$R1_PID:[0-9]* (kept warm"
	api DELETE "/v1/sessions/$SES2"
	code "replicas: nor can the other service delete it" 409
	grep_in "... session_leased" "$T/body" '"session_leased"'

	# Turns on one session at once on the two: exactly one runs.
	URL=$R1
	start_run "{\"prompt\":\"slow:1500\",\"session\":\"$SES2\"}"
	TURN2=$RUN
	URL=$R2
	api POST '/v1/runs?wait=false' "{\"prompt\":\"ok\",\"session\":\"$SES2\"}"
	code "replicas: a turn at once on the other service is refused" 409
	grep_in "... while the turn goes on" "$T/body" "a turn going on"
	URL=$R1
	wait_state "$TURN2" finished && ok "... and the one that runs finishes" || fail "... and the one that runs finishes"
	# A service killed mid-turn: its lease expires, and the other takes the
	# session over (the killed turn never wrote its turn index).
	start_run "{\"prompt\":\"slow:20000\",\"session\":\"$SES2\"}"
	wait_event "$RUN" '"text":"working..."' || fail "replicas: the turn to kill started"
	kill -9 "$R1_PID"
	wait "$R1_PID" 2>/dev/null
	URL=$R2
	api POST '/v1/runs?wait=false' "{\"prompt\":\"ok\",\"session\":\"$SES2\"}"
	code "replicas: a dead service's lease holds until it expires" 409
	taken=
	for _ in $(seq 40); do
		sleep 0.2
		api POST '/v1/runs?wait=false' "{\"prompt\":\"ok\",\"session\":\"$SES2\"}"
		[ "$CODE" = 202 ] && { taken=$(get "$T/body" run); break; }
	done
	[ -n "$taken" ] && ok "replicas: taken over after the lease expired" ||
		fail "replicas: taken over after the lease expired (HTTP $CODE: $(cat "$T/body"))"
	wait_state "$taken" finished && ok "... the turn runs there" ||
		fail "... the turn runs there ($(cat "$T/body"))"
	"$SANDRUN_SESSION_TOOL" "$SANDRUN_RUNNER_STATE_DIR" lease "$SES2" >"$T/lease" 2>&1
	grep -q ":$R2_PID:[0-9]* warm$" "$T/lease" && ok "... which holds the lease now, warm" ||
		fail "... which holds the lease now, warm ($(cat "$T/lease"))"
	api GET "/v1/sessions/$SES2"
	[ "$(get "$T/body" turn)" = 3 ] && ok "... as turn 3: no turn index written twice" ||
		fail "... as turn 3 ($(cat "$T/body"))"
	start_run "{\"prompt\":\"ok\"}"
	wait_state "$RUN" finished || fail "replicas: a session to delete"
	SES3=$(get "$T/body" session)
	api DELETE "/v1/sessions/$SES3"
	code "replicas: the holder deletes a session it keeps warm" 200
	# (by the heartbeat the deletion set off)
	for _ in $(seq 40); do
		"$SANDRUN_SESSION_TOOL" "$SANDRUN_RUNNER_STATE_DIR" lease "$SES3" >"$T/lease" 2>&1
		rc=$?
		[ $rc = 0 ] || break
		sleep 0.05
	done
	[ $rc = 1 ] && ok "... and its lease is released" || fail "... and its lease is released ($(cat "$T/lease"))"
	kill -TERM "$R2_PID"
	wait "$R2_PID"
	"$SANDRUN_SESSION_TOOL" "$SANDRUN_RUNNER_STATE_DIR" lease "$SES2" >"$T/lease" 2>&1
	[ $? = 1 ] && ok "replicas: a clean stop releases the service's leases" ||
		fail "replicas: a clean stop releases the service's leases ($(cat "$T/lease"))"
	if [ -n "${SANDRUN_STORE_URL:-}" ]; then
		[ ! -e "$SANDRUN_RUNNER_STATE_DIR/sandrun.db" ] &&
			ok "replicas: with [store] url, no SQLite file in the state directory" ||
			fail "replicas: with [store] url, no SQLite file in the state directory"
	fi
}
# Two replicas on one store, each with sandboxes of its own (another
# runner id, another local sandbox root), as replicas with state
# directories of their own are: a session whose sandbox the other has is
# refused there as session_elsewhere, naming where it lives, and nothing
# is deleted; its own replica continues it, also after a kill -9 and a
# restart, and the other does not adopt its warm sandbox.
elsewhere() {
	own_svc() { # own_svc NAME: URL, SVC_PID; a runner and root of NAME's own
		start_svc "$1" SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens" \
			SANDRUN_SERVICE_LEASE_TTL=3 SANDRUN_SERVICE_WARM_LIVE=1 SANDRUN_RUNNER_ID="runner-$1" \
			SANDRUN_PROVIDER_LOCAL_ROOT="$T/root-$1"
	}
	lease_gone() { # lease_gone SESSION: wait (10 s) until nobody holds its lease
		for _ in $(seq 100); do
			"$SANDRUN_SESSION_TOOL" "$SANDRUN_RUNNER_STATE_DIR" lease "$1" >"$T/lease" 2>&1
			[ $? = 1 ] && return 0
			sleep 0.1
		done
		return 1
	}
	failed_with() { # failed_with NAME RUN CODE: the run failed with CODE
		wait_state "$2" failed
		if [ "$(get "$T/body" error.code)" = "$3" ]; then ok "$1"; else
			fail "$1 ($(cat "$T/body"))"
		fi
	}
	own_svc ea
	A=$URL A_PID=$SVC_PID
	own_svc eb
	B=$URL B_PID=$SVC_PID
	URL=$A
	start_run '{"prompt":"ok"}'
	wait_state "$RUN" finished || fail "elsewhere: the first turn, on A"
	SES=$(get "$T/body" session)
	lease_gone "$SES" || fail "elsewhere: A's lease on the session ends ($(cat "$T/lease"))"
	URL=$B
	start_run "{\"prompt\":\"ok\",\"session\":\"$SES\"}"
	failed_with "elsewhere: B refuses a turn on A's session as session_elsewhere" "$RUN" \
		session_elsewhere
	[ "$(get "$T/body" error.retryable)" = true ] && ok "... retryable (A may take it)" ||
		fail "... retryable (A may take it) ($(cat "$T/body"))"
	grep_in "... naming A's runner and sandbox root" "$T/body" "runner-ea' at [^ ]*:$T/root-ea"
	api DELETE "/v1/sessions/$SES"
	code "elsewhere: nor does B delete it" 409
	grep_in "... session_elsewhere" "$T/body" '"session_elsewhere"'
	api GET "/v1/sessions/$SES"
	[ "$CODE" = 200 ] && [ "$(get "$T/body" turn)" = 1 ] && ok "elsewhere: the session is kept" ||
		fail "elsewhere: the session is kept (HTTP $CODE: $(cat "$T/body"))"
	URL=$A
	lease_gone "$SES" || fail "elsewhere: B lets the session's lease go ($(cat "$T/lease"))"
	start_run "{\"prompt\":\"ok\",\"session\":\"$SES\"}"
	wait_state "$RUN" finished && ok "elsewhere: A continues it" ||
		fail "elsewhere: A continues it ($(cat "$T/body"))"
	events "$RUN"
	grep_in "... in its own sandbox" "$T/ev" '"how":"reconnected"\|"how":"warm"'
	# Kept warm by A, which is killed; B restarts meanwhile (and finds
	# the dead service's warm record), then takes the next turn. (The
	# record is written after the turn's end: waited for.)
	for _ in $(seq 100); do
		"$SANDRUN_SESSION_TOOL" "$SANDRUN_RUNNER_STATE_DIR" warm "$SES" >/dev/null 2>&1 && break
		sleep 0.1
	done
	kill -9 "$A_PID"
	wait "$A_PID" 2>/dev/null
	kill -TERM "$B_PID"
	wait "$B_PID"
	own_svc eb
	B=$URL B_PID=$SVC_PID
	for _ in $(seq 50); do # until the killed A's lease expires
		start_run "{\"prompt\":\"ok\",\"session\":\"$SES\"}"
		[ "$CODE" = 409 ] || break
		sleep 0.2
	done
	failed_with "elsewhere: after A was killed, B still refuses its session" "$RUN" \
		session_elsewhere
	grep_in "... and left its warm sandbox for A" "$T/eb.log" "left for its runner"
	own_svc ea
	A=$URL A_PID=$SVC_PID
	start_run "{\"prompt\":\"ok\",\"session\":\"$SES\"}"
	wait_state "$RUN" finished && ok "elsewhere: A, back, continues its session" ||
		fail "elsewhere: A, back, continues its session ($(cat "$T/body"))"
	api GET "/v1/sessions/$SES"
	[ "$(get "$T/body" turn)" = 3 ] && ok "... as turn 3" || fail "... as turn 3 ($(cat "$T/body"))"
	kill -TERM "$A_PID" "$B_PID"
	wait "$A_PID" "$B_PID"
}
# The store's server restarts between two turns (STORE_RESTART: the
# command that restarts it; tests/integration/store_pg_test.sh): the next
# turn on the session runs, and its run is recorded (read back by the next
# start).
store_restart() {
	start_svc rs SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens"
	start_run '{"prompt":"ok"}'
	wait_state "$RUN" finished || fail "store restart: the first turn"
	SES=$(get "$T/body" session)
	if sh -c "$STORE_RESTART" >"$T/restart.log" 2>&1; then ok "the store's server restarted"; else
		fail "the store's server restarted"
		cat "$T/restart.log"
	fi
	start_run "{\"prompt\":\"ok\",\"session\":\"$SES\"}"
	wait_state "$RUN" finished && ok "after it restarted, a turn on the session runs" ||
		fail "after it restarted, a turn on the session runs ($(cat "$T/body"))"
	api GET "/v1/sessions/$SES"
	[ "$(get "$T/body" turn)" = 2 ] && ok "... and is recorded as turn 2" ||
		fail "... and is recorded as turn 2 ($(cat "$T/body"))"
	kill -TERM "$SVC_PID"
	wait "$SVC_PID"
	start_svc rs2 SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens"
	api GET "/v1/runs/$RUN"
	[ "$(get "$T/body" state)" = finished ] && ok "... its run was written to the store" ||
		fail "... its run was written to the store ($(cat "$T/body"))"
	kill -TERM "$SVC_PID"
	wait "$SVC_PID"
}
# SERVICE_TEST_PART=replicas or store_restart: only that part
# (tests/integration/store_pg_test.sh, on PostgreSQL).
case "${SERVICE_TEST_PART:-}" in
replicas | store_restart | elsewhere)
	$SERVICE_TEST_PART
	finish
	exit
	;;
esac

# ---------------------------------------------------------------- start
expect "no token on TCP: refused (exit 3)" 3 env SANDRUN_SERVICE_LISTEN=127.0.0.1:0 "$D"
grep_in "it says why and what to do" "$T/err" "no bearer token configured.*unix:"
printf '# nobody yet\n' >"$T/empty-tokens"
expect "a tokens file without a token: refused" 3 env SANDRUN_SERVICE_LISTEN=127.0.0.1:0 \
	SANDRUN_SERVICE_TOKENS_FILE="$T/empty-tokens" "$D"
grep_in "the file is named" "$T/err" "empty-tokens holds no token"
expect "a bad [service] value: exit 3" 3 env SANDRUN_SERVICE_MAX_RUNS=0 "$D"
grep_in "naming the key" "$T/err" "SANDRUN_SERVICE_MAX_RUNS: \[service\] key 'max_runs'"
expect "sandrund --help" 0 "$D" --help

start_svc svc SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens" \
	SANDRUN_SERVICE_MAX_RUNS=3 SANDRUN_SERVICE_EVENT_BUFFER=32 SANDRUN_SERVICE_MAX_BODY=4K \
	SANDRUN_SERVICE_DRAIN_TIMEOUT=1 SANDRUN_RUNNER_HARNESSES=claude,pi \
	SANDRUN_HARNESS_PI_COMMAND="$SANDRUN_SRCDIR/tests/emulators/fake_acp.mjs"
MAIN_PID=$SVC_PID
MAIN_URL=$URL
case "$URL" in http://127.0.0.1:*) ok "listening on $URL" ;; *) fail "no URL in the log"; cat "$T/svc.log"; finish; exit 1 ;; esac
HOSTPORT=${URL#http://}

# ---------------------------------------------------------------- auth
CODE=$(curl -s -o "$T/body" -w '%{http_code}' "$URL/health")
code "GET /health needs no token" 200
CODE=$(curl -s -o "$T/body" -D "$T/headers" -w '%{http_code}' -X POST --data '{"prompt":"ok"}' "$URL/v1/runs")
code "no token: 401" 401
grep_in "401 says Bearer" "$T/headers" "WWW-Authenticate: Bearer"
grep_in "401 is a JSON error" "$T/body" '"error":{"code":"unauthorized"'
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer ${TOKEN}x" "$URL/v1/runs/run-x")
code "a wrong token: 401" 401
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Basic $TOKEN" "$URL/metrics")
code "another scheme: 401" 401
# Headers that announce 100000 bytes, and no body: the answer comes
# without the server waiting for it.
raw() { # raw REQUEST-HEAD: the status line, or "" after 3 s
	node -e 'const s = require("net").connect(process.argv[1].split(":")[1], process.argv[1].split(":")[0]);
		s.setTimeout(3000, () => { s.destroy(); process.exit(0); });
		s.on("data", (d) => { console.log(String(d).split("\r\n")[0]); s.destroy(); });
		s.write(process.argv[2].replace(/\\r\\n/g, "\r\n"));' "$HOSTPORT" "$1"
}
line=$(raw 'POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n')
[ "$line" = "HTTP/1.1 401 Unauthorized" ] && ok "401 before the body is read" || fail "401 before the body is read (got '$line')"

# Ambiguous requests: each a 400, whatever a lenient parser would pick.
bad_head() { # bad_head NAME HEAD
	line=$(raw "$2")
	[ "$line" = "HTTP/1.1 400 Bad Request" ] && ok "$1: 400" || fail "$1: 400 (got '$line')"
}
bad_head "two different Content-Length headers" \
	"POST /v1/runs HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer $TOKEN\\r\\nContent-Length: 2\\r\\nContent-Length: 40\\r\\n\\r\\n{}"
bad_head "two Authorization headers, the first valid" \
	"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer $TOKEN\\r\\nAuthorization: Bearer other\\r\\n\\r\\n"
bad_head "two Authorization headers, the second valid" \
	"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer other\\r\\nAuthorization: Bearer $TOKEN\\r\\n\\r\\n"
bad_head "HTTP/1.1 without Host" "GET /metrics HTTP/1.1\\r\\nAuthorization: Bearer $TOKEN\\r\\n\\r\\n"
for a in '+5' '%205' '18446744073709551616' '5%00' '0x5'; do
	api GET "/v1/runs/run-0000000000000000/events?after=$a"
	code "after=$a: 400" 400
done

# --------------------------------------------------------------- limits
line=$(raw "POST /v1/runs HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer $TOKEN\\r\\nContent-Length: 5000\\r\\n\\r\\n")
[ "$line" = "HTTP/1.1 413 Request Entity Too Large" ] || [ "$line" = "HTTP/1.1 413 Content Too Large" ] &&
	ok "413 from the declared length, before the body" || fail "413 before the body (got '$line')"
node -e 'console.log(JSON.stringify({prompt: "x".repeat(6000)}))' >"$T/big.json"
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "$AUTH" -H 'Transfer-Encoding: chunked' \
	--data-binary @"$T/big.json" "$URL/v1/runs")
code "413 for a chunked body over max_body" 413
grep_in "413 names the limit" "$T/body" '"code":"body_too_large".*4096 bytes'

# ---------------------------------------------------- routes, bad bodies
api GET /nowhere
code "unknown route: 404" 404
api PUT /v1/runs
code "wrong method: 405" 405
grep_in "405 says what is allowed" "$T/headers" "Allow: POST"
api PATCH /v1/runs/run-x
grep_in "... for a run: GET, DELETE" "$T/headers" "Allow: GET, DELETE"
api GET /v1/runs/run-0000000000000000
code "unknown run: 404" 404
api POST /v1/runs 'not json'
code "not JSON: 400" 400
grep_in "400 invalid_json" "$T/body" '"code":"invalid_json"'
api POST /v1/runs '{"prompt":"ok","permision_mode":"ask"}'
code "a misspelt field: 400" 400
grep_in "the field is named" "$T/body" "unknown field 'permision_mode'"
api POST /v1/runs '{"prompt":"ok","network":{"mode":"sometimes"}}'
grep_in "a bad value is named" "$T/body" '"code":"invalid_request".*network.mode'
api POST /v1/runs '{"prompt":"ok","mounts":["s3://work/a:data",7]}'
code "a mount that is not a string: 400" 400
grep_in "  the entry is named" "$T/body" "'mounts\[1\]' must be a non-empty string"
api POST /v1/runs '{"prompt":"ok","endpoints":["a","b","c","d","e","f","g","h","i"]}'
code "nine endpoints: 400" 400
grep_in "  saying the limit" "$T/body" "'endpoints' has more than 8 entries"
api POST '/v1/runs?wait=perhaps' '{"prompt":"ok"}'
code "a bad wait: 400" 400
api GET '/v1/runs/run-0000000000000000/events?after=-1'
code "a bad after: 400" 400
# A credential is redacted from every output while held: values too short
# or too common to be secrets are refused, not held (they would garble
# every run's events), and so are more than 32 of them (45,000 held one by
# one stalled the loop for seconds).
# The service's own credentials go only to the model hosts it lists: a
# model.url elsewhere must bring its own.
api POST /v1/runs '{"prompt":"ok","model":{"url":"https://collector.example/v1"}}'
code "a model.url the service does not list, without credentials: 400" 400
grep_in "  saying why" "$T/body" '"code":"model_url_refused".*\[service\] model_hosts (none configured)'
api POST /v1/runs '{"prompt":"ok","model":{"credentials":{"ANTHROPIC_API_KEY":"local"}}}'
code "a credential too short to be a secret: 400" 400
grep_in "  saying why" "$T/body" "'model.credentials.ANTHROPIC_API_KEY' is too short or too common to be a secret"
api POST /v1/runs '{"prompt":"ok","model":{"credentials":{"ANTHROPIC_API_KEY":"sk-a-real-key-1","ANTHROPC_API_KEY":"sk-a-typo-key-2"}}}'
grep_in "a credential the harness does not take: refused" "$T/body" \
	'"type":"run.failed","code":"credential_unknown".*harness .claude. takes no .ANTHROPC_API_KEY.; it takes ANTHROPIC_API_KEY'
grep -q '"type":"sandbox.acquired"' "$T/body" && fail "... before any sandbox" || ok "... before any sandbox"
api POST /v1/runs '{"prompt":"ok","harness":"pi","permission_mode":"ask"}'
grep_in "permission_mode ask with pi, which never asks: refused" "$T/body" \
	'"type":"run.failed","code":"permission_mode_unsupported".*harness .pi. never asks'
api POST /v1/runs '{"prompt":"ok","harness":"pi","permission_mode":"approve_all","model":{"credentials":{"OPENAI_API_KEY":"sk-pi-key-0123"}}}'
grep -q '"code":"permission_mode_unsupported"' "$T/body" &&
	fail "... and with approve_all it is not refused so" || ok "... and with approve_all it is not refused so"
PISES=$(sed -n '1s/.*"session":"\(ses-[0-9a-f]*\)".*/\1/p' "$T/body")
[ -z "$PISES" ] || api DELETE "/v1/sessions/$PISES"
api POST /v1/runs '{"prompt":"ok","model":{"credentials":{"ANTHROPIC_API_KEY":"sandboxsession"}}}'
code "a plain word: 400" 400
node -e 'const c={};for(let i=0;i<150;i++)c["K"+i]="v-"+String(i).padStart(6,"0");console.log(JSON.stringify({prompt:"ok",model:{credentials:c}}))' >"$T/many.json"
api GET /metrics
held=$(sed -n 's/^sandrun_secrets_held \([0-9]*\)$/\1/p' "$T/body")
start_ms=$(date +%s%N)
api POST /v1/runs @"$T/many.json"
code "150 credentials (max_body is 4K here): 400" 400
grep_in "  saying the limit" "$T/body" "'model.credentials' has more than 32 entries"
[ $(( ($(date +%s%N) - start_ms) / 1000000 )) -lt 2000 ] && ok "  at once" || fail "  at once"
api GET /metrics
grep -q "^sandrun_secrets_held $held\$" "$T/body" && ok "  and nothing of them is held" ||
	fail "  and nothing of them is held ($(grep '^sandrun_secrets_held' "$T/body"))"
# A run's credential is hidden from its own events, not from another's: a
# value that other runs' events happen to contain garbles only its own.
start_run '{"prompt":"slow:3000","model":{"credentials":{"ANTHROPIC_API_KEY":"sandbox.acquired"}}}'
HOLDER=$RUN
wait_event "$HOLDER" '"text":"working..."' || fail "scoped redaction: the run holding the value started"
api POST /v1/runs '{"prompt":"ok"}'
grep_in "scoped redaction: another run's events are not garbled by it" "$T/body" '"type":"sandbox.acquired"'
OTHER_SES=$(sed -n 's/.*"type":"run.started".*"session":"\([^"]*\)".*/\1/p' "$T/body" | head -n 1)
events "$HOLDER"
grep -q '"type":"sandbox.acquired"' "$T/ev" && fail "... while the run that holds it has it hidden" ||
	ok "... while the run that holds it has it hidden"
wait_state "$HOLDER" finished || fail "scoped redaction: the holding run ends"
# (their sandboxes out of the warm pool, which is counted below)
api DELETE "/v1/sessions/$(get "$T/body" session)"
code "... its session deleted" 200
api DELETE "/v1/sessions/$OTHER_SES"
code "... and the other's" 200

# --------------------------------------------------------- a run streamed
api POST /v1/runs '{"prompt":"ok"}'
code "POST /v1/runs streams" 200
grep_in "as NDJSON" "$T/headers" "Content-Type: application/x-ndjson"
head -n 1 "$T/body" >"$T/first"
grep_in "the first event names the run" "$T/first" '"type":"run.started".*"run":"run-[0-9a-f]\{16\}","seq":1'
grep_in "the agent's text" "$T/body" '"type":"agent.message","text":"hello from the fake agent"'
tail -n 1 "$T/body" >"$T/last"
grep_in "the stream ends with run.finished" "$T/last" '"type":"run.finished","stop_reason":"end_turn"'
RUN1=$(sed -n 's/.*"run":"\(run-[0-9a-f]*\)".*/\1/p' "$T/first")
SES=$(sed -n 's/.*"session":"\(ses-[0-9a-f]*\)".*/\1/p' "$T/first")
api GET "/v1/runs/$RUN1"
code "GET the run" 200
[ "$(get "$T/body" state)/$(get "$T/body" exit_code)/$(get "$T/body" stop_reason)" = "finished/0/end_turn" ] &&
	ok "its state, exit code and stop reason" || fail "its state, exit code and stop reason ($(cat "$T/body"))"
[ "$(get "$T/body" session)" = "$SES" ] && [ -n "$(get "$T/body" timings.turn)" ] &&
	ok "its session and timings" || fail "its session and timings ($(cat "$T/body"))"

# provider_calls: the local provider's calls that acquire or let go of a
# sandbox, from /metrics.
provider_calls() {
	api GET /metrics
	grep -E '^sandrun_plugin_calls_total\{plugin="provider.local",op="(create|reconnect|status|park|destroy)"\}' "$T/body"
}
provider_calls >"$T/calls-before"
api POST /v1/runs "{\"prompt\":\"ok\",\"session\":\"$SES\"}"
grep_in "a second turn on the session" "$T/body" '"type":"run.started".*"turn":2'
grep_in "in the same sandbox, still running in the warm pool" "$T/body" '"how":"warm"'
grep_in "with the same agent, still running" "$T/body" '"type":"agent.starting","harness":"claude","warm":true'
grep -q '"type":"agent.session"' "$T/body" && fail "... no new ACP session" || ok "... no new ACP session"
grep_in "the warm agent answers the prompt" "$T/body" '"type":"agent.message","text":"hello from the fake agent"'
provider_calls >"$T/calls-after"
if [ -s "$T/calls-before" ] && cmp -s "$T/calls-before" "$T/calls-after"; then
	ok "the warm turn made no provider call to acquire or release its sandbox"
else
	fail "the warm turn made no provider call"; diff "$T/calls-before" "$T/calls-after"
fi
grep_in "the pool holds it again, running" "$T/body" '^sandrun_warm_sandboxes{state="running"} 1$'
api GET "/v1/sessions/$SES"
code "GET the session" 200
[ "$(get "$T/body" turn)" = 2 ] && [ -n "$(get "$T/body" sandbox)" ] && [ -z "$(get "$T/body" run)" ] &&
	ok "the session's turn and sandbox" || fail "the session's turn and sandbox ($(cat "$T/body"))"
SB=$(get "$T/body" sandbox)

# A warm agent lists this turn's tools: the same tools reuse it, one
# changed description starts a new agent (the shim read the old specs).
tools_run() { # SESSION-JSON DESCRIPTION
	api POST /v1/runs "{\"prompt\":\"tools\"$1,\"tools\":[{\"name\":\"pick\",\"kind\":\"client\",\"description\":\"$2\"}]}"
}
tools_run "" "pick one"
grep_in "tools: the agent lists the turn's tools" "$T/body" '"text":"\[{\\"name\\":\\"pick\\",\\"description\\":\\"pick one\\"}\]"'
ST=$(sed -n '1s/.*"session":"\(ses-[0-9a-f]*\)".*/\1/p' "$T/body")
tools_run ",\"session\":\"$ST\"" "pick one"
grep_in "... the same tools next turn: the warm agent is reused" "$T/body" '"type":"agent.starting","harness":"claude","warm":true'
grep_in "... and lists them" "$T/body" 'description\\":\\"pick one\\"'
tools_run ",\"session\":\"$ST\"" "pick two"
grep -q '"warm":true' "$T/body" && fail "... one description changed: a new agent" ||
	ok "... one description changed: a new agent"
grep_in "... which lists the new description" "$T/body" 'description\\":\\"pick two\\"'
grep -q 'pick one' "$T/body" && fail "... and not the old one" || ok "... and not the old one"
api DELETE "/v1/sessions/$ST"
code "... its session deleted" 200

# An agent that exits between turns: the sandbox stays warm without it,
# and the next turn starts a new one.
api POST /v1/runs '{"prompt":"exit_after"}'
SX=$(sed -n '1s/.*"session":"\(ses-[0-9a-f]*\)".*/\1/p' "$T/body")
wait_grep "$T/svc.log" "session $SX: the warm agent exited"
grep_in "an agent that exits while warm is noticed" "$T/svc.log" "session $SX: the warm agent exited"
api POST /v1/runs "{\"prompt\":\"ok\",\"session\":\"$SX\"}"
grep_in "... its sandbox is still warm" "$T/body" '"how":"warm"'
grep -q '"warm":true' "$T/body" && fail "... and a new agent is started" ||
	ok "... and a new agent is started"
grep_in "... which answers" "$T/body" '"type":"agent.message","text":"hello from the fake agent"'

# ------------------------------------------------ a permission over the API
start_run '{"prompt":"permission"}'
code "wait=false: 202" 202
grep_in "with its Location" "$T/headers" "Location: /v1/runs/$RUN"
wait_event "$RUN" '"type":"permission.request","request_id":"perm-1"' &&
	ok "the permission request is an event" || fail "the permission request is an event"
api POST "/v1/runs/$RUN/permissions" '{"request_id":"perm-9","allow":true}'
code "an unknown request id: 404" 404
api POST "/v1/runs/$RUN/permissions" '{"request_id":"perm-1"}'
code "an answer without allow: 400" 400
api POST "/v1/runs/$RUN/permissions" '{"request_id":"perm-1","allow":false,"allow":true}'
code "an answer with allow twice: 400" 400
api POST "/v1/runs/$RUN/permissions" '{"request_id":"perm-1","allow":true}'
code "the answer is taken" 200
wait_state "$RUN" finished && ok "the run then ends" || fail "the run then ends"
events "$RUN"
grep_in "the agent got the allow" "$T/ev" '"text":"permission: yes"'
api POST "/v1/runs/$RUN/permissions" '{"request_id":"perm-1","allow":true}'
code "an answer after the end: 409" 409
api DELETE "/v1/runs/$RUN"
code "cancelling an ended run: 409" 409

# --------------------------------------------------------------- cancel
start_run '{"prompt":"cancel"}'
wait_event "$RUN" '"text":"working..."' || fail "the cancel run started working"
api DELETE "/v1/runs/$RUN"
code "DELETE cancels: 202" 202
wait_state "$RUN" cancelled && ok "the run is cancelled" || fail "the run is cancelled"
[ "$(get "$T/body" exit_code)" = 130 ] && ok "exit code 130" || fail "exit code 130"
events "$RUN"
grep_in "the caller gets run.finished cancelled" "$T/ev" '"type":"run.finished","stop_reason":"cancelled"'

# ------------------------------------- replay after the client went away
curl -s -N --max-time 1 -H "$AUTH" --data '{"prompt":"slow:2500"}' "$URL/v1/runs" >"$T/gone" 2>/dev/null
RUN=$(sed -n '1s/.*"run":"\(run-[0-9a-f]*\)".*/\1/p' "$T/gone")
grep -q run.finished "$T/gone" && fail "the client left before the end" || ok "the client left before the end"
wait_state "$RUN" finished && ok "the run went on without its caller" || fail "the run went on without its caller"
events "$RUN"
grep_in "replay: all of it" "$T/ev" '"text":"done slowly"'
tail -n 1 "$T/ev" | grep -q '"type":"run.finished"' && ok "replay: up to run.finished" || fail "replay: up to run.finished"
n=$(wc -l <"$T/ev")
head -n "$(wc -l <"$T/gone")" "$T/ev" | cmp -s - "$T/gone" &&
	ok "replay repeats what the caller saw" || fail "replay repeats what the caller saw"
events "$RUN" 5
head -n 1 "$T/ev" | grep -q '"seq":6' && [ "$(wc -l <"$T/ev")" -eq $((n - 5)) ] &&
	ok "after=5 starts at event 6" || fail "after=5 starts at event 6"

# ------------------------------------------------------------ runs at once
start_run '{"prompt":"slow:2000"}'
A=$RUN
start_run '{"prompt":"slow:2000"}'
B=$RUN
api GET "/v1/runs/$A"
sa=$(get "$T/body" state)
api GET "/v1/runs/$B"
sb=$(get "$T/body" state)
[ "$sa/$sb" = running/running ] && ok "two runs at once" || fail "two runs at once ($sa/$sb)"
wait_state "$A" finished && wait_state "$B" finished && ok "both end" || fail "both end"
api GET "/v1/runs/$A"
ca=$(get "$T/body" created_at) ea=$(get "$T/body" ended_at)
api GET "/v1/runs/$B"
cb=$(get "$T/body" created_at) eb=$(get "$T/body" ended_at)
# Side by side: each started before the other ended, by the service's own
# clock (the test's, under load, counts its polling too).
[ "$(expr "$cb" \< "$ea")/$(expr "$ca" \< "$eb")" = 1/1 ] &&
	ok "side by side (A $ca to $ea, B $cb to $eb)" ||
	fail "side by side (A $ca to $ea, B $cb to $eb)"
events "$A"
grep -q "$B" "$T/ev" && fail "no event of one run in the other's" || ok "no event of one run in the other's"
grep -c '"text":"done slowly"' "$T/ev" | grep -qx 1 && ok "each its own turn" || fail "each its own turn"

# ------------------------------------------------------ 429 past max_runs
start_run '{"prompt":"slow:20000"}'
R1=$RUN
start_run '{"prompt":"slow:20000"}'
R2=$RUN
start_run "{\"prompt\":\"slow:20000\",\"session\":\"$SES\"}"
R3=$RUN
api POST '/v1/runs?wait=false' '{"prompt":"ok"}'
code "past max_runs: 429" 429
grep_in "with Retry-After" "$T/headers" "Retry-After: [0-9]"
grep_in "429 too_many_runs" "$T/body" '"code":"too_many_runs"'
api DELETE "/v1/runs/$R1"
wait_state "$R1" cancelled || fail "R1 cancelled"
api POST /v1/runs "{\"prompt\":\"ok\",\"session\":\"$SES\"}"
code "a second run on a busy session: 409" 409
grep_in "409 session_busy" "$T/body" '"code":"session_busy"'
api DELETE "/v1/sessions/$SES"
code "deleting a busy session: 409" 409
for r in $R2 $R3; do api DELETE "/v1/runs/$r"; done
wait_state "$R2" cancelled && wait_state "$R3" cancelled && ok "cancelled, the cap frees" || fail "cancelled, the cap frees"
api POST '/v1/runs?wait=false' '{"prompt":"ok"}'
code "a new run is taken again" 202
wait_state "$(get "$T/body" run)" finished || true

# --------------------------------------------------------- event buffer
api POST /v1/runs '{"prompt":"chatty:60"}'
RUN=$(sed -n '1s/.*"run":"\(run-[0-9a-f]*\)".*/\1/p' "$T/body")
wait_state "$RUN" finished || fail "the chatty run ends"
events "$RUN"
head -n 1 "$T/ev" | grep -q '"type":"events.dropped","run":"'"$RUN"'","from":1,"to":' &&
	ok "past event_buffer, replay says what was dropped" || fail "past event_buffer, replay says what was dropped ($(head -n 1 "$T/ev"))"
[ "$(wc -l <"$T/ev")" -eq 33 ] && ok "then the last 32 events" || fail "then the last 32 events ($(wc -l <"$T/ev") lines)"
tail -n 1 "$T/ev" | grep -q '"type":"run.finished"' && ok "up to the end" || fail "up to the end"

# --------------------------------------------------------------- sessions
[ -d "$boxes/$SB" ] && ok "the session's sandbox exists" || fail "the session's sandbox exists"
api DELETE "/v1/sessions/$SES"
code "DELETE the session" 200
grep_in "its sandbox destroyed" "$T/body" "\"sandbox\":\"$SB\",\"deleted\":true"
[ ! -e "$boxes/$SB" ] && ok "the sandbox is gone" || fail "the sandbox is gone"
api GET "/v1/sessions/$SES"
code "the session is gone" 404
api GET /v1/sessions/ses-nothex
code "not a session id: 404" 404
api POST /v1/runs "{\"prompt\":\"ok\",\"session\":\"$SES\"}"
grep_in "a turn on it is refused by the plan" "$T/body" '"code":"unknown_session"'
RUN=$(sed -n '1s/.*"run":"\(run-[0-9a-f]*\)".*/\1/p' "$T/body")
api GET "/v1/runs/$RUN"
[ "$(get "$T/body" state)/$(get "$T/body" exit_code)" = refused/5 ] && ok "state refused, exit 5" ||
	fail "state refused, exit 5 ($(cat "$T/body"))"

# ------------------------- secrets: held while a run or its agent has them
# A request's model credential is redacted from the events, and the
# service forgets it once nothing that could show it is left (the run,
# then its agent kept warm): a service running turn after turn does not
# keep every credential it was ever given.
secrets_held() {
	api GET /metrics
	sed -n 's/^sandrun_secrets_held \([0-9]*\)$/\1/p' "$T/body"
}
HELD=$(secrets_held)
KEY=sk-ant-svc-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
api POST /v1/runs "{\"prompt\":\"env:ANTHROPIC_API_KEY\",\"model\":{\"credentials\":{\"ANTHROPIC_API_KEY\":\"$KEY\"}}}"
code "a run with a model credential" 200
grep_in "... the agent had it, the events show it redacted" "$T/body" 'ANTHROPIC_API_KEY=\[REDACTED\]'
if grep -q "$KEY" "$T/body" "$T/svc.log"; then fail "... never in plain text"; else ok "... never in plain text"; fi
SES=$(sed -n 's/.*"type":"run.finished".*"session":"\([^"]*\)".*/\1/p' "$T/body")
[ "$(secrets_held)" = $((HELD + 1)) ] && ok "... held while its agent is kept warm" ||
	fail "... held while its agent is kept warm ($(secrets_held), was $HELD)"
api DELETE "/v1/sessions/$SES"
code "... the session deleted" 200
for _ in $(seq 100); do [ "$(secrets_held)" = "$HELD" ] && break; sleep 0.05; done
[ "$(secrets_held)" = "$HELD" ] && ok "... then forgotten" ||
	fail "... then forgotten ($(secrets_held), was $HELD)"

# ---------------------------------------------------------------- metrics
api GET /metrics
code "GET /metrics" 200
grep_in "Prometheus text" "$T/headers" "Content-Type: text/plain; version=0.0.4"
grep_in "runs by state" "$T/body" '^sandrun_runs{state="finished"} [1-9]'
grep_in "ended runs by state" "$T/body" '^sandrun_runs_ended_total{state="cancelled"} [1-9]'
grep_in "turn durations" "$T/body" '^sandrun_stage_duration_seconds_count{stage="turn"} [1-9]'
grep_in "stage durations" "$T/body" '^sandrun_stage_duration_seconds_count{stage="sandbox_start"} [1-9]'
grep_in "provider calls" "$T/body" '^sandrun_plugin_calls_total{plugin="provider.local",op="create"} [1-9]'
grep_in "provider errors" "$T/body" '^sandrun_plugin_call_errors_total{plugin="provider.local",op="create"} 0'
grep_in "answers by code" "$T/body" '^sandrun_http_responses_total{code="429"} [1-9]'

# ------------------------------------------------ sandrun run --server
"$S" run --json ok >"$T/here.ndjson" 2>"$T/here.err"
"$S" run --server "$URL" --token-file "$T/tokens" --json ok >"$T/there.ndjson" 2>"$T/there.err"
rc=$?
[ $rc -eq 0 ] && ok "--server: exit 0" || { fail "--server: exit 0 (got $rc)"; cat "$T/there.err"; }
types() { sed -n 's/^{"type":"\([^"]*\)".*/\1/p' "$1" | tr '\n' ' '; }
[ "$(types "$T/here.ndjson")" = "$(types "$T/there.ndjson")" ] && [ -n "$(types "$T/here.ndjson")" ] &&
	ok "--server: the same events as in-process" ||
	fail "--server: the same events ($(types "$T/here.ndjson") / $(types "$T/there.ndjson"))"
SANDRUN_TOKEN=$TOKEN node "$SANDRUN_SRCDIR/tests/e2e/drive.mjs" "$T/perm.ndjson" - - \
	"$S" run --server "$URL" --json permission >/dev/null 2>&1
grep_in "--server: a permission answered from stdin" "$T/perm.ndjson" '"text":"permission: yes"'
SANDRUN_TOKEN=$TOKEN INTERRUPT_ON=agent.message node "$SANDRUN_SRCDIR/tests/e2e/drive.mjs" \
	"$T/int.ndjson" - - "$S" run --server "$URL" --json cancel >/dev/null 2>&1
rc=$?
[ $rc -eq 130 ] && ok "--server: Ctrl-C, exit 130" || fail "--server: Ctrl-C, exit 130 (got $rc)"
grep_in "--server: cancelled cleanly" "$T/int.ndjson" '"stop_reason":"cancelled"'
SANDRUN_TOKEN=$TOKEN expect "--server: a plan refusal exits 5" 5 "$S" run --server "$URL" --harness pi --json ok
SANDRUN_TOKEN=wrong-token-0000000000 expect "--server: a refused token exits 3" 3 "$S" run --server "$URL" ok
grep_in "--server: says so" "$T/err" "refused the run (HTTP 401)"
expect "--server: nobody there exits 4" 4 "$S" run --server http://127.0.0.1:1 ok
SANDRUN_TOKEN=$TOKEN expect "--server: a request the service refuses exits 2" 2 "$S" run --server "$URL" --harness 'No!' ok
grep_in "--server: with the service's reason" "$T/err" "(HTTP 400): 'harness' must be a plugin name"

# ------------------------------------------- a Unix socket, no token needed
start_svc unix SANDRUN_SERVICE_LISTEN="unix:$T/sandrund.sock"
[ "$(stat -c %a "$T/sandrund.sock")" = 600 ] && ok "the socket is 0600" || fail "the socket is 0600"
grep_in "serving without a token is said" "$T/unix.log" "no bearer token configured: whoever can connect"
CODE=$(curl -s -o "$T/body" -w '%{http_code}' --unix-socket "$T/sandrund.sock" --data '{"prompt":"ok"}' http://x/v1/runs)
code "a run over the socket without a token" 200
expect "sandrun run --server unix:PATH" 0 "$S" run --server "unix:$T/sandrund.sock" --json ok
kill -TERM "$SVC_PID"
wait "$SVC_PID"
[ ! -e "$T/sandrund.sock" ] && ok "the socket is removed at the stop" || fail "the socket is removed at the stop"

# ------------------------------------------------------ SIGHUP: reload
TOKEN2=tok-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
printf '%s\n' "$TOKEN2" >"$T/tokens2"
printf '[service]\nlisten = 127.0.0.1:0\ntokens_file = %s\ndrain_timeout = 30\n' "$T/tokens" >"$T/hup.conf"
SVC_ARGS="--config $T/hup.conf"
start_svc hup
SVC_ARGS=
HUP_PID=$SVC_PID
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "$AUTH" "$URL/metrics")
code "before SIGHUP: the first token is taken" 200
printf '[service]\nlisten = 127.0.0.1:0\ntokens_file = %s\nmax_runs = 0\n' "$T/tokens2" >"$T/hup.conf"
kill -HUP "$HUP_PID"
wait_grep "$T/hup.log" "not reloaded" && ok "SIGHUP with a bad value: not reloaded" ||
	fail "SIGHUP with a bad value: not reloaded"
grep_in "... the bad value named" "$T/hup.log" "hup.conf:4: \[service\] key 'max_runs'"
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "$AUTH" "$URL/metrics")
code "... and the first token still taken" 200
printf '[service]\nlisten = 127.0.0.1:1\ntokens_file = %s\ndrain_timeout = 30\n[provider.local]\nenv_allow = X\n' \
	"$T/tokens2" >"$T/hup.conf"
kill -HUP "$HUP_PID"
wait_grep "$T/hup.log" "reloaded: new runs use it" && ok "SIGHUP: reloaded" || fail "SIGHUP: reloaded"
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "$AUTH" "$URL/metrics")
code "after SIGHUP: the old token is refused" 401
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $TOKEN2" "$URL/metrics")
code "... and the new one taken" 200
grep_in "SIGHUP: a new listen waits for a restart" "$T/hup.log" "listen changed: it takes effect at the next start"
grep_in "SIGHUP: a plugin's section waits for a restart" "$T/hup.log" "\[provider.local\] changed: .*restart to apply it"
# The tokens file emptied, then removed: its old tokens are refused from
# then on (sandrund(8)), /health still answers; tokens again: taken again.
: >"$T/tokens2"
kill -HUP "$HUP_PID"
wait_grep "$T/hup.log" "every request but /health is refused" &&
	ok "SIGHUP, the tokens file emptied: said" || fail "SIGHUP, the tokens file emptied: said"
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $TOKEN2" "$URL/metrics")
code "... the removed token is refused" 401
CODE=$(curl -s -o "$T/body" -w '%{http_code}' "$URL/health")
code "... /health still answers" 200
# token_back: the token written back and SIGHUP sent; until it is taken.
token_back() {
	printf '%s\n' "$TOKEN2" >"$T/tokens2"
	kill -HUP "$HUP_PID"
	for _ in $(seq 100); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN2" "$URL/metrics")" = 200 ] && break
		sleep 0.05
	done
}
token_back
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $TOKEN2" "$URL/metrics")
code "SIGHUP, the token back in the file: taken again" 200
rm -f "$T/tokens2"
n_refused=$(grep -c "every request but /health is refused" "$T/hup.log")
kill -HUP "$HUP_PID"
for _ in $(seq 100); do
	[ "$(grep -c "every request but /health is refused" "$T/hup.log")" -gt "$n_refused" ] && break
	sleep 0.05
done
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $TOKEN2" "$URL/metrics")
code "SIGHUP, the tokens file removed: its token is refused" 401
token_back

# ------------------------------------ SIGTERM: runs finish within the drain
AUTH="Authorization: Bearer $TOKEN2"
start_run '{"prompt":"slow:1500"}'
curl -s -N -H "$AUTH" "$URL/v1/runs/$RUN/events" >"$T/follow" 2>/dev/null &
follow=$!
wait_event "$RUN" '"text":"working..."' || fail "the drained run started"
kill -TERM "$HUP_PID"
wait_grep "$T/hup.log" "may finish within 30 s" && ok "SIGTERM: the drain is logged" ||
	fail "SIGTERM: the drain is logged"
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "$AUTH" --data '{"prompt":"ok"}' "$URL/v1/runs")
[ "$CODE" = 000 ] || [ "$CODE" = 503 ] && ok "SIGTERM: no new run while draining" ||
	fail "SIGTERM: no new run while draining (HTTP $CODE)"
wait "$HUP_PID"
rc=$?
[ $rc -eq 0 ] && ok "SIGTERM drained: sandrund exits 0" || fail "SIGTERM drained: sandrund exits 0 (got $rc)"
wait "$follow"
grep_in "SIGTERM: the run in flight finished its turn" "$T/follow" '"type":"run.finished","stop_reason":"end_turn"'
AUTH="Authorization: Bearer $TOKEN"
DRAINED=$RUN

# ------------------------------- a second SIGTERM cancels the runs at once
start_svc twice SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens"
# The run log is in the database: the drained run, from the service before.
api GET "/v1/runs/$DRAINED"
code "after a restart: a run from before is there" 200
[ "$(get "$T/body" state)" = finished ] && ok "... finished, as it was" ||
	fail "... finished, as it was ($(cat "$T/body"))"
events "$DRAINED"
cmp -s "$T/ev" "$T/follow" && ok "after a restart: its events replay, the same lines" ||
	fail "after a restart: its events replay ($(wc -l <"$T/ev") lines, $(wc -l <"$T/follow") then)"
start_run '{"prompt":"slow:30000"}'
wait_event "$RUN" '"text":"working..."' || fail "the run started"
kill -TERM "$SVC_PID"
wait_grep "$T/twice.log" "may finish within 60 s" || fail "the default drain_timeout is 60 s"
t0=$(date +%s)
kill -TERM "$SVC_PID"
wait "$SVC_PID"
rc=$?
[ $rc -eq 0 ] && [ $(( $(date +%s) - t0 )) -lt 15 ] && ok "a second SIGTERM: the run cancelled, exit 0" ||
	fail "a second SIGTERM: the run cancelled, exit 0 (got $rc)"
grep_in "... logged" "$T/twice.log" "second stop signal: cancelling the runs now"

# ------------- slow clients: bounded per address, cut when headers dawdle
start_svc slow SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens" \
	SANDRUN_SERVICE_MAX_CLIENT_CONNECTIONS=20 SANDRUN_SERVICE_HEADER_TIMEOUT=2
grep_in "slow clients: the start says the bounds" "$T/slow.log" \
	"connections: at most [0-9]*, 20 from one address; a request's headers within 2 s"
PORT=${URL##*:}
node "$SANDRUN_SRCDIR/tests/helpers/slow_clients.mjs" 127.0.0.1 "$PORT" 60 127.0.0.1 8 200 \
	>"$T/slow.json" 2>&1 &
slow_pid=$!
sleep 1
t0=$(date +%s%N)
hc=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 --interface 127.0.0.2 "$URL/health")
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$hc" = 200 ] && [ "$ms" -lt 1000 ] &&
	ok "slow clients: 60 from one address, /health from another answers ($ms ms)" ||
	fail "slow clients: /health from another address answers (HTTP $hc, $ms ms)"
wait $slow_pid
refused=$(get "$T/slow.json" refused)
cut=$(get "$T/slow.json" cut)
[ "$refused" -ge 40 ] && ok "... past 20 from one address, refused ($refused of 60)" ||
	fail "... past 20 from one address, refused ($(cat "$T/slow.json"))"
[ "$cut" -ge 1 ] && [ "$(get "$T/slow.json" open)" = 0 ] &&
	node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
		process.exit(j.cut_ms.every((ms) => ms >= 1900 && ms < 4500) ? 0 : 1)' "$T/slow.json" &&
	ok "... the others cut once their headers took over 2 s ($cut)" ||
	fail "... the others cut once their headers took over 2 s ($(cat "$T/slow.json"))"
api GET /health
code "... and the address is served again" 200
kill -TERM "$SVC_PID"
wait "$SVC_PID"

# ------------------- a service killed mid-run: the run is failed at restart
start_svc crash SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens"
# a sandbox kept warm (running) when the service is killed
api POST /v1/runs '{"prompt":"ok"}'
WARMBOX=$(box_in "$T/body")
wait_grep "$T/crash.log" "sandbox $WARMBOX.* kept running" || fail "a sandbox kept warm ($WARMBOX)"
start_run '{"prompt":"slow:20000"}'
wait_event "$RUN" '"text":"working..."' || fail "the run started"
sleep 0.3 # its events written
kill -9 "$SVC_PID"
wait "$SVC_PID" 2>/dev/null
start_svc crash2 SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens"
api GET "/v1/runs/$RUN"
[ "$CODE" = 200 ] && [ "$(get "$T/body" state)" = failed ] &&
	[ "$(get "$T/body" error.code)" = service_restarted ] &&
	[ "$(get "$T/body" error.retryable)" = true ] && [ "$(get "$T/body" exit_code)" = 75 ] &&
	[ -n "$(get "$T/body" ended_at)" ] &&
	ok "killed mid-run: the run is failed after the restart (service_restarted, retryable, exit 75, ended)" ||
	fail "killed mid-run: the run is failed after the restart (HTTP $CODE: $(cat "$T/body"))"
last=$(get "$T/body" events)
events "$RUN"
grep_in "... its events up to the kill replay" "$T/ev" '"text":"working..."'
tail -n 1 "$T/ev" | grep -q "\"type\":\"run.failed\",\"code\":\"service_restarted\".*\"seq\":$last}" &&
	ok "... and end with one run.failed, the summary's last event ($last)" ||
	fail "... and end with one run.failed, the summary's last event ($last: $(tail -n 2 "$T/ev"))"
[ "$(grep -c '"type":"run.failed"' "$T/ev")" = 1 ] && ok "... only one" ||
	fail "... only one ($(grep -c '"type":"run.failed"' "$T/ev"))"
grep_in "... the restart says so" "$T/crash2.log" "run $RUN was not over when the service stopped"
grep_in "killed with a sandbox warm: the next start finds it" "$T/crash2.log" \
	"found 1 sandboxes a stopped service kept running (parking them stopped)"
for _ in $(seq 100); do
	grep -q '"state": *"parked-stopped"' "$boxes/.records/$WARMBOX.json" 2>/dev/null && break
	sleep 0.05
done
grep -q '"state": *"parked-stopped"' "$boxes/.records/$WARMBOX.json" && ok "... and parks it stopped" ||
	fail "... and parks it stopped ($WARMBOX: $(cat "$boxes/.records/$WARMBOX.json" 2>&1))"
kill -TERM "$SVC_PID"
wait "$SVC_PID"

# ------------- a TTL outlives a clean restart (the pool's record is durable)
start_svc ttl1 SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens" \
	SANDRUN_SERVICE_WARM_LIVE=0 SANDRUN_SERVICE_WARM_TTL=3
api POST /v1/runs '{"prompt":"ok"}'
TTLBOX=$(box_in "$T/body")
kill -TERM "$SVC_PID"
wait "$SVC_PID"
[ -d "$boxes/$TTLBOX" ] && ok "a TTL: the sandbox is parked when its service stops" ||
	fail "a TTL: the sandbox is parked when its service stops ($TTLBOX)"
start_svc ttl2 SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens" \
	SANDRUN_SERVICE_WARM_TTL=3
grep_in "... the next start takes its TTL over" "$T/ttl2.log" "and 1 parked with a TTL"
for _ in $(seq 100); do [ -d "$boxes/$TTLBOX" ] || break; sleep 0.05; done
[ ! -d "$boxes/$TTLBOX" ] && ok "... and destroys it when the TTL ends" ||
	fail "... and destroys it when the TTL ends"
kill -TERM "$SVC_PID"
wait "$SVC_PID"

# ----------------------------------- the warm pool: capacity, then expiry
start_svc cool SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens" \
	SANDRUN_SERVICE_WARM_LIVE=4 SANDRUN_SERVICE_MAX_WARM=1
api POST /v1/runs '{"prompt":"ok"}'
SA=$(sed -n '1s/.*"session":"\(ses-[0-9a-f]*\)".*/\1/p' "$T/body")
api POST /v1/runs '{"prompt":"ok"}'
SBB=$(box_in "$T/body")
wait_grep "$T/cool.log" "the warm pool is full for provider local (max_warm 1)" &&
	ok "max_warm is strict: the second sandbox is parked stopped" ||
	fail "max_warm is strict: the second sandbox is parked stopped"
grep -q '"state": *"parked-stopped"' "$boxes/.records/$SBB.json" && ok "... it is stopped" ||
	fail "... it is stopped ($(cat "$boxes/.records/$SBB.json"))"
wait_grep "$T/cool.log" "session $SA: sandbox [^ ]* parked stopped (expired)" &&
	ok "after warm_live the first is parked stopped" || fail "after warm_live the first is parked stopped"
api POST /v1/runs "{\"prompt\":\"ok\",\"session\":\"$SA\"}"
grep_in "its next turn reconnects it through the provider" "$T/body" '"how":"reconnected"'
kill -TERM "$SVC_PID"
wait "$SVC_PID"

# -------------------------- SIGTERM past drain_timeout: the run cancelled
SVC_PID=$MAIN_PID
URL=$MAIN_URL
start_run '{"prompt":"slow:30000"}'
curl -s -N -H "$AUTH" "$URL/v1/runs/$RUN/events" >"$T/follow" 2>/dev/null &
follow=$!
wait_event "$RUN" '"text":"working..."' || fail "the last run started"
kill -TERM "$SVC_PID"
t0=$(date +%s)
wait "$SVC_PID"
rc=$?
[ $rc -eq 0 ] && ok "SIGTERM: sandrund exits 0" || fail "SIGTERM: sandrund exits 0 (got $rc)"
[ $(( $(date +%s) - t0 )) -lt 15 ] && ok "SIGTERM: promptly" || fail "SIGTERM: promptly"
wait "$follow"
grep_in "SIGTERM: the run in flight is cancelled after drain_timeout, its stream ended" "$T/follow" \
	'"stop_reason":"cancelled"'
grep_in "SIGTERM: logged" "$T/svc.log" "stopping: cancelling the 1 runs going on"
SBX=$(box_in "$T/follow")
[ -n "$SBX" ] && [ ! -e "$boxes/$SBX" ] &&
	ok "SIGTERM: the fresh sandbox of the run it cancelled is destroyed" ||
	fail "SIGTERM: the fresh sandbox of the run it cancelled is destroyed ($SBX)"
grep_in "SIGTERM: the warm sandboxes are parked stopped" "$T/svc.log" \
	"stopping: parking the [0-9]* warm sandboxes stopped"
SBW=$(box_in "$T/there.ndjson")
grep -q '"state": *"parked-stopped"' "$boxes/.records/$SBW.json" && ok "... one of them, stopped" ||
	fail "... one of them, stopped ($SBW: $(cat "$boxes/.records/$SBW.json" 2>&1))"
replicas
elsewhere
finish
