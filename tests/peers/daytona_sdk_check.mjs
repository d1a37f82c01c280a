// Drives tests/emulators/daytona.mjs with the official @daytonaio/sdk.
// Usage: node daytona_sdk_check.mjs NPM_DIR BASE_URL API_KEY
// Prints "ok - ..." / "FAIL - ..." lines; exits 1 when a check failed.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

const [npmDir, base, apiKey] = process.argv.slice(2);
const require = createRequire(path.join(npmDir, 'node_modules', 'x.js'));
const { Daytona } = require('@daytonaio/sdk');
const sdkVersion = require('@daytonaio/sdk/package.json').version;
console.log(`# @daytonaio/sdk ${sdkVersion}, node ${process.version}`);

let failed = 0;
const ok = (name) => console.log(`ok - ${name}`);
const bad = (name, why) => { failed++; console.log(`FAIL - ${name}${why !== undefined ? ` (${why})` : ''}`); };
const check = (name, cond, why) => (cond ? ok(name) : bad(name, why));
async function step(name, fn) {
  try { await fn(); } catch (e) { bad(name, `${e?.constructor?.name}: ${e?.message} status=${e?.statusCode}`); }
}
async function refused(name, fn, status, pattern) {
  try { await fn(); bad(name, 'no error'); } catch (e) {
    check(name, e.statusCode === status && (!pattern || pattern.test(e.message)), `status=${e.statusCode} message=${e.message}`);
  }
}
const admin = (p, body, method = body ? 'POST' : 'GET') =>
  fetch(`${base}/_emulator${p}`, { method, headers: { 'content-type': 'application/json' }, body: body ? JSON.stringify(body) : undefined })
    .then((r) => (r.status === 204 ? null : r.json()));
const api = (method, p) => fetch(`${base}/api${p}`, { method, headers: { authorization: `Bearer ${apiKey}` } });
const freePort = () => new Promise((resolve) => { const s = net.createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); }); });
const run = `r${Date.now().toString(36)}`;

// The emulator does not serve the socket.io event gateway: the SDK polls.
const daytona = new Daytona({ apiKey, apiUrl: `${base}/api`, target: 'us', useDeprecatedPolling: true });

await step('a wrong API key', async () => {
  const wrong = new Daytona({ apiKey: `${apiKey}-wrong`, apiUrl: `${base}/api`, target: 'us', useDeprecatedPolling: true });
  await refused('a wrong key is 401 Invalid credentials', () => wrong.get('any'), 401, /Invalid credentials/);
  const r = await fetch(`${base}/api/sandbox`, { headers: { authorization: `Bearer ${apiKey}-wrong` } });
  const b = await r.json();
  check('the 401 body is the API\'s', r.status === 401 && b.statusCode === 401 && b.error === 'Unauthorized' &&
    b.message === 'Invalid credentials', JSON.stringify(b));
});

let sb;
await step('create with env and labels', async () => {
  sb = await daytona.create({ envVars: { FOO: 'bar baz' }, labels: { suite: 'emu', run } }, { timeout: 20 });
  check('create: started', sb.state === 'started', sb.state);
  check('create: env and labels', sb.env?.FOO === 'bar baz' && sb.labels?.run === run, JSON.stringify([sb.env, sb.labels]));
  check('create: toolboxProxyUrl', sb.toolboxProxyUrl === `${base}/toolbox`, sb.toolboxProxyUrl);
});
if (!sb) { console.log('# no sandbox, giving up'); process.exit(1); }

await step('execute', async () => {
  const r = await sb.process.executeCommand('echo "$FOO"; echo err >&2; pwd');
  const dir = await sb.getWorkDir();
  check('execute: env, stdout+stderr, exit 0', r.exitCode === 0 && r.result === `bar baz\nerr\n${dir}\n`, JSON.stringify(r));
  const r2 = await sb.process.executeCommand('exit 7');
  check('execute: exit code', r2.exitCode === 7, JSON.stringify(r2));
  const r3 = await sb.process.executeCommand('echo "$X" && pwd', '.', { X: 'from-envs' });
  check('execute: envs', r3.result.startsWith('from-envs\n'), JSON.stringify(r3));
});

