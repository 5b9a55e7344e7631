"""The tools a Responses client runs itself, as the model sees them and as the client does.

A client offers functions, functions grouped in a `namespace`, `custom` tools (freeform text
input) and `local_shell`. The chat keeps each as a function the model can call (a custom
tool takes one string, `input`; a namespaced function is `<namespace>_<name>`), and the
model's calls go back to the client in its own terms: `function_call` (with its
`namespace`), `custom_tool_call`, or `local_shell_call`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from chatd.parts import ToolCallPart
from chatd.store.chats import DynamicTool
from chatd.tools.names import MCP_SEPARATOR

__all__ = [
    "LOCAL_SHELL",
    "ClientTool",
    "ClientTools",
    "call_item",
    "custom_input",
    "model_name",
    "model_tools",
]

LOCAL_SHELL = "local_shell"
"""The function the model calls for a `local_shell` tool."""

_LOCAL_SHELL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}},
        "working_directory": {"type": "string"},
        "timeout_ms": {"type": "integer"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["command"],
}


@dataclass(frozen=True)
class ClientTool:
    """One tool of the client's, under the name the model calls it by."""

    kind: Literal["function", "custom", "local_shell"]
    name: str
    """The client's own name for it."""
    namespace: str | None = None


ClientTools = dict[str, ClientTool]
"""The client's tools by the name the model calls them."""


def model_name(name: str, namespace: str | None) -> str:
    """The name the model calls a client's tool by (a namespace's `__`, as Codex's MCP
    servers' `mcp__<server>` have, is one `_`: `__` marks the workers' MCP tools)."""
    while namespace and MCP_SEPARATOR in namespace:
        namespace = namespace.replace(MCP_SEPARATOR, "_")
    return f"{namespace}_{name}" if namespace else name


def model_tools(tools: list[dict[str, Any]]) -> tuple[list[DynamicTool], ClientTools]:
    """The chat's client tools for a request's `tools` (as dumped), and their map back."""
    dynamic: list[DynamicTool] = []
    known: ClientTools = {}
    for tool in tools:
        kind = tool.get("type")
        if kind == "namespace":
            for nested in tool.get("tools") or []:
                _add(dynamic, known, nested, str(tool["name"]))
        elif kind in ("function", "custom", "local_shell"):
            _add(dynamic, known, tool, None)
    return dynamic, known


def _add(
    dynamic: list[DynamicTool], known: ClientTools, tool: dict[str, Any], namespace: str | None
) -> None:
    kind = tool["type"]
    name = LOCAL_SHELL if kind == "local_shell" else str(tool["name"])
    called = model_name(name, namespace)
    if called in known:
        raise ValueError(f"two tools would both be called {called!r}")
    known[called] = ClientTool(kind=kind, name=name, namespace=namespace)
    if kind == "custom":
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {"input": {"type": "string", "description": _format_hint(tool)}},
            "required": ["input"],
        }
    elif kind == "local_shell":
        schema = _LOCAL_SHELL_SCHEMA
    else:
        schema = tool.get("parameters") or {"type": "object"}
    description = tool.get("description") or (
        "Run a shell command on the user's machine." if kind == "local_shell" else ""
    )
    dynamic.append(DynamicTool(name=called, description=description, input_schema=schema))


def _format_hint(tool: dict[str, Any]) -> str:
    """What the custom tool's one string must be: free text, or text its grammar accepts."""
    fmt = tool.get("format") or {}
    if fmt.get("type") == "grammar":
        return f"Text that matches this {fmt.get('syntax')} grammar:\n{fmt.get('definition')}"
    return "The tool's input, as free text."


def custom_input(arguments: str) -> str:
    """A custom tool's input from the arguments the model called it with."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments
    text = value.get("input") if isinstance(value, dict) else None
    return text if isinstance(text, str) else arguments


def call_item(
    item_id: str, call: ToolCallPart, status: str, tool: ClientTool | None
) -> dict[str, Any]:
    """The model's call of a client's tool, as the client's item of its kind."""
    if tool is not None and tool.kind == "custom":
        item: dict[str, Any] = {
            "type": "custom_tool_call",
            "id": item_id,
            "call_id": call.id,
            "name": tool.name,
            "input": custom_input(call.arguments),
            "status": status,
        }
    elif tool is not None and tool.kind == "local_shell":
        try:
            action = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            action = {}
        item = {
            "type": "local_shell_call",
            "id": item_id,
            "call_id": call.id,
            "action": {"type": "exec", "env": {}, **(action if isinstance(action, dict) else {})},
            "status": status,
        }
    else:
        item = {
            "type": "function_call",
            "id": item_id,
            "call_id": call.id,
            "name": tool.name if tool else call.name,
            "arguments": call.arguments,
            "status": status,
        }
    if tool is not None and tool.namespace:
        item["namespace"] = tool.namespace
    return item
