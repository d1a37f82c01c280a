#!/usr/bin/env node
// Runner overhead of an agent turn (not a test). For each harness, runs N
// text-only turns against the scripted model and reports medians of:
//   pre:   sandrun start -> session/prompt sent, minus the time spent
//          waiting for the adapter (initialize, session/new, set_mode)
//   post:  the agent's last update -> sandrun's exit
//   turn:  the whole process, for reference
// Usage: node turn.mjs BUILD_DIR N HARNESS...   (adapters from
// $SANDRUN_HARNESS_DIR, as installed by scripts/harnesses)
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { join } from 'node:path';

const [build, nArg, ...harnesses] = process.argv.slice(2);
const N = Number(nArg) || 5;
const src = join(import.meta.dirname, '..', '..');
const tmp = mkdtempSync('/tmp/sandrun-bench-turn-');

function emulator(kind) {
  const script = join(tmp, `${kind}.json`);
  writeFileSync(script, JSON.stringify(Array.from({ length: 4 * N + 8 }, () => ({ text: 'ok' }))));
  const p = spawn('node', [join(src, 'tests/emulators', `${kind}.mjs`), '--script', script,
    '--log', join(tmp, `${kind}.log`)], { stdio: ['pipe', 'pipe', 'ignore'] });
  return new Promise((res) => createInterface({ input: p.stdout }).once('line',
    (l) => res({ proc: p, url: JSON.parse(l).url })));
}

function turn(harness, url) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const env = { ...process.env, SANDRUN_PLUGIN_PATH: `${build}/plugins/provider:${build}/plugins/harness`,
      SANDRUN_RUNNER_STATE_DIR: join(tmp, 'state'), SANDRUN_RUNNER_HARNESSES: 'claude,codex,pi',
      [`SANDRUN_HARNESS_${harness.toUpperCase()}_INSTALL_DIR`]: `${process.env.SANDRUN_HARNESS_DIR}/${harness}`,
      SANDRUN_RUNNER_NODE_DIR: `${process.env.SANDRUN_HARNESS_DIR}/node`,
      ANTHROPIC_API_KEY: 'bench' };
    const p = spawn(`${build}/sandrun`, ['run', '--json', '--approve-all', '--harness', harness,
      '--model-url', url, 'say ok'], { env, stdio: ['ignore', 'pipe', 'ignore'] });
    let sent = 0, last = 0, adapter = 0;
    createInterface({ input: p.stdout }).on('line', (l) => {
      const ev = JSON.parse(l), now = performance.now();
      if (ev.type === 'agent.prompt_sent') sent = now;
      if (ev.type === 'timing' && ['probe_capabilities', 'create_session'].includes(ev.stage)) adapter += ev.ms;
      if (ev.type.startsWith('agent.')) last = now;
    });
    p.on('exit', (code) => {
      const end = performance.now();
      resolve({ code, pre: sent - t0 - adapter, post: end - last, total: end - t0 });
    });
  });
}

const median = (a) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)];
const anthropic = await emulator('anthropic'), openai = await emulator('openai');
for (const h of harnesses) {
  const url = h === 'claude' ? anthropic.url : `${openai.url}/v1`;
  const rows = [];
  for (let i = 0; i < N; i++) rows.push(await turn(h, url));
  const bad = rows.filter((r) => r.code !== 0).length;
  console.log(`${h}: runner pre ${median(rows.map((r) => r.pre)).toFixed(1)} ms, ` +
    `post ${median(rows.map((r) => r.post)).toFixed(1)} ms, whole turn ${median(rows.map((r) => r.total)).toFixed(0)} ms ` +
    `(median of ${N}${bad ? `, ${bad} failed` : ''})`);
}
anthropic.proc.kill(); openai.proc.kill();
