"""A chat as its owner reads it, in one query: the key's owner, the chat and its queue.

`GET /chats/{id}` is the read a client polls; checking the key, reading the chat and then
its queue took three round trips (and three statements' worth of gateway CPU) per poll.
"""

from __future__ import annotations

import uuid
from typing import TypeVar

import asyncpg
from pydantic import BaseModel

__all__ = ["ChatReads"]

View = TypeVar("View", bound=BaseModel)

# `c.*` as `ChatStore` reads it, plus the chat's queue, oldest first, as three arrays of the
# same order (a record of a jsonb column can't be decoded by asyncpg).
_CHAT_WITH_QUEUE = """
SELECT k.owner AS key_owner, c.*,
       q.ids AS queued_ids, q.parts AS queued_parts, q.created_at AS queued_created_at
FROM api_keys k
LEFT JOIN chats c ON c.id = $1 AND c.owner = k.owner
LEFT JOIN LATERAL (
    SELECT array_agg(m.id ORDER BY m.created_at, m.id) AS ids,
           jsonb_agg(m.parts ORDER BY m.created_at, m.id) AS parts,
           array_agg(m.created_at ORDER BY m.created_at, m.id) AS created_at
    FROM queued_messages m
    WHERE m.chat_id = c.id AND m.promoted_at IS NULL
) q ON c.id IS NOT NULL
WHERE k.key_hash = $2 AND k.revoked_at IS NULL
"""


class ChatReads:
    """Reads a chat with its queue on behalf of an API key."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def chat_with_queue(
        self, chat_id: uuid.UUID, key_hash: str, view: type[View]
    ) -> tuple[str | None, View | None]:
        """The owner of an active API key and, if that owner has the chat, the chat's columns
        and its `queued_messages` (id, parts, created_at; oldest first) validated as `view`,
        which names the fields it shows: one validation from the row, no intermediate model."""
        row = await self._pool.fetchrow(_CHAT_WITH_QUEUE, chat_id, key_hash)
        if row is None:
            return None, None
        data = dict(row)
        owner = str(data.pop("key_owner"))
        if data["id"] is None:
            return owner, None
        queue = zip(
            data.pop("queued_ids") or [],
            data.pop("queued_parts") or [],
            data.pop("queued_created_at") or [],
            strict=True,
        )
        data["queued_messages"] = [
            {"id": queued_id, "parts": parts, "created_at": created_at}
            for queued_id, parts, created_at in queue
        ]
        return owner, view.model_validate(data)
