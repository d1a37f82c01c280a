#!/bin/sh
# sandrun sandbox list and sandrun janitor on the local provider: only this
# runner's sandboxes are listed; the janitor deletes those no session
# needs (older than its grace period), keeps the ones a session points at
# and the ones made by hand, and never touches another runner's.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
S=$SANDRUN_BIN
export SANDRUN_RUNNER_HARNESSES=claude
export SANDRUN_HARNESS_CLAUDE_COMMAND="$SANDRUN_SRCDIR/tests/emulators/fake_acp.mjs"
export SANDRUN_HARNESS_CLAUDE_ENV=FAKE_ACP_MODE=fs
command -v node >/dev/null || missing "node (for the fake ACP agent)"
field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p" "$2" | head -n 1; }

expect "an empty list" 0 "$S" sandbox list --json
grep_in "an empty list is []" "$T/out" '^\[\]$'
expect "a turn (fake agent)" 0 "$S" run --json go
session=$(field session "$T/out")
box=$(grep run.finished "$T/out" | sed -n 's/.*"sandbox":"\([^"]*\)".*/\1/p')
[ -n "$session" ] && [ -n "$box" ] && ok "the turn named its session and sandbox" ||
	fail "the turn named its session and sandbox"
expect "a sandbox made by hand" 0 "$S" sandbox create --label team=a
hand=$(cat "$T/out")
expect "a sandbox left by exec --keep" 0 "$S" exec --keep -- true
left=$(sed -n 's/.*kept sandbox \(.*\)/\1/p' "$T/err")
expect "list" 0 "$S" sandbox list
grep_in "the run's sandbox, with its session" "$T/out" "^$box .*$session *run$"
grep_in "the hand-made one" "$T/out" "^$hand .* hand$"
grep_in "the one exec left" "$T/out" "^$left .* exec$"
expect "list by a label" 0 "$S" sandbox list --json --label team=a
[ "$(grep -o '"id"' "$T/out" | wc -l)" -eq 1 ] && grep -q "$hand" "$T/out" &&
	ok "the label filter holds" || fail "the label filter holds"
grep_in "labelled with the runner id" "$T/out" "\"sandrun.runner\":\"$(cat "$T/state/runner-id")\""
expect "labels of the runner's own cannot be set by hand" 2 "$S" sandbox create --label sandrun.session=x
grep_in "said why" "$T/err" "are the runner's own"

SANDRUN_RUNNER_ID=other-runner expect "another runner lists none of them" 0 "$S" sandbox list --json
grep_in "another runner: []" "$T/out" '^\[\]$'
SANDRUN_RUNNER_ID=other-runner expect "another runner's janitor" 0 "$S" janitor --grace 0
grep_in "touches nothing" "$T/out" "no sandboxes of this runner"

expect "janitor, default grace" 0 "$S" janitor
grep_in "a young leftover is kept" "$T/out" "^kept  *$left .*younger than the grace period"
grep_in "the session's sandbox is kept" "$T/out" "^kept  *$box .*its session points at it"
grep_in "the hand-made one is kept" "$T/out" "^kept  *$hand .*made by hand"

# The run's pointer is lost (as when a run crashes before recording it).
"$SANDRUN_SESSION_TOOL" "$T/state" get "$session" >"$T/session.json" &&
	"$SANDRUN_SESSION_TOOL" "$T/state" rm "$session" || fail "the pointer is taken away"
expect "janitor --dry-run" 0 "$S" janitor --dry-run --grace 0
grep_in "would delete the unpointed one" "$T/out" "^would delete  *$box .*no session points at it"
grep_in "would delete exec's leftover" "$T/out" "^would delete  *$left "
expect "list after the dry run" 0 "$S" sandbox list --json
grep -q "$box" "$T/out" && grep -q "$left" "$T/out" && ok "a dry run deletes nothing" ||
	fail "a dry run deletes nothing"
"$SANDRUN_SESSION_TOOL" "$T/state" put "$session" "$T/session.json" || fail "the pointer is put back"
expect "janitor --grace 0 --json" 0 "$S" janitor --grace 0 --json
grep_in "exec's leftover deleted" "$T/out" "\"id\":\"$left\",\"verdict\":\"deleted\""
grep_in "the pointed one kept" "$T/out" "\"id\":\"$box\",\"verdict\":\"kept\""
expect "list after the janitor" 0 "$S" sandbox list --json
! grep -q "$left" "$T/out" && grep -q "$box" "$T/out" && grep -q "$hand" "$T/out" &&
	ok "exactly the leftover is gone" || fail "exactly the leftover is gone"
