// Slow clients, as a slowloris attack sends them: N connections from one
// address that each send a request's headers one byte every STEP_MS and
// never finish them. Prints one JSON line once every connection ended or
// SECONDS passed: {"n", "refused" (closed by the server within 200 ms of
// connecting), "cut" (closed later by the server), "open" (still open at
// the end), "cut_ms": [when each cut one was closed, from its connect]}.
//   node slow_clients.mjs HOST PORT N FROM_ADDR SECONDS [STEP_MS]
import net from 'node:net';

const [host, port, n, from, seconds, step] = process.argv.slice(2);
const N = Number(n), STEP = Number(step ?? 500);
const head = `GET /health HTTP/1.1\r\nHost: ${host}\r\nX-Slow: ${'a'.repeat(4000)}\r\n`;
const out = { n: N, refused: 0, cut: 0, open: 0, cut_ms: [], errors: 0 };
let ended = 0;
const socks = [];

function done() {
  out.open = socks.filter((s) => !s.ended).length;
  out.cut_ms.sort((a, b) => a - b);
  console.log(JSON.stringify(out));
  for (const s of socks) s.sock.destroy();
  process.exit(0);
}

for (let i = 0; i < N; i++) {
  const t = { ended: false, at: 0, pos: 0 };
  t.sock = net.connect({ host, port: Number(port), localAddress: from });
  t.sock.on('connect', () => {
    t.at = Date.now();
    t.timer = setInterval(() => {
      if (t.pos < head.length) t.sock.write(head[t.pos++]);
    }, STEP);
  });
  const end = () => {
    if (t.ended) return;
    t.ended = true;
    clearInterval(t.timer);
    const ms = t.at ? Date.now() - t.at : 0;
    if (!t.at || ms < 200) out.refused++;
    else { out.cut++; out.cut_ms.push(ms); }
    if (++ended === N) done();
  };
  t.sock.on('error', () => { out.errors++; end(); });
  t.sock.on('close', end);
  t.sock.on('data', () => {});
  socks.push(t);
}
setTimeout(done, Number(seconds) * 1000);
