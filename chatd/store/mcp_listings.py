"""The MCP tools each turn listed: stored once per turn so every later step and tool call of
the turn (and a replay) sees the same tools, whatever the servers list meanwhile."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

__all__ = ["McpListingStore"]


class McpListingStore:
    """Reads and writes the tool list of a turn; the tools are opaque dicts here."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def get(self, chat_id: uuid.UUID, turn_id: str) -> list[dict[str, Any]] | None:
        """The turn's stored tools, or None if it stored none yet."""
        tools: list[dict[str, Any]] | None = await self._pool.fetchval(
            "SELECT tools FROM turn_mcp_tools WHERE chat_id = $1 AND turn_id = $2",
            chat_id,
            turn_id,
        )
        return tools

    async def put(
        self, chat_id: uuid.UUID, turn_id: str, tools: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Store the turn's tools unless it has some already; the stored list, which is an
        earlier writer's if there was one (a retried or raced listing): the first wins."""
        stored: list[dict[str, Any]] | None = await self._pool.fetchval(
            "INSERT INTO turn_mcp_tools (chat_id, turn_id, tools) VALUES ($1, $2, $3)"
            " ON CONFLICT (chat_id, turn_id) DO NOTHING RETURNING tools",
            chat_id,
            turn_id,
            tools,
        )
        if stored is None:
            # A new statement: it sees the row the conflicting writer committed.
            stored = await self.get(chat_id, turn_id)
            assert stored is not None
        return stored
