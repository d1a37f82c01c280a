#!/bin/sh
# A local sandbox is a real one (bubblewrap): from inside, another sandbox's
# workspace, the runner's state directory and relay journal, host Unix
# sockets and host processes are out of sight, and nothing outside the
# sandbox can be written. Without bubblewrap, sandboxes are refused unless
# the operator sets confinement = none.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
S=$SANDRUN_BIN
if ! command -v bwrap >/dev/null; then
	echo "SKIP: bubblewrap is not installed (scripts/deps installs it)"
	[ "${CI:-}" = true ] && { echo "FAIL: CI=true: bubblewrap must be installed"; exit 1; }
	exit 77
fi
node=$(command -v node) || { echo "FAIL: node is needed for the socket checks"; exit 1; }
boxes="$T/state/plugins/provider.local/sandboxes"
in_box() { # in_box ID SCRIPT: run a shell script inside the sandbox
	"$S" sandbox exec "$1" -- sh -c "$2" >"$T/out" 2>"$T/err"
}
# refused NAME ID SCRIPT [-]: the script must fail inside; unless "-" (a
# script that changes something), it must work outside too, so that the
# check proves the sandbox, not a typo.
refused() {
	if [ "${4:-}" = - ] || sh -c "$3" >/dev/null 2>&1; then :; else
		fail "$1: does not work outside the sandbox either"; return
	fi
	if in_box "$2" "$3"; then fail "$1"; sed 's/^/  out: /' "$T/out" | head -5; else ok "$1"; fi
}

expect "doctor says sandboxes are confined" 0 "$S" doctor
grep_in "doctor names bubblewrap" "$T/out" "provider local .*confined by bubblewrap"
if [ "$(id -u)" -eq 0 ]; then
	grep_in "doctor, as root: confined, the agents run as nobody with no capability" "$T/out" \
		"^\[ok  \] provider local .*confined by bubblewrap.*files of /etc, /opt and /usr/local others may not read hidden.*run as root, its agents run as uid $(id -u nobody) gid $(id -g nobody) (agent_user) with no capability"
	SANDRUN_PROVIDER_LOCAL_AGENT_USER=root expect "doctor, as root with agent_user = root" 0 "$S" doctor
	grep_in "... only partly, and why (a warning)" "$T/out" \
		"^\[warn\] provider local .*partly confined by bubblewrap.*no capability.*run as root with agent_user = root, the agent is uid 0"
	SANDRUN_PROVIDER_LOCAL_AGENT_USER=no-such-user-$$ expect "agent_user: an unknown user is a configuration error" 4 "$S" sandbox create
	grep_in "... naming the key" "$T/err" "agent_user"
	SANDRUN_PROVIDER_LOCAL_AGENT_USER=root expect "agent_user = root: a sandbox" 0 "$S" sandbox create
	r=$(cat "$T/out")
	SANDRUN_PROVIDER_LOCAL_AGENT_USER=root expect "... whose agent is uid 0" 0 "$S" sandbox exec "$r" -- id -u
	grep_in "... (uid 0)" "$T/out" "^0$"
	expect "... given to nobody at its next reconnect" 0 "$S" sandbox reconnect "$r"
	expect "... whose agent is nobody then" 0 "$S" sandbox exec "$r" -- sh -c 'id -u; touch written && echo wrote'
	grep_in "... (uid $(id -u nobody)), writing its workspace" "$T/out" "^$(id -u nobody)$"
	grep_in "... (it writes)" "$T/out" "^wrote$"
	"$S" sandbox destroy "$r" >/dev/null 2>&1
fi
a=$("$S" sandbox create) && b=$("$S" sandbox create) || { fail "two sandboxes"; finish; exit 1; }
in_box "$a" 'echo private-to-a >secret.txt && echo ok' && ok "a writes its own workspace" ||
	fail "a writes its own workspace"
test -f "$boxes/$a/workspace/secret.txt" && ok "the file is in a's workspace on the host" ||
	fail "the file is in a's workspace on the host"

# The runner's own state: a session pointer, a relay journal entry.
mkdir -p "$T/state/sessions" "$T/state/relay/run-1"
echo '{"sandbox":"sb-x"}' >"$T/state/sessions/ses-1.json"
echo claimed >"$T/state/relay/run-1/call-1.claim"
echo '{"session":"ses-00000000000000aa","sandbox":"sb-x","turn":1}' >"$T/pointer.json"
"$SANDRUN_SESSION_TOOL" "$T/state" put ses-00000000000000aa "$T/pointer.json" ||
	fail "a session pointer in the database"

