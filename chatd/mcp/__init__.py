"""MCP (Model Context Protocol) servers as a tool source on the worker.

`McpClients(mcp_config_from_env())` (in `client`) once per worker that has servers;
`list_tools(server)` and `call_tool(server, tool, arguments)`; `McpUnavailable` when a server
can't be used. The package itself imports nothing, and only `client`, `mapping` and `session`
import the MCP SDK, which is slow to import: the gateway reads `config`, the catalog `tools`.
"""
