#!/usr/bin/env node
// Daytona emulator (built-ins only): control-plane API, toolbox and preview
// proxy on 127.0.0.1, following @daytonaio/sdk 0.218 / @daytona/api-client
// field for field. A "sandbox" is a directory under the state dir plus the
// processes started in it on this host. What is and is not emulated:
// doc/daytona-emulator.md.
//
// Usage: node daytona.mjs [--state-dir DIR] [--api-key KEY] [--port N]
//                         [--transition-ms MS] [--log FILE] [--egress-port N]
//                         [--egress-host NAME=127.0.0.1:PORT]...
// (env: DAYTONA_EMU_STATE_DIR, DAYTONA_EMU_API_KEY, DAYTONA_EMU_PORT,
//  DAYTONA_EMU_TRANSITION_MS, DAYTONA_EMU_EGRESS_PORT, DAYTONA_EMU_EGRESS_HOSTS
//  (NAME=127.0.0.1:PORT,...); defaults: a temporary dir removed at exit,
//  key "test-key", ports 0, 50 ms per state step).
// Prints one JSON line once listening:
//   {"url","apiUrl","toolboxUrl","previewUrl","adminUrl","egressProxyUrl","stateDir","pid"}
// Exits on SIGTERM/SIGINT (or when a piped stdin closes), killing the
// process group of every process it started, and every process whose
// environment names one of its sandboxes.
import http from 'node:http';
import net from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import { spawn, spawnSync } from 'node:child_process';

const arg = (name) => { const i = process.argv.indexOf(name); return i > 0 ? process.argv[i + 1] : undefined; };
const argAll = (name) => process.argv.flatMap((a, i) => (a === name && i + 1 < process.argv.length ? [process.argv[i + 1]] : []));
const API_KEY = arg('--api-key') ?? process.env.DAYTONA_EMU_API_KEY ?? 'test-key';
const PORT = Number(arg('--port') ?? process.env.DAYTONA_EMU_PORT ?? 0);
const EGRESS_LISTEN_PORT = Number(arg('--egress-port') ?? process.env.DAYTONA_EMU_EGRESS_PORT ?? 0);
const LOG = arg('--log') ?? process.env.DAYTONA_EMU_LOG;
let stateDirArg = arg('--state-dir') ?? process.env.DAYTONA_EMU_STATE_DIR;
const tempState = !stateDirArg;
const STATE = stateDirArg ? path.resolve(stateDirArg) : fs.mkdtempSync(path.join(os.tmpdir(), 'daytona-emu-'));
fs.mkdirSync(path.join(STATE, 'sandboxes'), { recursive: true });
const config = { transitionMs: Number(arg('--transition-ms') ?? process.env.DAYTONA_EMU_TRANSITION_MS ?? 50) };
const ORG = '7c9e6679-7425-40de-944b-e07fc1f90ae7';
const DAEMON_VERSION = '0.218.0-emulator';
let BASE = '';

// ------------------------------------------------------------------ state
const sandboxes = new Map();   // id -> record
const secrets = new Map();     // id -> {id,name,value,description,hosts,placeholder,createdAt,updatedAt}
const calls = new Map();       // route key -> count
const faults = new Map();      // route key -> {status,count,latencyMs,after,message}
const streams = new Set();     // open follow streams: {sandboxId, close()}
const now = () => new Date().toISOString();
const log = (entry) => { if (LOG) fs.appendFileSync(LOG, JSON.stringify({ t: Date.now(), ...entry }) + '\n'); };

const STATUS_TEXT = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found',
  407: 'Proxy Authentication Required', 408: 'Request Timeout', 409: 'Conflict', 410: 'Gone', 422: 'Unprocessable Entity',
  429: 'Too Many Requests', 500: 'Internal Server Error', 501: 'Not Implemented', 502: 'Bad Gateway',
  503: 'Service Unavailable', 504: 'Gateway Timeout' };
class HttpError extends Error {
  constructor(status, message, code) { super(message); this.status = status; this.code = code; }
}
const fail = (status, message, code) => { throw new HttpError(status, message, code); };

function send(res, status, body, headers = {}) {
  if (res.headersSent || res.destroyed) return;
  if (body === undefined || body === null) { res.writeHead(status, headers); return res.end(); }
  const text = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  res.writeHead(status, { 'content-type': typeof body === 'object' && !Buffer.isBuffer(body) ? 'application/json' : 'text/plain; charset=utf-8', ...headers });
  res.end(text);
}
// Control-plane error body (NestJS filter): {path,timestamp,statusCode,error,message}.
const apiErrorBody = (req, status, message) => ({ path: req.url, timestamp: now(), statusCode: status,
  error: STATUS_TEXT[status] || 'Error', message });
// Toolbox (daemon) error body: {statusCode,message,code,timestamp,path,method,source}.
const DAEMON_CODE = { 400: 'BAD_REQUEST', 401: 'UNAUTHORIZED', 403: 'FORBIDDEN', 404: 'NOT_FOUND', 408: 'REQUEST_TIMEOUT',
  409: 'CONFLICT', 410: 'GONE', 422: 'UNPROCESSABLE_ENTITY', 500: 'INTERNAL_SERVER_ERROR' };
const toolboxErrorBody = (req, status, message, code) => ({ statusCode: status, message,
  code: code || DAEMON_CODE[status] || 'INTERNAL_SERVER_ERROR', timestamp: now(), path: req.url.split('?')[0],
  method: req.method, source: 'daemon' });

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}
function jsonBody(buf) {
  if (!buf.length) return {};
  try { return JSON.parse(buf.toString('utf8')); } catch { fail(400, 'Invalid JSON body', 'INVALID_REQUEST_BODY'); }
}
const uuid = () => crypto.randomUUID();
const token = () => crypto.randomBytes(16).toString('hex');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ------------------------------------------------------------- processes
// Every child is spawned detached (its own process group); stop, delete,
// error and exit kill the whole group.
function track(sb, child) {
  sb.procs.add(child);
  child.on('exit', () => sb.procs.delete(child));
}
function killGroup(child, sig = 'SIGKILL') {
  try { process.kill(-child.pid, sig); } catch { /* gone */ }
}
// A container's mounts end with it: a FUSE daemon a process of the
// sandbox started (s3fs forks away from its group) is unmounted, so that
// removing the sandbox's directory never reaches into what it mounted.
// Whether something is still mounted below dir afterwards.
function unmountBelow(dir) {
  const below = () => {
    let info = '';
    try { info = fs.readFileSync('/proc/self/mountinfo', 'utf8'); } catch { return []; }
    const unesc = (s) => s.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
    return info.split('\n').map((l) => unesc(l.split(' ')[4] || '')).filter((mp) => mp.startsWith(dir + '/'));
  };
  for (const mp of below().reverse())
    if (spawnSync('fusermount', ['-u', '-z', mp]).status !== 0) spawnSync('umount', ['-l', mp]);
  return below().length > 0;
}
// A container's processes end with it, a daemon that left its process
// group (setsid) included: every process whose environment names the
// sandbox (sandboxEnv gives each one DAYTONA_SANDBOX_ID) is killed.
function killStragglers(sb) {
  const mark = Buffer.from(`DAYTONA_SANDBOX_ID=${sb.id}\0`);
  let pids = [];
  try { pids = fs.readdirSync('/proc').filter((d) => /^[0-9]+$/.test(d) && Number(d) !== process.pid); } catch { return; }
  for (const pid of pids) {
    let env;
    try { env = fs.readFileSync(`/proc/${pid}/environ`); } catch { continue; } // gone, or not ours to read
    const at = env.indexOf(mark);
    if (at === 0 || (at > 0 && env[at - 1] === 0)) {
      try { process.kill(Number(pid), 'SIGKILL'); } catch { continue; /* gone */ }
      log({ event: 'kill', sandboxId: sb.id, pid: Number(pid), reason: 'outside its process group' });
    }
  }
}
function killAll(sb) {
  unmountBelow(sb.dir);
  for (const c of sb.procs) killGroup(c);
  sb.procs.clear();
  killStragglers(sb);
  for (const s of sb.sessions.values()) for (const c of s.commands) if (c.exitCode === undefined) c.killed = true;
  sb.sessions.clear();
  for (const st of [...streams]) if (st.sandboxId === sb.id) st.close();
}
// The sandbox's way out is the egress proxy (its own credentials in the
// URL); loopback (toolbox, relay, test servers) stays direct.
const egressProxyUrl = (sb) => `http://${sb.id}:${sb.egressToken}@127.0.0.1:${EGRESS_PORT}`;
function sandboxEnv(sb, extra = {}) {
  const proxy = egressProxyUrl(sb);
  const env = { PATH: process.env.PATH || '/usr/local/bin:/usr/bin:/bin', HOME: sb.dir, USER: sb.user, LANG: 'C.UTF-8',
    DAYTONA_SANDBOX_ID: sb.id, DAYTONA_SANDBOX_USER: sb.user, DAYTONA_SANDBOX_SNAPSHOT: sb.snapshot || '',
    HTTP_PROXY: proxy, http_proxy: proxy, HTTPS_PROXY: proxy, https_proxy: proxy,
    NO_PROXY: '127.0.0.1,localhost', no_proxy: '127.0.0.1,localhost' };
  Object.assign(env, sb.env);
  for (const link of sb.secretLinks) {
    const s = [...secrets.values()].find((x) => x.name === link.secretName);
    if (s) env[link.env] = s.placeholder;
  }
  return Object.assign(env, extra);
}
function spawnIn(sb, script, { cwd, env } = {}) {
  const child = spawn('/bin/sh', ['-c', script], { cwd: cwd || sb.dir, env: sandboxEnv(sb, env), detached: true,
    stdio: ['pipe', 'pipe', 'pipe'] });
  track(sb, child);
  child.stdin.on('error', () => {});
  return child;
}

