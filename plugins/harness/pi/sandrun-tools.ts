// Pi extension: exposes sandrun platform tools to Pi (loaded by jiti, no build step).
// Tool specs come from the JSON file named by $SANDRUN_TOOL_SPECS:
//   [{"name":"echo","description":"...","inputSchema":{"type":"object",...}}]
// Each tool runs `${SANDRUN_SHIM:-sandrun-shim} call NAME ARGS_JSON`; stdout is the
// result text. Exit 0 = ok, 1 = tool error, 4 = paused, anything else = failure.
// Non-zero exits throw, which Pi reports to the model as an error tool result.
// Only node built-ins are imported; the parameters are plain JSON Schema, which
// Pi's validator (typebox Compile) accepts without TypeBox metadata.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";

type Spec = { name: string; description?: string; inputSchema?: Record<string, unknown> };
type ToolResult = { content: { type: "text"; text: string }[]; details: Record<string, unknown> };

// Run the shim; resolve with stdout/stderr/exit code (never rejects on non-zero exit).
function runShim(name: string, args: unknown, signal?: AbortSignal, cwd?: string) {
  const shim = process.env.SANDRUN_SHIM || "sandrun-shim";
  return new Promise<{ code: number | null; out: string; err: string }>((resolve, reject) => {
    const child = spawn(shim, ["call", name, JSON.stringify(args ?? {})], {
      cwd, stdio: ["ignore", "pipe", "pipe"], signal,
    });
    let out = "", err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("error", reject); // ENOENT, or AbortError when the turn is cancelled
    child.on("close", (code) => resolve({ code, out, err }));
  });
}

export default function sandrunTools(pi: any) {
  const file = process.env.SANDRUN_TOOL_SPECS;
  if (!file) return; // nothing to register outside sandrun
  const specs: Spec[] = JSON.parse(readFileSync(file, "utf8"));
  for (const spec of specs) {
    pi.registerTool({
      name: spec.name,
      label: spec.name,
      description: spec.description ?? spec.name,
      promptSnippet: spec.description ?? spec.name,
      parameters: spec.inputSchema ?? { type: "object", properties: {} },
      async execute(_id: string, params: unknown, signal?: AbortSignal, _onUpdate?: unknown, ctx?: { cwd?: string }): Promise<ToolResult> {
        const { code, out, err } = await runShim(spec.name, params, signal, ctx?.cwd);
        if (code === 0) return { content: [{ type: "text", text: out }], details: { exitCode: 0 } };
        const why = code === 4 ? "paused" : code === 1 ? "tool error" : `shim exit ${code}`;
        throw new Error(`${spec.name}: ${why}: ${(out || err).trim()}`);
      },
    });
  }
}
