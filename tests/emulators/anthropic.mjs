// Scripted Anthropic Messages API emulator (Node ESM, built-ins only).
// Usage: node anthropic.mjs --script SCRIPT.json --log LOG.ndjson [--key KEY]
// With --key, as the real API: a request whose x-api-key (or bearer token) is not KEY gets
// 401 authentication_error and consumes no turn (logged with kind "refused").
// Prints {"url":"http://127.0.0.1:PORT"} on stdout once listening.
// Script: JSON array of turns, consumed in order by MAIN-conversation requests only:
//   {"text":"..."}                                   -> stop_reason end_turn
//   {"tool_use":{"name":"...","input":{...}},"text":"optional text before"} -> stop_reason tool_use
// Each log line has key_sha256: hex SHA-256 of the x-api-key (else the bearer token), or null.
// Main vs side (see isMain): a main request offers the model tools (non-empty `tools`) AND its
// last user message is not a forked helper prompt. Claude Code's side requests either send
// `tools: []` (session title, JSON-schema output) or fork the full main request (same system,
// same tools, same history) and append one user message with a fixed instruction (prompt
// suggestion "[SUGGESTION MODE: ...", compaction "Your task is to create a detailed summary...").
// Side requests get a short answer and never consume a script turn.
// Auto-mode permission classifier ("You are a security monitor...", non-streaming, no tools)
// gets "<severity>N</severity>" with N from --severity (default 0 = allow, >50 = block).
import http from "node:http";
import fs from "node:fs";
import crypto from "node:crypto";

const arg = (name) => { const i = process.argv.indexOf(name); return i > 0 ? process.argv[i + 1] : undefined; };
const scriptPath = arg("--script"), logPath = arg("--log"), wantKey = arg("--key");
const severity = Number(arg("--severity") ?? 0);
const script = scriptPath ? JSON.parse(fs.readFileSync(scriptPath, "utf8")) : [];
let turn = 0, seq = 0;

const log = (entry) => { if (logPath) fs.appendFileSync(logPath, JSON.stringify(entry) + "\n"); };
const redact = (h) => Object.fromEntries(Object.entries(h).map(([k, v]) =>
  [k, /^(x-api-key|authorization)$/i.test(k) ? "<redacted>" : v]));
// The key that came (x-api-key, else the bearer token) as hex SHA-256, so a
// test can tell which key the model got without the key in the log.
function keySha256(h) {
  const key = h["x-api-key"] ?? /^Bearer\s+(.+)$/i.exec(h.authorization ?? "")?.[1];
  return key === undefined ? null : crypto.createHash("sha256").update(key).digest("hex");
}
const id = (p) => `${p}_${String(++seq).padStart(4, "0")}${Date.now().toString(36)}`;