// ------------------------------------------------------------ sandboxes
const TRANSITIONAL = new Set(['creating', 'restoring', 'destroying', 'starting', 'stopping', 'pulling_snapshot',
  'archiving', 'resizing', 'snapshotting', 'forking', 'pausing', 'resuming', 'pending_build', 'building_snapshot']);
function setState(sb, state) {
  sb.state = state;
  sb.updatedAt = now();
  log({ event: 'state', sandboxId: sb.id, state });
}
// Run the steps of a transition, one per config.transitionMs; a newer
// transition (or a forced error) cancels the older one.
function transition(sb, steps, done) {
  const gen = ++sb.gen;
  let i = 0;
  const next = () => {
    if (sb.gen !== gen) return;
    if (i < steps.length) { setState(sb, steps[i++]); return setTimeout(next, config.transitionMs); }
    done?.();
  };
  next();
}
function startSandbox(sb) {
  sb.desiredState = 'started';
  transition(sb, ['starting'], () => {
    fs.mkdirSync(sb.dir, { recursive: true });
    sb.previewToken = token();
    sb.lastActivityAt = now();
    setState(sb, 'started');
  });
}
function stopSandbox(sb) {
  sb.desiredState = 'stopped';
  transition(sb, ['stopping'], () => {
    killAll(sb);
    setState(sb, 'stopped');
    if (sb.autoDeleteInterval === 0) deleteSandbox(sb);
  });
}
function deleteSandbox(sb) {
  sb.desiredState = 'destroyed';
  killAll(sb);
  transition(sb, ['destroying'], () => {
    setState(sb, 'destroyed');
    // Never into a store that is still mounted there.
    if (unmountBelow(sb.dir)) log({ event: 'delete', sandboxId: sb.id, kept: sb.dir, reason: 'still mounted' });
    else fs.rmSync(sb.dir, { recursive: true, force: true });
    fs.rmSync(path.join(STATE, 'sessions', sb.id), { recursive: true, force: true });
    sandboxes.delete(sb.id);
  });
}
function forceError(sb, reason, recoverable) {
  sb.gen++;
  killAll(sb);
  sb.errorReason = reason || 'Sandbox failed (forced by the emulator)';
  sb.recoverable = !!recoverable;
  setState(sb, 'error');
}
function findSandbox(idOrName) {
  const sb = sandboxes.get(idOrName) || [...sandboxes.values()].find((s) => s.name === idOrName);
  if (!sb) fail(404, `Sandbox with ID or name ${idOrName} not found`);
  return sb;
}
const LIST_FIELDS = ['id', 'organizationId', 'name', 'target', 'runnerId', 'sandboxClass', 'state', 'desiredState', 'snapshot',
  'user', 'errorReason', 'recoverable', 'public', 'networkBlockAll', 'networkAllowList', 'domainAllowList', 'cpu', 'gpu',
  'memory', 'disk', 'labels', 'autoStopInterval', 'autoPauseInterval', 'autoArchiveInterval', 'autoDeleteInterval',
  'createdAt', 'updatedAt', 'lastActivityAt', 'daemonVersion', 'toolboxProxyUrl'];
function sandboxDto(sb, list = false) {
  const full = {
    id: sb.id, organizationId: ORG, name: sb.name, snapshot: sb.snapshot, user: sb.user, env: { ...sb.env },
    labels: { ...sb.labels }, public: sb.public, networkBlockAll: sb.networkBlockAll,
    ...(sb.networkAllowList !== undefined ? { networkAllowList: sb.networkAllowList } : {}),
    ...(sb.domainAllowList !== undefined ? { domainAllowList: sb.domainAllowList } : {}),
    target: sb.target, cpu: sb.cpu, gpu: 0, memory: sb.memory, disk: sb.disk, state: sb.state,
    desiredState: sb.desiredState, ...(sb.state === 'error' ? { errorReason: sb.errorReason, recoverable: sb.recoverable } : {}),
    backupState: 'None', autoStopInterval: sb.autoStopInterval, autoPauseInterval: sb.autoPauseInterval,
    autoArchiveInterval: sb.autoArchiveInterval, autoDeleteInterval: sb.autoDeleteInterval, volumes: sb.volumes,
    createdAt: sb.createdAt, updatedAt: sb.updatedAt, lastActivityAt: sb.lastActivityAt, sandboxClass: 'container',
    daemonVersion: DAEMON_VERSION, runnerId: 'emulator-runner', toolboxProxyUrl: `${BASE}/toolbox`, kvm: false,
  };
  if (!list) return full;
  return Object.fromEntries(LIST_FIELDS.filter((k) => k in full).map((k) => [k, full[k]]));
}
const NAME_RE = /^[a-zA-Z0-9][a-zA-Z0-9._-]*$/;
function parseSecretLinks(list) {
  if (list === undefined || list === null) return [];
  if (!Array.isArray(list)) fail(400, 'secrets must be an array');
  const out = [];
  for (const item of list) {
    const entries = item && typeof item === 'object' ? Object.entries(item) : [];
    if (entries.length !== 1 || typeof entries[0][1] !== 'string') fail(400, 'each secrets entry must map one env var to a secret name');
    const [env, secretName] = entries[0];
    if (![...secrets.values()].some((s) => s.name === secretName)) fail(400, `Secret ${secretName} not found`);
    out.push({ env, secretName });
  }
  return out;
}
function createSandbox(body) {
  if (body.snapshot && (body.cpu !== undefined || body.memory !== undefined || body.disk !== undefined))
    fail(400, 'Cannot specify Sandbox resources when using a snapshot');
  const id = uuid();
  const name = body.name || id;
  if (!NAME_RE.test(name)) fail(400, 'Sandbox name can only contain letters, numbers, dots, underscores and hyphens');
  if ([...sandboxes.values()].some((s) => s.name === name)) fail(409, `Sandbox with name ${name} already exists`);
  for (const [k, v] of Object.entries(body.env || {})) if (typeof v !== 'string') fail(400, `env ${k} must be a string`);
  const secretLinks = parseSecretLinks(body.secrets);
  const t = now();
  const sb = {
    id, name, snapshot: body.buildInfo ? undefined : (body.snapshot || 'daytonaio/sandbox:0.5.0'), user: body.user || 'daytona',
    env: { ...(body.env || {}) }, labels: { ...(body.labels || {}) }, public: !!body.public,
    networkBlockAll: !!body.networkBlockAll, networkAllowList: body.networkAllowList, domainAllowList: body.domainAllowList,
    target: body.target || 'us', cpu: body.cpu ?? 1, memory: body.memory ?? 1, disk: body.disk ?? 3,
    autoStopInterval: body.autoStopInterval ?? 15, autoPauseInterval: body.autoPauseInterval ?? 0,
    autoArchiveInterval: body.autoArchiveInterval ?? 10080, autoDeleteInterval: body.autoDeleteInterval ?? -1,
    volumes: body.volumes || [], secretLinks, state: 'creating', desiredState: 'started', createdAt: t, updatedAt: t,
    lastActivityAt: t, dir: path.join(STATE, 'sandboxes', id), procs: new Set(), sessions: new Map(), gen: 0,
    previewToken: token(), egressToken: token(), errorReason: undefined, recoverable: undefined,
  };
  fs.mkdirSync(sb.dir, { recursive: true });
  sandboxes.set(id, sb);
  log({ event: 'state', sandboxId: id, state: 'creating' });
  transition(sb, ['creating', 'starting'], () => { sb.previewToken = token(); setState(sb, 'started'); });
  return sb;
}
// The refusals of the real state machine, in its order.
function guardChange(sb, what) {
  if (TRANSITIONAL.has(sb.state) || (sb.state !== sb.desiredState && sb.state !== 'error'))
    fail(409, 'Sandbox state change in progress');
  if (what !== 'delete' && (sb.state === 'error' || sb.state === 'build_failed')) fail(400, 'Sandbox is in an errored state');
}

