#!/bin/sh
# A hostile agent on the local provider: from inside a sandbox, every way
# out this suite knows is tried (capabilities, mounts, /proc, devices,
# hard links, the runner's state, records and tokens, other sandboxes,
# host processes and their environment, network off), and each must fail;
# then the host must be unchanged (a fingerprint, before and after, of
# /etc and of files the runner's user keeps beside its state). It runs as
# the user who runs the tests (root in CI) and, when that is root, again
# as an unprivileged one (nobody) with a state directory of its own.
# What runs through a turn (links planted in the relay directory, the tool
# specs, the records) is in tests/integration/run_test.sh and
# confinement_test.sh; doc/security.md lists them all.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
if ! command -v bwrap >/dev/null; then
	echo "SKIP: bubblewrap is not installed (scripts/deps installs it)"
	[ "${CI:-}" = true ] && { echo "FAIL: CI=true: bubblewrap must be installed"; exit 1; }
	exit 77
fi
node=$(command -v node) || missing "node is not installed (the network checks need it)"
chmod 755 "$T" # (nobody's run reaches its own state dir through it)
CANARY="hostile-canary-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
export HOSTILE_CANARY="$CANARY"
# A host process with a marked command line, and a listener on 127.0.0.1.
sh -c 'sleep 300; :' "$CANARY" &
sleeper=$!
"$node" -e 'const s = require("net").createServer((c) => c.end("host-secret\n"));
	s.listen(0, "127.0.0.1", () => console.log(s.address().port))' >"$T/port" &
listener=$!
trap 'kill $sleeper $listener 2>/dev/null; rm -rf "$T"' EXIT
wait_for "$T/port"
PORT=$(cat "$T/port")
# Under a root runner: a root-only file in /etc, as /etc/sandrun/tokens.
ETC_SECRET=
if [ "$(id -u)" -eq 0 ]; then
	ETC_SECRET=/etc/.sandrun-hostile-$$
	LOCAL_SECRET=/usr/local/.sandrun-hostile-$$
	# ... and one where nothing is hidden: only the agent's user keeps it out
	USR_SECRET=/usr/lib/.sandrun-hostile-$$
	(umask 077 && printf 'tok-%s\n' "$CANARY" >"$ETC_SECRET" &&
		printf 'tok-%s\n' "$CANARY" >"$LOCAL_SECRET" &&
		printf 'tok-%s\n' "$CANARY" >"$USR_SECRET")
	trap 'kill $sleeper $listener 2>/dev/null; rm -f "$ETC_SECRET" "$LOCAL_SECRET" "$USR_SECRET"; rm -rf "$T"' EXIT
fi
mkdir -p "$T/host"
echo host-file >"$T/host/file"
printf 'tok-%s\n' "$CANARY" >"$T/host/tokens"
chmod 600 "$T/host/tokens"

# fingerprint: what a successful attack would change on the host.
fingerprint() {
	{
		find /etc /usr/local/bin -xdev -printf '%p %s %T@ %m %U\n' 2>/dev/null
		find "$T/host" -printf '%p %s %T@ %m %U\n'
		cat "$T/host/file" "$T/host/tokens"
	} | sort | sha256sum
}

