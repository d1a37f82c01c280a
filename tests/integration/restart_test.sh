#!/bin/sh
# A sandbox outlives the runner process: every step is a new sandrun.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
S=$SANDRUN_BIN

expect "create" 0 "$S" sandbox create --env GREETING=hi --label run=r1
id=$(cat "$T/out")
case "$id" in sb-????????????????) ok "id printed" ;; *) fail "id printed ($id)" ;; esac
expect "exec writes in the workspace" 0 "$S" sandbox exec "$id" -- sh -c 'echo "$GREETING" > note'
expect "park stopped" 0 "$S" sandbox park "$id" --stopped
expect "reconnect after restart" 0 "$S" sandbox reconnect "$id" --json
grep_in "reconnect answers the workspace" "$T/out" "\"workspace\":.*$id/workspace"
expect "exec reads what the first process wrote" 0 "$S" sandbox exec "$id" -- cat note
grep_in "file survived" "$T/out" "^hi$"
expect "destroy" 0 "$S" sandbox destroy "$id"
test ! -e "$T/state/plugins/provider.local/sandboxes/$id" && ok "directory removed" ||
	fail "directory removed"
expect "reconnect after destroy fails" 1 "$S" sandbox reconnect "$id"
grep_in "not found named" "$T/err" "sandbox '$id' not found"
expect "invalid id rejected" 1 "$S" sandbox destroy "../../etc"
grep_in "invalid id explained" "$T/err" "invalid sandbox id"
expect "missing id" 2 "$S" sandbox exec
finish
