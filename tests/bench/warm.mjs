// The client of tests/bench/warm: TURNS turns on one session through
// sandrund's API, each timed from the request to the agent.prompt_sent
// event and to run.finished. Prints one JSON line per turn:
// {"turn", "how", "warm_agent", "prompt_ms", "total_ms"}.
//   node warm.mjs URL TOKEN MODEL_URL TURNS
import http from "node:http";

const [url, token, model, turns] = process.argv.slice(2);

function turn(session) {
	return new Promise((resolve, reject) => {
		const body = JSON.stringify({ prompt: "say ok", session: session || undefined,
			model: { url: model, credentials: { ANTHROPIC_API_KEY: "sk-ant-bench" } } });
		const t0 = process.hrtime.bigint();
		const ms = () => Number(process.hrtime.bigint() - t0) / 1e6;
		const out = { prompt_ms: null, warm_agent: false };
		const req = http.request(url + "/v1/runs", { method: "POST", headers: {
			Authorization: "Bearer " + token, "Content-Type": "application/json" } }, (res) => {
			let buf = "";
			res.on("data", (d) => {
				buf += d;
				let i;
				while ((i = buf.indexOf("\n")) >= 0) {
					const ev = JSON.parse(buf.slice(0, i));
					buf = buf.slice(i + 1);
					if (ev.type === "run.started") { out.turn = ev.turn; out.session = ev.session; }
					if (ev.type === "sandbox.acquired") out.how = ev.how;
					if (ev.type === "agent.starting") out.warm_agent = !!ev.warm;
					if (ev.type === "agent.prompt_sent") out.prompt_ms = ms();
					if (ev.type === "run.failed") out.failed = ev.code + ": " + ev.message;
				}
			});
			res.on("end", () => { out.total_ms = ms(); resolve(out); });
		});
		req.on("error", reject);
		req.end(body);
	});
}

let session = null;
for (let i = 0; i < Number(turns); i++) {
	const r = await turn(session);
	session = r.session;
	console.log(JSON.stringify(r));
	if (r.failed) process.exit(1);
}