// Cursor pagination: the cursor is an opaque base64url of the last index.
const encCursor = (n) => Buffer.from(JSON.stringify({ o: n })).toString('base64url');
function decCursor(c) {
  if (!c) return 0;
  try { const o = JSON.parse(Buffer.from(c, 'base64url').toString()).o; if (Number.isInteger(o) && o >= 0) return o; } catch { /* below */ }
  fail(400, 'Invalid cursor');
}
const multi = (q, k) => q.getAll(k).flatMap((v) => v.split(',')).filter(Boolean);
function listSandboxes(q) {
  let labels = null;
  if (q.get('labels')) {
    try { labels = JSON.parse(q.get('labels')); } catch { fail(400, 'labels must be a JSON object'); }
    if (!labels || typeof labels !== 'object' || Array.isArray(labels)) fail(400, 'labels must be a JSON object');
  }
  const limit = q.get('limit') ? Number(q.get('limit')) : 100;
  if (!Number.isInteger(limit) || limit < 1 || limit > 200) fail(400, 'limit must be an integer between 1 and 200');
  const states = multi(q, 'states');
  const ids = multi(q, 'id');
  let items = [...sandboxes.values()].filter((sb) =>
    (!labels || Object.entries(labels).every(([k, v]) => sb.labels[k] === v)) &&
    (!states.length ? sb.state !== 'destroyed' : states.includes(sb.state)) &&
    (!ids.length || ids.some((p) => sb.id.startsWith(p))) &&
    (!q.get('name') || sb.name.toLowerCase().startsWith(q.get('name').toLowerCase())));
  items.sort((a, b) => (b.createdAt.localeCompare(a.createdAt)) || a.id.localeCompare(b.id));
  const off = decCursor(q.get('cursor'));
  const page = items.slice(off, off + limit);
  return { items: page.map((sb) => sandboxDto(sb, true)), nextCursor: off + limit < items.length ? encCursor(off + limit) : null };
}

// ---------------------------------------------------------------- secrets
const SECRET_NAME_RE = /^[a-zA-Z_][a-zA-Z0-9_-]*$/;
const HOST_RE = /^(\*\.)?([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*$/;
function checkHosts(hosts) {
  if (hosts === undefined) return [];
  if (!Array.isArray(hosts)) fail(400, 'hosts must be an array of strings');
  for (const h of hosts) if (typeof h !== 'string' || !HOST_RE.test(h)) fail(400, `Invalid host: ${h} (a host name or *.domain, no port)`);
  return [...hosts];
}
const secretDto = (s) => ({ id: s.id, name: s.name, ...(s.description !== undefined ? { description: s.description } : {}),
  createdAt: s.createdAt, placeholder: s.placeholder, hosts: [...s.hosts], updatedAt: s.updatedAt });
function findSecret(id) { const s = secrets.get(id); if (!s) fail(404, `Secret with ID ${id} not found`); return s; }

// ------------------------------------------------------------- multipart
function boundaryOf(ct) { const m = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(ct || ''); return m ? (m[1] || m[2]).trim() : null; }
function parseMultipart(buf, ct) {
  const b = boundaryOf(ct);
  if (!b) fail(400, 'expected multipart/form-data', 'INVALID_REQUEST_BODY');
  const delim = Buffer.from(`--${b}`);
  const parts = [];
  let pos = buf.indexOf(delim);
  while (pos >= 0) {
    pos += delim.length;
    if (buf[pos] === 0x2d && buf[pos + 1] === 0x2d) break;
    pos += 2; // CRLF
    const he = buf.indexOf('\r\n\r\n', pos);
    if (he < 0) break;
    const head = buf.subarray(pos, he).toString('utf8');
    const next = buf.indexOf(Buffer.concat([Buffer.from('\r\n'), delim]), he + 4);
    if (next < 0) break;
    const data = buf.subarray(he + 4, next);
    const cd = /content-disposition:([^\r\n]*)/i.exec(head)?.[1] || '';
    const name = /\bname="([^"]*)"/i.exec(cd)?.[1];
    const filename = /\bfilename="([^"]*)"/i.exec(cd)?.[1];
    parts.push({ name, filename, data });
    pos = next + 2;
  }
  return parts;
}
function multipartBody(parts) {
  const b = `DAYTONA-EMU-${token()}`;
  const bufs = [];
  for (const p of parts) {
    bufs.push(Buffer.from(`--${b}\r\nContent-Disposition: form-data; name="${p.name}"; filename="${p.filename.replace(/"/g, '%22')}"\r\n` +
      `Content-Type: ${p.type}\r\nContent-Length: ${p.data.length}\r\n\r\n`), p.data, Buffer.from('\r\n'));
  }
  bufs.push(Buffer.from(`--${b}--\r\n`));
  return { body: Buffer.concat(bufs), type: `multipart/form-data; boundary=${b}` };
}

// ----------------------------------------------------------------- toolbox
function resolvePath(sb, p) {
  if (typeof p !== 'string' || p === '') fail(400, 'path is required', 'BAD_REQUEST');
  if (p === '~' || p.startsWith('~/')) p = p.slice(2);
  return path.resolve(sb.dir, p);
}
function fileInfo(abs) {
  const st = fs.statSync(abs);
  const mode = (st.mode & 0o777).toString(8).padStart(3, '0');
  const perms = (st.isDirectory() ? 'd' : '-') + [6, 3, 0].map((s) => { const m = (st.mode >> s) & 7;
    return (m & 4 ? 'r' : '-') + (m & 2 ? 'w' : '-') + (m & 1 ? 'x' : '-'); }).join('');
  return { name: path.basename(abs), path: abs, isDir: st.isDirectory(), size: st.size, mode: perms, permissions: `0${mode}`,
    owner: os.userInfo().username, group: os.userInfo().username, modTime: st.mtime.toISOString(), modifiedAt: st.mtime.toISOString() };
}
function fsError(e, p) {
  if (e instanceof HttpError) return e;
  if (e.code === 'ENOENT') return new HttpError(404, `file not found: ${p}`, 'FILE_NOT_FOUND');
  if (e.code === 'EACCES' || e.code === 'EPERM') return new HttpError(403, `access denied: ${p}`, 'FILE_ACCESS_DENIED');
  if (e.code === 'EISDIR') return new HttpError(400, `path is a directory: ${p}`, 'BAD_REQUEST');
  return new HttpError(500, e.message);
}
const fsTry = (p, fn) => { try { return fn(); } catch (e) { throw fsError(e, p); } };
function writeFile(sb, p, data) {
  const abs = resolvePath(sb, p);
  fsTry(p, () => { fs.mkdirSync(path.dirname(abs), { recursive: true }); fs.writeFileSync(abs, data); });
}

// process/execute: sh -c in the sandbox, stdout+stderr combined.
function execute(sb, body) {
  if (typeof body.command !== 'string' || !body.command) fail(400, 'command is required', 'BAD_REQUEST');
  return new Promise((resolve, reject) => {
    const cwd = body.cwd ? resolvePath(sb, body.cwd) : sb.dir;
    if (!fs.existsSync(cwd)) return reject(new HttpError(400, `cwd does not exist: ${body.cwd}`, 'BAD_REQUEST'));
    // One pipe for both streams, as the daemon's combined output.
    const child = spawnIn(sb, `exec 2>&1\n${body.command}`, { cwd, env: body.envs || {} });
    child.stdin.end();
    const out = [];
    child.stdout.on('data', (d) => out.push(d));
    let timer = null, timedOut = false;
    if (body.timeout > 0) timer = setTimeout(() => { timedOut = true; killGroup(child); }, body.timeout * 1000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (timedOut) return reject(new HttpError(408, 'command execution timeout', 'PROCESS_EXECUTION_TIMEOUT'));
      resolve({ exitCode: code ?? (signal ? 128 + (os.constants.signals[signal] || 9) : -1), result: Buffer.concat(out).toString('utf8') });
    });
  });
}