await step('upload/download', async () => {
  const payload = Buffer.from('hello\0binary\n\u00e9');
  await sb.fs.uploadFile(payload, 'work/a.bin');
  const got = await sb.fs.downloadFile('work/a.bin');
  check('download returns the uploaded bytes', Buffer.isBuffer(got) && got.equals(payload), got?.toString());
  await sb.fs.uploadFiles([{ source: Buffer.from('one'), destination: 'work/1.txt' }, { source: Buffer.from('two'), destination: 'work/2.txt' }]);
  const many = await sb.fs.downloadFiles([{ source: 'work/1.txt' }, { source: 'work/2.txt' }, { source: 'work/missing' }]);
  check('bulk download: files and a per-file error',
    many[0].result?.toString() === 'one' && many[1].result?.toString() === 'two' && /not found/i.test(many[2].error || ''),
    JSON.stringify(many.map((m) => [m.source, m.result?.toString(), m.error])));
  const list = await sb.fs.listFiles('work');
  check('list files', list.map((f) => f.name).sort().join(',') === '1.txt,2.txt,a.bin', JSON.stringify(list.map((f) => f.name)));
  const r = await sb.process.executeCommand('cat work/1.txt');
  check('uploaded file visible to processes', r.result === 'one', r.result);
});

await step('session command with logs', async () => {
  await sb.process.createSession('s1');
  const first = await sb.process.executeSessionCommand('s1', { command: 'export GREETING=hi; mkdir -p sub && cd sub' });
  check('session: sync command', first.exitCode === 0, JSON.stringify(first));
  const second = await sb.process.executeSessionCommand('s1', { command: 'echo "$GREETING from $(basename "$PWD")"' });
  check('session: one shell (export and cd carry over)', second.stdout === 'hi from sub\n', JSON.stringify(second));
  const cmd = await sb.process.executeSessionCommand('s1', { command: 'read line; echo "got $line"; echo oops >&2; exit 3', runAsync: true });
  check('session: async command id', typeof cmd.cmdId === 'string' && cmd.cmdId.length > 0, JSON.stringify(cmd));
  let out = '', err = '';
  const follow = sb.process.getSessionCommandLogs('s1', cmd.cmdId, (s) => { out += s; }, (s) => { err += s; });
  await new Promise((r) => setTimeout(r, 100));
  await sb.process.sendSessionCommandInput('s1', cmd.cmdId, 'input-line\n');
  await follow;
  // The daemon echoes input into the command's stdout unless the command
  // was started with suppressInputEcho (SendInput, apps/daemon/pkg/session/input.go).
  check('session: followed logs (WebSocket) split stdout/stderr, the input echoed',
    out === 'input-line\ngot input-line\n' && err === 'oops\n', JSON.stringify([out, err]));
  const logs = await sb.process.getSessionCommandLogs('s1', cmd.cmdId);
  check('session: logs JSON', logs.stdout === 'input-line\ngot input-line\n' && logs.stderr === 'oops\n' && logs.output.includes('oops'), JSON.stringify(logs));
  const info = await sb.process.getSessionCommand('s1', cmd.cmdId);
  check('session: command exit code', info.exitCode === 3, JSON.stringify(info));
  await refused('session: input after the end is 410', () => sb.process.sendSessionCommandInput('s1', cmd.cmdId, 'late\n'), 410);
  // suppressInputEcho: no echo; input without a newline gets one.
  const quiet = await sb.process.executeSessionCommand('s1', { command: 'read a; read b; echo "[$a][$b]"', runAsync: true,
    suppressInputEcho: true });
  let qout = '';
  const qfollow = sb.process.getSessionCommandLogs('s1', quiet.cmdId, (t) => { qout += t; }, () => {});
  for (let i = 0; i < 100; i++) {
    try { await sb.process.sendSessionCommandInput('s1', quiet.cmdId, 'half'); break; } catch { await new Promise((r) => setTimeout(r, 50)); }
  }
  await sb.process.sendSessionCommandInput('s1', quiet.cmdId, 'line\n');
  await qfollow;
  check('session: suppressInputEcho: no echo; a newline appended to input without one', qout === '[half][line]\n', JSON.stringify(qout));
  const sessions = await sb.process.listSessions();
  check('session: listed with its commands', sessions.length === 1 && sessions[0].commands.length === 4, JSON.stringify(sessions));
  // Plain HTTP follow (what a C client uses): chunked, stdout and stderr merged.
  const sync = await sb.process.executeSessionCommand('s1', { command: 'echo a; echo b >&2' });
  const h = { authorization: `Bearer ${apiKey}` };
  const t = await (await fetch(`${base}/toolbox/${sb.id}/process/session/s1/command/${sync.cmdId}/logs?follow=true`, { headers: h })).text();
  check('session: HTTP follow merged', t === 'a\nb\n' || t === 'b\na\n', JSON.stringify(t));
  const plain = await fetch(`${base}/toolbox/${sb.id}/process/session/s1/command/${sync.cmdId}/logs`, { headers: h });
  check('session: logs without the SDK header are text', /^text\/plain/.test(plain.headers.get('content-type')) && (await plain.text()).length === 4);
});

