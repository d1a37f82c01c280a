#!/usr/bin/env node
// A deliberately misbehaving ACP agent for sandrun's failure tests.
// FAKE_ACP_MODE selects the behaviour:
//   silent          reads everything, answers nothing (initialize never ends)
//   exit_mid_turn   answers initialize and session/new, then dies in the
//                   prompt with a message on stderr
//   fs              in the prompt, asks to read a file inside the workspace,
//                   /etc/hostname and a ../ escape, and to write outside; it
//                   reports what it got as one agent_message_chunk (JSON)
//   cancel          the prompt waits until session/cancel, then ends
//                   with stopReason "cancelled"
//   ok              answers "hello from the fake agent" and ends the turn
//   env:NAME        answers "NAME=<its value in the agent's environment>"
//   sh:SCRIPT       runs /bin/sh -c SCRIPT in the session's directory and
//                   answers "exit N: <stdout and stderr>"
//   permission      asks session/request_permission (allow once / reject
//                   once), says which option came back, ends the turn
//   slow:MS         "working..." then, MS milliseconds later, ends the turn
//                   (cancel ends it at once with "cancelled")
//   chatty:N        N message chunks ("chunk 1" ...), then ends the turn
//   exit_after      ends the turn, then exits 200 ms later (between turns)
//   tools           starts the session's first stdio MCP server once (as a
//                   real agent does, for the session's life) and answers
//                   its tools/list as JSON [{name, description}]
//   prompt          each prompt's text names one of the modes above, so a
//                   long-lived runner (sandrund) can drive several at once
// Built-ins only; newline-delimited JSON-RPC on stdin/stdout.
import { createInterface } from 'node:readline';
import { spawn, spawnSync } from 'node:child_process';

const baseMode = process.env.FAKE_ACP_MODE || 'silent';
let nextId = 0;
const waiting = new Map();
let cwd = '/';
let mcpServers = [];
let mcp = null;                 // the MCP server, once started: { send(method, params) }
const send = (m) => process.stdout.write(JSON.stringify({ jsonrpc: '2.0', ...m }) + '\n');
const request = (method, params) => new Promise((resolve) => {
  const id = nextId++;
  waiting.set(id, resolve);
  send({ id, method, params });
});

const say = (sessionId, text) => send({ method: 'session/update', params: { sessionId, update: {
  sessionUpdate: 'agent_message_chunk', content: { type: 'text', text } } } });