// Sessions: commands run one after another; the shell's exported variables
// and working directory carry from one command to the next (each command is
// a fresh `sh -c` that sources the state the previous one left).
function newSession(sb, id) {
  const dir = path.join(STATE, 'sessions', sb.id, id.replace(/[^A-Za-z0-9_.-]/g, '_'));
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'env'), '');
  fs.writeFileSync(path.join(dir, 'cwd'), sb.dir);
  return { id, dir, commands: [], queue: Promise.resolve() };
}
const shq = (s) => `'${String(s).replace(/'/g, `'\\''`)}'`;
function runSessionCommand(sb, sess, cmd) {
  return new Promise((resolve) => {
    if (cmd.killed || !sb.sessions.has(sess.id)) { cmd.exitCode = 137; cmd.done(); return resolve(); }
    const envf = path.join(sess.dir, 'env'), cwdf = path.join(sess.dir, 'cwd');
    const script = `. ${shq(envf)}; cd "$(cat ${shq(cwdf)})" 2>/dev/null\n` +
      `{ ${cmd.command}\n}\n__dtn_rc=$?; export -p >${shq(envf)}.tmp && mv ${shq(envf)}.tmp ${shq(envf)}; pwd >${shq(cwdf)}; exit $__dtn_rc`;
    const child = spawnIn(sb, script);
    cmd.child = child;
    child.stdout.on('data', (d) => cmd.line(1, d));
    child.stderr.on('data', (d) => cmd.line(2, d));
    child.on('exit', (code, signal) => {
      // The exit code is written once the labelers have flushed the log
      // (cmdWrapperFormat, apps/daemon/pkg/session/execute.go): a client that
      // sees it reads the whole output. Output a background child still
      // writes keeps coming, but the command is over.
      setTimeout(() => {
        cmd.flush();
        cmd.exitCode = code ?? 128 + (os.constants.signals[signal] || 9);
        cmd.done(); resolve();
      }, 20);
    });
  });
}
function enqueueCommand(sb, sess, command) {
  const cmd = { id: uuid(), command, exitCode: undefined, chunks: [], listeners: new Set(), ended: false, killed: false,
    push(kind, data) { this.chunks.push({ kind, data }); for (const l of this.listeners) l.data(kind, data); },
    // The daemon's labelers read each stream line by line (`while IFS= read -r line || [ -n "$line" ]`,
    // cmdWrapperFormat): a line reaches the log once its newline comes, a last line without
    // one gets one, NUL bytes are lost.
    partial: { 1: Buffer.alloc(0), 2: Buffer.alloc(0) },
    line(kind, data) {
      const all = Buffer.concat([this.partial[kind], Buffer.from(data.filter((b) => b !== 0))]);
      const end = all.lastIndexOf(10) + 1;
      this.partial[kind] = all.subarray(end);
      if (end) this.push(kind, all.subarray(0, end));
    },
    flush() { for (const k of [1, 2]) if (this.partial[k].length) this.line(k, Buffer.from('\n')); },
    done() { if (this.ended) return; this.ended = true; for (const l of [...this.listeners]) l.end(); this.child?.stdin?.end(); } };
  cmd.finished = new Promise((r) => { const d = cmd.done.bind(cmd); cmd.done = () => { d(); r(); }; });
  sess.commands.push(cmd);
  sess.queue = sess.queue.then(() => runSessionCommand(sb, sess, cmd));
  return cmd;
}
const MARK = { 1: Buffer.from([1, 1, 1]), 2: Buffer.from([2, 2, 2]) };
function logsOf(cmd) {
  const pick = (k) => Buffer.concat(cmd.chunks.filter((c) => !k || c.kind === k).map((c) => c.data)).toString('utf8');
  return { output: pick(0), stdout: pick(1), stderr: pick(2) };
}
function sdkVersionAtLeast(req, want) {
  const v = String(req.headers['x-daytona-sdk-version'] || '').split('.').map((x) => parseInt(x, 10));
  if (!v.length || Number.isNaN(v[0])) return false;
  for (let i = 0; i < want.length; i++) { const a = v[i] || 0; if (a !== want[i]) return a > want[i]; }
  return true;
}
function findCommand(sb, sid, cid) {
  const sess = sb.sessions.get(sid);
  if (!sess) fail(404, `session ${sid} not found`, 'NOT_FOUND');
  const cmd = sess.commands.find((c) => c.id === cid);
  if (!cmd) fail(404, `command ${cid} not found`, 'PROCESS_NOT_FOUND');
  return { sess, cmd };
}
const commandDto = (c) => ({ id: c.id, command: c.command, ...(c.exitCode !== undefined ? { exitCode: c.exitCode } : {}) });

// Follow over WebSocket (what the SDK uses): one binary frame per chunk,
// prefixed by the stdout/stderr marker; a close frame (1000) at the end.
function wsFrame(opcode, payload) {
  const len = payload.length;
  const head = len < 126 ? Buffer.from([0x80 | opcode, len])
    : len < 65536 ? Buffer.from([0x80 | opcode, 126, len >> 8, len & 255])
      : (() => { const h = Buffer.alloc(10); h[0] = 0x80 | opcode; h[1] = 127; h.writeBigUInt64BE(BigInt(len), 2); return h; })();
  return Buffer.concat([head, payload]);
}
function followWs(req, socket, sb, cmd) {
  const accept = crypto.createHash('sha1').update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
    `Sec-WebSocket-Accept: ${accept}\r\n\r\n`);
  const sendChunk = (k, d) => { if (!socket.destroyed) socket.write(wsFrame(2, Buffer.concat([MARK[k], d]))); };
  let closed = false;
  const close = (code = 1000) => {
    if (closed) return; closed = true;
    cmd.listeners.delete(l); streams.delete(st);
    if (!socket.destroyed) { const p = Buffer.alloc(2); p.writeUInt16BE(code); socket.end(wsFrame(8, p)); }
  };
  const l = { data: sendChunk, end: () => close(1000) };
  const st = { sandboxId: sb.id, close: () => { closed = true; cmd.listeners.delete(l); streams.delete(st); socket.destroy(); } };
  socket.on('data', (d) => { if ((d[0] & 0x0f) === 8) close(1000); });
  socket.on('error', () => {});
  socket.on('close', () => { closed = true; cmd.listeners.delete(l); streams.delete(st); });
  for (const c of cmd.chunks) sendChunk(c.kind, c.data);
  if (cmd.ended) return close(1000);
  cmd.listeners.add(l);
  streams.add(st);
}

// ------------------------------------------------------------------ routes
// [method, pattern, handler, area]; {x} captures one path segment. The route
// key used for call counts and faults is `${method} ${pattern}` without the
// /api or /toolbox prefix folded away, e.g. "POST /api/sandbox/{id}/start",
// "POST /toolbox/{id}/process/execute".
const routes = [];
const on = (method, pattern, handler) => {
  const names = [];
  const re = new RegExp('^' + pattern.replace(/\{(\w+)\}/g, (_, n) => { names.push(n); return '([^/]+)'; }) + '/?$');
  routes.push({ method, pattern, re, names, handler, key: `${method} ${pattern}`,
    area: pattern.startsWith('/api/') ? 'api' : pattern.startsWith('/toolbox/') ? 'toolbox' : 'other' });
};

// control plane
on('POST', '/api/sandbox', async (c) => send(c.res, 200, sandboxDto(createSandbox(await c.json()))));
on('GET', '/api/sandbox', (c) => send(c.res, 200, listSandboxes(c.query)));
on('GET', '/api/sandbox/{id}', (c) => send(c.res, 200, sandboxDto(findSandbox(c.p.id))));
on('DELETE', '/api/sandbox/{id}', (c) => {
  const sb = findSandbox(c.p.id);
  guardChange(sb, 'delete');
  deleteSandbox(sb);
  send(c.res, 200, sandboxDto(sb));
});
on('POST', '/api/sandbox/{id}/start', (c) => {
  const sb = findSandbox(c.p.id);
  guardChange(sb, 'start');
  if (sb.state === 'started') return send(c.res, 200, sandboxDto(sb));
  if (!['stopped', 'archived'].includes(sb.state)) fail(400, `Sandbox is not in a startable state (${sb.state})`);
  startSandbox(sb);
  send(c.res, 200, sandboxDto(sb));
});
on('POST', '/api/sandbox/{id}/stop', (c) => {
  const sb = findSandbox(c.p.id);
  guardChange(sb, 'stop');
  // SandboxService.stop (apps/api/src/sandbox/services/sandbox.service.ts).
  if (sb.state !== 'started') fail(400, 'Sandbox is not in a stoppable state');
  stopSandbox(sb);
  send(c.res, 200, sandboxDto(sb));
});
on('POST', '/api/sandbox/{id}/pause', () => fail(422, 'Pause is only supported for VM sandboxes'));
on('POST', '/api/sandbox/{id}/recover', (c) => {
  const sb = findSandbox(c.p.id);
  if (sb.state !== 'error' || !sb.recoverable) fail(400, 'Sandbox is not recoverable');
  sb.errorReason = undefined; sb.recoverable = undefined;
  startSandbox(sb);
  send(c.res, 200, sandboxDto(sb));
});
on('PUT', '/api/sandbox/{id}/labels', async (c) => {
  const sb = findSandbox(c.p.id);
  const body = await c.json();
  if (!body.labels || typeof body.labels !== 'object') fail(400, 'labels is required');
  sb.labels = { ...body.labels }; sb.updatedAt = now();
  send(c.res, 200, { labels: sb.labels });
});
on('POST', '/api/sandbox/{id}/network-settings', async (c) => {
  const sb = findSandbox(c.p.id);
  const body = await c.json();
  if (body.networkBlockAll !== undefined) sb.networkBlockAll = !!body.networkBlockAll;
  if (body.networkAllowList !== undefined) sb.networkAllowList = body.networkAllowList;
  if (body.domainAllowList !== undefined) sb.domainAllowList = body.domainAllowList;
  sb.updatedAt = now();
  send(c.res, 200, sandboxDto(sb));
});
on('PUT', '/api/sandbox/{id}/secrets', async (c) => {
  const sb = findSandbox(c.p.id);
  const body = await c.json();
  sb.secretLinks = parseSecretLinks(body.secrets ?? []);
  sb.updatedAt = now();
  send(c.res, 200, sandboxDto(sb));
});
for (const kind of ['autostop', 'autoarchive', 'autodelete', 'autopause']) {
  on('POST', `/api/sandbox/{id}/${kind}/{interval}`, (c) => {
    const sb = findSandbox(c.p.id);
    const n = Number(c.p.interval);
    if (!Number.isInteger(n)) fail(400, 'interval must be an integer');
    sb[{ autostop: 'autoStopInterval', autoarchive: 'autoArchiveInterval', autodelete: 'autoDeleteInterval', autopause: 'autoPauseInterval' }[kind]] = n;
    send(c.res, 200, null);
  });
}
on('POST', '/api/sandbox/{id}/last-activity', (c) => { findSandbox(c.p.id).lastActivityAt = now(); send(c.res, 201, null); });
on('GET', '/api/sandbox/{id}/toolbox-proxy-url', (c) => { findSandbox(c.p.id); send(c.res, 200, { url: `${BASE}/toolbox` }); });
on('GET', '/api/sandbox/{id}/ports/{port}/preview-url', (c) => {
  const sb = findSandbox(c.p.id);
  const port = Number(c.p.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) fail(400, 'Invalid port');
  send(c.res, 200, { sandboxId: sb.id, url: `${BASE}/preview/${sb.id}/${port}`, token: sb.previewToken });
});
on('GET', '/api/config', (c) => send(c.res, 200, { version: DAEMON_VERSION, proxyToolboxUrl: `${BASE}/toolbox`,
  proxyTemplateUrl: `${BASE}/preview/{{SANDBOX_ID}}/{{PORT}}`, defaultSnapshot: 'daytonaio/sandbox:0.5.0', analyticsApiUrl: null }));
// secrets
on('POST', '/api/secret', async (c) => {
  const body = await c.json();
  if (typeof body.name !== 'string' || !SECRET_NAME_RE.test(body.name)) fail(400, 'name must match ^[a-zA-Z_][a-zA-Z0-9_-]*$');
  if (typeof body.value !== 'string' || !body.value) fail(400, 'value is required');
  if ([...secrets.values()].some((s) => s.name === body.name)) fail(409, `Secret with name ${body.name} already exists`);
  const t = now();
  const s = { id: uuid(), name: body.name, value: body.value, description: body.description, hosts: checkHosts(body.hosts),
    placeholder: `dtn_secret_${crypto.randomBytes(16).toString('hex')}`, createdAt: t, updatedAt: t };
  secrets.set(s.id, s);
  send(c.res, 201, secretDto(s));
});
on('GET', '/api/secret', (c) => send(c.res, 200, [...secrets.values()].map(secretDto)));
on('GET', '/api/secret/paginated', (c) => {
  const limit = c.query.get('limit') ? Number(c.query.get('limit')) : 100;
  if (!Number.isInteger(limit) || limit < 1 || limit > 200) fail(400, 'limit must be an integer between 1 and 200');
  const name = c.query.get('name');
  const all = [...secrets.values()].filter((s) => !name || s.name.toLowerCase().includes(name.toLowerCase()))
    .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  const off = decCursor(c.query.get('cursor'));
  send(c.res, 200, { items: all.slice(off, off + limit).map(secretDto), total: all.length,
    nextCursor: off + limit < all.length ? encCursor(off + limit) : null });
});
on('GET', '/api/secret/{id}', (c) => send(c.res, 200, secretDto(findSecret(c.p.id))));
on('PATCH', '/api/secret/{id}', async (c) => {
  const s = findSecret(c.p.id);
  const body = await c.json();
  if (body.value !== undefined) { if (typeof body.value !== 'string' || !body.value) fail(400, 'value must be a non-empty string'); s.value = body.value; }
  if (body.description !== undefined) s.description = body.description;
  if (body.hosts !== undefined) s.hosts = checkHosts(body.hosts);
  s.updatedAt = now();
  send(c.res, 200, secretDto(s));
});
on('DELETE', '/api/secret/{id}', (c) => { const s = findSecret(c.p.id); secrets.delete(s.id); send(c.res, 204, null); });

// toolbox (at {toolboxProxyUrl}/{sandboxId}/...)
on('GET', '/toolbox/{id}/version', (c) => send(c.res, 200, { version: DAEMON_VERSION }));
on('GET', '/toolbox/{id}/user-home-dir', (c) => send(c.res, 200, { dir: c.sb.dir }));
on('GET', '/toolbox/{id}/work-dir', (c) => send(c.res, 200, { dir: c.sb.dir }));
on('GET', '/toolbox/{id}/files', (c) => {
  const p = c.query.get('path') || '.';
  const abs = resolvePath(c.sb, p);
  send(c.res, 200, fsTry(p, () => fs.readdirSync(abs).map((n) => fileInfo(path.join(abs, n)))));
});
on('GET', '/toolbox/{id}/files/info', (c) => { const p = c.query.get('path'); send(c.res, 200, fsTry(p, () => fileInfo(resolvePath(c.sb, p)))); });
on('DELETE', '/toolbox/{id}/files', (c) => {
  const p = c.query.get('path');
  const abs = resolvePath(c.sb, p);
  fsTry(p, () => {
    const st = fs.statSync(abs);
    if (st.isDirectory() && c.query.get('recursive') !== 'true') fs.rmdirSync(abs); else fs.rmSync(abs, { recursive: true });
  });
  send(c.res, 204, null);
});
on('POST', '/toolbox/{id}/files/folder', (c) => {
  const p = c.query.get('path');
  const mode = parseInt(c.query.get('mode') || '755', 8);
  fsTry(p, () => fs.mkdirSync(resolvePath(c.sb, p), { recursive: true, mode }));
  send(c.res, 201, null);
});
on('POST', '/toolbox/{id}/files/move', (c) => {
  const s = c.query.get('source'), d = c.query.get('destination');
  // MoveFile (apps/daemon/pkg/toolbox/fs/move_file.go): a destination that
  // exists is 409, never overwritten.
  const exists = (() => { try { fs.lstatSync(resolvePath(c.sb, d)); return true; } catch { return false; } })();
  fsTry(s, () => fs.lstatSync(resolvePath(c.sb, s)));
  if (exists) fail(409, 'destination already exists', 'CONFLICT');
  fsTry(s, () => fs.renameSync(resolvePath(c.sb, s), resolvePath(c.sb, d)));
  send(c.res, 200, null);
});
on('GET', '/toolbox/{id}/files/download', (c) => {
  const p = c.query.get('path');
  const data = fsTry(p, () => fs.readFileSync(resolvePath(c.sb, p)));
  send(c.res, 200, data, { 'content-type': 'application/octet-stream',
    'content-disposition': `attachment; filename="${path.basename(p)}"` });
});
on('POST', '/toolbox/{id}/files/bulk-download', async (c) => {
  const body = await c.json();
  if (!Array.isArray(body.paths)) fail(400, 'paths is required', 'INVALID_REQUEST_BODY');
  const parts = body.paths.map((p) => {
    try { return { name: 'file', filename: p, type: 'application/octet-stream', data: fsTry(p, () => fs.readFileSync(resolvePath(c.sb, p))) }; } catch (e) {
      const err = e instanceof HttpError ? e : new HttpError(500, String(e));
      return { name: 'error', filename: p, type: 'application/json', data: Buffer.from(JSON.stringify(toolboxErrorBody(c.req, err.status, err.message, err.code))) };
    }
  });
  const mp = multipartBody(parts);
  send(c.res, 200, mp.body, { 'content-type': mp.type });
});
const uploadOne = async (c) => {
  const p = c.query.get('path');
  const raw = await c.raw();
  const ct = c.req.headers['content-type'] || '';
  let data = raw;
  if (/^multipart\/form-data/i.test(ct)) {
    const f = parseMultipart(raw, ct).find((x) => x.name === 'file');
    if (!f) fail(400, 'multipart field "file" is required', 'INVALID_REQUEST_BODY');
    data = f.data;
  }
  writeFile(c.sb, p, data);
  send(c.res, 200, null);
};
on('POST', '/toolbox/{id}/files/upload', uploadOne);
on('POST', '/toolbox/{id}/files/upload-v2', uploadOne);
on('POST', '/toolbox/{id}/files/bulk-upload', async (c) => {
  const parts = parseMultipart(await c.raw(), c.req.headers['content-type']);
  const byIndex = new Map();
  for (const p of parts) {
    const m = /^files\[(\d+)\]\.(path|file)$/.exec(p.name || '');
    if (!m) continue;
    const e = byIndex.get(m[1]) || {};
    e[m[2]] = p.data;
    byIndex.set(m[1], e);
  }
  for (const [i, e] of byIndex) {
    if (!e.path || !e.file) fail(400, `files[${i}] needs both path and file`, 'INVALID_REQUEST_BODY');
    writeFile(c.sb, e.path.toString('utf8'), e.file);
  }
  send(c.res, 200, null);
});
on('POST', '/toolbox/{id}/process/execute', async (c) => send(c.res, 200, await execute(c.sb, await c.json())));
on('POST', '/toolbox/{id}/process/session', async (c) => {
  const body = await c.json();
  if (typeof body.sessionId !== 'string' || !body.sessionId) fail(400, 'sessionId is required', 'INVALID_REQUEST_BODY');
  if (c.sb.sessions.has(body.sessionId)) fail(409, `session ${body.sessionId} already exists`, 'CONFLICT');
  c.sb.sessions.set(body.sessionId, newSession(c.sb, body.sessionId));
  send(c.res, 201, null);
});
on('GET', '/toolbox/{id}/process/session', (c) => send(c.res, 200, [...c.sb.sessions.values()].map((s) => ({ sessionId: s.id, commands: s.commands.map(commandDto) }))));
on('GET', '/toolbox/{id}/process/session/{sid}', (c) => {
  const s = c.sb.sessions.get(c.p.sid);
  if (!s) fail(404, `session ${c.p.sid} not found`, 'NOT_FOUND');
  send(c.res, 200, { sessionId: s.id, commands: s.commands.map(commandDto) });
});
on('DELETE', '/toolbox/{id}/process/session/{sid}', (c) => {
  const s = c.sb.sessions.get(c.p.sid);
  if (!s) fail(404, `session ${c.p.sid} not found`, 'NOT_FOUND');
  c.sb.sessions.delete(s.id);
  for (const cmd of s.commands) { cmd.killed = true; if (cmd.child) killGroup(cmd.child); }
  send(c.res, 204, null);
});
on('POST', '/toolbox/{id}/process/session/{sid}/exec', async (c) => {
  const s = c.sb.sessions.get(c.p.sid);
  // The controller wraps the service's not-found: c.Error(fmt.Errorf("failed to
  // execute command: %w", err)) reaches the middleware's default case, 500.
  if (!s) fail(500, `failed to execute command: not found: session not found`, 'INTERNAL_SERVER_ERROR');
  const body = await c.json();
  if (typeof body.command !== 'string' || !body.command) fail(400, 'command is required', 'INVALID_REQUEST_BODY');
  const cmd = enqueueCommand(c.sb, s, body.command);
  // Stored per command at exec time (SessionExecuteRequest, Command.SuppressInputEcho).
  cmd.suppressInputEcho = body.suppressInputEcho === true;
  if (body.runAsync || body.async) return send(c.res, 202, { cmdId: cmd.id });
  await cmd.finished;
  const l = logsOf(cmd);
  send(c.res, 200, { cmdId: cmd.id, output: l.output, stdout: l.stdout, stderr: l.stderr, exitCode: cmd.exitCode });
});
on('GET', '/toolbox/{id}/process/session/{sid}/command/{cid}', (c) => send(c.res, 200, commandDto(findCommand(c.sb, c.p.sid, c.p.cid).cmd)));
on('GET', '/toolbox/{id}/process/session/{sid}/command/{cid}/logs', (c) => {
  const { cmd } = findCommand(c.sb, c.p.sid, c.p.cid);
  // The log file exists once the command's wrapper runs; before, os.ReadFile fails.
  if (!cmd.child && cmd.exitCode === undefined) fail(404, 'not found: open output.log: no such file or directory', 'NOT_FOUND');
  // Without a WebSocket upgrade, ?follow is ignored: the log so far (GetSessionCommandLogs,
  // apps/daemon/pkg/session/log.go).
  const l = logsOf(cmd);
  if (sdkVersionAtLeast(c.req, [0, 167, 0])) return send(c.res, 200, l);
  send(c.res, 200, l.output);
});
on('POST', '/toolbox/{id}/process/session/{sid}/command/{cid}/input', async (c) => {
  const { cmd } = findCommand(c.sb, c.p.sid, c.p.cid);
  const body = await c.json();
  if (typeof body.data !== 'string') fail(400, 'data is required', 'INVALID_REQUEST_BODY');
  if (cmd.exitCode !== undefined || cmd.ended) fail(410, 'command has already completed', 'COMMAND_ALREADY_COMPLETED');
  // The daemon opens the FIFO the command's wrapper makes when the command
  // starts; before that the open fails (SendInput, apps/daemon/pkg/session/input.go).
  if (!cmd.child) fail(500, 'internal server error: failed to open input pipe: no such file or directory', 'INTERNAL_SERVER_ERROR');
  // "Ensure newline for commands like `read`": input without one gets one;
  // then, unless the command was started with suppressInputEcho, what was
  // written is appended to the command's log as stdout (SendInput, input.go).
  const data = body.data.endsWith('\n') ? body.data : body.data + '\n';
  cmd.child.stdin.write(data);
  if (!cmd.suppressInputEcho) cmd.push(1, Buffer.from(data));
  send(c.res, 204, null);
});

// ----------------------------------------------------------- admin API
const PREVIEW_KEY = /^[A-Z]+ \/preview\/\{id\}\/\{port\}$/;
function admin(req, res, url, buf) {
  const p = url.pathname.replace(/^\/_emulator/, '');
  const body = () => jsonBody(buf);
  let m;
  if (req.method === 'GET' && p === '/calls') return send(res, 200, Object.fromEntries(calls));
  if (req.method === 'DELETE' && p === '/calls') { calls.clear(); return send(res, 204, null); }
  if (req.method === 'GET' && p === '/routes') return send(res, 200, [...routes.map((r) => r.key), 'GET /preview/{id}/{port}', 'POST /preview/{id}/{port}']);
  if (req.method === 'GET' && p === '/login') return send(res, 200, 'Daytona login (emulated): preview needs x-daytona-preview-token\n');
  if (req.method === 'GET' && p === '/faults') return send(res, 200, Object.fromEntries(faults));
  if (req.method === 'POST' && p === '/faults') {
    const b = body();
    const list = Array.isArray(b) ? b : [b];
    for (const f of list) {
      if (!routes.some((r) => r.key === f.route) && !PREVIEW_KEY.test(f.route || '')) fail(400, `unknown route ${f.route} (GET /_emulator/routes lists them)`);
      if (f.after !== undefined && !(Number.isInteger(f.after) && f.after >= 0)) fail(400, 'after must be an integer >= 0');
      faults.set(f.route, { status: f.status ?? 0, count: f.count ?? 1, latencyMs: f.latencyMs ?? 0, after: f.after ?? 0,
        ...(f.message ? { message: f.message } : {}) });
    }
    return send(res, 200, Object.fromEntries(faults));
  }
  if (req.method === 'DELETE' && p === '/faults') { faults.clear(); return send(res, 204, null); }
  if (req.method === 'GET' && p === '/config') return send(res, 200, config);
  if (req.method === 'POST' && p === '/config') {
    const b = body();
    if (b.transitionMs !== undefined) config.transitionMs = Number(b.transitionMs);
    return send(res, 200, config);
  }
  if (req.method === 'POST' && (m = /^\/sandbox\/([^/]+)\/error$/.exec(p))) {
    const sb = findSandbox(decodeURIComponent(m[1]));
    const b = body();
    forceError(sb, b.errorReason, b.recoverable);
    return send(res, 200, sandboxDto(sb));
  }
  if (req.method === 'GET' && (m = /^\/sandbox\/([^/]+)$/.exec(p))) {
    const sb = findSandbox(decodeURIComponent(m[1]));
    return send(res, 200, { ...sandboxDto(sb), dir: sb.dir, previewToken: sb.previewToken, egressProxyUrl: egressProxyUrl(sb),
      pids: [...sb.procs].map((c) => c.pid), sessions: [...sb.sessions.keys()], secrets: sb.secretLinks });
  }
  if (req.method === 'GET' && p === '/egress') {
    const sid = url.searchParams.get('sandboxId');
    return send(res, 200, egressLog.filter((e) => !sid || e.sandboxId === sid));
  }
  if (req.method === 'DELETE' && p === '/egress') { egressLog.length = 0; return send(res, 204, null); }
  if (req.method === 'GET' && p === '/egress/hosts') return send(res, 200, egressHostsDto());
  if (req.method === 'POST' && p === '/egress/hosts') {
    const b = body();
    if (!b || typeof b !== 'object' || Array.isArray(b)) fail(400, 'expected a JSON object {"NAME":"127.0.0.1:PORT"} (null removes NAME)');
    // All or nothing: check every entry before changing the map.
    const parsed = Object.entries(b).map(([name, target]) => [name.toLowerCase(), target === null ? null : parseUpstream(name, target)]);
    for (const [name, up] of parsed) if (up) egressHosts.set(name, up); else egressHosts.delete(name);
    return send(res, 200, egressHostsDto());
  }
  if (req.method === 'DELETE' && p === '/egress/hosts') { egressHosts.clear(); return send(res, 204, null); }
  if (req.method === 'POST' && p === '/streams/drop') {
    const sid = url.searchParams.get('sandboxId');
    let n = 0;
    for (const st of [...streams]) if (!sid || st.sandboxId === sid) { st.close(); n++; }
    return send(res, 200, { dropped: n });
  }
  fail(404, `no admin route ${req.method} ${p}`);
}

// ------------------------------------------------------------ dispatch
function match(method, pathname) {
  for (const r of routes) {
    if (r.method !== method) continue;
    const m = r.re.exec(pathname);
    if (m) return { r, p: Object.fromEntries(r.names.map((n, i) => [n, decodeURIComponent(m[i + 1])])) };
  }
  return null;
}
const authorized = (req) => req.headers.authorization === `Bearer ${API_KEY}`;
// A fault for the route, if one is armed: the first `after` calls pass
// untouched; then it waits its latency and answers its status (0 = only the
// latency), `count` times. count < 0 means every call.
async function applyFault(key) {
  const f = faults.get(key);
  if (!f) return null;
  if (f.after > 0) { f.after--; return null; }
  if (f.count === 0) { faults.delete(key); return null; }
  if (f.count > 0 && --f.count === 0) faults.delete(key);
  if (f.latencyMs) await sleep(f.latencyMs);
  return f.status ? f : null;
}
function toolboxSandbox(id) {
  const sb = sandboxes.get(id);
  if (!sb) fail(404, `sandbox ${id} not found`, 'NOT_FOUND');
  if (sb.state !== 'started') fail(400, 'no IP address found. Is the Sandbox started?', 'BAD_REQUEST');
  sb.lastActivityAt = now();
  return sb;
}

async function handle(req, res) {
  const url = new URL(req.url, 'http://127.0.0.1');
  const pathname = url.pathname;
  if (pathname.startsWith('/_emulator/')) {
    const buf = await readBody(req);
    try { return admin(req, res, url, buf); } catch (e) {
      return send(res, e.status || 500, apiErrorBody(req, e.status || 500, e.message));
    }
  }
  if (pathname.startsWith('/preview/')) return preview(req, res, url);
  const hit = match(req.method, pathname);
  const area = hit?.r.area ?? (pathname.startsWith('/toolbox/') ? 'toolbox' : 'api');
  const errBody = (status, message, code) => area === 'toolbox' ? toolboxErrorBody(req, status, message, code) : apiErrorBody(req, status, message);
  const key = hit ? hit.r.key : `${req.method} ${pathname}`;
  calls.set(key, (calls.get(key) || 0) + 1);
  log({ method: req.method, url: req.url, route: key });
  try {
    // The control plane's guard: UnauthorizedException('Invalid credentials')
    // (apps/api/src/auth/global-auth.guard.ts handleRequest); the toolbox
    // proxy's: 'unauthorized: authentication failed' (apps/proxy auth.go).
    if (!authorized(req)) fail(401, area === 'toolbox' ? 'unauthorized: authentication failed: Bearer token is invalid' : 'Invalid credentials', 'UNAUTHORIZED');
    const f = await applyFault(key);
    if (f) return send(res, f.status, errBody(f.status, f.message || `Injected fault (${f.status})`));
    if (!hit) fail(404, `Cannot ${req.method} ${pathname}`);
    let raw = null;
    const c = { req, res, url, query: url.searchParams, p: hit.p,
      raw: async () => (raw ??= await readBody(req)), json: async () => jsonBody(await c.raw()) };
    if (area === 'toolbox') c.sb = toolboxSandbox(hit.p.id);
    await hit.r.handler(c);
  } catch (e) {
    if (!(e instanceof HttpError)) { console.error(e); e = new HttpError(500, area === 'toolbox' ? String(e.message) : 'An unexpected error occurred.'); }
    send(res, e.status, errBody(e.status, e.message, e.code));
  }
}

// ------------------------------------------------------------- preview
function previewAuth(req, url, sb) {
  if (sb.public) return true;
  const t = req.headers['x-daytona-preview-token'] || url.searchParams.get('DAYTONA_SANDBOX_AUTH_KEY');
  return t === sb.previewToken;
}
function previewTarget(req, res, url) {
  const m = /^\/preview\/([^/]+)\/(\d+)(\/.*)?$/.exec(url.pathname);
  const key = `${req.method} /preview/{id}/{port}`;
  calls.set(key, (calls.get(key) || 0) + 1);
  if (!m) { send(res, 404, 'not found'); return null; }
  const sb = sandboxes.get(m[1]);
  if (!sb) { send(res, 404, apiErrorBody(req, 404, `Sandbox ${m[1]} not found`)); return null; }
  if (!previewAuth(req, url, sb)) {
    send(res, 307, null, { location: `${BASE}/_emulator/login?redirect=${encodeURIComponent(url.pathname)}` });
    return null;
  }
  if (sb.state !== 'started') { send(res, 400, apiErrorBody(req, 400, 'no IP address found. Is the Sandbox started?')); return null; }
  const q = new URLSearchParams(url.search);
  q.delete('DAYTONA_SANDBOX_AUTH_KEY');
  const qs = q.toString();
  return { sb, port: Number(m[2]), path: (m[3] || '/') + (qs ? `?${qs}` : ''), key };
}
async function preview(req, res, url) {
  const t = previewTarget(req, res, url);
  if (!t) return;
  const f = await applyFault(t.key);
  if (f) return send(res, f.status, apiErrorBody(req, f.status, f.message || `Injected fault (${f.status})`));
  const headers = { ...req.headers, host: `127.0.0.1:${t.port}` };
  delete headers['x-daytona-preview-token'];
  const up = http.request({ host: '127.0.0.1', port: t.port, method: req.method, path: t.path, headers }, (ur) => {
    res.writeHead(ur.statusCode, ur.headers);
    ur.pipe(res);
  });
  up.on('error', () => send(res, 502, apiErrorBody(req, 502, `nothing listens on port ${t.port} in sandbox ${t.sb.id}`)));
  req.pipe(up);
}

// --------------------------------------------------------- egress proxy
// Daytona's egress proxy: every sandbox process has HTTP(S)_PROXY pointing
// here with its sandbox's credentials. In a request to a host one of the
// sandbox's secrets lists, the secret's placeholder becomes its value in
// header values and the query string; any other host gets the request as
// sent. Names resolve through the egress host map only, to loopback
// upstreams: the emulator never contacts the internet. CONNECT is a plain
// tunnel (no TLS interception, so no substitution).
const egressHosts = new Map();   // lower-cased name or *.domain -> {host, port}
const egressLog = [];            // proxied requests: names of secrets used, never values
const EGRESS_LOG_MAX = 10000;
const EGRESS_HELP = '--egress-host NAME=127.0.0.1:PORT or POST /_emulator/egress/hosts';
let EGRESS_PORT = 0;

function parseUpstream(name, target) {
  if (typeof name !== 'string' || !HOST_RE.test(name)) fail(400, `egress host name ${name}: a host name or *.domain, no port`);
  const m = /^(127\.0\.0\.1|localhost|\[::1\]):(\d{1,5})$/.exec(typeof target === 'string' ? target : '');
  if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535)
    fail(400, `egress host ${name}: upstream ${JSON.stringify(target)} must be 127.0.0.1:PORT (or localhost:PORT, [::1]:PORT)`);
  return { host: m[1] === '[::1]' ? '::1' : m[1], port: Number(m[2]) };
}
const egressHostsDto = () => Object.fromEntries([...egressHosts].map(([n, u]) =>
  [n, `${u.host === '::1' ? '[::1]' : u.host}:${u.port}`]));
// Daytona's host rules: an exact name, or `*.domain` for the subdomains of
// domain (not domain itself). Host and rule compare lower-cased.
function hostMatches(rule, host) {
  rule = rule.toLowerCase();
  if (rule.startsWith('*.')) return host.endsWith(rule.slice(1)) && host.length > rule.length - 1;
  return host === rule;
}
// The upstream of a host: the map (exact, then wildcard entries); a
// loopback name not in the map goes to itself.
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);
function egressUpstream(host, port) {
  if (egressHosts.has(host)) return egressHosts.get(host);
  for (const [name, up] of egressHosts) if (name.startsWith('*.') && hostMatches(name, host)) return up;
  if (LOOPBACK.has(host)) return { host: host === '[::1]' ? '::1' : host, port: Number(port) || 80 };
  return null;
}
// Proxy-Authorization: Basic base64(sandboxId:token).
function egressSandbox(req) {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(req.headers['proxy-authorization'] || '');
  if (!m) return null;
  const cred = Buffer.from(m[1], 'base64').toString('utf8');
  const i = cred.indexOf(':');
  const sb = i > 0 ? sandboxes.get(cred.slice(0, i)) : undefined;
  return sb && sb.egressToken === cred.slice(i + 1) ? sb : null;
}
// The secrets linked to the sandbox that may go to host (no hosts: any
// host, as Daytona does).
function egressSecrets(sb, host) {
  const names = new Set(sb.secretLinks.map((l) => l.secretName));
  return [...secrets.values()].filter((s) => names.has(s.name) && (!s.hosts.length || s.hosts.some((h) => hostMatches(h, host))));
}
function egressRecord(entry) {
  const rec = { t: now(), ...entry };
  egressLog.push(rec);
  if (egressLog.length > EGRESS_LOG_MAX) egressLog.shift();
  log({ event: 'egress', ...rec });
  return rec;
}
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-authorization', 'proxy-authenticate', 'proxy-connection', 'te',
  'trailer', 'upgrade'];
// rawHeaders to an object (repeated names as arrays), without hop-by-hop
// headers and those the Connection header names.
function forwardHeaders(raw, connection, drop = [], map = (v) => v) {
  const skip = new Set([...HOP_BY_HOP, ...drop, ...String(connection || '').toLowerCase().split(',').map((x) => x.trim())]);
  const out = {};
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i];
    if (skip.has(k.toLowerCase())) continue;
    const v = map(raw[i + 1]);
    out[k] = k in out ? [].concat(out[k], v) : v;
  }
  return out;
}
const EGRESS_TAG = 'egress proxy (Daytona emulator)';
const proxyAuthHeaders = { 'proxy-authenticate': 'Basic realm="daytona-egress"' };

function egressRequest(req, res, tunnelSb) {
  // The request target as sent (absolute form), host lower-cased.
  const m = /^http:\/\/([^/?#]+)([^#]*)/i.exec(req.url);
  let host = '', port = '';
  try { const u = new URL(req.url); if (m) { host = u.hostname.toLowerCase(); port = u.port; } } catch { /* origin form */ }
  if (!host) return send(res, 400, `${EGRESS_TAG}: expected an absolute-form http:// request (https goes through CONNECT)\n`);
  const target = m[2] || '/';
  const sb = tunnelSb ?? egressSandbox(req);
  const rec = egressRecord({ sandboxId: sb ? sb.id : null, method: req.method, host, path: target, secrets: [] });
  if (!sb) {
    rec.status = 407;
    return send(res, 407, `${EGRESS_TAG}: Proxy-Authorization missing or wrong (the sandbox's HTTP_PROXY carries it)\n`, proxyAuthHeaders);
  }
  const up = egressUpstream(host, port);
  if (!up) {
    rec.status = 502;
    return send(res, 502, `${EGRESS_TAG}: host ${host} is not in the egress host map (${EGRESS_HELP}); the emulator never contacts the internet\n`);
  }
  const subs = egressSecrets(sb, host);
  const used = new Set();
  const swap = (text, inQuery) => {
    for (const s of subs) {
      if (!text.includes(s.placeholder)) continue;
      used.add(s.name);
      const value = inQuery ? encodeURIComponent(s.value) : s.value;
      text = text.replaceAll(s.placeholder, () => value);
    }
    return text;
  };
  const q = target.indexOf('?');
  const pathOut = q < 0 ? target : target.slice(0, q) + swap(target.slice(q), true);
  const headers = forwardHeaders(req.rawHeaders, req.headers.connection, [], (v) => swap(v, false));
  rec.secrets = [...used];
  let ureq;
  try {
    ureq = http.request({ host: up.host, port: up.port, method: req.method, path: pathOut, headers, agent: false }, (ur) => {
      rec.status = ur.statusCode;
      res.writeHead(ur.statusCode, ur.statusMessage, forwardHeaders(ur.rawHeaders, ur.headers.connection, ['transfer-encoding']));
      ur.pipe(res);
      ur.on('error', () => res.destroy());
    });
  } catch (e) {
    // e.g. a value with a character a header cannot carry; name no value.
    rec.status = 502;
    return send(res, 502, `${EGRESS_TAG}: cannot forward to ${host}: ${e.code || 'invalid request'}\n`);
  }
  ureq.on('error', (e) => {
    if (rec.status === undefined) rec.status = 502;
    if (res.headersSent) return res.destroy();
    send(res, 502, `${EGRESS_TAG}: upstream of ${host} (${up.host}:${up.port}) failed: ${e.code || e.message}\n`);
  });
  res.on('close', () => { if (!res.writableFinished) ureq.destroy(); });
  req.pipe(ureq);
}
// CONNECT host:port: a tunnel to the host's upstream, bytes untouched.
function egressConnect(req, socket, head) {
  socket.on('error', () => {});
  const m = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(req.url);
  const host = (m ? m[1] : req.url).toLowerCase();
  const sb = egressSandbox(req);
  const rec = egressRecord({ sandboxId: sb ? sb.id : null, method: 'CONNECT', host, path: null, port: m ? Number(m[2]) : null,
    secrets: [], tunnel: true });
  const refuse = (status, text, extra = {}) => {
    rec.status = status;
    const hdr = { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text), ...extra, connection: 'close' };
    socket.end(`HTTP/1.1 ${status} ${STATUS_TEXT[status]}\r\n${Object.entries(hdr).map(([k, v]) => `${k}: ${v}`).join('\r\n')}\r\n\r\n${text}`);
  };
  if (!m) return refuse(400, `${EGRESS_TAG}: CONNECT needs host:port\n`);
  if (!sb) return refuse(407, `${EGRESS_TAG}: Proxy-Authorization missing or wrong (the sandbox's HTTPS_PROXY carries it)\n`, proxyAuthHeaders);
  const up = egressUpstream(host, m[2]);
  if (!up) return refuse(502, `${EGRESS_TAG}: host ${host} is not in the egress host map (${EGRESS_HELP}); the emulator never contacts the internet\n`);
  // Daytona's proxy intercepts what goes through it; the emulator, with no
  // TLS of its own, reads plain HTTP sent through a tunnel (as Node's proxy
  // agents send even http:// requests) as it reads proxied requests, with the
  // same substitution; anything else (TLS) is a blind tunnel.
  rec.status = 200;
  socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
  const start = (first) => {
    if (/^[A-Z]{3,10} \/[^ ]* HTTP\/1\.[01]\r?\n/.test(first.subarray(0, 2048).toString('latin1'))) {
      const inner = http.createServer((ireq, ires) => {
        ireq.url = `http://${host}:${m[2]}${ireq.url}`;
        try { egressRequest(ireq, ires, sb); } catch (e) { console.error(e); send(ires, 500, `${EGRESS_TAG}: internal error\n`); }
      });
      socket.unshift(first);
      inner.emit('connection', socket);
      return;
    }
    const upSock = net.connect(up.port, up.host, () => {
      upSock.write(first);
      upSock.pipe(socket);
      socket.pipe(upSock);
    });
    upSock.on('error', () => socket.destroy());
    socket.on('close', () => upSock.destroy());
  };
  if (head?.length) return start(head);
  socket.once('data', (d) => { socket.pause(); start(d); socket.resume(); });
}
const egressServer = http.createServer((req, res) => {
  try { egressRequest(req, res); } catch (e) { console.error(e); send(res, 500, `${EGRESS_TAG}: internal error\n`); }
});
egressServer.on('connect', egressConnect);
egressServer.on('upgrade', (req, socket) => {
  socket.on('error', () => {});
  const text = `${EGRESS_TAG}: upgrades through the proxy are not emulated (use CONNECT)\n`;
  socket.end(`HTTP/1.1 501 Not Implemented\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`);
});
// The host map from the command line (and DAYTONA_EMU_EGRESS_HOSTS).
try {
  const specs = [...(process.env.DAYTONA_EMU_EGRESS_HOSTS || '').split(',').filter(Boolean), ...argAll('--egress-host')];
  for (const spec of specs) {
    const i = spec.indexOf('=');
    if (i <= 0) fail(400, `--egress-host ${spec}: expected NAME=127.0.0.1:PORT`);
    const name = spec.slice(0, i).trim().toLowerCase();
    egressHosts.set(name, parseUpstream(name, spec.slice(i + 1).trim()));
  }
} catch (e) {
  console.error(`daytona emulator: ${e.message}`);
  process.exit(2);
}