let port, link;
await step('preview URL fetch', async () => {
  port = await freePort();
  await sb.process.createSession('web');
  await sb.process.executeSessionCommand('web', { runAsync: true,
    command: `exec node -e "require('http').createServer((q,r)=>r.end('hello '+q.url)).listen(${port},'127.0.0.1')"` });
  link = await sb.getPreviewLink(port);
  check('preview: link fields', link.sandboxId === sb.id && typeof link.url === 'string' && typeof link.token === 'string', JSON.stringify(link));
  let body = '';
  for (let i = 0; i < 50; i++) {
    const r = await fetch(`${link.url}/path?q=1`, { headers: { 'x-daytona-preview-token': link.token } });
    if (r.status === 200) { body = await r.text(); break; }
    await new Promise((res) => setTimeout(res, 100));
  }
  check('preview: proxied to the sandbox port', body === 'hello /path?q=1', body);
  const q = await fetch(`${link.url}/x?DAYTONA_SANDBOX_AUTH_KEY=${link.token}`);
  check('preview: token as a query parameter', q.status === 200 && (await q.text()) === 'hello /x');
  const anon = await fetch(`${link.url}/`, { redirect: 'manual' });
  check('preview: no token is a 307', anon.status === 307, anon.status);
});

await step('list by labels', async () => {
  const other = await daytona.create({ labels: { suite: 'emu', run: `${run}-other` } }, { timeout: 20 });
  const found = [];
  for await (const s of daytona.list({ labels: { run } })) found.push(s.id);
  check('list: by labels', found.length === 1 && found[0] === sb.id, JSON.stringify(found));
  const page = await (await api('GET', `/sandbox?limit=1&labels=${encodeURIComponent(JSON.stringify({ suite: 'emu' }))}`)).json();
  check('list: cursor pagination', page.items.length === 1 && typeof page.nextCursor === 'string' && !('env' in page.items[0]), JSON.stringify(page).slice(0, 200));
  const page2 = await (await api('GET', `/sandbox?limit=1&cursor=${page.nextCursor}&labels=${encodeURIComponent(JSON.stringify({ suite: 'emu' }))}`)).json();
  check('list: second page', page2.items.length === 1 && page2.items[0].id !== page.items[0].id && page2.nextCursor === null, JSON.stringify(page2).slice(0, 200));
  await other.delete();
});

await step('network settings', async () => {
  await sb.updateNetworkSettings({ networkBlockAll: true, networkAllowList: '10.0.0.0/8' });
  await sb.refreshData();
  check('network settings stored', sb.networkBlockAll === true && sb.networkAllowList === '10.0.0.0/8', JSON.stringify([sb.networkBlockAll, sb.networkAllowList]));
});

