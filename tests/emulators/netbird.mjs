#!/usr/bin/env node
// An emulator of NetBird's management REST API (shared/management/http/api/
// openapi.yml) for the tunnel tests, on 127.0.0.1, with the real server's
// quirks (see shared/protocols/tunnels.md):
//  - auth "Authorization: Token nbp_..."; none: 401; a token that is not a
//    PAT (40 characters: nbp_, a 30-character secret, its CRC-32 in base62
//    padded to 6; extractPATFromToken, management/server/auth/manager.go):
//    401 "token invalid"; a well-formed unknown token: 404 "invalid token:
//    pat: <base64 of its SHA-256> not found" (util.WriteError lowercases);
//  - a group that is not there cannot be deleted: 400 "group: ID not found"
//    (deleteGroup answers every DeleteGroups error with 400); nor "All":
//    400; a duplicate group name: 409;
//  - errors {"message","code"}; creates answer 200; deletes 200 {};
//  - a new account has the group "All" and the all-to-all policy "Default";
//  - ?name= filters are SQL LIKE '%x%' (case-insensitive, _ and % wildcards);
//  - empty lists may come back as null (Group.peers, rule sources);
//  - "All" in a setup key's auto_groups: 422; a one-off key with
//    usage_limit > 1: 422; a group a setup key (even revoked) lists in
//    auto_groups cannot be deleted: 400 "group has been linked to setup
//    key: NAME"; nor one a policy uses: 400;
//  - peer IPs from 100.64.0.0/16 here; an ephemeral peer's dns_label is
//    <host>-<ip3>-<ip4>.netbird.cloud;
//  - a setup key's plaintext only in the create answer.
// The client's side (what `netbird up --setup-key-file` does over gRPC) is
// POST /emu/login {"setup_key","hostname"}: it checks the key (revoked,
// expired, used up) and adds the peer, in the key's auto groups. GET
// /emu/state dumps everything, for the tests to check what is left; POST
// /emu/fail {"method","path","status","message"} makes the next such
// call fail once.
//
// Usage: node netbird.mjs --token nbp_... [--runner NAME]
//        node netbird.mjs --mint-token   (prints a new well-formed PAT)
// Prints {"url": "http://127.0.0.1:PORT"} once listening. The runner's own
// peer (default "runner", 100.64.0.1) is in group "runners".
import http from "node:http";
import crypto from "node:crypto";

// A PAT as NetBird makes one (generateNewToken, management/server/types/
// personal_access_token.go): nbp_ + 30 base62 characters + the CRC-32 of
// those in base62 (netbird's base62 package), left-padded with 0 to 6.
const B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
function crc32(buf) {
  let c = ~0;
  for (const b of buf) { c ^= b; for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xEDB88320 & -(c & 1)); }
  return ~c >>> 0;
}
function b62(n) { let s = ""; do { s = B62[n % 62] + s; n = Math.floor(n / 62); } while (n > 0); return s; }
const checksum = (secret) => b62(crc32(Buffer.from(secret))).padStart(6, "0");
const wellFormed = (t) => t.length === 40 && t.startsWith("nbp_") && [...t.slice(4)].every((ch) => B62.includes(ch)) &&
  checksum(t.slice(4, 34)) === t.slice(34);
const args = process.argv.slice(2);
if (args[0] === "--mint-token") {
  const secret = [...crypto.randomBytes(30)].map((b) => B62[b % 62]).join("");
  console.log(`nbp_${secret}${checksum(secret)}`);
  process.exit(0);
}
let token = null, runnerName = "runner";
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--token") token = args[++i];
  else if (args[i] === "--runner") runnerName = args[++i];
}
if (!token) { console.error("netbird emulator: --token is required"); process.exit(2); }
if (!wellFormed(token)) { console.error("netbird emulator: --token is not a well-formed PAT (see --mint-token)"); process.exit(2); }

