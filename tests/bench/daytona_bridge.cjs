// daytona_bridge.cjs - the stand-in for sandrun-shim in a bridge mode (which
// does not exist yet), for tests/bench/daytona_transport: run inside a
// sandbox, it starts `cat` (standing for the agent) and carries its stdio
// over HTTP on 127.0.0.1:PORT, reached from outside through the preview
// proxy. Node built-ins only, CommonJS so no package.json is needed.
//   node daytona_bridge.cjs PORT
// One client at a time; the last stream opened gets cat's stdout:
//   POST /in      request body -> cat's stdin, 204 once written
//   GET  /out     an empty line, then cat's stdout, chunked, for as long as
//                 it is open
//   POST /duplex  a streamed (chunked) request body -> cat's stdin, and
//                 an empty line then cat's stdout as the streamed response
//                 of the same request
//   WebSocket upgrade (any path): frames -> stdin, stdout -> binary frames
// Exits when cat does, or on SIGTERM.
'use strict';
const http = require('http');
const crypto = require('crypto');
const { spawn } = require('child_process');

const port = Number(process.argv[2]);
const cat = spawn('cat', [], { stdio: ['pipe', 'pipe', 'inherit'] });
let sink = null;
cat.stdout.on('data', (d) => { if (sink) sink(d); });
cat.on('exit', () => process.exit(0));
const toCat = (d) => cat.stdin.write(d);

function frame(payload) { // server to client: unmasked
  const n = payload.length;
  const head = n < 126 ? Buffer.from([0x82, n])
    : n < 65536 ? Buffer.from([0x82, 126, n >> 8, n & 255])
      : Buffer.concat([Buffer.from([0x82, 127]), (() => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(n)); return b; })()]);
  return Buffer.concat([head, payload]);
}
function frames(onFrame) { // client to server: masked
  let buf = Buffer.alloc(0);
  return (d) => {
    buf = Buffer.concat([buf, d]);
    for (;;) {
      if (buf.length < 2) return;
      const op = buf[0] & 15, masked = buf[1] & 128;
      let n = buf[1] & 127, off = 2;
      if (n === 126) { if (buf.length < 4) return; n = buf.readUInt16BE(2); off = 4; }
      else if (n === 127) { if (buf.length < 10) return; n = Number(buf.readBigUInt64BE(2)); off = 10; }
      const key = off;
      if (masked) off += 4;
      if (buf.length < off + n) return;
      const p = Buffer.from(buf.subarray(off, off + n));
      if (masked) for (let i = 0; i < n; i++) p[i] ^= buf[key + (i & 3)];
      buf = buf.subarray(off + n);
      onFrame(op, p);
    }
  };
}

const server = http.createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/in') {
    req.on('data', toCat);
    req.on('end', () => { res.writeHead(204); res.end(); });
    return;
  }
  if ((req.method === 'GET' && req.url === '/out') || (req.method === 'POST' && req.url === '/duplex')) {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'cache-control': 'no-cache' });
    // An empty line at once: a proxy that holds the head until the first
    // byte of the body (the emulator's does) lets it through now.
    res.write('\n');
    const mine = (d) => res.write(d);
    sink = mine;
    res.on('close', () => { if (sink === mine) sink = null; });
    if (req.method === 'POST') req.on('data', toCat);
    return;
  }
  res.writeHead(404);
  res.end();
});
server.on('upgrade', (req, socket) => {
  const accept = crypto.createHash('sha1')
    .update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  socket.setNoDelay(true);
  socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
    `Sec-WebSocket-Accept: ${accept}\r\n\r\n`);
  const mine = (d) => socket.write(frame(d));
  sink = mine;
  socket.on('data', frames((op, p) => {
    if (op === 8) return socket.end(Buffer.from([0x88, 0]));
    if (op === 1 || op === 2) toCat(p);
  }));
  socket.on('error', () => {});
  socket.on('close', () => { if (sink === mine) sink = null; });
});
// A streamed request lives as long as the session: no request timeout
// (Node >= 18 would cut one after 300 s).
server.requestTimeout = 0;
server.listen(port, '127.0.0.1');
process.on('SIGTERM', () => process.exit(0));
