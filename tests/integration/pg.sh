# A PostgreSQL server for a test, sourced after lib.sh: Debian's
# postgresql, initdb into a temporary directory, run by an unprivileged
# user when the test runs as root (the server refuses root), listening on
# a Unix socket in that directory only. start_pg sets PG_URL; stop_pg
# (also at exit) stops it and removes its files.
PG_DIR=
pg_bin() {
	for d in "$(pg_config --bindir 2>/dev/null)" $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
		[ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
	done
	return 1
}
as_pg() { # as_pg CMD...: as the server's user
	if [ "$(id -u)" -eq 0 ]; then
		setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"
	else
		"$@"
	fi
}
start_pg() {
	bin=$(pg_bin) || missing "PostgreSQL's server is not installed (Debian: apt-get install postgresql)"
	command -v psql >/dev/null || missing "psql is not installed (Debian: postgresql-client)"
	PG_DIR=$(mktemp -d /tmp/sandrun-pg-XXXXXX)
	trap 'stop_pg; rm -rf "$T"' EXIT
	[ "$(id -u)" -eq 0 ] && chown nobody:nogroup "$PG_DIR"
	if ! as_pg "$bin/initdb" -D "$PG_DIR/data" -U sandrun -A trust --no-locale -E UTF8 \
		--no-sync >"$PG_DIR/initdb.log" 2>&1; then
		cat "$PG_DIR/initdb.log"
		fail "initdb"
		finish
		exit 1
	fi
	if ! as_pg "$bin/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 -o \
		"-k $PG_DIR -c listen_addresses= -c fsync=off -c full_page_writes=off" start \
		>/dev/null 2>&1; then
		cat "$PG_DIR/server.log"
		fail "the PostgreSQL server starts"
		finish
		exit 1
	fi
	PG_URL="postgresql:///postgres?host=$PG_DIR&user=sandrun"
	ok "a PostgreSQL server ($("$bin/postgres" --version)) on $PG_DIR"
}
# pg_restart_cmd: a command (one string) that restarts the server.
pg_restart_cmd() {
	cmd="$(pg_bin)/pg_ctl -D $PG_DIR/data -m fast -w -t 60 restart"
	[ "$(id -u)" -eq 0 ] && cmd="setpriv --reuid=nobody --regid=nogroup --clear-groups $cmd"
	echo "$cmd"
}
stop_pg() {
	[ -n "$PG_DIR" ] || return 0
	as_pg "$(pg_bin)/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1
	rm -rf "$PG_DIR"
	PG_DIR=
}
