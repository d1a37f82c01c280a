#!/bin/sh
# The official MCP TypeScript SDK client against sandrun-shim (stdio) and
# the loopback server (Streamable HTTP with the bearer). Needs the SDK in
# $SANDRUN_NPM_DIR (scripts/check installs it); skips with a reason when
# it is absent, and fails when CI=true.
. "$SANDRUN_SRCDIR/tests/integration/lib.sh"
check="$SANDRUN_SRCDIR/tests/peers/mcp_sdk_check.mjs"
command -v node >/dev/null || missing "node is not installed (scripts/check installs it)"
[ -f "${SANDRUN_NPM_DIR:-/nonexistent}/node_modules/@modelcontextprotocol/sdk/package.json" ] ||
	missing "@modelcontextprotocol/sdk is not installed in SANDRUN_NPM_DIR='${SANDRUN_NPM_DIR:-}' (scripts/check installs it)"
serve_tools --mcp-http
echo "# SDK $(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$SANDRUN_NPM_DIR/node_modules/@modelcontextprotocol/sdk/package.json" | head -n 1)"

node "$check" stdio "$SANDRUN_SHIM" mcp --specs "$T/specs.json" --relay-dir "$RELAY" >"$T/stdio.out" 2>&1
rc=$?
sed 's/^/  stdio: /' "$T/stdio.out"
[ "$rc" -eq 0 ] && ok "SDK over stdio against sandrun-shim" || fail "SDK over stdio against sandrun-shim"
node "$check" http "$MCP_URL" "$MCP_TOKEN" >"$T/http.out" 2>&1
rc=$?
sed 's/^/  http: /' "$T/http.out"
[ "$rc" -eq 0 ] && ok "SDK over Streamable HTTP against the loopback server" ||
	fail "SDK over Streamable HTTP against the loopback server"
grep -q "protocolVersion 2025-11-25" "$T/stdio.out" && ok "negotiated 2025-11-25" || fail "negotiated 2025-11-25"
test "$(grep -c ' echo$' "$CB_LOG")" -eq 2 && ok "each echo ran once" || fail "each echo ran once"
finish
