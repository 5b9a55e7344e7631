"""MCP (Model Context Protocol) servers as a tool source on the worker.

`McpClients(mcp_config_from_env())` (in `client`) once per worker; `list_tools(server)` and
`call_tool(server, tool, arguments)`; `McpUnavailable` when a server can't be used. The
package itself imports nothing: the gateway reads only `config`, and the MCP SDK is slow to
import.
"""
