#!/usr/bin/env node
// A tunnel provider's public edge, for the tunnel emulators, on 127.0.0.1.
//
// Clients reach it as an HTTP proxy (https_proxy=http://127.0.0.1:PORT):
// CONNECT to a routed host on port 443 is answered with TLS (the test's
// certificate) and each request is forwarded to the host's origin, as
// ngrok's and Cloudflare's edges forward to the agent's local service. A
// host without a route gets 404 with its provider's error code; an origin
// that does not answer, 502 (ngrok: ERR_NGROK_8012; Cloudflare: its 502
// page). Server-sent event streams pass unless the route says no SSE (a
// quick tunnel buffers them), and a route may cap the requests in flight
// (a quick tunnel: 200).
//
// In-process: import { startEdge } and add routes to edge.routes. As a
// process (the fake cloudflared's edge): node edge.mjs --cert F --key F
// prints "ready PORT" and takes POST /routes {host, origin, provider,
// sse, max_in_flight} and DELETE /routes/HOST on the same port.
import http from "node:http";
import tls from "node:tls";
import fs from "node:fs";
import { fileURLToPath } from "node:url";

export function startEdge({ cert, key }, ready) {
  const routes = new Map(); // host -> { origin, provider, sse, max_in_flight, in_flight, count }

  const app = http.createServer((req, res) => {
    const host = (req.headers.host || "").replace(/:\d+$/, "");
    const r = routes.get(host);
    if (!r) {
      if (host.endsWith(".trycloudflare.com")) {
        res.writeHead(530, { "Content-Type": "text/plain", "cf-ray": "0000000000000000-LHR" });
        return res.end("error code: 1033\n");
      }
      res.writeHead(404, { "ngrok-error-code": "ERR_NGROK_3200", "Content-Type": "text/plain" });
      return res.end(`Tunnel ${host} not found\n`);
    }
    if (r.max_in_flight && r.in_flight >= r.max_in_flight) {
      res.writeHead(429, { "Content-Type": "text/plain" });
      return res.end("too many requests in flight\n");
    }
    r.in_flight++;
    r.count++;
    res.on("close", () => r.in_flight--);
    const target = new URL(r.origin);
    const up = http.request({
      host: target.hostname === "localhost" ? "127.0.0.1" : target.hostname.replace(/^\[|\]$/g, ""),
      port: target.port || 80,
      method: req.method,
      path: req.url,
      // The public Host goes to the origin as it came: cloudflared's
      // buildHTTPRequest sets req.Host to it and its RoundTrip changes only the
      // URL; ngrok rewrites it only with host_header: rewrite (opt-in).
      headers: { ...req.headers, "x-forwarded-for": "203.0.113.7", "x-forwarded-proto": "https" },
    }, (ur) => {
      if (r.sse === false && /^text\/event-stream/.test(ur.headers["content-type"] || "")) {
        // A quick tunnel holds an event stream until it ends.
        const chunks = [];
        ur.on("data", (c) => chunks.push(c));
        ur.on("end", () => { res.writeHead(ur.statusCode, ur.headers); res.end(Buffer.concat(chunks)); });
        return;
      }
      res.writeHead(ur.statusCode, ur.headers);
      ur.pipe(res);
    });
    up.on("error", () => {
      if (res.headersSent) return res.destroy();
      if (r.provider === "cloudflare") {
        res.writeHead(502, { "Content-Type": "text/html", "cf-ray": "0000000000000000-LHR" });
        return res.end("<html><body>Bad gateway: the origin did not answer</body></html>\n");
      }
      res.writeHead(502, { "ngrok-error-code": "ERR_NGROK_8012", "Content-Type": "text/html" });
      res.end(`<html><body>Traffic was successfully tunneled to the ngrok agent, but the agent failed to establish a connection to the upstream web service at ${r.origin}.</body></html>\n`);
    });
    req.pipe(up);
  });

  const control = (req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const m = req.url.match(/^\/routes(?:\/([^/]+))?$/);
      if (m && !m[1] && req.method === "POST") {
        try {
          const b = JSON.parse(Buffer.concat(chunks).toString("utf8"));
          routes.set(b.host, { origin: b.origin, provider: b.provider, sse: b.sse, max_in_flight: b.max_in_flight || 0, in_flight: 0, count: 0 });
          res.writeHead(201);
        } catch { res.writeHead(400); }
        return res.end();
      }
      if (m && m[1] && req.method === "DELETE") {
        res.writeHead(routes.delete(decodeURIComponent(m[1])) ? 204 : 404);
        return res.end();
      }
      if (req.url === "/routes" && req.method === "GET") {
        res.writeHead(200, { "Content-Type": "application/json" });
        return res.end(JSON.stringify([...routes.entries()].map(([host, r]) => ({ host, origin: r.origin, count: r.count }))));
      }
      res.writeHead(400, { "Content-Type": "text/plain" });
      res.end("this edge takes CONNECT, and /routes\n");
    });
  };

  const proxy = http.createServer(control);
  proxy.on("connect", (req, sock, head) => {
    const [host, port] = req.url.split(":");
    const known = host.endsWith(".ngrok-free.app") || host.endsWith(".trycloudflare.com");
    if (!known || port !== "443") {
      sock.end("HTTP/1.1 403 Forbidden\r\n\r\n");
      return;
    }
    sock.write("HTTP/1.1 200 Connection Established\r\n\r\n");
    if (head && head.length) sock.unshift(head);
    const t = new tls.TLSSocket(sock, { isServer: true, cert, key });
    t.on("error", () => sock.destroy());
    app.emit("connection", t);
  });
  proxy.listen(0, "127.0.0.1", () => ready(proxy.address().port));
  return { routes, server: proxy };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  let cert = null, key = null;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--cert") cert = fs.readFileSync(args[++i]);
    else if (args[i] === "--key") key = fs.readFileSync(args[++i]);
  }
  if (!cert || !key) { console.error("edge: --cert and --key are required"); process.exit(2); }
  startEdge({ cert, key }, (port) => process.stdout.write(`ready ${port}\n`));
  process.on("SIGTERM", () => process.exit(0));
}
