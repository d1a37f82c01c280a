#!/bin/sh
# sandrund's answers against doc/api.yaml: tests/peers/openapi_check.mjs
# drives a service (the scripted agent behind it) through every operation,
# then through an abuse suite (malformed HTTP byte for byte: duplicate
# headers, no Host, NULs, bad query values, duplicate JSON keys, deep
# nesting, tokens almost right, ids that walk up, refused credentials and
# callbacks), and validates what it answers with ajv (pinned in
# scripts/npm-peers); then kills it mid-run and validates the run after
# the restart.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
command -v node >/dev/null || missing "node is not installed"
npm_dir=${SANDRUN_NPM_DIR:-}
for pkg in ajv ajv-formats yaml; do
	[ -n "$npm_dir" ] && [ -f "$npm_dir/node_modules/$pkg/package.json" ] ||
		missing "$pkg is not installed in \$SANDRUN_NPM_DIR (scripts/npm-peers installs it; scripts/check sets SANDRUN_NPM_DIR)"
done
export SANDRUN_RUNNER_HARNESSES=claude
export SANDRUN_HARNESS_CLAUDE_COMMAND="$SANDRUN_SRCDIR/tests/emulators/fake_acp.mjs"
export SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=prompt
TOKEN=tok-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
printf '%s\n' "$TOKEN" >"$T/tokens"
chmod 600 "$T/tokens"
SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens" SANDRUN_SERVICE_MAX_RUNS=2 \
	SANDRUN_SERVICE_MAX_BODY=4K SANDRUN_SERVICE_EVENT_BUFFER=32 \
	"$SANDRUN_BUILDDIR/sandrund" >"$T/svc.log" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null; rm -rf "$T"' EXIT
wait_grep "$T/svc.log" "listening on"
URL=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$T/svc.log")
[ -n "$URL" ] || { cat "$T/svc.log"; exit 1; }
SANDRUN_NPM_DIR=$npm_dir node "$SANDRUN_SRCDIR/tests/peers/openapi_check.mjs" \
	"$SANDRUN_SRCDIR/doc/api.yaml" "$URL" "$TOKEN" >"$T/check1"
rc=$?
grep -v '^# [0-9]* checks, [0-9]* failed$' "$T/check1"
[ $rc -eq 77 ] && missing "the OpenAPI validator could not be loaded"
# Killed mid-run and started again: the run's answers still match.
RUN=$(curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
	--data '{"prompt":"slow:20000"}' "$URL/v1/runs?wait=false" | sed -n 's/.*"run":"\([^"]*\)".*/\1/p')
for _ in $(seq 100); do
	curl -s -N --max-time 0.3 -H "Authorization: Bearer $TOKEN" "$URL/v1/runs/$RUN/events" |
		grep -q '"text":"working..."' && break
done
sleep 0.3 # its events written
kill -9 $pid
wait $pid 2>/dev/null
SANDRUN_SERVICE_LISTEN=127.0.0.1:0 SANDRUN_SERVICE_TOKENS_FILE="$T/tokens" \
	"$SANDRUN_BUILDDIR/sandrund" >"$T/svc2.log" 2>&1 &
pid=$!
wait_grep "$T/svc2.log" "listening on"
URL=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$T/svc2.log")
SANDRUN_NPM_DIR=$npm_dir node "$SANDRUN_SRCDIR/tests/peers/openapi_check.mjs" \
	"$SANDRUN_SRCDIR/doc/api.yaml" "$URL" "$TOKEN" --restarted "$RUN" >"$T/check2"
rc2=$?
grep -v '^# [0-9]* checks, [0-9]* failed$' "$T/check2"
# One count for both (scripts/check reads the last such line).
cat "$T/check1" "$T/check2" | sed -n 's/^# \([0-9]*\) checks, \([0-9]*\) failed$/\1 \2/p' |
	awk '{ n += $1; f += $2 } END { printf "# %d checks, %d failed\n", n, f }'
kill -TERM $pid
wait $pid
[ $rc -eq 0 ] && [ $rc2 -eq 0 ]
