"""Tool names the workers own. A client-executed (dynamic) tool may not take one: it would
silently shadow the built-in, subagent, advisor or MCP tool of that name, which the model
would then call believing it runs on the worker."""

from __future__ import annotations

from chatd.subagents import AGENT_TOOLS

__all__ = ["MCP_SEPARATOR", "WORKER_TOOL_NAMES", "client_tool_name", "collision"]

WORKER_TOOL_NAMES = frozenset(
    {"current_time", "read_file", "write_file", "edit_file", "list_files", "execute", "advisor"}
    | AGENT_TOOLS
)
"""Every tool a worker may offer by itself (`chatd.tools.defaults` and the subagent tools),
whether or not this deployment enables it."""

MCP_SEPARATOR = "__"
"""Between an MCP tool's server and tool; server names have no `_`, so the first `__`
splits."""


def collision(name: str) -> str | None:
    """What a client tool called `name` would collide with; None if nothing."""
    if name in WORKER_TOOL_NAMES:
        return f"the worker's tool {name!r}"
    if MCP_SEPARATOR in name:
        return f"the MCP tools' names (`<server>{MCP_SEPARATOR}<tool>`)"
    return None


def client_tool_name(name: str) -> str:
    """`name`, for a client's tool; ValueError naming what it would collide with."""
    taken = collision(name)
    if taken:
        raise ValueError(f"a client tool named {name!r} would collide with {taken}")
    return name
