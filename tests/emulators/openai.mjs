#!/usr/bin/env node
// Scripted OpenAI Responses API emulator (built-ins only).
// Usage: node openai.mjs --script SCRIPT.json [--log LOG.ndjson] [--key KEY]
// With --key, as the real API: a request whose bearer token is not KEY gets 401
// invalid_api_key and consumes no turn (logged with kind "refused").
// Prints {"url":"http://127.0.0.1:PORT"} once listening.
// Script: JSON array of turns, consumed in order by *main* requests:
//   {"text":"..."}
//   {"function_call":{"namespace":"mcp__srv","name":"tool","arguments":{...}}}  (namespace optional)
// Main vs side rule: a POST /v1/responses is a *side* request (does not consume a
// turn) when it comes from a codex sub-agent (header `x-openai-subagent`, e.g. the
// "guardian" auto-review, also echoed in body.client_metadata) or carries no tools
// (title/summary-style calls). Everything else is main and consumes one turn.
// Side requests asking for a JSON schema (body.text.format.type == "json_schema")
// get a minimal object satisfying it (first enum value => guardian says "allow");
// other side requests get the text "side answer".
import http from 'node:http';
import fs from 'node:fs';
import crypto from 'node:crypto';

const arg = (name) => { const i = process.argv.indexOf(name); return i > 0 ? process.argv[i + 1] : undefined; };
const script = JSON.parse(fs.readFileSync(arg('--script'), 'utf8'));
const logPath = arg('--log');
const wantKey = arg('--key');
let turn = 0, seq = 0;
const rid = (p) => `${p}_${Date.now().toString(36)}${(seq++).toString(36)}`;

// Append one NDJSON line per request; header values are dropped (only names kept),
// the key that came (bearer token, else x-api-key) only as key_sha256 (hex SHA-256).
function log(entry) {
  if (logPath) fs.appendFileSync(logPath, JSON.stringify({ t: Date.now(), ...entry }) + '\n');
}

