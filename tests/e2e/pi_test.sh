#!/bin/sh
# Pi (pi-acp + pi-coding-agent) against the scripted OpenAI Responses API;
# platform tools through the sandrun-tools Pi extension.
HARNESS=pi BIN=pi-acp EMULATOR=openai MODEL_URL_SUFFIX= KEY_ENV=OPENAI_API_KEY OTHER_KEY_ENVS=ANTHROPIC_API_KEY LOADS=no
call() { printf '{"function_call":{"name":"%s","arguments":%s}}' "$1" "$2"; }
. "$SANDRUN_SRCDIR/tests/e2e/turn.sh"