// Whether process pid runs on this machine (the emulator's sandboxes are
// processes of this machine); a zombie has ended.
const alive = (pid) => { try { return !/^\d+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return false; } };

await step('stop/start/delete', async () => {
  // A daemon that leaves the command's process group still ends with the sandbox.
  await sb.process.executeCommand(`setsid sh -c 'echo $$ >daemon.pid; exec sleep 300' </dev/null >/dev/null 2>&1 &`);
  let pid = 0;
  for (let i = 0; i < 50 && !pid; i++) {
    pid = Number((await sb.process.executeCommand('cat daemon.pid 2>/dev/null')).result.trim()) || 0;
    if (!pid) await new Promise((r) => setTimeout(r, 100));
  }
  check('a daemon (setsid) runs in the sandbox', pid > 0 && alive(pid), pid);
  await sb.stop();
  check('stop: stopped', sb.state === 'stopped', sb.state);
  check('stop: the daemon ended with the sandbox', pid > 0 && !alive(pid), pid);
  const p = await fetch(`${link.url}/`, { headers: { 'x-daytona-preview-token': link.token } });
  check('stop: preview refused (400)', p.status === 400, p.status);
  await refused('stop: toolbox refused', () => sb.process.executeCommand('true'), 400, /no IP address found/);
  await refused('stop from stopped is 400, in the service\'s words', () => sb.stop(), 400, /Sandbox is not in a stoppable state/);
  await sb.start();
  check('start: started', sb.state === 'started', sb.state);
  const link2 = await sb.getPreviewLink(port);
  check('start: preview token rotated', link2.token !== link.token);
  const r = await sb.process.executeCommand('cat work/2.txt');
  check('start: files kept across stop/start', r.result === 'two', r.result);
  await sb.delete(30, true);
  check('delete: destroyed', sb.state === 'destroyed', sb.state);
  await refused('delete: then 404', () => daytona.get(sb.id), 404);
});

await step('state machine refusals', async () => {
  await admin('/config', { transitionMs: 400 });
  const created = await (await fetch(`${base}/api/sandbox`, { method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ labels: { run } }) })).json();
  check('create returns before started', created.state === 'creating', created.state);
  const s2 = await daytona.get(created.id);
  await refused('409 during a state change', () => s2.stop(), 409, /Sandbox state change in progress/);
  await refused('409 on delete during a change', () => s2.delete(), 409);
  await admin('/config', { transitionMs: 20 });
  await s2.waitUntilStarted(10);
  await admin(`/sandbox/${s2.id}/error`, { errorReason: 'disk on fire' });
  await s2.refreshData();
  check('forced error state', s2.state === 'error' && s2.errorReason === 'disk on fire', JSON.stringify([s2.state, s2.errorReason]));
  await refused('error refuses start', () => s2.start(), 400, /errored/);
  await refused('error refuses stop', () => s2.stop(), 400, /errored/);
  await s2.delete(30, true);
  check('errored sandbox deleted', s2.state === 'destroyed', s2.state);
});

await step('secrets', async () => {
  const name = `SR_${run}_1`;
  const sec = await daytona.secret.create({ name, value: 's3cret', hosts: ['api.example.com'] });
  check('secret: record', sec.name === name && /^dtn_secret_[0-9a-f]+$/.test(sec.placeholder) &&
    JSON.stringify(sec.hosts) === '["api.example.com"]' && !('value' in sec), JSON.stringify(sec));
  await refused('secret: duplicate name is 409', () => daytona.secret.create({ name, value: 'x', hosts: ['a.example.com'] }), 409);
  await refused('secret: host with a port is 400', () => daytona.secret.create({ name: `${name}_p`, value: 'x', hosts: ['a.example.com:443'] }), 400);
  const page = await daytona.secret.list({ limit: 10 });
  check('secret: paginated list', page.items.some((s) => s.id === sec.id), JSON.stringify(page));
  const s3 = await daytona.create({ secrets: { API_TOKEN: name } }, { timeout: 20 });
  const r = await s3.process.executeCommand('printf %s "$API_TOKEN"');
  check('secret: placeholder in the sandbox env', r.result === sec.placeholder, r.result);
  await s3.delete();
  await daytona.secret.delete(sec.id);
  await refused('secret: gone after delete', () => daytona.secret.get(sec.id), 404);
});

