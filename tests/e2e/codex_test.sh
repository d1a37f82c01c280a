#!/bin/sh
# Codex (codex-acp) against the scripted OpenAI Responses API.
HARNESS=codex BIN=codex-acp EMULATOR=openai MODEL_URL_SUFFIX=/v1 KEY_ENV=OPENAI_API_KEY OTHER_KEY_ENVS=CODEX_API_KEY LOADS=no
call() { printf '{"function_call":{"namespace":"mcp__sandrun-tools","name":"%s","arguments":%s}}' "$1" "$2"; }
. "$SANDRUN_SRCDIR/tests/e2e/turn.sh"