refused "another sandbox's workspace is out of sight" "$b" "cat '$boxes/$a/workspace/secret.txt'"
refused "the sandboxes' root lists nothing else" "$b" "ls '$boxes' | grep -q '$a'"
refused "session pointers are out of sight" "$b" "cat '$T/state/sessions/ses-1.json'"
refused "the session database is out of sight" "$b" "cat '$T/state/sandrun.db'"
refused "the relay journal is out of sight" "$b" "cat '$T/state/relay/run-1/call-1.claim'"
refused "the journal claim cannot be deleted" "$b" "rm '$T/state/relay/run-1/call-1.claim'" -
test -f "$T/state/relay/run-1/call-1.claim" && ok "the claim is still there" || fail "the claim is still there"
refused "the source tree cannot be written" "$b" "touch '$SANDRUN_BUILDDIR/written-from-sandbox' && rm '$SANDRUN_BUILDDIR/written-from-sandbox'"
# The runner's /tmp: the sandbox writes into its own, never the host's.
in_box "$b" "touch '$T/written-from-sandbox'"
refused "the system cannot be written" "$b" "touch /usr/written-from-sandbox" -
test ! -e "$T/written-from-sandbox" && ok "nothing reaches the runner's /tmp" ||
	fail "nothing reaches the runner's /tmp"

# Host Unix sockets: one in the runner's /tmp, one in /run.
sock1="$T/host.sock" sock2="/run/sandrun-test-$$.sock"
"$node" -e 'for (const p of process.argv.slice(1))
	require("net").createServer(c => { c.on("error", () => {}); c.end("hi"); }).listen(p)' \
	"$sock1" "$sock2" &
srv=$!
for _ in $(seq 100); do [ -S "$sock1" ] && [ -S "$sock2" ] && break; sleep 0.05; done
connect="$node -e 'const s=require(\"net\").connect(process.argv[1]); s.on(\"connect\",()=>process.exit(0)); s.on(\"error\",()=>process.exit(1))'"
refused "a host socket in /tmp cannot be reached" "$b" "$connect '$sock1'"
refused "a host socket in /run cannot be reached" "$b" "$connect '$sock2'"
kill "$srv" 2>/dev/null; rm -f "$sock2"

# Host processes: this shell's pid is not there; only a handful of pids are.
refused "host processes are out of sight" "$b" "test -d /proc/$$"
in_box "$b" 'ls /proc | grep -c "^[0-9]"'
test "$(cat "$T/out")" -lt 10 && ok "a pid namespace of its own ($(cat "$T/out") pids)" ||
	fail "a pid namespace of its own ($(cat "$T/out") pids)"
refused "home directories are out of sight" "$b" 'test -n "$(ls -A /root)$(ls -A /home)"'
# No capability (a root runner's agent would otherwise have them all): the
# masks stay on.
if [ "$(id -u)" -eq 0 ]; then
	refused "a root runner's sandbox has no capability" "$b" \
		"grep -q '^CapEff:[[:space:]]*0*[1-9a-f]' /proc/self/status"
	echo host >"$T/host-tmp-marker"
	refused "the host's /tmp stays masked (umount -l /tmp fails)" "$b" \
		"umount -l /tmp 2>/dev/null; test -e '$T/host-tmp-marker'" -
	refused "the host's processes stay hidden (umount -l /proc fails)" "$b" \
		"umount -l /proc 2>/dev/null; test -d /proc/$$" -
	refused "/ cannot be remounted read-write" "$b" \
		"mount -o remount,bind,rw / 2>/dev/null && touch /usr/written-from-sandbox" -
	test ! -e /usr/written-from-sandbox && ok "  nothing was written to /usr" ||
		{ fail "  nothing was written to /usr"; rm -f /usr/written-from-sandbox; }
fi

