// mcp_roundtrip.mjs - minimal-overhead MCP stdio benchmark (no SDK, raw newline JSON-RPC).
// Usage: node mcp_roundtrip.mjs N CMD [ARGS...]
// Spawns CMD and measures: start_ms (spawn -> initialize response), rss_kb (VmHWM of
// the child pid after the calls; if CMD is a wrapper, that's the wrapper's), and the
// latency of N sequential tools/call "noop" after 1,000 uncounted warm-up calls
// (enough for V8 to have compiled this client's hot path, whose tiering
// would otherwise land in the tail of whichever server is measured).
// It also gives the CPU time each call cost, in microseconds: server_cpu_us
// for the child pid (all its threads, from /proc/PID/task/*/schedstat: time
// on a CPU, whatever the noise of the wall clock) and client_cpu_us for this
// client, over the timed calls.
// Prints one JSON line {"start_ms","rss_kb","p50_ms","p99_ms","mean_ms",
// "server_cpu_us","client_cpu_us","calls"},
// then closes the child's stdin and waits for it to exit (SIGKILL after 2 s).
// Exit 1 on any error/timeout, 2 on bad usage.
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';

const [nArg, cmd, ...args] = process.argv.slice(2);
const N = Number(nArg);
if (!Number.isInteger(N) || N < 1 || !cmd) {
  console.error('usage: node mcp_roundtrip.mjs N CMD [ARGS...]');
  process.exit(2);
}
const die = (msg) => { console.error(`mcp_roundtrip: ${msg}`); child?.kill('SIGKILL'); process.exit(1); };

const t0 = process.hrtime.bigint();
const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'inherit'] });
child.on('error', (e) => die(`spawn failed: ${e.message}`));
child.stdin.on('error', () => {});  // EPIPE if the child dies; reported via 'exit'
let done = false;
child.on('exit', (code, sig) => { if (!done) die(`child exited early (code ${code}, signal ${sig})`); });

// Responses matched by id; one request in flight at a time.
const pending = new Map();
let buf = '';
child.stdout.setEncoding('utf8');
child.stdout.on('data', (chunk) => {
  buf += chunk;
  let nl;
  while ((nl = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, nl).trim();
    buf = buf.slice(nl + 1);
    if (!line) continue;
    let msg;
    try { msg = JSON.parse(line); } catch { die(`bad JSON from child: ${line.slice(0, 200)}`); }
    const p = pending.get(msg.id);
    if (!p) continue;  // notifications / server requests are ignored
    pending.delete(msg.id);
    if (msg.error) die(`request ${msg.id} failed: ${JSON.stringify(msg.error)}`);
    p(msg.result);
  }
});

let nextId = 1;
const send = (obj) => child.stdin.write(JSON.stringify(obj) + '\n');
function request(method, params) {
  const id = nextId++;
  return new Promise((resolve) => {
    const timer = setTimeout(() => die(`timeout waiting for ${method} (id ${id})`), 10000);
    pending.set(id, (r) => { clearTimeout(timer); resolve(r); });
    send({ jsonrpc: '2.0', id, method, params });
  });
}

await request('initialize', {
  protocolVersion: '2025-06-18', capabilities: {},
  clientInfo: { name: 'mcp_roundtrip', version: '1.0.0' },
});
const startMs = Number(process.hrtime.bigint() - t0) / 1e6;
send({ jsonrpc: '2.0', method: 'notifications/initialized' });

// Nanoseconds on a CPU of every thread of pid (schedstat's first field).
const cpuNs = (pid) => readdirSync(`/proc/${pid}/task`).reduce((sum, t) => {
  try { return sum + Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]); }
  catch { return sum; }  // a thread that ended meanwhile
}, 0);

const call = () => request('tools/call', { name: 'noop', arguments: {} });
for (let i = 0; i < 1000; i++) await call();
const lat = new Array(N);
const server0 = cpuNs(child.pid), client0 = process.cpuUsage();
for (let i = 0; i < N; i++) {
  const s = process.hrtime.bigint();
  const r = await call();
  lat[i] = Number(process.hrtime.bigint() - s) / 1e6;
  if (i === 0 && r?.isError) die(`noop returned isError: ${JSON.stringify(r)}`);
}
const serverCpu = (cpuNs(child.pid) - server0) / 1000 / N;
const clientUse = process.cpuUsage(client0);
const clientCpu = (clientUse.user + clientUse.system) / N;

const hwm = /VmHWM:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
lat.sort((a, b) => a - b);
const pct = (p) => lat[Math.min(N - 1, Math.ceil(p * N) - 1)];  // nearest-rank
const r3 = (x) => Math.round(x * 1000) / 1000;
console.log(JSON.stringify({
  start_ms: r3(startMs), rss_kb: hwm ? Number(hwm[1]) : null,
  p50_ms: r3(pct(0.5)), p99_ms: r3(pct(0.99)),
  mean_ms: r3(lat.reduce((a, b) => a + b, 0) / N),
  server_cpu_us: Math.round(serverCpu * 10) / 10,
  client_cpu_us: Math.round(clientCpu * 10) / 10, calls: N,
}));

done = true;
const killer = setTimeout(() => child.kill('SIGKILL'), 2000);
child.on('exit', () => clearTimeout(killer));
child.stdin.end();
