#!/usr/bin/env node
// Runs `sandrun run --json ...`, saves its events (NDJSON) to EVENTS, and
// answers permission requests: platform tools named in ALLOW are allowed,
// those in DENY denied, the agent's own requests allowed.
// Usage: node drive.mjs EVENTS ALLOW DENY SANDRUN [ARGS...]
//   (ALLOW and DENY are comma-separated tool names, or -)
// Exits with sandrun's exit code; SIGINT is passed on when INTERRUPT_ON
// (an event type) is seen.
import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { createInterface } from 'node:readline';

const [events, allow, deny, cmd, ...args] = process.argv.slice(2);
const list = (s) => (s === '-' ? [] : s.split(','));
const allowed = list(allow), denied = list(deny);
const out = createWriteStream(events);
const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'inherit'] });
const answer = (id, ok) => child.stdin.write(
  JSON.stringify({ type: 'permission.response', request_id: id, allow: ok }) + '\n');

createInterface({ input: child.stdout }).on('line', (line) => {
  out.write(line + '\n');
  let ev;
  try { ev = JSON.parse(line); } catch { return; }
  if (ev.type === process.env.INTERRUPT_ON) child.kill('SIGINT');
  if (ev.type !== 'permission.request') return;
  if (ev.source === 'agent') return answer(ev.request_id, true);
  if (allowed.includes(ev.tool)) return answer(ev.request_id, true);
  if (denied.includes(ev.tool)) return answer(ev.request_id, false);
});
child.on('exit', (code, sig) => out.end(() => process.exit(sig ? 128 : code)));
