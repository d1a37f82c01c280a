// timing.mjs - where the time of a tool round trip goes, per stage.
// Usage: node timing.mjs TRACE_FILE
// Reads the lines SANDRUN_TRACE_TIMING makes the shim and the relay write
// (shim/trace_timing.h), joins them by call id, and prints p50 and p99 of
// each stage in microseconds. Calls missing a stamp are left out.
import { readFileSync } from 'node:fs';

const file = process.argv[2];
if (!file) {
  console.error('usage: node timing.mjs TRACE_FILE');
  process.exit(2);
}
const calls = new Map();
for (const line of readFileSync(file, 'utf8').split('\n')) {
  const [side, id, ...stamps] = line.split(' ');
  if (!id) continue;
  const c = calls.get(id) ?? {};
  for (const s of stamps) {
    const [k, v] = s.split('=');
    c[`${side}.${k}`] = BigInt(v);
  }
  calls.set(id, c);
}
// [label, from, to]: the critical path in order, then what follows it.
const stages = [
  ['shim: request read -> request file published', 'shim.received', 'shim.published'],
  ['inotify: request published -> runner picks it up', 'shim.published', 'relay.picked'],
  ['runner: picked up -> claimed and taken', 'relay.picked', 'relay.claimed'],
  ['runner: taken -> read and validated', 'relay.claimed', 'relay.read'],
  ['runner: validated -> callback started', 'relay.read', 'relay.sending'],
  ['callback: started -> answered', 'relay.sending', 'relay.answered'],
  ['runner: answered -> response published', 'relay.answered', 'relay.published'],
  ['inotify: response published -> shim has read it', 'relay.published', 'shim.seen'],
  ['shim: response read -> answer written', 'shim.seen', 'shim.answered'],
  ['total inside the shim (read -> answered)', 'shim.received', 'shim.answered'],
  ['runner after publishing (unclaim, event)', 'relay.published', 'relay.done'],
];
const pct = (a, p) => a[Math.min(a.length - 1, Math.ceil(p * a.length) - 1)];
const full = [...calls.values()].filter((c) => stages.every(([, f, t]) => f in c && t in c));
console.log(`per stage, ${full.length} calls (us)            p50      p99`);
for (const [label, from, to] of stages) {
  const d = full.map((c) => Number(c[to] - c[from]) / 1000).sort((a, b) => a - b);
  if (!d.length) continue;
  console.log(`  ${label.padEnd(50)} ${pct(d, 0.5).toFixed(1).padStart(7)} ${pct(d, 0.99).toFixed(1).padStart(8)}`);
}
