"""MCP (Model Context Protocol) servers as a tool source on the worker.

`McpClients(mcp_config_from_env())` once per worker; `list_tools(server)` and
`call_tool(server, tool, arguments)`; `McpUnavailable` when a server can't be used.
"""

from chatd.mcp.client import McpClients, McpUnavailable
from chatd.mcp.config import (
    HttpServer,
    McpConfig,
    McpConfigError,
    McpServer,
    StdioServer,
    load_mcp_config,
    load_mcp_server_names,
    mcp_config_from_env,
    server_names,
)
from chatd.mcp.mapping import McpResult, McpTool, qualified_name, split_qualified_name

__all__ = [
    "HttpServer",
    "McpClients",
    "McpConfig",
    "McpConfigError",
    "McpResult",
    "McpServer",
    "McpTool",
    "McpUnavailable",
    "StdioServer",
    "load_mcp_config",
    "load_mcp_server_names",
    "mcp_config_from_env",
    "qualified_name",
    "server_names",
    "split_qualified_name",
]
