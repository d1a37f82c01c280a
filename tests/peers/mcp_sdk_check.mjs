// mcp_sdk_check.mjs - MCP conformance check using the official SDK Client.
// Usage:
//   SANDRUN_NPM_DIR=DIR node mcp_sdk_check.mjs stdio CMD [ARGS...]
//   SANDRUN_NPM_DIR=DIR node mcp_sdk_check.mjs http URL TOKEN
// DIR is the `npm install --prefix DIR @modelcontextprotocol/sdk` directory.
// Prints "ok - NAME" / "FAIL - NAME: detail" per check, then "# N checks, M failed".
// Exit 0 if all passed, 1 on any failure or the 20 s timeout, 77 (SKIP) if the
// SDK is missing, 2 on bad usage. The server must expose echo, fail and noop.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const npmDir = process.env.SANDRUN_NPM_DIR;
const sdkDir = npmDir && join(npmDir, 'node_modules/@modelcontextprotocol/sdk/dist/esm');
if (!sdkDir || !existsSync(join(sdkDir, 'client/index.js'))) {
  console.log(`SKIP: @modelcontextprotocol/sdk not installed in ${npmDir ?? ''}`);
  process.exit(77);
}
const sdk = (p) => import(pathToFileURL(join(sdkDir, p)).href);
const { Client } = await sdk('client/index.js');
const { McpError } = await sdk('types.js');

const [mode, ...rest] = process.argv.slice(2);
if (!(mode === 'stdio' && rest.length >= 1) && !(mode === 'http' && rest.length === 2)) {
  console.error('usage: mcp_sdk_check.mjs stdio CMD [ARGS...] | http URL TOKEN');
  process.exit(2);
}

setTimeout(() => { console.log('FAIL - timeout: checks did not finish within 20 s'); process.exit(1); }, 20000);

let total = 0, failed = 0;
async function check(name, fn) {
  total++;
  try {
    const extra = await fn();
    console.log(`ok - ${name}${extra ? ` (${extra})` : ''}`);
  } catch (e) {
    failed++;
    console.log(`FAIL - ${name}: ${e?.message ?? e}`);
  }
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }
const json = (v) => JSON.stringify(v);

async function makeTransport(token) {
  if (mode === 'stdio') {
    const { StdioClientTransport } = await sdk('client/stdio.js');
    // Pass the full environment (the SDK default keeps only a few variables).
    return new StdioClientTransport({ command: rest[0], args: rest.slice(1), env: { ...process.env }, stderr: 'inherit' });
  }
  const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
  return new StreamableHTTPClientTransport(new URL(rest[0]),
    { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
}
const newClient = () => new Client({ name: 'sandrun-sdk-check', version: '1.0.0' });

const client = newClient();
const transport = await makeTransport(rest[1]);
// The Client does not expose the negotiated version; it hands it to the transport.
let protocolVersion;
const setPV = transport.setProtocolVersion?.bind(transport);
transport.setProtocolVersion = (v) => { protocolVersion = v; setPV?.(v); };

let connected = false;
await check('initialize', async () => {
  await client.connect(transport);
  connected = true;
  assert(protocolVersion, 'no protocolVersion reported');
  assert(client.getServerCapabilities()?.tools, `no tools capability: ${json(client.getServerCapabilities())}`);
  return `protocolVersion ${protocolVersion}`;
});

if (connected) {
  await check('tools/list has echo, fail, noop with inputSchema', async () => {
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    for (const n of ['echo', 'fail', 'noop']) {
      assert(byName[n], `missing tool ${n} (got ${Object.keys(byName).join(',')})`);
      assert(byName[n].inputSchema?.type === 'object', `${n}: bad inputSchema ${json(byName[n].inputSchema)}`);
    }
    const es = byName.echo.inputSchema;
    assert(es.properties?.text?.type === 'string' && es.required?.includes('text'),
      `echo: inputSchema lacks required string "text": ${json(es)}`);
  });

  await check('tools/call echo', async () => {
    const r = await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
    assert(!r.isError, `isError set: ${json(r)}`);
    assert(r.content?.[0]?.type === 'text' && r.content[0].text === 'hello', `unexpected result ${json(r)}`);
  });

  await check('tools/call fail -> isError', async () => {
    const r = await client.callTool({ name: 'fail', arguments: {} });
    assert(r.isError === true, `isError not true: ${json(r)}`);
  });

  // Answered at once by the relay, before any callback: a missing
  // required argument and a client tool (paused). Both are results.
  await check('tools/call with a missing required argument -> isError', async () => {
    const r = await client.callTool({ name: 'echo', arguments: {} });
    assert(r.isError === true, `isError not true: ${json(r)}`);
  });

  await check('tools/call of a client tool is answered', async () => {
    const r = await client.callTool({ name: 'pick', arguments: {} });
    assert(r.content?.[0]?.type === 'text', `unexpected result ${json(r)}`);
  });

  await check('tools/call unknown tool refused', async () => {
    let r;
    try {
      r = await client.callTool({ name: 'nope', arguments: {} });
    } catch (e) {
      assert(e instanceof McpError, `non-JSON-RPC error: ${e?.message ?? e}`);
      return `JSON-RPC error ${e.code}`;
    }
    assert(r.isError === true, `accepted: ${json(r)}`);
    return 'isError result';
  });
}
await client.close().catch(() => {});

if (mode === 'http') {
  await check('http: client with wrong bearer cannot connect', async () => {
    const bad = newClient();
    let err;
    try { await bad.connect(await makeTransport('wrong')); } catch (e) { err = e; }
    await bad.close().catch(() => {});
    assert(err, 'connect succeeded with a wrong bearer');
    return err.code ? `code ${err.code}` : err.name;
  });

  await check('http: raw POST with wrong bearer -> 401', async () => {
    const res = await fetch(rest[0], {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
                 Authorization: 'Bearer wrong' },
      body: json({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    await res.arrayBuffer();
    assert(res.status === 401, `HTTP ${res.status}`);
  });
}

console.log(`# ${total} checks, ${failed} failed`);
process.exit(failed ? 1 : 0);
