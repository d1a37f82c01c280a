#!/bin/sh
# Claude Code (claude-agent-acp) against the scripted Anthropic Messages API.
HARNESS=claude BIN=claude-agent-acp EMULATOR=anthropic MODEL_URL_SUFFIX= KEY_ENV=ANTHROPIC_API_KEY OTHER_KEY_ENVS=ANTHROPIC_AUTH_TOKEN LOADS=yes
call() { printf '{"tool_use":{"name":"mcp__sandrun-tools__%s","input":%s}}' "$1" "$2"; }
HTTP_TOOLS=yes   # also a turn with tools over the loopback MCP server
. "$SANDRUN_SRCDIR/tests/e2e/turn.sh"