// Text of the last user message (string content or its text blocks; tool_results ignored).
function lastUserText(body) {
  const u = (body?.messages ?? []).filter((m) => m.role === "user").at(-1);
  if (!u) return "";
  return typeof u.content === "string" ? u.content : u.content.filter((b) => b.type === "text").map((b) => b.text).join("\n");
}
const FORK_MARKERS = /^\s*\[SUGGESTION MODE|Your task is to create a detailed summary of/;

// The rule (see header): tools offered, and not a forked helper prompt.
const isMain = (body) => Array.isArray(body?.tools) && body.tools.length > 0 && !FORK_MARKERS.test(lastUserText(body));

// Answer for a side request: title requests (JSON-schema output) get valid JSON, prompt
// suggestions get an empty text (= "no suggestion"), anything else a short "ok".
function sideText(body) {
  if (body?.output_config?.format || body?.output_format) {
    const props = body.output_config?.format?.schema?.properties ?? body.output_format?.schema?.properties ?? { title: {} };
    return JSON.stringify(Object.fromEntries(Object.keys(props).map((k) => [k, "Scripted session"])));
  }
  if (/^\s*\[SUGGESTION MODE/.test(lastUserText(body))) return "";
  if (/security monitor/.test(JSON.stringify(body?.system ?? ""))) return `<severity>${severity}</severity>`;
  return "ok";
}

// Side answers honour stop_sequences like the real API: cut before the first match.
function sideTurn(body) {
  let text = sideText(body);
  for (const seq of body?.stop_sequences ?? []) {
    const i = text.indexOf(seq);
    if (i >= 0) return { blocks: [{ type: "text", text: text.slice(0, i) }], stop: "stop_sequence", seq };
  }
  return { blocks: [{ type: "text", text }], stop: "end_turn" };
}

// Build content blocks for one turn.
function blocksFor(t) {
  const blocks = [];
  if (t.text !== undefined && (t.text !== "" || !t.tool_use)) blocks.push({ type: "text", text: String(t.text) });
  if (t.tool_use) blocks.push({ type: "tool_use", id: id("toolu"), name: t.tool_use.name, input: t.tool_use.input ?? {} });
  return { blocks, stop: t.tool_use ? "tool_use" : "end_turn" };
}

function answer(res, body, blocks, stop, stopSeq = null) {
  const model = body.model || "claude-sonnet-4-5";
  const usage = { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
  const msg = { id: id("msg"), type: "message", role: "assistant", model, content: blocks, stop_reason: stop, stop_sequence: stopSeq, usage };
  const headers = { "request-id": id("req") };
  if (!body.stream) {
    res.writeHead(200, { ...headers, "content-type": "application/json" });
    return res.end(JSON.stringify(msg));
  }
  res.writeHead(200, { ...headers, "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  const ev = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
  ev("message_start", { message: { ...msg, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } } });
  blocks.forEach((b, index) => {
    if (b.type === "text") {
      ev("content_block_start", { index, content_block: { type: "text", text: "" } });
      if (index === 0) ev("ping", {});
      for (const chunk of b.text.match(/[\s\S]{1,20}/g) ?? []) ev("content_block_delta", { index, delta: { type: "text_delta", text: chunk } });
    } else {
      ev("content_block_start", { index, content_block: { type: "tool_use", id: b.id, name: b.name, input: {} } });
      const json = JSON.stringify(b.input);
      ev("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: "" } });
      for (const chunk of json.match(/[\s\S]{1,15}/g) ?? []) ev("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: chunk } });
    }
    ev("content_block_stop", { index });
  });
  ev("message_delta", { delta: { stop_reason: stop, stop_sequence: stopSeq }, usage: { output_tokens: usage.output_tokens } });
  ev("message_stop", {});
  res.end();
}

const json = (res, code, obj) => { res.writeHead(code, { "content-type": "application/json" }); res.end(JSON.stringify(obj)); };

const server = http.createServer((req, res) => {
  let raw = "";
  req.on("data", (c) => (raw += c));
  req.on("end", () => {
    const path = new URL(req.url, "http://x").pathname;
    let body = null;
    try { body = raw ? JSON.parse(raw) : null; } catch { body = { _unparsed: raw }; }
    const entry = { t: new Date().toISOString(), method: req.method, path, url: req.url, headers: redact(req.headers), key_sha256: keySha256(req.headers), body };
    // The real API's answer to a missing or wrong key (docs.anthropic.com, "Errors":
    // 401 authentication_error); /api/hello is the unauthenticated probe.
    const given = req.headers["x-api-key"] ?? /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? "")?.[1];
    if (wantKey !== undefined && given !== wantKey && path !== "/api/hello") {
      log({ ...entry, kind: "refused", status: 401 });
      return json(res, 401, { type: "error", error: { type: "authentication_error", message: "invalid x-api-key" },
        request_id: id("req") });
    }
    if (req.method === "POST" && path === "/v1/messages") {
      body = body ?? {};
      const main = isMain(body);
      const r = main ? blocksFor(script[turn++] ?? { text: "(script exhausted)" }) : sideTurn(body);
      // kind: main|side; turn: script index (main only); reply: what we answered.
      log({ ...entry, kind: main ? "main" : "side", turn: main ? turn - 1 : null, reply: { stop_reason: r.stop, content: r.blocks } });
      return answer(res, body, r.blocks, r.stop, r.seq ?? null);
    }
    log({ ...entry, kind: "other" });
    if (path === "/api/hello") return json(res, 200, {}); // connectivity probe (HEAD) without DISABLE_NONESSENTIAL_TRAFFIC
    if (req.method === "POST" && path === "/v1/messages/count_tokens")
      return json(res, 200, { input_tokens: Math.ceil(raw.length / 4) });
    if (req.method === "GET" && path.startsWith("/v1/models")) {
      const m = { type: "model", id: "claude-sonnet-4-5", display_name: "Claude Sonnet 4.5", created_at: "2025-09-29T00:00:00Z" };
      return json(res, 200, path === "/v1/models" ? { data: [m], has_more: false, first_id: m.id, last_id: m.id } : m);
    }
    json(res, 404, { type: "error", error: { type: "not_found_error", message: `no route ${req.method} ${path}` } });
  });
});

server.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` })));
process.on("SIGTERM", () => process.exit(0));
process.on("SIGINT", () => process.exit(0));
// Exit when our stdin pipe closes (parent died); ignore when stdin is a TTY, file or /dev/null.
// Node's child_process gives a socketpair, a shell/C runner a pipe(2): accept both.
let st = null;
try { st = fs.fstatSync(0); } catch {} // fd 0 may be closed
if (st && (st.isFIFO() || st.isSocket())) { process.stdin.resume(); process.stdin.on("end", () => process.exit(0)); }