# It dies with the runner: SIGKILL to sandrun leaves nothing of the
# sandbox's processes (a child and a grandchild) behind.
# (/proc is read directly: a minimal Debian has no pgrep.)
marker="sleep 4242.$$"
marked() { # the pids whose command line starts with the marker
	for f in /proc/[0-9]*/cmdline; do
		tr '\0' ' ' <"$f" 2>/dev/null | grep -q "^$marker" && { p=${f#/proc/}; echo "${p%/cmdline}"; }
	done
}
"$S" sandbox exec "$b" -- sh -c "$marker & $marker" >/dev/null 2>&1 &
runner=$!
for _ in $(seq 100); do [ "$(marked | wc -l)" -ge 2 ] && break; sleep 0.05; done
test "$(marked | wc -l)" -ge 2 && ok "two processes run in the sandbox" ||
	fail "two processes run in the sandbox"
kill -9 "$runner"
for _ in $(seq 100); do [ "$(marked | wc -l)" -eq 0 ] && break; sleep 0.05; done
left=$(marked)
test -z "$left" && ok "they die with the runner" ||
	{ fail "they die with the runner (left: $left)"; kill -9 $left 2>/dev/null; }

# The runner's record of a sandbox is out of its reach: a sandbox made
# with network off that writes a record of its own (network open, another
# sandbox's id and labels), or plants a link where a record's temporary
# file would go, changes nothing the runner decides from.
off=$("$S" sandbox create --network off) || fail "a sandbox with network off"
victim=$("$S" sandbox create --label team=victim) || fail "a victim sandbox"
echo host-file >"$T/host-file"
in_box "$off" "printf '{\"id\":\"$victim\",\"state\":\"running\",\"network\":\"open\",\"labels\":{\"sandrun.run\":\"x\"}}' >../meta.json;
	ln -s '$T/host-file' ../meta.json.tmp; ln -s '$T/host-file' ../.records 2>/dev/null; echo planted"
grep -q planted "$T/out" && ok "the agent wrote its forged record" || fail "the agent wrote its forged record"
"$node" -e 'const s=require("net").createServer(c=>c.end("hi")).listen(0,"127.0.0.1",()=>{console.log(s.address().port)});setTimeout(()=>process.exit(0),30000)' >"$T/port" &
port_srv=$!
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.05; done
"$S" sandbox park "$off" >/dev/null 2>&1; "$S" sandbox reconnect "$off" >/dev/null 2>&1
[ "$(cat "$T/host-file")" = host-file ] && ok "a park and reconnect wrote through no planted link" ||
	fail "a park and reconnect wrote through no planted link"
"$S" sandbox list --json >"$T/list.json"
grep -q "\"id\":\"$off\".*\"network\":\"off\"\|\"network\":\"off\".*\"id\":\"$off\"" "$T/list.json" &&
	ok "the runner still has it as network off" || { fail "the runner still has it as network off"; cat "$T/list.json"; }
refused "its next exec still has no network" "$off" \
	"$node -e 'const s=require(\"net\").connect($(cat "$T/port"),\"127.0.0.1\");s.on(\"connect\",()=>process.exit(0));s.on(\"error\",()=>process.exit(1))'"
"$S" janitor --grace 0 >/dev/null 2>&1
"$S" sandbox list --json | grep -q "\"$victim\"" && ok "the janitor did not delete the sandbox the forged record named" ||
	fail "the janitor did not delete the sandbox the forged record named"
kill "$port_srv" 2>/dev/null
"$S" sandbox destroy "$off" >/dev/null 2>&1
"$S" sandbox destroy "$victim" >/dev/null 2>&1

expect "exec of a missing program is 127" 127 "$S" exec -- /nonexistent/prog
"$S" sandbox destroy "$a" >/dev/null 2>&1
"$S" sandbox destroy "$b" >/dev/null 2>&1

# Without bubblewrap: refused, unless the operator opts out.
SANDRUN_PROVIDER_LOCAL_BWRAP=off expect "without bubblewrap, create is refused" 4 "$S" sandbox create
grep_in "it says why and how to opt out" "$T/err" "confinement = none"
SANDRUN_PROVIDER_LOCAL_BWRAP=off expect "doctor fails without bubblewrap" 1 "$S" doctor
grep_in "doctor says what to install" "$T/out" "apt-get install bubblewrap"
SANDRUN_PROVIDER_LOCAL_BWRAP=off SANDRUN_PROVIDER_LOCAL_CONFINEMENT=none \
	expect "confinement = none runs unconfined" 0 "$S" exec -- cat "$T/state/sessions/ses-1.json"
SANDRUN_PROVIDER_LOCAL_BWRAP=off SANDRUN_PROVIDER_LOCAL_CONFINEMENT=none \
	expect "doctor says so" 0 "$S" doctor
grep_in "doctor names the opt-out" "$T/out" "confinement = none: they run unconfined"
SANDRUN_PROVIDER_LOCAL_CONFINEMENT=maybe expect "a bad confinement value fails doctor" 1 "$S" doctor
grep_in "it names the key and the value" "$T/err" "key 'confinement': invalid value 'maybe'"
finish