const id = () => crypto.randomBytes(10).toString("hex").slice(0, 20);
const groups = new Map(), policies = new Map(), keys = new Map(), peers = new Map();
let nextIp = 2;
const log = [];
const faults = []; // {method, path, status, message}: the next such call fails once

function addGroup(name) { const g = { id: id(), name, peers: [], issued: "api" }; groups.set(g.id, g); return g; }
const all = addGroup("All");
all.issued = "jwt";
const runners = addGroup("runners");
const runnerPeer = { id: id(), name: runnerName, ip: "100.64.0.1", dns_label: `${runnerName}.netbird.cloud`, connected: true, ephemeral: false, groups: [all.id, runners.id], hostname: runnerName };
peers.set(runnerPeer.id, runnerPeer);
all.peers.push(runnerPeer.id);
runners.peers.push(runnerPeer.id);
const def = {
  id: id(), name: "Default", description: "This is a default rule that allows connections between all the resources", enabled: true,
  rules: [{ id: id(), name: "Default", description: "", enabled: true, action: "accept", bidirectional: true, protocol: "all", ports: null, sources: [all.id], destinations: [all.id] }],
};
policies.set(def.id, def);

const like = (value, pattern) => {
  const re = new RegExp(pattern.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/%/g, ".*").replace(/_/g, "."), "i");
  return re.test(value);
};
const groupRef = (gid) => { const g = groups.get(gid); return g ? { id: g.id, name: g.name, peers_count: g.peers.length, resources_count: 0, issued: g.issued } : { id: gid, name: "?" }; };
const groupOut = (g) => ({ id: g.id, name: g.name, peers_count: g.peers.length, peers: g.peers.length ? g.peers.map((p) => ({ id: p, name: peers.get(p)?.name })) : null, resources: null, resources_count: 0, issued: g.issued });
const policyOut = (p) => ({ ...p, rules: p.rules.map((r) => ({ ...r, sources: r.sources && r.sources.length ? r.sources.map(groupRef) : null, destinations: r.destinations && r.destinations.length ? r.destinations.map(groupRef) : null })) });
const keyOut = (k, plain) => ({ id: k.id, name: k.name, key: plain ? k.key : `${k.key.slice(0, 5)}****`, type: k.type, expires: k.expires, revoked: k.revoked, used_times: k.used_times, last_used: k.last_used, state: k.revoked ? "revoked" : Date.now() > Date.parse(k.expires) ? "expired" : k.used_times >= (k.usage_limit || Infinity) ? "overused" : "valid", auto_groups: k.auto_groups, usage_limit: k.usage_limit, ephemeral: k.ephemeral, valid: !k.revoked && Date.now() <= Date.parse(k.expires) });
const peerOut = (p) => ({ id: p.id, name: p.name, ip: p.ip, dns_label: p.dns_label, connected: p.connected, hostname: p.hostname, ephemeral: p.ephemeral, groups: p.groups.map(groupRef), os: "Linux", version: "0.36.5" });