// --------------------------------------------------------------- server
const server = http.createServer((req, res) => {
  handle(req, res).catch((e) => { console.error(e); send(res, 500, { message: 'An unexpected error occurred.' }); });
});
server.on('upgrade', (req, socket, head) => {
  socket.on('error', () => {});
  const url = new URL(req.url, 'http://127.0.0.1');
  const reject = (status, body) => {
    socket.end(`HTTP/1.1 ${status} ${STATUS_TEXT[status] || ''}\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n${JSON.stringify(body)}`);
  };
  if (url.pathname.startsWith('/preview/')) {
    const fake = { headersSent: false, destroyed: false, writeHead(s, h) { this.s = s; this.h = h; }, end(b) { reject(this.s || 400, b ? String(b) : ''); } };
    const t = previewTarget(req, fake, url);
    if (!t) return;
    const up = net.connect(t.port, '127.0.0.1', () => {
      const lines = [`${req.method} ${t.path} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2)
        if (req.rawHeaders[i].toLowerCase() !== 'x-daytona-preview-token') lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      up.write(lines.join('\r\n') + '\r\n\r\n');
      if (head?.length) up.write(head);
      up.pipe(socket); socket.pipe(up);
    });
    up.on('error', () => socket.destroy());
    return;
  }
  const m = /^\/toolbox\/([^/]+)\/process\/session\/([^/]+)\/command\/([^/]+)\/logs$/.exec(url.pathname);
  const key = 'GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs';
  if (!m) return reject(404, toolboxErrorBody(req, 404, 'not found'));
  calls.set(key, (calls.get(key) || 0) + 1);
  try {
    if (!authorized(req)) fail(401, 'unauthorized: authentication failed: Bearer token is invalid', 'UNAUTHORIZED');
    const sb = toolboxSandbox(m[1]);
    const { cmd } = findCommand(sb, decodeURIComponent(m[2]), decodeURIComponent(m[3]));
    applyFault(key).then((f) => {
      if (f) return reject(f.status, toolboxErrorBody(req, f.status, f.message || `Injected fault (${f.status})`));
      followWs(req, socket, sb, cmd);
    });
  } catch (e) {
    reject(e.status || 500, toolboxErrorBody(req, e.status || 500, e.message, e.code));
  }
});

let quitting = false;
function quit() {
  if (quitting) return;
  quitting = true;
  for (const sb of sandboxes.values()) { sb.gen++; killAll(sb); }
  server.close();
  egressServer.close();
  for (const st of [...streams]) st.close();
  server.closeAllConnections?.();
  egressServer.closeAllConnections?.();
  if (tempState) fs.rmSync(STATE, { recursive: true, force: true });
  process.exit(0);
}
egressServer.listen(EGRESS_LISTEN_PORT, '127.0.0.1', () => {
  EGRESS_PORT = egressServer.address().port;
  server.listen(PORT, '127.0.0.1', () => {
    BASE = `http://127.0.0.1:${server.address().port}`;
    console.log(JSON.stringify({ url: BASE, apiUrl: `${BASE}/api`, toolboxUrl: `${BASE}/toolbox`, previewUrl: `${BASE}/preview`,
      adminUrl: `${BASE}/_emulator`, egressProxyUrl: `http://127.0.0.1:${EGRESS_PORT}`, stateDir: STATE, pid: process.pid }));
  });
});
process.on('SIGTERM', quit);
process.on('SIGINT', quit);
process.on('exit', () => { if (!quitting) for (const sb of sandboxes.values()) for (const c of sb.procs) killGroup(c); });
if (!process.stdin.isTTY && fs.fstatSync(0).isFIFO()) { process.stdin.on('end', quit); process.stdin.resume(); }
