"""A real MCP server for tests, built with the `mcp` SDK: `python mcp_server_tools.py stdio`
or `python mcp_server_tools.py http PORT`.

A runnable file rather than a module: a stdio server is started as `sys.executable` plus this
path, and needs nothing from the checkout but the SDK. `write_note` appends to the file named
by `CHATD_TEST_MCP_NOTES`, so a test can count how many times it really ran.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import anyio
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (
    METHOD_NOT_FOUND,
    CallToolResult,
    ImageContent,
    RequestParams,
    TextContent,
    ToolAnnotations,
)

NOTES_ENV = "CHATD_TEST_MCP_NOTES"
"""Names the file `write_note` appends to."""

PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
    "AAAABJRU5ErkJggg=="
)
"""A 1x1 PNG, base64: the `image` tool's answer."""

READ_ONLY = ToolAnnotations(read_only_hint=True)

server: MCPServer[Any] = MCPServer("chatd-test-tools", log_level="WARNING")


@server.tool(annotations=READ_ONLY, structured_output=False)
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool(annotations=READ_ONLY, structured_output=False)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool(annotations=ToolAnnotations(destructive_hint=True), structured_output=False)
def write_note(text: str) -> str:
    """Append a line to the notes file (a side effect a test can count)."""
    with open(os.environ[NOTES_ENV], "a", encoding="utf-8") as notes:
        notes.write(text + "\n")
    return "noted"


@server.tool(annotations=READ_ONLY)
def image() -> CallToolResult:
    """A small PNG image."""
    return CallToolResult(content=[ImageContent(data=PNG_1X1, mime_type="image/png")])


@server.tool(annotations=READ_ONLY)
def structured() -> CallToolResult:
    """A structured result (with its text rendering, as the spec asks)."""
    value = {"answer": 42, "items": ["a", "b"]}
    return CallToolResult(
        content=[TextContent(text='{"answer": 42, "items": ["a", "b"]}')],
        structured_content=value,
    )


@server.tool(annotations=READ_ONLY)
def fail() -> CallToolResult:
    """A tool-level failure (isError), not a protocol error."""
    return CallToolResult(content=[TextContent(text="it failed on purpose")], is_error=True)


@server.tool(annotations=READ_ONLY, structured_output=False)
def crash() -> str:
    """The server process dies in the middle of the call."""
    os._exit(3)


@server.tool(annotations=READ_ONLY, structured_output=False)
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(annotations=READ_ONLY, structured_output=False)
def pid() -> str:
    """This server's process id: tells a test whether a new process was started."""
    return str(os.getpid())


async def _no_discover(ctx: Any, params: RequestParams) -> None:
    raise MCPError(METHOD_NOT_FOUND, "Method not found")


@server.tool(annotations=READ_ONLY, structured_output=False)
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header ("" over stdio, or when it wasn't sent)."""
    return (ctx.headers or {}).get(name.lower(), "")


START_DELAY_S = 2.0
"""How long a `slow-start` server takes before it serves."""


def main(argv: list[str]) -> None:
    """Serve over stdio, or streamable HTTP on 127.0.0.1:PORT at /mcp; with `legacy`, as a
    server from before `server/discover` (clients fall back to the initialize handshake and
    an HTTP session id, which a restarted server no longer knows)."""
    if "slow-start" in argv:
        time.sleep(START_DELAY_S)  # a server that takes a while to come up (an npx download)
    if "legacy" in argv:
        server._lowlevel_server.add_request_handler("server/discover", RequestParams, _no_discover)
    if argv[:1] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
