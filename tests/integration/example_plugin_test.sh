#!/bin/sh
# A stranger's plugin: install sandrun into a temporary prefix, build the
# example out of tree with only pkg-config and the installed header, install
# it, and check that the installed sandrun lists and uses it.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
unset SANDRUN_PLUGIN_PATH SANDRUN_RUNNER_PLUGIN_DIR
prefix="$T/prefix"

# A pristine copy of the sources (the build tree may be configured in place).
(cd "$SANDRUN_BUILDDIR" && $MAKE -s distdir distdir="$T/src") >"$T/log" 2>&1 &&
	ok "source copy" || { fail "source copy"; cat "$T/log"; finish; exit 1; }
mkdir "$T/build"
(cd "$T/build" && "$T/src/configure" -q --prefix="$prefix" --disable-tests &&
	$MAKE -s -j2 install) >"$T/log" 2>&1 &&
	ok "install into $prefix" || { fail "install"; tail -30 "$T/log"; finish; exit 1; }

cp -r "$SANDRUN_SRCDIR/examples/provider-hello" "$T/hello"
chmod -R u+w "$T/hello"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
test "$(pkg-config --variable=plugindir sandrun-plugin)" = "$prefix/lib/sandrun/plugins" &&
	ok "pkg-config knows plugindir" || fail "pkg-config knows plugindir"
expect "example builds out of tree" 0 make -C "$T/hello"
expect "example installs" 0 make -C "$T/hello" install
test -f "$prefix/lib/sandrun/plugins/hello.so" && ok "installed into plugindir" ||
	fail "installed into plugindir"
nm -D --defined-only "$T/hello/hello.so" | grep -q ' T sandrun_plugin_entry$' &&
	ok "exports the entry symbol" || fail "exports the entry symbol"

unset SANDRUN_RUNNER_STATE_DIR
printf '[runner]\nprovider = hello\nharnesses =\nstate_dir = %s\n[provider.hello]\ngreeting = hi there\n' \
	"$T/state" >"$T/hello.conf"
expect "installed sandrun lists it" 0 "$prefix/bin/sandrun" plugins --json
grep_in "hello listed" "$T/out" '"name": "hello"'
grep_in "from the plugin directory" "$T/out" "\"path\": \"$prefix/lib/sandrun/plugins/hello.so\""
grep_in "local listed too" "$T/out" '"name": "local"'
expect "doctor uses it" 0 "$prefix/bin/sandrun" --config "$T/hello.conf" doctor
grep_in "doctor shows its config" "$T/out" "provider hello.*hi there"
expect "create through it" 0 "$prefix/bin/sandrun" --config "$T/hello.conf" sandbox create
grep_in "its id" "$T/out" "^hello-"
expect "what it lacks is unsupported" 4 "$prefix/bin/sandrun" --config "$T/hello.conf" \
	sandbox park "$(cat "$T/out")"
grep_in "typed error" "$T/err" "provider 'hello': operation 'park' is not supported"
test -f "$prefix/share/man/man1/sandrun.1" && ok "man page installed" || fail "man page installed"
test -f "$prefix/include/sandrun/plugin.h" && ok "header installed" || fail "header installed"
finish
