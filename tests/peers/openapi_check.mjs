#!/usr/bin/env node
// sandrund against its contract: drives a running service through every
// operation of doc/api.yaml and checks each answer there: its status is
// documented for the operation, its content type too, its body (each line
// of an NDJSON stream) valid against the schema, its required headers
// present and valid. The bodies sent with 2xx answers are checked against
// the request schemas, and every operation must have been answered 2xx at
// least once.
//
// Usage: node openapi_check.mjs API_YAML URL TOKEN [--restarted RUN]
// The service runs the scripted agent (tests/emulators/fake_acp.mjs,
// FAKE_ACP_MODE=prompt) with [service] max_runs = 2, max_body = 4K and
// event_buffer = 32. Needs ajv, ajv-formats and yaml (pinned in
// scripts/npm-peers) from $SANDRUN_NPM_DIR: exits 77 when they are absent.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const [apiPath, base, token] = process.argv.slice(2);
let Ajv2020, addFormats, YAML;
try {
  const req = createRequire(`${process.env.SANDRUN_NPM_DIR ?? '/nonexistent'}/package.json`);
  Ajv2020 = req('ajv/dist/2020').default;
  addFormats = req('ajv-formats').default ?? req('ajv-formats');
  YAML = req('yaml');
} catch (e) {
  console.log(`SKIP: ajv, ajv-formats or yaml not found under $SANDRUN_NPM_DIR (${e.message.split('\n')[0]}); scripts/npm-peers installs them`);
  process.exit(77);
}