// The session's first stdio MCP server, started on first use and kept.
function mcpClient() {
  if (mcp) return mcp;
  const s = mcpServers.find((x) => x.command);
  if (!s) return null;
  const env = { ...process.env };
  for (const e of s.env || []) env[e.name] = e.value;
  const child = spawn(s.command, s.args || [], { env, cwd, stdio: ['pipe', 'pipe', 'inherit'] });
  const pending = new Map();
  let next = 1;
  createInterface({ input: child.stdout }).on('line', (line) => {
    let m;
    try { m = JSON.parse(line); } catch { return; }
    pending.get(m.id)?.(m);
    pending.delete(m.id);
  });
  child.on('exit', () => { for (const r of pending.values()) r({ error: { message: 'exited' } }); mcp = null; });
  const call = (method, params) => new Promise((resolve) => {
    const id = next++;
    pending.set(id, resolve);
    child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
  });
  mcp = { call, ready: call('initialize', { protocolVersion: '2025-06-18', capabilities: {},
    clientInfo: { name: 'fake_acp', version: '1' } }).then(() =>
    child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n')) };
  return mcp;
}

async function prompt(id, sessionId, text) {
  const mode = baseMode === 'prompt' ? text.trim() : baseMode;
  if (mode === 'tools') {
    const c = mcpClient();
    let out = 'no MCP server';
    if (c) {
      await c.ready;
      const r = await c.call('tools/list', {});
      out = r.error ? `tools/list failed: ${r.error.message}` :
        JSON.stringify(r.result.tools.map((t) => ({ name: t.name, description: t.description })));
    }
    say(sessionId, out);
    send({ id, result: { stopReason: 'end_turn' } });
    return;
  }
  if (mode.startsWith('env:')) {
    const name = mode.slice(4);
    say(sessionId, `${name}=${process.env[name] ?? '(unset)'}`);
    send({ id, result: { stopReason: 'end_turn' } });
    return;
  }
  if (mode.startsWith('sh:')) {
    const r = spawnSync('/bin/sh', ['-c', mode.slice(3)], { cwd, encoding: 'utf8' });
    say(sessionId, `exit ${r.status}: ${(r.stdout || '') + (r.stderr || '')}`.trimEnd());
    send({ id, result: { stopReason: 'end_turn' } });
    return;
  }
  if (mode === 'ok') {
    say(sessionId, 'hello from the fake agent');
    send({ id, result: { stopReason: 'end_turn' } });
    return;
  }
  if (mode === 'permission') {
    const r = await request('session/request_permission', { sessionId,
      toolCall: { toolCallId: 'call-1', title: 'rm -rf build', kind: 'execute' },
      options: [{ optionId: 'yes', name: 'Allow', kind: 'allow_once' },
                { optionId: 'no', name: 'Reject', kind: 'reject_once' }] });
    const o = r.result?.outcome;
    say(sessionId, `permission: ${o?.outcome === 'selected' ? o.optionId : o?.outcome ?? 'error'}`);
    send({ id, result: { stopReason: 'end_turn' } });
    return;
  }
  if (mode === 'exit_after') {
    say(sessionId, 'leaving after this turn');
    send({ id, result: { stopReason: 'end_turn' } });
    setTimeout(() => process.exit(0), 200);
    return;
  }
  if (mode.startsWith('chatty:')) {
    for (let i = 1; i <= Number(mode.slice(7)); i++) say(sessionId, `chunk ${i}`);
    send({ id, result: { stopReason: 'end_turn' } });
    return;
  }
  if (mode.startsWith('slow:')) {
    say(sessionId, 'working...');
    const t = setTimeout(() => {
      say(sessionId, 'done slowly');
      send({ id, result: { stopReason: 'end_turn' } });
    }, Number(mode.slice(5)));
    cancelPrompt = () => { clearTimeout(t); send({ id, result: { stopReason: 'cancelled' } }); };
    return;
  }
  if (mode === 'exit_mid_turn') {
    process.stderr.write('fake agent: the model backend crashed\n');
    process.exit(3);
  }
  if (mode === 'fs') {
    const results = {};
    for (const [k, path] of [['inside', `${cwd}/inside.txt`], ['outside', '/etc/hostname'],
                              ['escape', `${cwd}/../meta.json`]]) {
      results[k] = await request('fs/read_text_file', { sessionId, path });
    }
    results.write_outside = await request('fs/write_text_file',
      { sessionId, path: '/tmp/sandrun-fake-acp-outside.txt', content: 'x' });
    results.write_inside = await request('fs/write_text_file',
      { sessionId, path: `${cwd}/written.txt`, content: 'written by the agent' });
    send({ method: 'session/update', params: { sessionId, update: {
      sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: JSON.stringify(results) } } } });
    send({ id, result: { stopReason: 'end_turn' } });
    return;
  }
  if (mode === 'cancel') {
    send({ method: 'session/update', params: { sessionId, update: {
      sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: 'working...' } } } });
    cancelPrompt = () => send({ id, result: { stopReason: 'cancelled' } });
  }
}
let cancelPrompt = null;

createInterface({ input: process.stdin }).on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id !== undefined && !m.method) {            // an answer to our request
    waiting.get(m.id)?.(m.error ? { error: m.error.message } : { result: m.result });
    waiting.delete(m.id);
    return;
  }
  if (baseMode === 'silent') return;
  switch (m.method) {
    case 'initialize':
      send({ id: m.id, result: { protocolVersion: 1, agentCapabilities: { loadSession: false } } });
      break;
    case 'session/new':
      cwd = m.params.cwd;
      mcpServers = m.params.mcpServers || [];
      send({ id: m.id, result: { sessionId: 'fake-session' } });
      break;
    case 'session/prompt':
      prompt(m.id, m.params.sessionId, m.params.prompt?.map((p) => p.text ?? '').join('') ?? '');
      break;
    case 'session/cancel':
      cancelPrompt?.();
      break;
    default:
      if (m.id !== undefined) send({ id: m.id, error: { code: -32601, message: 'no' } });
  }
});
