// node_mcp_server.mjs - reference MCP server (official SDK) serving echo/fail/noop.
// Usage:
//   SANDRUN_NPM_DIR=DIR node node_mcp_server.mjs                 # stdio (newline JSON-RPC)
//   SANDRUN_NPM_DIR=DIR node node_mcp_server.mjs --http PORT TOKEN
//       Streamable HTTP on 127.0.0.1:PORT/mcp (PORT 0 = ephemeral), JSON responses,
//       stateless, "Authorization: Bearer TOKEN" required (else 401). Prints
//       {"url":"http://127.0.0.1:PORT/mcp"} on stdout once listening. For testing
//       mcp_sdk_check.mjs in http mode.
// DIR is the `npm install --prefix DIR @modelcontextprotocol/sdk` directory.
// Exits 77 with a SKIP line if the SDK is missing.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const npmDir = process.env.SANDRUN_NPM_DIR;
const sdkDir = npmDir && join(npmDir, 'node_modules/@modelcontextprotocol/sdk/dist/esm');
if (!sdkDir || !existsSync(join(sdkDir, 'server/index.js'))) {
  console.log(`SKIP: @modelcontextprotocol/sdk not installed in ${npmDir ?? ''}`);
  process.exit(77);
}
const sdk = (p) => import(pathToFileURL(join(sdkDir, p)).href);
const { Server } = await sdk('server/index.js');
const { ListToolsRequestSchema, CallToolRequestSchema, McpError, ErrorCode } = await sdk('types.js');

const TOOLS = [
  { name: 'echo', description: 'Echo the text back',
    inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } },
  { name: 'fail', description: 'Always fails', inputSchema: { type: 'object', properties: {} } },
  { name: 'noop', description: 'Does nothing', inputSchema: { type: 'object', properties: {} } },
];
const text = (t) => ({ content: [{ type: 'text', text: t }] });

function makeServer() {
  const server = new Server({ name: 'node-mcp-reference', version: '1.0.0' },
                            { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, async (req) => {
    const { name, arguments: args = {} } = req.params;
    switch (name) {
      case 'noop': return text('ok');
      case 'fail': return { ...text('it failed'), isError: true };
      case 'echo':
        if (typeof args.text !== 'string') throw new McpError(ErrorCode.InvalidParams, 'echo: "text" must be a string');
        return text(args.text);
      default: throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`);
    }
  });
  return server;
}

if (process.argv[2] !== '--http') {
  const { StdioServerTransport } = await sdk('server/stdio.js');
  // Exits by itself once stdin closes and pending replies are written.
  await makeServer().connect(new StdioServerTransport());
} else {
  const [port = '0', token = 'test-token'] = process.argv.slice(3);
  const http = await import('node:http');
  const { StreamableHTTPServerTransport } = await sdk('server/streamableHttp.js');
  const httpServer = http.createServer(async (req, res) => {
    if (req.headers.authorization !== `Bearer ${token}`) {
      res.writeHead(401, { 'Content-Type': 'application/json', 'WWW-Authenticate': 'Bearer' });
      return res.end('{"error":"unauthorized"}');
    }
    if (req.method !== 'POST' || !req.url.startsWith('/mcp')) {
      res.writeHead(req.url.startsWith('/mcp') ? 405 : 404, { Allow: 'POST' });
      return res.end();
    }
    // Stateless: a fresh server + transport per request.
    const server = makeServer();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => { transport.close(); server.close(); });
    try {
      await server.connect(transport);
      await transport.handleRequest(req, res);
    } catch (e) {
      if (!res.headersSent) { res.writeHead(500); res.end(String(e)); }
    }
  });
  httpServer.listen(Number(port), '127.0.0.1', () => {
    console.log(JSON.stringify({ url: `http://127.0.0.1:${httpServer.address().port}/mcp` }));
  });
  const stop = () => httpServer.close(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
