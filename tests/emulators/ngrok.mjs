#!/usr/bin/env node
// An emulator of the ngrok agent for the tunnel tests, on 127.0.0.1 only.
//
// Two listeners:
//  - the agent's local API (what `ngrok start --none` serves on :4040):
//    GET /api/tunnels, POST /api/tunnels {addr, proto, name} -> 201,
//    GET and DELETE /api/tunnels/NAME (204), errors as the agent gives them
//    ({error_code, status_code, msg, details});
//  - the public edge (edge.mjs): an HTTP proxy a client reaches with
//    https_proxy=http://127.0.0.1:EDGE; each tunnel's public host is
//    forwarded to its config.addr, as ngrok's edge does; a tunnel whose
//    service does not answer gives 502 with ngrok-error-code
//    ERR_NGROK_8012, an unknown host 404 ERR_NGROK_3200.
//
// Usage: node ngrok.mjs --cert FILE --key FILE | --edge URL [--tunnel NAME=ADDR]...
//        [--http-tunnel NAME=ADDR]... (an http:// public URL, as ngrok v2 also made)
// Prints "ready API_PORT EDGE_PORT" on standard output once listening.
import http from "node:http";
import fs from "node:fs";
import crypto from "node:crypto";
import { startEdge } from "./edge.mjs";

const args = process.argv.slice(2);
let cert = null, key = null, externalEdge = null;
const initial = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--cert") cert = fs.readFileSync(args[++i]);
  else if (args[i] === "--key") key = fs.readFileSync(args[++i]);
  else if (args[i] === "--tunnel") initial.push([args[++i], "https"]);
  else if (args[i] === "--http-tunnel") initial.push([args[++i], "http"]);
  else if (args[i] === "--edge") externalEdge = args[++i];
  else { console.error(`ngrok emulator: unknown argument ${args[i]}`); process.exit(2); }
}
if ((!cert || !key) && !externalEdge) { console.error("ngrok emulator: --cert and --key (or --edge) are required"); process.exit(2); }

const tunnels = new Map(); // name -> tunnel object

// The agent normalizes an address to scheme://host:port.
function normalizeAddr(addr) {
  if (/^\d+$/.test(addr)) return `http://localhost:${addr}`;
  if (!addr.includes("://")) return `http://${addr}`;
  return addr;
}

function addTunnel(name, addr, proto, scheme = "https") {
  const host = `${crypto.randomBytes(6).toString("hex")}.ngrok-free.app`;
  const t = {
    name,
    ID: crypto.randomBytes(16).toString("hex"),
    uri: `/api/tunnels/${encodeURIComponent(name)}`,
    public_url: `${scheme}://${host}`,
    proto: scheme,
    config: { addr: normalizeAddr(addr), inspect: true },
    metrics: {
      conns: { count: 0, gauge: 0, rate1: 0, rate5: 0, rate15: 0, p50: 0, p90: 0, p95: 0, p99: 0 },
      http: { count: 0, rate1: 0, rate5: 0, rate15: 0, p50: 0, p90: 0, p95: 0, p99: 0 },
    },
  };
  if (proto && proto !== "http") { t.proto = proto; t.public_url = `${proto}://${host}:${20000 + tunnels.size}`; }
  tunnels.set(name, t);
  return t;
}

// Tunnels of the agent's configuration file, there before any client.
for (const [spec, scheme] of initial) {
  const eq = spec.indexOf("=");
  addTunnel(spec.slice(0, eq), spec.slice(eq + 1), "http", scheme);
}

function agentError(res, status, code, msg, details = {}) {
  const body = JSON.stringify({ error_code: code, status_code: status, msg, details });
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}

function send(res, status, obj) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}

const api = http.createServer((req, res) => {
  let chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const url = new URL(req.url, "http://127.0.0.1");
    const m = url.pathname.match(/^\/api\/tunnels(?:\/([^/]+))?\/?$/);
    if (!m) return agentError(res, 404, 100, "not found", {});
    const name = m[1] ? decodeURIComponent(m[1]) : null;
    if (!name && req.method === "GET")
      return send(res, 200, { tunnels: [...tunnels.values()], uri: "/api/tunnels" });
    if (!name && req.method === "POST") {
      let b;
      try { b = JSON.parse(Buffer.concat(chunks).toString("utf8")); }
      catch { return agentError(res, 400, 100, "invalid tunnel configuration", { err: "the body is not JSON" }); }
      if (!b || typeof b.addr !== "string" || !b.addr)
        return agentError(res, 400, 102, "invalid tunnel configuration", { err: "addr is required" });
      // The agent does not require a name (the docs' "Start tunnel" example
      // answers "name": ""); an unnamed tunnel gets one of its own.
      if (b.name !== undefined && typeof b.name !== "string")
        return agentError(res, 400, 102, "invalid tunnel configuration", { err: "name must be a string" });
      if (!b.name) b.name = `tunnel-${tunnels.size + 1}`;
      if (b.proto && !["http", "tcp", "tls"].includes(b.proto))
        return agentError(res, 400, 102, "invalid tunnel configuration", { err: `unknown proto ${b.proto}` });
      if (tunnels.has(b.name))
        // Agent 3.29.0 and later (its changelog); older agents took duplicates.
        return agentError(res, 400, 102, "invalid tunnel configuration", { err: `tunnel "${b.name}" already exists` });
      const t = addTunnel(b.name, b.addr, b.proto || "http");
      route(t);
      return send(res, 201, t);
    }
    if (name && req.method === "GET") {
      const t = tunnels.get(name);
      return t ? send(res, 200, t) : agentError(res, 404, 100, "tunnel not found", { err: `tunnel ${name} not found` });
    }
    if (name && req.method === "DELETE") {
      const t = tunnels.get(name);
      if (!t) return agentError(res, 404, 100, "tunnel not found", { err: `tunnel ${name} not found` });
      tunnels.delete(name);
      edge.routes.delete(new URL(t.public_url).hostname);
      res.writeHead(204);
      return res.end();
    }
    agentError(res, 405, 100, "method not allowed", {});
  });
});

let ready = 0, edgePort = 0;
function listening() {
  if (++ready === 2) process.stdout.write(`ready ${api.address().port} ${edgePort}\n`);
}
// The agent's tunnels are the edge's routes: an edge of its own, or the
// one --edge names (its control URL), shared with other emulators.
function edgeCall(method, path, body) {
  const data = body ? JSON.stringify(body) : "";
  const r = http.request(`${externalEdge}${path}`, { method, headers: { "content-type": "application/json", "content-length": Buffer.byteLength(data) } }, (res) => res.resume());
  r.on("error", () => {});
  r.end(data);
}
const edge = externalEdge
  ? { routes: { set: (host, r) => edgeCall("POST", "/routes", { host, ...r }), delete: (host) => edgeCall("DELETE", `/routes/${encodeURIComponent(host)}`) } }
  : startEdge({ cert, key }, (port) => { edgePort = port; listening(); });
if (externalEdge) { edgePort = Number(new URL(externalEdge).port); ready++; }
function route(t) {
  edge.routes.set(new URL(t.public_url).hostname, { origin: t.config.addr, provider: "ngrok", sse: true, max_in_flight: 0, in_flight: 0, count: 0 });
}
for (const t of tunnels.values()) route(t);
api.listen(0, "127.0.0.1", listening);
process.on("SIGTERM", () => process.exit(0));
