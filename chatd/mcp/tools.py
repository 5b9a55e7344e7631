"""Our view of the tools MCP servers offer: what a model, the approval policy and the
catalog see, with no MCP SDK import (the gateway and a worker without MCP servers never load
it; `mapping` converts the SDK's types into these)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from chatd.providers.base import ToolSpec
from chatd.tools.base import ToolOutput
from chatd.tools.names import MCP_SEPARATOR

__all__ = [
    "QUALIFIED_NAME",
    "McpResult",
    "McpTool",
    "qualified_name",
    "split_qualified_name",
]

QUALIFIED_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What providers accept as a tool name; a server's tool that doesn't fit is skipped."""

SEPARATOR = MCP_SEPARATOR


class McpTool(BaseModel):
    """One tool an MCP server offers, as the model and the approval policy see it."""

    model_config = ConfigDict(frozen=True)

    server: str
    """The configured server name."""
    name: str
    """The tool's name on its server (what `call_tool` takes)."""
    qualified_name: str
    """`<server>__<name>`: the name the model sees."""
    description: str
    """The server's description of it ("" when it gave none)."""
    input_schema: dict[str, Any]
    """The JSON schema of its arguments, as the server gave it."""
    read_only: bool
    """The server says it changes nothing (`readOnlyHint`)."""
    destructive: bool
    """MCP's default: destructive unless `readOnlyHint` is true or `destructiveHint` false."""
    idempotent: bool
    """Safe to call again after a lost answer: read-only, or `idempotentHint` true."""

    def spec(self) -> ToolSpec:
        """The tool as the model sees it."""
        return ToolSpec(
            name=self.qualified_name, description=self.description, input_schema=self.input_schema
        )


class McpResult(BaseModel):
    """A tool call's answer: its output in our shapes, and whether the server called it a
    failure (`isError`: the model should see it and may correct itself)."""

    output: ToolOutput
    is_error: bool = False


def qualified_name(server: str, tool: str) -> str:
    """The name the model sees for `tool` of `server`."""
    return f"{server}{SEPARATOR}{tool}"


def split_qualified_name(name: str) -> tuple[str, str] | None:
    """`(server, tool)` for a qualified name; None if it isn't one."""
    server, sep, tool = name.partition(SEPARATOR)
    if not sep or not server or not tool:
        return None
    return server, tool
