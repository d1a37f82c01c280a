#!/bin/sh
# The store on PostgreSQL ([store] url): a real server started here
# (tests/integration/pg.sh). The store's tests (tests/unit/session_test:
# session pointers and their compare-and-set, leases, the warm record,
# the migration and the import of the earlier files; tests/unit/kv_test:
# the plugins' key-value areas) on it, then two
# sandrund replicas on it (tests/integration/service_test.sh's replicas
# part): concurrent turns on one session, exactly one runs; a replica
# killed mid-turn, the other takes the session over once the lease
# expires; no turn index written twice. And a server that cannot be
# reached: a clear error that shows no password.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
. "$SANDRUN_SRCDIR/tests/integration/pg.sh"
command -v node >/dev/null || missing "node is not installed (the scripted agent needs it)"
command -v curl >/dev/null || missing "curl is not installed"
start_pg

# The store's unit tests, one at a time (each empties the database).
for t in session kv; do
	SANDRUN_TEST_STORE_URL=$PG_URL "$SANDRUN_BUILDDIR/tests/unit/${t}_test" -j1 \
		--filter '!(*not_a_database*)' >"$T/unit" 2>&1
	rc=$?
	sed 's/^/  | /' "$T/unit" | grep -v '^  | \[----\] *$' | tail -30
	grep -q "Synthesis: Tested: [1-9][0-9]* | Passing: [1-9][0-9]* | Failing: 0 | Crashing: 0" \
		"$T/unit" && [ $rc -eq 0 ] && ok "tests/unit/${t}_test passes on PostgreSQL" ||
		fail "tests/unit/${t}_test passes on PostgreSQL (exit $rc)"
done

# part PART NAME: service_test.sh's PART on this server, one check.
part() {
	SANDRUN_STORE_URL=$PG_URL SERVICE_TEST_PART=$1 sh "$SANDRUN_SRCDIR/tests/integration/service_test.sh" \
		>"$T/$1" 2>&1
	rc=$?
	sed 's/^/  | /' "$T/$1"
	[ $rc -eq 0 ] && ok "$2" || fail "$2 (exit $rc)"
}
# Two replicas on it; then replicas with sandboxes of their own (a
# session on one is refused on the other, and lost nowhere).
part replicas "two sandrund replicas on one PostgreSQL database"
part elsewhere "replicas with sandboxes of their own on one PostgreSQL database"
psql -qXAt -d "$PG_URL" -c "SELECT (SELECT count(*) FROM sessions) || ' ' ||
	(SELECT count(*) FROM runs) || ' ' || (SELECT count(*) FROM run_events)" >"$T/count" 2>&1
read -r n_sessions n_runs n_events <"$T/count"
[ "${n_sessions:-0}" -ge 1 ] && [ "${n_runs:-0}" -ge 5 ] && [ "${n_events:-0}" -ge 20 ] &&
	ok "... their sessions, runs and events are in the server's tables" ||
	fail "... their sessions, runs and events are in the server's tables ($(cat "$T/count"))"

# The server restarts between two turns of one sandrund.
STORE_RESTART="$(pg_restart_cmd)"
export STORE_RESTART
part store_restart "sandrund goes on when the PostgreSQL server restarts"

SANDRUN_STORE_URL=$PG_URL "$SANDRUN_BIN" doctor >"$T/out" 2>"$T/err"
grep_in "sandrun doctor names the store" "$T/out" "ok.*store.*PostgreSQL database postgres on $PG_DIR"

# A server that is not there: said, with no password shown; sandrund
# does not start.
export SANDRUN_SERVICE_LISTEN="unix:$T/sock"
SANDRUN_STORE_URL="postgresql://sandrun:hunter2secret@127.0.0.1:1/nope?connect_timeout=2" \
	"$SANDRUN_BUILDDIR/sandrund" >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -0 $pid 2>/dev/null && { kill -9 $pid; fail "sandrund exits when the store cannot be reached"; } ||
	ok "sandrund exits when the store cannot be reached"
grep_in "... saying so" "$T/err" "cannot connect to the PostgreSQL server of \[store\] url"
grep -q hunter2secret "$T/out" "$T/err" && fail "... the password is not shown" ||
	ok "... the password is not shown"
SANDRUN_STORE_URL="postgresql://sandrun:hunter2secret@127.0.0.1:1/nope?connect_timeout=2" \
	"$SANDRUN_BIN" doctor >"$T/out" 2>"$T/err"
grep_in "... and doctor fails its store check" "$T/out" "FAIL.*store.*cannot be used"
grep -q hunter2secret "$T/out" "$T/err" && fail "... showing no password" || ok "... showing no password"
# URLs libpq cannot parse (its message would quote them): refused at
# the configuration, the password not shown.
for bad in "postgresql://sandrun:hunter2%zz@127.0.0.1/x" "password=hunter2 secret host=x"; do
	SANDRUN_STORE_URL=$bad SANDRUN_SERVICE_LISTEN="unix:$T/sock" "$SANDRUN_BUILDDIR/sandrund" \
		>"$T/out" 2>"$T/err"
	rc=$?
	[ $rc -ne 0 ] && grep -q "\[store\] key 'url': invalid value" "$T/err" &&
		! grep -q hunter2 "$T/out" "$T/err" &&
		ok "a URL that does not parse: refused (exit $rc), the password not shown" ||
		{ fail "a URL that does not parse: refused, the password not shown (exit $rc)"; cat "$T/err"; }
done
SANDRUN_STORE_URL="mysql://x" "$SANDRUN_BIN" doctor >"$T/out" 2>"$T/err"
grep_in "a URL that is not PostgreSQL's: refused, saying what is wanted" "$T/err" \
	"\[store\] key 'url': invalid value: a PostgreSQL URI"
finish
