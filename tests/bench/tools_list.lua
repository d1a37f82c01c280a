-- tools_list.lua - wrk script: POST an MCP tools/list request to the target URL.
-- Usage: SANDRUN_TOKEN=TOKEN wrk -t1 -c8 -d5s -s tools_list.lua http://127.0.0.1:PORT/mcp
wrk.method = "POST"
wrk.body   = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
wrk.headers["Content-Type"]  = "application/json"
wrk.headers["Accept"]        = "application/json, text/event-stream"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("SANDRUN_TOKEN") or "")