"$SANDRUN_SESSION_TOOL" "$T/state" rm "$session" || fail "the session is forgotten"
expect "janitor after the session is gone" 0 "$S" janitor -g 0
grep_in "deleted" "$T/out" "^deleted  *$box "
expect "sandbox destroy" 0 "$S" sandbox destroy "$hand"
expect "list at the end" 0 "$S" sandbox list --json
grep_in "nothing of this runner left" "$T/out" '^\[\]$'

# sandrund sweeps by itself ([janitor] interval; its first sweep a few
# seconds after the start), one replica at a time: the other, on the same
# store, finds the interval's lease taken and sweeps nothing.
expect "a sandbox left by exec --keep, for sandrund" 0 "$S" exec --keep -- true
left=$(sed -n 's/.*kept sandbox \(.*\)/\1/p' "$T/err")
expect "a turn, whose session points at its sandbox" 0 "$S" run --json go
box=$(grep run.finished "$T/out" | sed -n 's/.*"sandbox":"\([^"]*\)".*/\1/p')
svc() { # svc NAME: sandrund on a Unix socket $T/NAME.sock, its log $T/NAME.log
	SANDRUN_SERVICE_LISTEN="unix:$T/$1.sock" SANDRUN_JANITOR_INTERVAL=10 \
		SANDRUN_JANITOR_GRACE=0s \
		"$SANDRUN_BUILDDIR/sandrund" >"$T/$1.log" 2>&1 &
}
metric() { # metric NAME SERVICE: its value in SERVICE's /metrics
	curl -s --unix-socket "$T/$2.sock" http://x/metrics | sed -n "s/^$1 //p"
}
svc ja
ja=$!
wait_grep "$T/ja.log" "listening on"
svc jb
jb=$!
wait_grep "$T/jb.log" "listening on"
wait_grep "$T/ja.log" "janitor: .*sweep: removed" || wait_grep "$T/jb.log" "janitor: .*sweep: removed"
sweeper=ja other=jb
grep -q "sweep: removed" "$T/ja.log" || { sweeper=jb other=ja; }
grep_in "sandrund's janitor removed exec's leftover" "$T/$sweeper.log" "janitor: .*sweep: removed 1"
expect "list after sandrund's sweep" 0 "$S" sandbox list --json
! grep -q "$left" "$T/out" && grep -q "$box" "$T/out" &&
	ok "... exactly it (the session's sandbox kept)" || fail "... exactly it (the session's sandbox kept)"
[ "$(metric sandrun_janitor_removed_total "$sweeper")/$(metric sandrun_janitor_sweeps_total "$sweeper")" = 1/1 ] &&
	ok "/metrics counts the sweep and what it removed" ||
	fail "/metrics counts the sweep and what it removed ($(metric sandrun_janitor_removed_total "$sweeper")/$(metric sandrun_janitor_sweeps_total "$sweeper"))"
sleep 6 # the other's first sweep came, and found the lease taken
[ "$(metric sandrun_janitor_sweeps_total "$other")" = 0 ] &&
	ok "the other replica swept nothing in that interval" ||
	fail "the other replica swept nothing in that interval ($(metric sandrun_janitor_sweeps_total "$other"))"
kill -TERM "$ja" "$jb"
wait "$ja" "$jb"
SANDRUN_JANITOR_INTERVAL=5 expect "[janitor] interval below 10 s: refused" 3 "$SANDRUN_BUILDDIR/sandrund"
grep_in "... naming the key" "$T/err" "interval"

expect "a bad grace is a usage error" 2 "$S" janitor --grace 5x
grep_in "said what a duration is" "$T/err" "expected a duration such as 90s"
expect "an argument is a usage error" 2 "$S" janitor now
SANDRUN_RUNNER_ID='Bad Id' expect "a bad runner id is a configuration error" 3 "$S" sandbox list
grep_in "names the key" "$T/err" "id"
echo "not an id!" >"$T/state/runner-id"
expect "a damaged runner-id file" 1 "$S" sandbox list
grep_in "said which file" "$T/err" "runner-id does not hold a runner id"
expect "janitor --help" 0 "$S" janitor --help
grep_in "help names the grace period" "$T/out" "default 2h"
finish
