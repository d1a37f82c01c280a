// The client of tests/bench/load: N turns at once through sandrund's API,
// each on its own session (new, or the SESSIONS file's), timed from the
// request to its first event line (API latency) and to the end of its
// stream (the turn). Checks that nothing is lost: every stream ends with
// run.finished, its lines numbered 1, 2, ... without a gap. Prints one
// JSON object: {"ok", "failed", "lost", "api_ms": [...], "turn_ms": [...],
// "sessions": [...], "errors": [...]}.
//   node load.mjs URL TOKEN N PROMPT [SESSIONS_FILE]
import fs from "node:fs";
import http from "node:http";

const [url, token, n, prompt, sessionsFile] = process.argv.slice(2);
const sessions = sessionsFile ? JSON.parse(fs.readFileSync(sessionsFile, "utf8")) : [];
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

function turn(i) {
	return new Promise((resolve) => {
		const body = JSON.stringify({ prompt, session: sessions[i] || undefined });
		const t0 = process.hrtime.bigint();
		const ms = () => Number(process.hrtime.bigint() - t0) / 1e6;
		const out = { api_ms: null, lines: 0, gap: false, finished: false };
		const req = http.request(url + "/v1/runs", { method: "POST", agent, headers: {
			Authorization: "Bearer " + token, "Content-Type": "application/json" } }, (res) => {
			let buf = "";
			out.status = res.statusCode;
			res.on("data", (d) => {
				if (out.api_ms === null)
					out.api_ms = ms();
				buf += d;
				let j;
				while ((j = buf.indexOf("\n")) >= 0) {
					const ev = JSON.parse(buf.slice(0, j));
					buf = buf.slice(j + 1);
					out.lines++;
					if (ev.seq !== out.lines)
						out.gap = true;
					if (ev.type === "run.started") out.session = ev.session;
					if (ev.type === "sandbox.acquired") out.how = ev.how;
					if (ev.type === "run.finished") out.finished = ev.stop_reason === "end_turn";
					if (ev.type === "run.failed") out.error = ev.code + ": " + ev.message;
				}
			});
			res.on("end", () => { out.turn_ms = ms(); resolve(out); });
		});
		req.on("error", (e) => { out.error = String(e); resolve(out); });
		req.end(body);
	});
}

const all = await Promise.all(Array.from({ length: Number(n) }, (_, i) => turn(i)));
const good = all.filter((r) => r.status === 200 && r.finished && !r.gap);
console.log(JSON.stringify({
	ok: good.length,
	failed: all.length - good.length,
	lost: all.filter((r) => r.gap).length,
	warm: all.filter((r) => r.how === "warm").length,
	api_ms: good.map((r) => r.api_ms),
	turn_ms: good.map((r) => r.turn_ms),
	sessions: all.map((r) => r.session),
	errors: [...new Set(all.filter((r) => !good.includes(r)).map((r) =>
		r.error || "HTTP " + r.status + (r.finished ? "" : ", no run.finished")))].slice(0, 5),
}));
