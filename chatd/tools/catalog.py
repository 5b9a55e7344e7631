"""The tools one turn offers, and the approval policy of each call.

A turn offers the worker's built-in tools (those the chat makes active), the tools of the
MCP servers the chat selected, and the chat's own client-executed tools. The MCP servers are
listed once per turn and the list is stored (`turn_mcp_tools`), so every step and tool call
of the turn sees the same tools, whichever worker runs it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
from pydantic import RootModel

from chatd.mcp.tools import McpTool
from chatd.parts import ToolCallPart
from chatd.providers.base import ToolSpec
from chatd.store.chats import ChatRecord
from chatd.store.mcp_listings import McpListingStore
from chatd.subagents import AGENT_TOOLS, WAIT_AGENT, SubagentSettings
from chatd.tool_policy import PolicyDecision, decide
from chatd.tools.base import MediaOutput, Tool, ToolContext, ToolOutput, ToolRegistry
from workflows.payloads import ToolCallRef

if TYPE_CHECKING:
    # Only a worker with MCP servers makes one (`workers.worker`): the SDK is slow to import.
    from chatd.mcp.client import McpClients

__all__ = ["McpToolFailed", "ToolCatalog", "TurnTools"]

log = logging.getLogger("chatd.tools")
_CLIENT_TIMEOUT_MARGIN_S = 5.0
"""An MCP call's own timeout fires first, with a message naming the server."""


class JsonArguments(RootModel[dict[str, Any]]):
    """Arguments of a tool described by a JSON Schema: checked by the schema, kept as given."""


class McpToolFailed(Exception):
    """The MCP server answered the call with an error result."""


@dataclass(frozen=True)
class TurnTools:
    """The tools of one turn, as the model sees them and as the worker runs them."""

    chat: ChatRecord
    registry: ToolRegistry
    mcp_tools: list[McpTool]
    mcp: McpClients | None
    operator_policy: dict[str, PolicyDecision]
    subagents: SubagentSettings

    def specs(self) -> list[ToolSpec]:
        """Every tool the model is offered in this turn."""
        builtin = self.registry.active(self.chat.active_tools)
        specs = [t.spec() for t in builtin if self._offered(t.name)]
        specs += [self._mcp_tool(t).spec() for t in self.mcp_tools]
        specs += [ToolSpec.model_validate(t.model_dump()) for t in self.chat.dynamic_tools]
        return specs

    def tool(self, name: str) -> Tool[Any] | None:
        """The worker-run tool called `name` (built-in or MCP), active or not."""
        mcp_tool = next((t for t in self.mcp_tools if t.qualified_name == name), None)
        if mcp_tool is not None:
            return self._mcp_tool(mcp_tool)
        return self.registry.get(name)

    def active(self, name: str) -> bool:
        """Whether the chat lets the model use the worker-run tool called `name`."""
        if any(t.qualified_name == name for t in self.mcp_tools):
            return True
        if not self._offered(name):
            return False
        return self.chat.active_tools is None or name in self.chat.active_tools

    def _offered(self, name: str) -> bool:
        """Subagent tools only for chats that enable them (spawning only below the depth
        limit)."""
        return name not in AGENT_TOOLS or self.subagents.offers(self.chat, name)

    def classify(self, call: ToolCallPart) -> ToolCallRef:
        """Who runs the call, its policy flags, and whether the chat's policy lets it run,
        asks a person first, or refuses it."""
        if any(t.name == call.name for t in self.chat.dynamic_tools):
            return ToolCallRef(id=call.id, name=call.name, kind="dynamic")
        mcp_tool = next((t for t in self.mcp_tools if t.qualified_name == call.name), None)
        tool = self.tool(call.name)
        if tool is None:
            return ToolCallRef(id=call.id, name=call.name, kind="unknown")
        if call.name == WAIT_AGENT and self.active(call.name):
            return ToolCallRef(id=call.id, name=call.name, kind="wait")
        default: PolicyDecision = "ask" if mcp_tool and mcp_tool.destructive else "auto"
        return ToolCallRef(
            id=call.id,
            name=call.name,
            kind="mcp" if mcp_tool else "builtin",
            exclusive=tool.exclusive,
            stop_after=tool.stop_after,
            inline=tool.inline,
            policy=decide(call.name, self.chat.tool_policy, self.operator_policy, default),
        )

    def _mcp_tool(self, listed: McpTool) -> Tool[JsonArguments]:
        """An MCP server's tool as a worker tool: each call goes to the server, within the
        server's timeout (the client's own, whose message says which server failed)."""
        clients = self.mcp
        server = clients.config.servers.get(listed.server) if clients else None

        async def call(args: JsonArguments, context: ToolContext) -> ToolOutput:
            if clients is None or server is None:
                raise McpToolFailed(f"MCP server {listed.server!r} is not configured here")
            result = await clients.call_tool(listed.server, listed.name, args.root)
            if result.is_error:
                raise McpToolFailed(_text(result.output))
            return result.output

        # Starting the server may come first (`connect_timeout_s`), then the call itself.
        own = server.connect_timeout_s + server.timeout_s if server else 0
        timeout_s = own + _CLIENT_TIMEOUT_MARGIN_S
        return Tool(
            name=listed.qualified_name,
            description=listed.description,
            args=JsonArguments,
            run=call,
            timeout=timedelta(seconds=timeout_s),
            idempotent=listed.idempotent,
            read_only=listed.read_only,
            json_schema=listed.input_schema,
        )


class ToolCatalog:
    """Where a worker finds the tools of a turn."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        registry: ToolRegistry,
        mcp: McpClients | None = None,
        operator_policy: dict[str, PolicyDecision] | None = None,
        subagents: SubagentSettings | None = None,
    ) -> None:
        self._listings = McpListingStore(pool)
        self._registry = registry
        self._mcp = mcp
        self._operator_policy = operator_policy or {}
        self._subagents = subagents or SubagentSettings()

    async def for_turn(self, chat: ChatRecord, turn_id: str) -> TurnTools:
        """The turn's tools; its chat's MCP servers are listed by the first caller."""
        mcp_tools = await self._mcp_tools(chat, turn_id) if chat.mcp_servers else []
        return TurnTools(
            chat, self._registry, mcp_tools, self._mcp, self._operator_policy, self._subagents
        )

    async def _mcp_tools(self, chat: ChatRecord, turn_id: str) -> list[McpTool]:
        stored = await self._listings.get(chat.id, turn_id)
        if stored is None:
            listed = await self._list(chat.id, chat.mcp_servers)
            stored = await self._listings.put(chat.id, turn_id, [t.model_dump() for t in listed])
        return [McpTool.model_validate(t) for t in stored]

    async def _list(self, chat_id: uuid.UUID, servers: list[str]) -> list[McpTool]:
        """Every selected server's tools; a server that can't be listed offers none in this
        turn (its failure is logged, and the turn goes on with the others)."""
        if self._mcp is None:
            log.warning("chat %s selects MCP servers, but this worker has none", chat_id)
            return []
        listings = await asyncio.gather(
            *(self._mcp.list_tools(server) for server in servers), return_exceptions=True
        )
        tools: list[McpTool] = []
        for server, listing in zip(servers, listings, strict=True):
            if isinstance(listing, BaseException):
                log.warning("MCP server %s not listed for chat %s: %s", server, chat_id, listing)
                continue
            tools += listing
        return tools


def _text(output: ToolOutput) -> str:
    """An error result's output as text."""
    if isinstance(output, str):
        return output
    if isinstance(output, MediaOutput):
        return f"[{output.media_type} result]"
    return str(output)
