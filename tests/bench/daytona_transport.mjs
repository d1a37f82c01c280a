// daytona_transport.mjs - the client of tests/bench/daytona_transport: one
// line's round trip to a process in a Daytona sandbox and back, through
// each transport the daytona provider could use for an agent's stdio,
// against tests/emulators/daytona.mjs. Node built-ins only (Node 18+).
//   node daytona_transport.mjs --url EMULATOR_URL [--key KEY] [--n N]
//        [--warmup W] [--latency MS] [--rtt MS] [--label NAME] [--run I]
// Transports, each set up from nothing and torn down in turn:
//   a   toolbox session: `cat` as an async session command (suppressInputEcho),
//       each line one POST .../command/{cid}/input, the echo on the log's
//       follow over a WebSocket (the daemon's only follow)
//   b1  bridge (tests/bench/daytona_bridge.cjs, uploaded and started through
//       a toolbox session) over the preview URL: each line one POST /in,
//       the echo on one long GET /out
//   b2  the bridge, one streamed request: a chunked POST /duplex body
//       carries the lines in, its chunked response the echoes
//   b3  the bridge over a WebSocket through the preview proxy
// --latency MS arms the emulator's latency fault (status 0, every call) on
// every route, control plane, toolbox and preview alike, before any set-up:
// a cost per HTTP request, paid once by a stream however long it lives.
// --rtt MS puts a relay in this process between the client and the
// emulator that holds every chunk MS/2 in each direction: a network round
// trip, paid by every byte on every transport.
// Prints one line per transport:
//   R LABEL RUN TRANSPORT N P50_MS P99_MS MEAN_MS CALLS_PER_MSG SETUP_CALLS
//     SETUP_RETRIES SETUP_MS
// (calls as the emulator counts them, GET /_emulator/calls; SETUP_RETRIES:
// those of SETUP_CALLS that found the bridge not listening yet). Exit 1 on
// any failure or a round trip that takes over 15 s.
import http from 'node:http';
import net from 'node:net';
import fs from 'node:fs';
import crypto from 'node:crypto';
import { fileURLToPath } from 'node:url';