function send(res, status, obj) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}
const err = (res, code, message) => send(res, code, { message, code });

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const url = new URL(req.url, "http://127.0.0.1");
    const path = url.pathname.replace(/\/$/, "");
    let body = null;
    if (chunks.length) {
      try { body = JSON.parse(Buffer.concat(chunks).toString("utf8")); }
      catch { return err(res, 400, "couldn't parse JSON request"); }
    }
    if (path === "/emu/fail" && req.method === "POST") {
      faults.push(body);
      return send(res, 200, {});
    }
    log.push(`${req.method} ${path}`);
    const f = faults.findIndex((x) => x.method === req.method && x.path === path);
    if (f >= 0) {
      const [fault] = faults.splice(f, 1);
      return err(res, fault.status || 500, fault.message || "internal error");
    }
    if (path === "/emu/state" && req.method === "GET")
      return send(res, 200, { groups: [...groups.values()].map(groupOut), policies: [...policies.values()].map(policyOut), setup_keys: [...keys.values()].map((k) => keyOut(k, false)), peers: [...peers.values()].map(peerOut), log });
    if (path === "/emu/login" && req.method === "POST") {
      const k = [...keys.values()].find((x) => x.key === body?.setup_key);
      if (!k) return err(res, 404, "couldn't add peer: setup key is invalid");
      if (k.revoked) return err(res, 403, "couldn't add peer: setup key is revoked");
      if (Date.now() > Date.parse(k.expires)) return err(res, 403, "couldn't add peer: setup key is expired");
      if (k.usage_limit && k.used_times >= k.usage_limit) return err(res, 403, "couldn't add peer: setup key has reached its usage limit");
      k.used_times++;
      k.last_used = new Date().toISOString();
      const n = nextIp++;
      const ip = `100.64.${n >> 8}.${n & 255}`;
      const host = String(body.hostname || "peer");
      const p = { id: id(), name: host, hostname: host, ip, dns_label: k.ephemeral ? `${host}-${n >> 8}-${n & 255}.netbird.cloud` : `${host}.netbird.cloud`, connected: true, ephemeral: k.ephemeral, groups: [all.id, ...k.auto_groups] };
      peers.set(p.id, p);
      for (const gid of p.groups) groups.get(gid)?.peers.push(p.id);
      return send(res, 200, peerOut(p));
    }
    const auth = req.headers.authorization || "";
    if (!auth) return err(res, 401, "no valid authentication provided");
    const m = auth.match(/^Token (\S+)$/i);
    if (!m || !wellFormed(m[1])) return err(res, 401, "token invalid");
    if (m[1] !== token)
      return err(res, 404, `invalid token: pat: ${crypto.createHash("sha256").update(m[1]).digest("base64")} not found`);

    let r;
    if (path === "/api/groups" && req.method === "GET") return send(res, 200, [...groups.values()].map(groupOut));
    if (path === "/api/groups" && req.method === "POST") {
      if (!body?.name) return err(res, 422, "group name shouldn't be empty");
      if ([...groups.values()].some((g) => g.name === body.name)) return err(res, 409, "group with name " + body.name + " already exists");
      const g = addGroup(body.name);
      return send(res, 200, groupOut(g));
    }
    if ((r = path.match(/^\/api\/groups\/([^/]+)$/))) {
      const g = groups.get(r[1]);
      if (!g) return err(res, req.method === "DELETE" ? 400 : 404, `group: ${r[1]} not found`);
      if (req.method === "GET") return send(res, 200, groupOut(g));
      if (req.method === "DELETE") {
        if (g.name === "All") return err(res, 400, "deleting group ALL is not allowed");
        const k = [...keys.values()].find((x) => x.auto_groups.includes(g.id));
        if (k) return err(res, 400, `group has been linked to setup key: ${k.name}`);
        const p = [...policies.values()].find((x) => x.rules.some((ru) => ru.sources?.includes(g.id) || ru.destinations?.includes(g.id)));
        if (p) return err(res, 400, `group has been linked to policy: ${p.name}`);
        groups.delete(g.id);
        return send(res, 200, {});
      }
    }
    if (path === "/api/policies" && req.method === "GET") return send(res, 200, [...policies.values()].map(policyOut));
    if (path === "/api/policies" && req.method === "POST") {
      if (!body?.name || !Array.isArray(body.rules) || !body.rules.length) return err(res, 422, "policy must have a name and at least one rule");
      for (const ru of body.rules) {
        for (const gid of [...(ru.sources || []), ...(ru.destinations || [])]) if (!groups.has(gid)) return err(res, 422, `invalid auto groups: group not found: ${gid}`);
        if (!["all", "tcp", "udp", "icmp"].includes(ru.protocol)) return err(res, 422, `invalid protocol ${ru.protocol}`);
        if ((ru.ports || []).some((p) => !/^\d+$/.test(p))) return err(res, 422, "invalid port");
      }
      const p = { id: id(), name: body.name, description: body.description || "", enabled: body.enabled !== false, rules: body.rules.map((ru) => ({ id: id(), name: ru.name || body.name, description: ru.description || "", enabled: ru.enabled !== false, action: ru.action || "accept", bidirectional: !!ru.bidirectional, protocol: ru.protocol, ports: ru.ports || null, sources: ru.sources || [], destinations: ru.destinations || [] })) };
      policies.set(p.id, p);
      return send(res, 200, policyOut(p));
    }
    if ((r = path.match(/^\/api\/policies\/([^/]+)$/))) {
      const p = policies.get(r[1]);
      if (!p) return err(res, 404, `policy: ${r[1]} not found`);
      if (req.method === "GET") return send(res, 200, policyOut(p));
      if (req.method === "DELETE") { policies.delete(p.id); return send(res, 200, {}); }
    }
    if (path === "/api/setup-keys" && req.method === "GET") return send(res, 200, [...keys.values()].map((k) => keyOut(k, false)));
    if (path === "/api/setup-keys" && req.method === "POST") {
      if (!body?.name) return err(res, 422, "setup key name shouldn't be empty");
      if (!["one-off", "reusable"].includes(body.type)) return err(res, 422, "invalid setup key type");
      const ag = body.auto_groups || [];
      if (ag.includes(all.id)) return err(res, 422, "invalid auto groups: can't add 'All' group to the setup key");
      for (const gid of ag) if (!groups.has(gid)) return err(res, 422, `invalid auto groups: group not found: ${gid}`);
      if (body.type === "one-off" && (body.usage_limit || 1) > 1) return err(res, 422, "one-off setup key can only be used once");
      const secs = Number(body.expires_in || 0);
      if (secs && (secs < 86400 && secs < 1)) return err(res, 422, "expiration has to be positive");
      const k = { id: id(), name: body.name, key: crypto.randomUUID().toUpperCase(), type: body.type, expires: new Date(Date.now() + (secs || 365 * 86400) * 1000).toISOString(), revoked: false, used_times: 0, last_used: "0001-01-01T00:00:00Z", auto_groups: ag, usage_limit: body.type === "one-off" ? 1 : (body.usage_limit || 0), ephemeral: !!body.ephemeral };
      keys.set(k.id, k);
      return send(res, 200, keyOut(k, true));
    }
    if ((r = path.match(/^\/api\/setup-keys\/([^/]+)$/))) {
      const k = keys.get(r[1]);
      if (!k) return err(res, 404, `setup key: ${r[1]} not found`);
      if (req.method === "GET") return send(res, 200, keyOut(k, false));
      if (req.method === "PUT") { if (body && "revoked" in body) k.revoked = !!body.revoked; return send(res, 200, keyOut(k, false)); }
      if (req.method === "DELETE") { keys.delete(k.id); return send(res, 200, {}); }
    }
    if (path === "/api/peers" && req.method === "GET") {
      const name = url.searchParams.get("name");
      return send(res, 200, [...peers.values()].filter((p) => name === null || like(p.name, `%${name}%`)).map(peerOut));
    }
    if ((r = path.match(/^\/api\/peers\/([^/]+)$/))) {
      const p = peers.get(r[1]);
      if (!p) return err(res, 404, `peer: ${r[1]} not found`);
      if (req.method === "GET") return send(res, 200, peerOut(p));
      if (req.method === "DELETE") {
        peers.delete(p.id);
        for (const g of groups.values()) g.peers = g.peers.filter((x) => x !== p.id);
        return send(res, 200, {});
      }
    }
    err(res, 404, "no such route");
  });
});
server.listen(0, "127.0.0.1", () => process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` }) + "\n"));
process.on("SIGTERM", () => process.exit(0));