await step('fault injection and call counts', async () => {
  const probe = await daytona.create({}, { timeout: 20 });
  await admin('/faults', { route: 'GET /api/sandbox/{id}', status: 503, count: 1 });
  await refused('fault: injected status', () => daytona.get(probe.id), 503);
  await daytona.get(probe.id);
  ok('fault: count consumed');
  await admin('/faults', { route: 'POST /toolbox/{id}/process/execute', latencyMs: 300, count: 1 });
  const t0 = Date.now();
  await probe.process.executeCommand('true');
  check('fault: latency', Date.now() - t0 >= 300, Date.now() - t0);
  await admin('/faults', { route: 'POST /toolbox/{id}/process/execute', status: 500, count: 2 });
  await refused('fault: toolbox status', () => probe.process.executeCommand('true'), 500);
  await refused('fault: second of two', () => probe.process.executeCommand('true'), 500);
  await probe.process.executeCommand('true');
  ok('fault: cleared after count');
  const calls = await admin('/calls');
  check('call counts per route', calls['POST /api/sandbox'] >= 4 && calls['GET /api/sandbox/{id}'] > 0 &&
    calls['POST /toolbox/{id}/process/execute'] >= 4, JSON.stringify(calls));
  const unauth = await fetch(`${base}/api/sandbox`, { headers: { authorization: 'Bearer wrong' } });
  const ub = await unauth.json();
  check('401 with the error body', unauth.status === 401 && ub.statusCode === 401 && 'timestamp' in ub && 'path' in ub, JSON.stringify(ub));
  // A plain GET with ?follow=true is the log so far (the daemon follows over a
  // WebSocket only); dropping follow streams cuts the SDK's WebSocket follow.
  await probe.process.createSession('long');
  const long = await probe.process.executeSessionCommand('long', { command: 'echo started; sleep 30', runAsync: true });
  let first = '';
  for (let i = 0; i < 100 && first !== 'started\n'; i++) {
    if (i) await new Promise((r) => setTimeout(r, 50));
    // text() resolves only once the answer ends: the command still runs.
    const res = await fetch(`${base}/toolbox/${probe.id}/process/session/long/command/${long.cmdId}/logs?follow=true`,
      { headers: { authorization: `Bearer ${apiKey}` } });
    first = res.status === 200 ? await res.text() : '';
  }
  const cut = true;
  let wsOut = '';
  const ws = probe.process.getSessionCommandLogs('long', long.cmdId, (s) => { wsOut += s; }, () => {}).then(() => 'ended', (e) => `error ${e.message}`);
  await new Promise((r) => setTimeout(r, 200));
  const dropped = await admin('/streams/drop', {});
  check('HTTP ?follow=true: the log so far, then the answer ends', first === 'started\n' && cut && dropped.dropped === 1,
    JSON.stringify([first, cut, dropped]));
  const wsEnd = await Promise.race([ws, new Promise((r) => setTimeout(() => r('still open'), 3000))]);
  check('drop: WebSocket follow cut', wsOut === 'started\n' && wsEnd !== 'still open', JSON.stringify([wsOut, wsEnd]));
  await probe.delete();
});

// Left running on purpose: the shell test checks that SIGTERM kills it.
await step('a process left running', async () => {
  const s4 = await daytona.create({ labels: { keep: run } }, { timeout: 20 });
  await s4.process.createSession('bg');
  await s4.process.executeSessionCommand('bg', { command: `sleep 300 # marker-${run}`, runAsync: true });
  console.log(`# marker marker-${run}`);
});

console.log(`# ${failed} failed`);
await daytona[Symbol.asyncDispose]?.();
process.exit(failed ? 1 : 0);