const arg = (name, def) => { const i = process.argv.indexOf(name); return i > 0 ? process.argv[i + 1] : def; };
const EMU = arg('--url');
const KEY = arg('--key', 'test-key');
const N = Number(arg('--n', 200));
const WARM = Number(arg('--warmup', 20));
const LAT = Number(arg('--latency', 0));
const RTT = Number(arg('--rtt', 0));
const LABEL = arg('--label', `lat${LAT}-rtt${RTT}`);
const RUN = Number(arg('--run', 1));
if (!EMU || !(N > 0) || !(WARM >= 0) || !(LAT >= 0) || !(RTT >= 0)) {
  console.error('usage: node daytona_transport.mjs --url EMULATOR_URL [--key KEY] [--n N] [--warmup W] [--latency MS] [--rtt MS] [--label NAME] [--run I]');
  process.exit(2);
}
const BRIDGE = fs.readFileSync(fileURLToPath(new URL('./daytona_bridge.cjs', import.meta.url)));
const die = (msg) => { console.error(`daytona_transport: ${msg}`); process.exit(1); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => Number(process.hrtime.bigint()) / 1e6;
const agent = new http.Agent({ keepAlive: true });
const AUTH = { authorization: `Bearer ${KEY}` };

// One request, body read whole. body: a string, a Buffer or an object (JSON).
function request(method, url, { headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (body !== undefined && !Buffer.isBuffer(body) && typeof body !== 'string') {
      body = JSON.stringify(body);
      h['content-type'] = 'application/json';
    }
    if (body !== undefined) h['content-length'] = Buffer.byteLength(body);
    const req = http.request(url, { method, agent, headers: h }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}
async function expect(p, status, what) {
  const r = await p;
  if (r.status !== status) die(`${what}: HTTP ${r.status} ${r.body}`);
  return r.body ? JSON.parse(r.body) : null;
}
const admin = (method, p, body) => request(method, `${EMU}/_emulator${p}`, { body });
async function callCount() {
  const r = await admin('GET', '/calls');
  return Object.values(JSON.parse(r.body)).reduce((a, b) => a + b, 0);
}

// The network round trip: a relay holding every chunk RTT/2 each way.
async function startRelay(target, oneWay) {
  const t = new URL(target);
  const srv = net.createServer((c) => {
    const u = net.connect(Number(t.port), t.hostname);
    const kill = () => { c.destroy(); u.destroy(); };
    for (const s of [c, u]) { s.setNoDelay(true); s.on('error', kill); }
    const pipe = (a, b) => {
      a.on('data', (d) => setTimeout(() => { if (!b.destroyed) b.write(d); }, oneWay));
      a.on('end', () => setTimeout(() => b.end(), oneWay));
    };
    pipe(c, u);
    pipe(u, c);
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${srv.address().port}`, close: () => srv.close() };
}
const relay = RTT > 0 ? await startRelay(EMU, RTT / 2) : null;
const BASE = relay ? relay.url : EMU;
const API = `${BASE}/api`;

// Lines arriving on a stream; wait(line) resolves when that line comes.
class Lines {
  constructor() { this.buf = ''; this.want = null; }
  feed(d) {
    this.buf += d;
    let i;
    while ((i = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, i);
      this.buf = this.buf.slice(i + 1);
      if (this.want && line === this.want.line) { const w = this.want; this.want = null; w.resolve(); }
    }
  }
  wait(line) { return new Promise((resolve) => { this.want = { line, resolve }; }); }
}

// A long-lived request on its own connection: {req, head}, head resolving
// at the response's head ({status: 0} if the connection failed first).
// open: leave the body open (a streamed upload), after writing `first`.
function openStream(method, url, headers, lines, { open = false, first } = {}) {
  let req;
  const head = new Promise((resolve) => {
    req = http.request(url, { method, agent: false, headers }, (res) => {
      if (res.statusCode !== 200) { res.resume(); req.destroy(); return resolve({ status: res.statusCode }); }
      res.setEncoding('utf8');
      res.on('data', (d) => lines.feed(d));
      res.on('error', () => {});
      resolve({ status: 200, req, res });
    });
    req.on('error', (e) => resolve({ status: 0, error: e }));
  });
  if (!open) req.end();
  else {
    req.flushHeaders();
    if (first !== undefined) req.write(first);
  }
  return { req, head };
}

// WebSocket, client side (frames masked, as RFC 6455 requires).
function wsFrame(payload) {
  const n = payload.length;
  const head = n < 126 ? Buffer.from([0x82, 0x80 | n])
    : n < 65536 ? Buffer.from([0x82, 0x80 | 126, n >> 8, n & 255])
      : (() => { const b = Buffer.alloc(10); b[0] = 0x82; b[1] = 0x80 | 127; b.writeBigUInt64BE(BigInt(n), 2); return b; })();
  const mask = crypto.randomBytes(4);
  const p = Buffer.from(payload);
  for (let i = 0; i < n; i++) p[i] ^= mask[i & 3];
  return Buffer.concat([head, mask, p]);
}
function wsFrames(onFrame) {  // server to client: unmasked
  let buf = Buffer.alloc(0);
  return (d) => {
    buf = Buffer.concat([buf, d]);
    for (;;) {
      if (buf.length < 2) return;
      let n = buf[1] & 127, off = 2;
      if (n === 126) { if (buf.length < 4) return; n = buf.readUInt16BE(2); off = 4; }
      else if (n === 127) { if (buf.length < 10) return; n = Number(buf.readBigUInt64BE(2)); off = 10; }
      if (buf.length < off + n) return;
      const op = buf[0] & 15, p = buf.subarray(off, off + n);
      buf = buf.subarray(off + n);
      onFrame(op, p);
    }
  };
}
function openWs(url, headers, lines, { markers = false } = {}) {
  return new Promise((resolve) => {
    const req = http.request(url, { agent: false, headers: { ...headers, connection: 'Upgrade', upgrade: 'websocket',
      'sec-websocket-key': crypto.randomBytes(16).toString('base64'), 'sec-websocket-version': '13' } });
    req.on('upgrade', (_res, socket, head) => {
      socket.setNoDelay(true);
      socket.on('error', () => {});
      // A log's frames carry the daemon's stream markers (\x01\x01\x01 stdout).
      const parse = wsFrames((op, p) => {
        if (op === 1 || op === 2) lines.feed(markers ? p.toString('utf8').replace(/[\x01\x02]{3}/g, '') : p.toString('utf8'));
      });
      socket.on('data', parse);
      if (head.length) parse(head);
      resolve({ status: 101, socket });
    });
    req.on('response', (res) => { res.resume(); resolve({ status: res.statusCode }); });
    req.on('error', (e) => resolve({ status: 0, error: e }));
    req.end();
  });
}

// ------------------------------------------------------------ the sandbox
const sb = await expect(request('POST', `${API}/sandbox`, { headers: AUTH,
  body: { name: `bench-transport-${process.pid}-${RUN}`, labels: { bench: 'daytona_transport' } } }), 200, 'create sandbox');
for (let i = 0, state = sb.state; state !== 'started'; i++) {
  if (i > 600) die(`sandbox ${sb.id} did not start (${state})`);
  await sleep(10);
  state = (await expect(request('GET', `${API}/sandbox/${sb.id}`, { headers: AUTH }), 200, 'get sandbox')).state;
}
const TB = `${BASE}/toolbox/${sb.id}`;
await admin('DELETE', '/faults');
if (LAT > 0) {
  const routes = JSON.parse((await admin('GET', '/routes')).body);
  await admin('POST', '/faults', routes.map((route) => ({ route, status: 0, count: -1, latencyMs: LAT })));
}
let seq = 0;
async function session(command, extra = {}) {
  const sid = `bench-${process.pid}-${RUN}-${++seq}`;
  await expect(request('POST', `${TB}/process/session`, { headers: AUTH, body: { sessionId: sid } }), 201, 'create session');
  const { cmdId } = await expect(request('POST', `${TB}/process/session/${sid}/exec`,
    { headers: AUTH, body: { command, runAsync: true, ...extra } }), 202, 'exec');
  return { sid, cid: cmdId };
}
const endSession = (sid) => request('DELETE', `${TB}/process/session/${sid}`, { headers: AUTH });

// ------------------------------------------------------------ transports
// Each set-up answers {lines, send(line), close(), retries}.
async function setupToolbox() {
  const { sid, cid } = await session('cat', { suppressInputEcho: true });
  const lines = new Lines();
  let st, retries = 0;
  for (;;) {  // 404: the command's log does not exist yet
    st = await openWs(`${TB}/process/session/${sid}/command/${cid}/logs?follow=true`, AUTH, lines, { markers: true });
    if (st.status === 101) break;
    if (st.status !== 404 || ++retries > 1000) die(`follow: HTTP ${st.status} ${st.error?.message ?? ''}`);
    await sleep(2);
  }
  const input = `${TB}/process/session/${sid}/command/${cid}/input`;
  return { lines, retries,
    async send(line) {
      for (let i = 0; ; i++) {  // 500: the command's input pipe is not made yet
        const r = await request('POST', input, { headers: AUTH, body: { data: `${line}\n` } });
        if (r.status === 204) return;
        if (r.status !== 500 || i > 500) die(`input: HTTP ${r.status} ${r.body}`);
        await sleep(2);
      }
    },
    close() { st.socket.destroy(); return endSession(sid); } };
}
function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}
async function setupBridge(kind) {
  const boundary = `----bench${crypto.randomBytes(8).toString('hex')}`;
  const body = Buffer.concat([Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="daytona_bridge.cjs"\r\n` +
    'Content-Type: application/octet-stream\r\n\r\n'), BRIDGE, Buffer.from(`\r\n--${boundary}--\r\n`)]);
  await expect(request('POST', `${TB}/files/upload?path=daytona_bridge.cjs`,
    { headers: { ...AUTH, 'content-type': `multipart/form-data; boundary=${boundary}` }, body }), 200, 'upload the bridge');
  const port = await freePort();
  const { sid } = await session(`exec '${process.execPath.replace(/'/g, `'\\''`)}' daytona_bridge.cjs ${port}`);
  const pv = await expect(request('GET', `${API}/sandbox/${sb.id}/ports/${port}/preview-url`, { headers: AUTH }), 200, 'preview-url');
  const url = pv.url.replace(EMU, BASE);
  const hdr = { 'x-daytona-preview-token': pv.token };
  const lines = new Lines();
  let st, retries = 0;
  for (;;) {  // 502 (or a dropped upgrade): the bridge does not listen yet
    st = kind === 'b1' ? await openStream('GET', `${url}/out`, hdr, lines).head
      : kind === 'b2' ? await openStream('POST', `${url}/duplex`, { ...hdr, 'content-type': 'application/octet-stream',
        'transfer-encoding': 'chunked' }, lines, { open: true, first: '\n' }).head  // the body's first chunk makes the emulator forward the request
        : await openWs(`${url}/ws`, hdr, lines);
    if (st.status === 200 || st.status === 101) break;
    if ((st.status !== 502 && st.status !== 0) || ++retries > 1000) die(`${kind}: connect: HTTP ${st.status} ${st.error?.message ?? ''}`);
    await sleep(10);
  }
  const close = () => { (st.socket || st.req).destroy(); return endSession(sid); };
  if (kind === 'b1') {
    return { lines, retries, close,
      async send(line) { const r = await request('POST', `${url}/in`, { headers: hdr, body: `${line}\n` }); if (r.status !== 204) die(`b1: /in: HTTP ${r.status}`); } };
  }
  if (kind === 'b2') return { lines, retries, close, async send(line) { st.req.write(`${line}\n`); } };
  return { lines, retries, close, async send(line) { st.socket.write(wsFrame(Buffer.from(`${line}\n`))); } };
}

// ------------------------------------------------------------ measure
const PAD = 'x'.repeat(120);  // an ACP message is a JSON line of some hundreds of bytes
async function roundTrip(t, i) {
  const line = JSON.stringify({ jsonrpc: '2.0', id: i, method: 'session/prompt', params: { pad: PAD } });
  let t1;
  const t0 = now();
  const echoed = t.lines.wait(line).then(() => { t1 = now(); });
  let timer;
  const timeout = new Promise((_, rej) => { timer = setTimeout(() => rej(new Error('no echo in 15 s')), 15000); });
  await Promise.race([Promise.all([t.send(line), echoed]), timeout]).catch((e) => die(`${i}: ${e.message}`));
  clearTimeout(timer);
  return t1 - t0;
}
const order = ['a', 'b1', 'b2', 'b3'];
for (let r = 1; r < RUN; r++) order.push(order.shift());  // who goes first rotates with the run
for (const kind of order) {
  await admin('DELETE', '/calls');
  const s0 = now();
  const t = kind === 'a' ? await setupToolbox() : await setupBridge(kind);
  const setupMs = now() - s0;
  // (a) does not wait for its follow request to arrive: count it all the same.
  const follow = 'GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs';
  for (let i = 0; kind === 'a' && !JSON.parse((await admin('GET', '/calls')).body)[follow]; i++) {
    if (i > 1000) die('the follow request never arrived');
    await sleep(2);
  }
  const setupCalls = await callCount();
  for (let i = 0; i < WARM; i++) await roundTrip(t, -1 - i);
  await admin('DELETE', '/calls');
  const rt = [];
  for (let i = 0; i < N; i++) rt.push(await roundTrip(t, i));
  const perMsg = (await callCount()) / N;
  await t.close();
  rt.sort((x, y) => x - y);
  const q = (p) => rt[Math.min(rt.length - 1, Math.ceil(p * rt.length) - 1)];
  const mean = rt.reduce((a, b) => a + b, 0) / rt.length;
  console.log(['R', LABEL, RUN, kind, N, q(0.5).toFixed(3), q(0.99).toFixed(3), mean.toFixed(3), perMsg.toFixed(2),
    setupCalls, t.retries, setupMs.toFixed(1)].join(' '));
}
await admin('DELETE', '/faults');
await request('DELETE', `${EMU}/api/sandbox/${sb.id}`, { headers: AUTH });
agent.destroy();
relay?.close();
process.exit(0);