const doc = YAML.parse(readFileSync(apiPath, 'utf8'));
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema(doc, 'api');
const esc = (s) => encodeURIComponent(String(s).replace(/~/g, '~0').replace(/\//g, '~1'));
const pointer = (...parts) => 'api#/' + parts.map(esc).join('/');
const validators = new Map();
function validator(ptr) {
  if (!validators.has(ptr)) validators.set(ptr, ajv.getSchema(ptr));
  const v = validators.get(ptr);
  if (!v) throw new Error(`no schema at ${ptr}`);
  return v;
}

let checks = 0, failed = 0;
const ok = (name) => { checks++; console.log(`ok - ${name}`); };
const fail = (name, why) => { checks++; failed++; console.log(`FAIL - ${name}: ${why}`); };
const covered = new Set();

function findOp(method, url) {
  const path = url.split('?')[0];
  for (const [tmpl, item] of Object.entries(doc.paths)) {
    const re = new RegExp('^' + tmpl.replace(/\{[^}]+\}/g, '[^/]+') + '$');
    if (re.test(path)) return { tmpl, op: item[method.toLowerCase()] };
  }
  return null;
}

// The documented answer for method, path and status: [its object, the
// pointer to it].
function documented(method, path, status) {
  const found = findOp(method, path);
  if (!found) return status === 404 ? [doc.components.responses.NotFound, pointer('components', 'responses', 'NotFound')] : [null, 'an undocumented path'];
  if (!found.op) return status === 405 ? [doc.components.responses.MethodNotAllowed, pointer('components', 'responses', 'MethodNotAllowed')] : [null, `no ${method} on ${found.tmpl}`];
  const r = found.op.responses[String(status)];
  if (!r) return [null, `status ${status} is not documented for ${method} ${found.tmpl}`];
  covered.add(`${method} ${found.tmpl} ${status}`);
  if (r.$ref) {
    const name = r.$ref.split('/').pop();
    return [doc.components.responses[name], pointer('components', 'responses', name)];
  }
  return [r, pointer('paths', found.tmpl, method.toLowerCase(), 'responses', String(status))];
}

function errors(v) {
  return ajv.errorsText(v.errors, { separator: '; ' }).slice(0, 600);
}

// Check one answer; returns its parsed body (an array of events for a stream).
function check(name, method, path, status, headers, text, sent) {
  const [resp, ptr] = documented(method, path, status);
  if (!resp) return fail(name, ptr);
  const ctype = (headers.get('content-type') ?? '').split(';')[0].trim();
  let body = text;
  if (resp.content) {
    if (!resp.content[ctype]) return fail(name, `content type '${ctype}' is not documented for ${status}`);
    const v = validator(`${ptr}/content/${esc(ctype)}/schema`);
    if (ctype === 'application/x-ndjson') {
      body = text.split('\n').filter((l) => l).map((l) => JSON.parse(l));
      for (const ev of body)
        if (!v(ev)) return fail(name, `event ${JSON.stringify(ev).slice(0, 200)}: ${errors(v)}`);
    } else if (ctype === 'application/json') {
      body = JSON.parse(text);
      if (!v(body)) return fail(name, `${text.slice(0, 300)}: ${errors(v)}`);
    } else if (!v(text)) {
      return fail(name, errors(v));
    }
  }
  for (const [h, spec] of Object.entries(resp.headers ?? {})) {
    const def = spec.$ref ? doc.components.headers[spec.$ref.split('/').pop()] : spec;
    const got = headers.get(h);
    if (got === null) {
      if (def.required) return fail(name, `no ${h} header`);
      continue;
    }
    const hv = ajv.compile(def.schema);
    if (!hv(got)) return fail(name, `header ${h}: '${got}': ${errors(hv)}`);
  }
  if (sent !== undefined && status < 300) {
    const found = findOp(method, path);
    const rb = found.op.requestBody?.content?.['application/json'];
    if (rb) {
      const v = validator(pointer('paths', found.tmpl, method.toLowerCase(), 'requestBody', 'content', 'application/json', 'schema'));
      if (!v(sent)) return fail(name, `the body it took is not a valid request: ${errors(v)}`);
    }
  }
  ok(`${name} (${status})`);
  return body;
}

// A request; opts: body (an object, or a string sent as is), auth (false:
// no token), follow (ms: read a stream that long, then drop it), want
// (the status expected), headers.
async function call(name, method, path, opts = {}) {
  const headers = { ...(opts.headers ?? {}) };
  if (opts.auth !== false) headers.authorization = `Bearer ${token}`;
  let payload;
  if (opts.body !== undefined) {
    headers['content-type'] = 'application/json';
    payload = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
  }
  const ac = new AbortController();
  let timer;
  if (opts.follow) timer = setTimeout(() => ac.abort(), opts.follow);
  let res, text = '';
  try {
    res = await fetch(base + path, { method, headers, body: payload, signal: ac.signal });
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
    }
  } catch (e) {
    if (e.name !== 'AbortError' || !res) { fail(name, `no answer: ${e.message}`); return null; }
    text = text.slice(0, text.lastIndexOf('\n') + 1); // whole lines only
  } finally {
    clearTimeout(timer);
  }
  if (opts.want !== undefined && res.status !== opts.want) {
    fail(name, `HTTP ${res.status}, wanted ${opts.want}: ${text.slice(0, 200)}`);
    return null;
  }
  const sent = typeof opts.body === 'object' ? opts.body : undefined;
  return { status: res.status, body: check(name, method, path, res.status, res.headers, text, sent) };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitEvent(run, type) {
  for (let i = 0; i < 40; i++) {
    const r = await call(`follow ${run} for ${type}`, 'GET', `/v1/runs/${run}/events`, { follow: 400, want: 200 });
    if (r?.body?.some?.((e) => e.type === type)) return true;
  }
  return false;
}
async function waitState(run, state) {
  for (let i = 0; i < 200; i++) {
    const res = await fetch(`${base}/v1/runs/${run}`, { headers: { authorization: `Bearer ${token}` } });
    if ((await res.json()).state === state) return true;
    await sleep(50);
  }
  return false;
}

// --restarted RUN: only RUN, which the service was killed during (kill -9)
// and restarted: its summary an ended run's, its replay ending with the
// one run.failed service_restarted that the summary counts.
if (process.argv[5] === '--restarted') {
  const id = process.argv[6];
  const sum = await call('the interrupted run after the restart', 'GET', `/v1/runs/${id}`, { want: 200 });
  const evs = await call('its replay', 'GET', `/v1/runs/${id}/events`, { want: 200 });
  const last = evs?.body?.at?.(-1) ?? {};
  last.type === 'run.failed' && last.code === 'service_restarted' && last.retryable === true
    ? ok('its replay ends with run.failed service_restarted, retryable')
    : fail('its replay ends with run.failed service_restarted', JSON.stringify(last));
  sum?.body?.events === last.seq ? ok(`its summary counts that event (${last.seq})`)
    : fail('its summary counts that event', `${sum?.body?.events} vs ${last.seq}`);
  (evs?.body ?? []).filter((e) => e.type === 'run.failed').length === 1
    ? ok('one run.failed') : fail('one run.failed', JSON.stringify(evs?.body));
  console.log(`# ${checks} checks, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

// ------------------------------------------------------------ the service
await call('health', 'GET', '/health', { auth: false, want: 200 });
await call('metrics without a token', 'GET', '/metrics', { auth: false, want: 401 });
await call('metrics', 'GET', '/metrics', { want: 200 });
await call('an unknown route', 'GET', '/v2/nothing', { want: 404 });
await call('a wrong method', 'PUT', '/v1/runs', { want: 405 });

// ------------------------------------------------------------------ runs
const streamed = await call('a run streamed', 'POST', '/v1/runs', { body: { prompt: 'ok', permission_mode: 'ask', network: { mode: 'open' } }, want: 200 });
const first = streamed?.body?.[0] ?? {};
const run = first.run, session = first.session;
first.type === 'run.started' ? ok('its first event names the run') : fail('its first event names the run', JSON.stringify(first));
await call('its summary', 'GET', `/v1/runs/${run}`, { want: 200 });
await call('its events after 2', 'GET', `/v1/runs/${run}/events?after=2`, { want: 200 });
await call('a bad after', 'GET', `/v1/runs/${run}/events?after=x`, { want: 400 });
await call('an unknown run', 'GET', '/v1/runs/run-0000000000000000', { want: 404 });
await call('events of an unknown run', 'GET', '/v1/runs/run-0000000000000000/events', { want: 404 });
await call('cancel an unknown run', 'DELETE', '/v1/runs/run-0000000000000000', { want: 404 });
await call('a refused run (plan gate)', 'POST', '/v1/runs', { body: { prompt: 'ok', harness: 'nosuch' }, want: 200 });
await call('no token', 'POST', '/v1/runs', { body: { prompt: 'ok' }, auth: false, want: 401 });
await call('not JSON', 'POST', '/v1/runs', { body: 'nope', want: 400 });
await call('an unknown field', 'POST', '/v1/runs', { body: { prompt: 'ok', mood: 'good' }, want: 400 });
await call('over max_body', 'POST', '/v1/runs', { body: { prompt: 'x'.repeat(5000) }, want: 413 });

const perm = await call('a run without waiting', 'POST', '/v1/runs?wait=false', { body: { prompt: 'permission' }, want: 202 });
const prun = perm?.body?.run;
(await waitEvent(prun, 'permission.request')) ? ok('a permission request came') : fail('a permission request came', 'no event');
await call('an answer to no request', 'POST', `/v1/runs/${prun}/permissions`, { body: { request_id: 'perm-9', allow: true }, want: 404 });
await call('a malformed answer', 'POST', `/v1/runs/${prun}/permissions`, { body: { allow: 'yes' }, want: 400 });
await call('an answer', 'POST', `/v1/runs/${prun}/permissions`, { body: { request_id: 'perm-1', allow: false }, want: 200 });
(await waitState(prun, 'finished')) ? ok('that run finished') : fail('that run finished', 'state');
await call('an answer after the end', 'POST', `/v1/runs/${prun}/permissions`, { body: { request_id: 'perm-1', allow: true }, want: 409 });
await call('an answer for an unknown run', 'POST', '/v1/runs/run-0000000000000000/permissions', { body: { request_id: 'perm-1', allow: true }, want: 404 });

// ----------------------------------------------- sessions, busy, cancel, 429
const slow = await call('a slow run on the session', 'POST', '/v1/runs?wait=false', { body: { prompt: 'slow:20000', session }, want: 202 });
const srun = slow?.body?.run;
await waitEvent(srun, 'agent.message');
await call('another run on the busy session', 'POST', '/v1/runs', { body: { prompt: 'ok', session }, want: 409 });
const ses = await call('the session', 'GET', `/v1/sessions/${session}`, { want: 200 });
ses?.body?.run === srun ? ok('the session names its run') : fail('the session names its run', JSON.stringify(ses?.body));
await call('deleting the busy session', 'DELETE', `/v1/sessions/${session}`, { want: 409 });
const other = await call('a second slow run', 'POST', '/v1/runs?wait=false', { body: { prompt: 'slow:20000' }, want: 202 });
await call('a third run past max_runs', 'POST', '/v1/runs', { body: { prompt: 'ok' }, want: 429 });
await call('cancel', 'DELETE', `/v1/runs/${srun}`, { want: 202 });
await call('cancel the other', 'DELETE', `/v1/runs/${other?.body?.run}`, { want: 202 });
(await waitState(srun, 'cancelled')) ? ok('cancelled') : fail('cancelled', 'state');
await waitState(other?.body?.run, 'cancelled');
const cancelled = await call('the cancelled run\'s events', 'GET', `/v1/runs/${srun}/events`, { want: 200 });
cancelled?.body?.at?.(-1)?.stop_reason === 'cancelled' ? ok('they end with run.finished cancelled') : fail('they end cancelled', JSON.stringify(cancelled?.body?.at?.(-1)));
await call('cancel an ended run', 'DELETE', `/v1/runs/${srun}`, { want: 409 });

const chatty = await call('a run past event_buffer', 'POST', '/v1/runs?wait=false', { body: { prompt: 'chatty:40' }, want: 202 });
await waitState(chatty?.body?.run, 'finished');
const dropped = await call('its replay', 'GET', `/v1/runs/${chatty?.body?.run}/events`, { want: 200 });
dropped?.body?.[0]?.type === 'events.dropped' ? ok('it starts with events.dropped') : fail('it starts with events.dropped', JSON.stringify(dropped?.body?.[0]));

await call('delete the session', 'DELETE', `/v1/sessions/${session}`, { want: 200 });
await call('the deleted session', 'GET', `/v1/sessions/${session}`, { want: 404 });
await call('delete it again', 'DELETE', `/v1/sessions/${session}`, { want: 404 });
await call('not a session id', 'GET', '/v1/sessions/nope', { want: 404 });
await call('a session without a token', 'GET', `/v1/sessions/${session}`, { auth: false, want: 401 });

// ------------------------------------------------------------- abuse
// What a token holder (or anyone who can connect) might send besides
// well-formed requests, byte for byte: each answer must still be the
// documented one, with a documented body.
import net from 'node:net';
function rawSend(text) {
  const u = new URL(base);
  return new Promise((resolve) => {
    const sock = net.connect(Number(u.port), u.hostname);
    let buf = Buffer.alloc(0);
    const done = () => {
      const str = buf.toString('latin1');
      const end = str.indexOf('\r\n\r\n');
      if (end < 0) return resolve(null);
      const lines = str.slice(0, end).split('\r\n');
      const status = Number(lines[0].split(' ')[1]);
      const headers = new Map();
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        headers.set(l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim());
      }
      const len = Number(headers.get('content-length') ?? 0);
      resolve({ status, headers: { get: (h) => headers.get(h.toLowerCase()) ?? null },
        body: buf.subarray(end + 4, end + 4 + len).toString('utf8') });
    };
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      const str = buf.toString('latin1');
      const end = str.indexOf('\r\n\r\n');
      const m = /content-length: *(\d+)/i.exec(str.slice(0, end));
      if (end >= 0 && m && buf.length >= end + 4 + Number(m[1])) { sock.destroy(); done(); }
    });
    sock.on('error', () => resolve(null));
    sock.on('close', done);
    sock.setTimeout(5000, () => sock.destroy());
    sock.write(Buffer.from(text, 'latin1'));
  });
}
async function abuse(name, method, path, head, body, want) {
  const host = new URL(base).host;
  const text = `${method} ${path} HTTP/1.1\r\n${head.replace('{host}', host)}` +
    `${body !== undefined ? `Content-Length: ${Buffer.byteLength(body)}\r\n` : ''}Connection: close\r\n\r\n${body ?? ''}`;
  const r = await rawSend(text);
  if (!r) return fail(name, 'no answer');
  if (r.status !== want) return fail(name, `HTTP ${r.status}, wanted ${want}: ${r.body.slice(0, 200)}`);
  check(`abuse: ${name}`, method, path, r.status, r.headers, r.body);
}
const auth = `Authorization: Bearer ${token}\r\n`;
const json = 'Content-Type: application/json\r\n';
await abuse('two Content-Length headers', 'POST', '/v1/runs', `Host: {host}\r\n${auth}${json}Content-Length: 2\r\n`, '{"prompt":"ok"}', 400);
await abuse('two Authorization headers', 'GET', '/metrics', `Host: {host}\r\n${auth}Authorization: Bearer nope\r\n`, undefined, 400);
await abuse('HTTP/1.1 without Host', 'GET', '/metrics', auth, undefined, 400);
await abuse('a NUL in a query', 'GET', `/v1/runs/${run}/events?after=1%00`, `Host: {host}\r\n${auth}`, undefined, 400);
for (const after of ['+5', '%205', '18446744073709551616', '-0', '0x10', '5abc'])
  await abuse(`after=${after}`, 'GET', `/v1/runs/${run}/events?after=${after}`, `Host: {host}\r\n${auth}`, undefined, 400);
await abuse('duplicate keys on /permissions', 'POST', `/v1/runs/${run}/permissions`, `Host: {host}\r\n${auth}${json}`, '{"request_id":"perm-1","allow":true,"allow":false}', 400);
await abuse('duplicate keys on /v1/runs', 'POST', '/v1/runs', `Host: {host}\r\n${auth}${json}`, '{"prompt":"ok","prompt":"two"}', 400);
await abuse('JSON nested 3,000 deep', 'POST', '/v1/runs', `Host: {host}\r\n${auth}${json}`, '['.repeat(3000), 400);
await abuse('a body over max_body', 'POST', '/v1/runs', `Host: {host}\r\n${auth}${json}`, '['.repeat(10000), 413);
await abuse('a token with a space after it', 'GET', '/metrics', `Host: {host}\r\nAuthorization: Bearer ${token} \r\n`, undefined, 401);
await abuse('a token of another case', 'GET', '/metrics', `Host: {host}\r\nAuthorization: Bearer ${token.toUpperCase()}\r\n`, undefined, 401);
await abuse('Basic instead of Bearer', 'GET', '/metrics', `Host: {host}\r\nAuthorization: Basic ${Buffer.from('a:' + token).toString('base64')}\r\n`, undefined, 401);
await abuse('a run id that walks up', 'GET', '/v1/runs/..%2f..%2fmetrics', `Host: {host}\r\n${auth}`, undefined, 404);
await abuse('a session id with a NUL', 'GET', '/v1/sessions/ses-0123456789abcdef%00', `Host: {host}\r\n${auth}`, undefined, 404);
await abuse('a prompt that is not a string', 'POST', '/v1/runs', `Host: {host}\r\n${auth}${json}`, '{"prompt":["ok"]}', 400);
await abuse('a huge number for a field', 'POST', '/v1/runs', `Host: {host}\r\n${auth}${json}`, '{"prompt":"ok","network":{"mode":1e999}}', 400);
await abuse('a credential too common to be a secret', 'POST', '/v1/runs', `Host: {host}\r\n${auth}${json}`, '{"prompt":"ok","model":{"url":"https://m.example/v1","credentials":{"ANTHROPIC_API_KEY":"password"}}}', 400);
await abuse('a callback to the metadata address', 'POST', '/v1/runs', `Host: {host}\r\n${auth}${json}`,
  '{"prompt":"ok","tools":[{"name":"m","description":"m","input_schema":{"type":"object"},"callback":{"url":"http://[::ffff:169.254.169.254]/latest"}}]}', 200);

// ------------------------------------------------------------- coverage
for (const [tmpl, item] of Object.entries(doc.paths))
  for (const method of ['get', 'post', 'delete', 'put', 'patch']) {
    if (!item[method]) continue;
    const op = `${method.toUpperCase()} ${tmpl}`;
    const statuses = Object.keys(item[method].responses);
    const two = statuses.filter((s) => s.startsWith('2') && covered.has(`${op} ${s}`));
    two.length ? ok(`${op} answered 2xx`) : fail(`${op} answered 2xx`, 'never exercised');
    const left = statuses.filter((s) => !covered.has(`${op} ${s}`));
    if (left.length) console.log(`# ${op}: not exercised: ${left.join(', ')}`);
  }
console.log(`# ${checks} checks, ${failed} failed`);
process.exit(failed ? 1 : 0);
