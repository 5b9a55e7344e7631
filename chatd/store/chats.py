"""Chat rows: creation, lookup by owner, status and usage updates."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

import asyncpg
from pydantic import BaseModel, Field

from chatd.models import ModelConfig, ModelError
from chatd.parts import Usage
from chatd.store.events import append_events

__all__ = ["ChatRecord", "ChatStatus", "ChatStore", "DynamicTool"]

ChatStatus = Literal["waiting", "running", "requires_action", "error"]


class DynamicTool(BaseModel):
    """A client-executed tool declared by the chat."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str = Field(default="", max_length=4096)
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ChatRecord(BaseModel):
    """A chat as stored."""

    id: uuid.UUID
    owner: str
    title: str | None
    title_source: str | None
    model: ModelConfig
    system_prompt: str | None
    dynamic_tools: list[DynamicTool]
    active_tools: list[str] | None
    max_steps: int
    action_timeout_s: int
    compaction_threshold: float
    status: ChatStatus
    last_error: ModelError | None
    pending_tool_calls: list[dict[str, Any]] | None
    action_expires_at: datetime | None
    usage: Usage
    created_at: datetime
    updated_at: datetime
    turn_id: str | None = None
    """The turn running now: set when it begins, cleared when it ends."""


def _record(row: asyncpg.Record | dict[str, Any]) -> ChatRecord:
    data = dict(row)
    data.pop("last_event_seq", None)
    return ChatRecord.model_validate(data)


class ChatStore:
    """Reads and writes chat rows."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create(
        self,
        *,
        owner: str,
        model: ModelConfig,
        title: str | None = None,
        system_prompt: str | None = None,
        dynamic_tools: list[DynamicTool] | None = None,
        active_tools: list[str] | None = None,
        max_steps: int = 25,
        action_timeout_s: int = 600,
        compaction_threshold: float = 0.7,
        chat_id: uuid.UUID | None = None,
    ) -> ChatRecord:
        """Insert a new chat in `waiting`; with a `chat_id` inserted before (by a create that
        is being retried), that chat."""
        chat_id = chat_id or uuid.uuid4()
        row = await self._pool.fetchrow(
            """INSERT INTO chats (id, owner, title, title_source, model, system_prompt,
                                  dynamic_tools, active_tools, max_steps, action_timeout_s,
                                  compaction_threshold)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
               ON CONFLICT (id) DO NOTHING RETURNING *""",
            chat_id,
            owner,
            title,
            "user" if title else None,
            model.model_dump(exclude_none=True),
            system_prompt,
            [t.model_dump() for t in dynamic_tools or []],
            active_tools,
            max_steps,
            action_timeout_s,
            compaction_threshold,
        )
        if row is None:
            row = await self._pool.fetchrow("SELECT * FROM chats WHERE id = $1", chat_id)
        assert row is not None
        return _record(row)

    async def set_generated_title(self, chat_id: uuid.UUID, title: str) -> bool:
        """Set a generated title unless the chat already has one; publish a `chat` event."""
        async with self._pool.acquire() as conn, conn.transaction():
            updated = await conn.fetchval(
                "UPDATE chats SET title = $2, title_source = 'generated', updated_at = now()"
                " WHERE id = $1 AND title IS NULL RETURNING id",
                chat_id,
                title,
            )
            if updated is None:
                return False
            await append_events(conn, chat_id, [("chat", {"title": title})])
            return True

    async def get(self, chat_id: uuid.UUID, owner: str | None = None) -> ChatRecord | None:
        """The chat, or None if it doesn't exist (or belongs to another owner)."""
        row = await self._pool.fetchrow(
            "SELECT * FROM chats WHERE id = $1 AND ($2::text IS NULL OR owner = $2)",
            chat_id,
            owner,
        )
        return _record(row) if row else None

    async def get_with_key(
        self, chat_id: uuid.UUID, key_hash: str
    ) -> tuple[str | None, ChatRecord | None]:
        """The owner of an active API key and, if that owner has the chat, the chat: both
        checks of a request about a chat in one query."""
        row = await self._pool.fetchrow(
            """SELECT k.owner AS key_owner, c.* FROM api_keys k
               LEFT JOIN chats c ON c.id = $1 AND c.owner = k.owner
               WHERE k.key_hash = $2 AND k.revoked_at IS NULL""",
            chat_id,
            key_hash,
        )
        if row is None:
            return None, None
        data = dict(row)
        owner = str(data.pop("key_owner"))
        return owner, _record(data) if data["id"] is not None else None

    async def list(
        self, owner: str, *, limit: int, before: tuple[datetime, uuid.UUID] | None
    ) -> list[ChatRecord]:
        """The owner's chats, newest first, strictly before the (created_at, id) cursor."""
        rows = await self._pool.fetch(
            """SELECT * FROM chats WHERE owner = $1
                 AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3))
               ORDER BY created_at DESC, id DESC LIMIT $4""",
            owner,
            before[0] if before else None,
            before[1] if before else None,
            limit,
        )
        return [_record(r) for r in rows]