# battery WHO RUNNER...: the attacks, with RUNNER (a command prefix that
# runs sandrun as WHO) driving the sandboxes.
battery() {
	who=$1
	shift
	R="$*"
	state=$($R sh -c 'echo "$SANDRUN_RUNNER_STATE_DIR"')
	boxes="$state/plugins/provider.local/sandboxes"
	in_box() { # in_box ID SCRIPT
		# shellcheck disable=SC2086
		$R "$SANDRUN_BIN" sandbox exec "$1" -- sh -c "$2" >"$T/out" 2>"$T/err"
	}
	refused() { # refused NAME ID SCRIPT: must fail inside
		if in_box "$2" "$3"; then fail "$who: $1"; sed 's/^/  out: /' "$T/out" | head -5; else
			ok "$who: $1"; fi
	}
	# shellcheck disable=SC2086
	a=$($R "$SANDRUN_BIN" sandbox create) && b=$($R "$SANDRUN_BIN" sandbox create --network off) &&
		c=$($R "$SANDRUN_BIN" sandbox create) || { fail "$who: three sandboxes"; return; }
	in_box "$c" 'echo private-to-c >secret.txt' || fail "$who: c writes its workspace"
	before=$(fingerprint)

	in_box "$a" 'grep "^CapEff:" /proc/self/status'
	grep -q 'CapEff:[[:space:]]*0000000000000000' "$T/out" && ok "$who: no capability" ||
		fail "$who: no capability ($(cat "$T/out"))"
	in_box "$a" 'id -u'
	[ -s "$T/out" ] && [ "$(cat "$T/out")" != 0 ] && ok "$who: the agent is not root (uid $(cat "$T/out"))" ||
		fail "$who: the agent is not root (uid $(cat "$T/out"))"
	refused "umount /tmp (uncovering the host's)" "$a" 'umount -l /tmp'
	refused "remount / read-write and write /etc" "$a" \
		'mount -o remount,bind,rw / && touch /etc/hostile-written'
	refused "umount /proc (showing the host's processes)" "$a" 'umount -l /proc'
	refused "mount a new /proc" "$a" 'mkdir -p /tmp/p && mount -t proc proc /tmp/p'
	refused "write /usr" "$a" 'touch /usr/hostile-written'
	refused "write a kernel setting" "$a" 'echo 0 >/proc/sys/kernel/randomize_va_space'
	refused "a block device" "$a" 'ls /dev | grep -q "^\(sd\|vd\|nvme\|xvd\)"'
	refused "a hard link to a host file" "$a" 'ln /etc/passwd ./passwd-link'
	refused "another sandbox's workspace" "$a" "cat $boxes/$c/workspace/secret.txt"
	refused "the sandboxes' directory" "$a" "ls $boxes/$c"
	refused "the runner's state (its database)" "$a" "ls $state/sandrun.db"
	refused "the runner's records of the sandbox" "$a" "ls $boxes/.records || ls ../.records"
	refused "the runner's tokens beside its state" "$a" "cat $T/host/tokens"
	# (The canary is matched in two pieces: whole, it would be in the
	# command line of the very shell that looks for it.)
	half=${CANARY%????????}
	rest=${CANARY#"$half"}
	look="p='$half'; p=\"\${p}$rest\"; for f in /proc/[0-9]*/"
	refused "a host process" "$a" "$look"'cmdline; do case "$(tr "\0" " " <"$f" 2>/dev/null)" in *"$p"*) exit 0;; esac; done; exit 1'
	refused "the runner's environment" "$a" "$look"'environ; do case "$(tr "\0" " " <"$f" 2>/dev/null)" in *"$p"*) exit 0;; esac; done; exit 1'
	refused "network off: the host's 127.0.0.1" "$b" \
		"$node -e 'require(\"net\").connect($PORT, \"127.0.0.1\").on(\"data\", () => process.exit(0)).on(\"error\", () => process.exit(1))'"
	refused "network off: another address" "$b" \
		"$node -e 'require(\"net\").connect(53, \"1.1.1.1\").on(\"connect\", () => process.exit(0)).on(\"error\", () => process.exit(1)); setTimeout(() => process.exit(1), 2000)'"
	in_box "$a" "$node -e 'require(\"net\").connect($PORT, \"127.0.0.1\").on(\"data\", () => process.exit(0)).on(\"error\", () => process.exit(1))'" &&
		ok "$who: (network open reaches it: the check is real)" ||
		fail "$who: (network open reaches it: the check is real)"
	refused "a root-only host file (/etc/shadow)" "$a" 'head -c1 /etc/shadow | grep -q .'
	if [ -n "$ETC_SECRET" ]; then
		refused "a root-only file in /etc (as the service's tokens would be)" "$a" \
			"grep -q tok- $ETC_SECRET"
		refused "a root-only file in /usr/local" "$a" "grep -q tok- $LOCAL_SECRET"
		grep -q tok- "$USR_SECRET" || fail "$who: (root reads $USR_SECRET outside)"
		refused "a root-only file where nothing is hidden (/usr/lib)" "$a" "grep -q tok- $USR_SECRET"
	fi
	refused "another service's data (/var/lib)" "$a" 'ls /var/lib | grep -q .'
	# Links and a FIFO where the runner reads and writes, then a park and a
	# reconnect (which write the runner's record) and a destroy.
	in_box "$a" "ln -s $T/host/file meta.json; ln -s $T/host/file meta.json.tmp;
		ln -s $T/host ../relay 2>/dev/null; mkfifo fifo; ln -s / root-link; echo done" ||
		fail "$who: links planted"
	# shellcheck disable=SC2086
	$R "$SANDRUN_BIN" sandbox park "$a" --stopped >/dev/null 2>&1 &&
		$R "$SANDRUN_BIN" sandbox reconnect "$a" >/dev/null 2>&1 &&
		ok "$who: park and reconnect with links planted" ||
		fail "$who: park and reconnect with links planted"
	# shellcheck disable=SC2086
	for x in "$a" "$b" "$c"; do $R "$SANDRUN_BIN" sandbox destroy "$x" >/dev/null 2>&1; done
	[ "$(cat "$T/host/file")" = host-file ] && [ -f "$T/host/tokens" ] &&
		ok "$who: the host files behind the links are whole" ||
		fail "$who: the host files behind the links are whole"
	after=$(fingerprint)
	[ "$before" = "$after" ] && ok "$who: the host is unchanged (/etc, /usr/local/bin, the runner's files)" ||
		fail "$who: the host is unchanged"
	test ! -e /etc/hostile-written && test ! -e /usr/hostile-written &&
		ok "$who: nothing was written to /etc or /usr" || fail "$who: nothing was written to /etc or /usr"
}

battery "$(id -un)" env
if [ "$(id -u)" -eq 0 ]; then
	# A sandbox made while its agent was uid 0 is given to agent_user at
	# its reconnect: a walk of a tree the agent wrote, with its links.
	r=$(SANDRUN_PROVIDER_LOCAL_AGENT_USER=root "$SANDRUN_BIN" sandbox create) ||
		fail "root: a sandbox with agent_user = root"
	SANDRUN_PROVIDER_LOCAL_AGENT_USER=root "$SANDRUN_BIN" sandbox exec "$r" -- sh -c \
		"ln -s $T/host/file file-link && ln -s / root-link && mkdir d &&
		 ln -s $T/host d/host-link" >/dev/null 2>&1 || fail "root: links planted for the walk"
	"$SANDRUN_BIN" sandbox reconnect "$r" >/dev/null 2>&1 || fail "root: the reconnect that gives it"
	[ "$(stat -c %u "$T/host/file")/$(stat -c %u "$T/host")/$(stat -c %u /etc/passwd)" = 0/0/0 ] &&
		ok "root: giving a sandbox's tree to agent_user follows none of its links" ||
		fail "root: giving a sandbox's tree to agent_user follows none of its links"
	"$SANDRUN_BIN" sandbox exec "$r" -- sh -c 'touch d/written' >/dev/null 2>&1 &&
		ok "root: (the tree was given: its agent writes it)" ||
		fail "root: (the tree was given: its agent writes it)"
	"$SANDRUN_BIN" sandbox destroy "$r" >/dev/null 2>&1
fi
if [ "$(id -u)" -eq 0 ]; then
	command -v setpriv >/dev/null || missing "setpriv is not installed (util-linux)"
	mkdir -p "$T/nobody/state"
	chown -R nobody:nogroup "$T/nobody"
	battery nobody setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME="$T/nobody" \
		SANDRUN_RUNNER_STATE_DIR="$T/nobody/state"
fi
finish