// Write an SSE event exactly like the real API: `event: TYPE` + `data: JSON` (type repeated).
function sse(res, n, type, obj) {
  res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: n.i++, ...obj })}\n\n`);
}

function respond(res, body, turnSpec) {
  const model = body.model || 'fake-model';
  const base = { id: rid('resp'), object: 'response', created_at: Math.floor(Date.now() / 1000),
    model, status: 'in_progress', output: [], usage: null };
  let item;
  const n = { i: 0 };
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-request-id': rid('req') });
  sse(res, n, 'response.created', { response: base });
  sse(res, n, 'response.in_progress', { response: base });
  if (turnSpec.function_call) {
    const fc = { ...turnSpec.function_call };
    // Codex sanitizes namespace names (mcp__sandrun-tools -> mcp__sandrun_tools);
    // if the scripted namespace is not offered as-is, use the sanitized spelling.
    const offered = (body.tools || []).filter((t) => t.type === 'namespace').map((t) => t.name);
    if (fc.namespace && !offered.includes(fc.namespace)) {
      const alt = fc.namespace.replace(/[^A-Za-z0-9_]/g, '_');
      if (offered.includes(alt)) fc.namespace = alt;
    }
    const args = typeof fc.arguments === 'string' ? fc.arguments : JSON.stringify(fc.arguments ?? {});
    item = { id: rid('fc'), type: 'function_call', status: 'in_progress', call_id: rid('call'),
      name: fc.name, arguments: '', ...(fc.namespace ? { namespace: fc.namespace } : {}) };
    sse(res, n, 'response.output_item.added', { output_index: 0, item });
    // Stream the arguments in two chunks to exercise delta accumulation.
    const cut = Math.floor(args.length / 2);
    for (const delta of [args.slice(0, cut), args.slice(cut)])
      if (delta) sse(res, n, 'response.function_call_arguments.delta', { item_id: item.id, output_index: 0, delta });
    sse(res, n, 'response.function_call_arguments.done', { item_id: item.id, output_index: 0, arguments: args });
    item = { ...item, arguments: args, status: 'completed' };
  } else {
    const text = String(turnSpec.text ?? '');
    item = { id: rid('msg'), type: 'message', role: 'assistant', status: 'in_progress', content: [] };
    sse(res, n, 'response.output_item.added', { output_index: 0, item });
    const part = { type: 'output_text', text: '', annotations: [] };
    sse(res, n, 'response.content_part.added', { item_id: item.id, output_index: 0, content_index: 0, part });
    for (const delta of text.match(/[\s\S]{1,16}/g) || [])
      sse(res, n, 'response.output_text.delta', { item_id: item.id, output_index: 0, content_index: 0, delta });
    sse(res, n, 'response.output_text.done', { item_id: item.id, output_index: 0, content_index: 0, text });
    sse(res, n, 'response.content_part.done', { item_id: item.id, output_index: 0, content_index: 0, part: { ...part, text } });
    item = { ...item, status: 'completed', content: [{ ...part, text }] };
  }
  sse(res, n, 'response.output_item.done', { output_index: 0, item });
  const inTok = Math.ceil(JSON.stringify(body.input ?? '').length / 4);
  sse(res, n, 'response.completed', { response: { ...base, status: 'completed', output: [item],
    usage: { input_tokens: inTok, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5,
      output_tokens_details: { reasoning_tokens: 0 }, total_tokens: inTok + 5 } } });
  res.end();
}

// Smallest value matching a JSON schema: first enum value, all properties filled.
function fill(s = {}) {
  if (s.enum) return s.enum[0];
  const type = Array.isArray(s.type) ? s.type[0] : s.type;
  if (type === 'object' || s.properties)
    return Object.fromEntries(Object.entries(s.properties || {}).map(([k, v]) => [k, fill(v)]));
  return { string: 'scripted', number: 0, integer: 0, boolean: false, array: [], null: null }[type] ?? null;
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const raw = Buffer.concat(chunks).toString('utf8');
    let body = null;
    try { body = raw ? JSON.parse(raw) : null; } catch { body = { unparsed: raw.slice(0, 2000) }; }
    const path = req.url.split('?')[0];
    const key = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? req.headers['x-api-key'];
    const entry = { method: req.method, url: req.url, headers: Object.keys(req.headers),
      key_sha256: key === undefined ? null : crypto.createHash('sha256').update(key).digest('hex'), body };
    // The real API's answers to a missing or a wrong key (platform.openai.com/docs,
    // "Error codes": 401 "Incorrect API key provided"; the key is shown masked).
    const bearer = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1];
    if (wantKey !== undefined && bearer !== wantKey) {
      log({ ...entry, kind: 'refused', status: 401 });
      res.writeHead(401, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ error: {
        message: bearer === undefined ? "You didn't provide an API key. You need to provide your API key in an " +
          'Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).'
          : `Incorrect API key provided: ${bearer.slice(0, 3)}***${bearer.slice(-4)}. You can find your API key at ` +
          'https://platform.openai.com/account/api-keys.',
        type: 'invalid_request_error', param: null, code: bearer === undefined ? null : 'invalid_api_key' } }));
    }
    if (req.method === 'POST' && /\/responses$/.test(path)) {
      const sub = req.headers['x-openai-subagent'] || body?.client_metadata?.['x-openai-subagent'];
      const main = !sub && Array.isArray(body?.tools) && body.tools.length > 0;
      const fmt = body?.text?.format;
      const spec = main ? (script[turn] ?? { text: '(script exhausted)' })
        : { text: fmt?.type === 'json_schema' ? JSON.stringify(fill(fmt.schema)) : 'side answer' };
      log({ ...entry, kind: main ? 'main' : 'side', subagent: sub || null, turn: main ? turn : null, answer: spec });
      if (main) turn++;
      return respond(res, body || {}, spec);
    }
    log({ ...entry, kind: 'other' });
    if (req.method === 'GET' && /\/models$/.test(path)) {
      // Both shapes: OpenAI's {object:"list",data} and codex's {models:[...]}.
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ object: 'list', data: [{ id: 'fake-model', object: 'model', owned_by: 'fake' }], models: [] }));
    }
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: `not emulated: ${req.method} ${path}`, type: 'not_found' } }));
  });
});

server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` }));
});
const quit = () => { server.close(); process.exit(0); };
process.on('SIGTERM', quit);
process.on('SIGINT', quit);
// Exit when a piped stdin closes (parent went away); ignore a TTY or /dev/null.
if (!process.stdin.isTTY && fs.fstatSync(0).isFIFO()) { process.stdin.on('end', quit); process.stdin.resume(); }
