"""Conversations (migration 026): a chat seen as an Open Responses conversation. Its items
are the chat's transcript; this store adds the client's metadata, the check that no turn is
under way before the transcript is changed, and the removal of a message's parts."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime

import asyncpg
from pydantic import BaseModel

from chatd.parts import Part, Role
from chatd.store.events import Conn, append_events

__all__ = [
    "ConversationBusy",
    "ConversationRecord",
    "ConversationStore",
    "ItemMessage",
    "original_indices",
]


class ConversationRecord(BaseModel):
    """A chat as a conversation shows it."""

    id: uuid.UUID
    created_at: datetime
    metadata: dict[str, str]


class ItemMessage(BaseModel):
    """A transcript message as conversation items are made from it."""

    id: int
    role: Role
    parts: list[Part]
    """Its parts now: without those removed."""
    removed: list[int]
    """The indices, among the parts it was stored with, of those removed."""


class ConversationBusy(Exception):
    """The chat's transcript can't change now: a turn runs, waits for the client, or has a
    message queued to begin."""

    def __init__(self, status: str) -> None:
        super().__init__(f"the conversation's chat is {status}")
        self.status = status


def original_indices(count: int, removed: Collection[int]) -> list[int]:
    """The index each of a message's `count` parts had when the message was stored."""
    indices: list[int] = []
    index = 0
    while len(indices) < count:
        if index not in removed:
            indices.append(index)
        index += 1
    return indices


class ConversationStore:
    """Reads and writes what conversations add to chats."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def get(self, chat_id: uuid.UUID, owner: str) -> ConversationRecord | None:
        """The owner's chat as a conversation; None if it doesn't exist, is another owner's,
        or is discarded (deleted, or a `store: false` response's)."""
        row = await self._pool.fetchrow(
            """SELECT c.id, c.created_at, coalesce(m.metadata, '{}'::jsonb) AS metadata
               FROM chats c LEFT JOIN conversation_metadata m ON m.chat_id = c.id
               WHERE c.id = $1 AND c.owner = $2 AND c.discard_at IS NULL""",
            chat_id,
            owner,
        )
        return ConversationRecord.model_validate(dict(row)) if row else None

    async def set_metadata(
        self, chat_id: uuid.UUID, metadata: dict[str, str], conn: Conn | None = None
    ) -> None:
        """Replace the conversation's metadata. With `conn`, within its transaction."""
        await (conn or self._pool).execute(
            """INSERT INTO conversation_metadata (chat_id, metadata) VALUES ($1, $2)
               ON CONFLICT (chat_id) DO UPDATE SET metadata = EXCLUDED.metadata""",
            chat_id,
            metadata,
        )

    async def hold_idle(self, conn: Conn, chat_id: uuid.UUID) -> None:
        """Lock the chat's row until `conn`'s transaction ends, so that no turn begins
        meanwhile; `ConversationBusy` unless it is idle with nothing queued."""
        row = await conn.fetchrow(
            """SELECT status, EXISTS (SELECT 1 FROM queued_messages q
                                      WHERE q.chat_id = c.id AND q.promoted_at IS NULL)
                   AS queued
               FROM chats c WHERE c.id = $1 FOR UPDATE""",
            chat_id,
        )
        if row is None:
            raise ConversationBusy("deleted")
        if row["status"] not in ("waiting", "error"):
            raise ConversationBusy(str(row["status"]))
        if row["queued"]:
            raise ConversationBusy("queued")

    async def call_names(
        self, chat_id: uuid.UUID, call_ids: Sequence[str], conn: Conn | None = None
    ) -> dict[str, str]:
        """The names of the chat's tool calls with these ids (those it has)."""
        if not call_ids:
            return {}
        rows = await (conn or self._pool).fetch(
            """SELECT DISTINCT ON (part ->> 'id') part ->> 'id' AS id, part ->> 'name' AS name
               FROM messages m, jsonb_array_elements(m.parts) AS part
               WHERE m.chat_id = $1 AND part ->> 'type' = 'tool_call'
                 AND part ->> 'id' = ANY($2::text[])
               ORDER BY part ->> 'id', m.id DESC""",
            chat_id,
            list(call_ids),
        )
        return {row["id"]: row["name"] for row in rows}

    async def messages(
        self, chat_id: uuid.UUID, *, from_id: int | None, descending: bool, limit: int
    ) -> list[ItemMessage]:
        """Up to `limit` of the messages the model sees (not compressed), from message
        `from_id` on (it included), oldest or newest first."""
        rows = await self._pool.fetch(
            _NEWEST_FIRST if descending else _OLDEST_FIRST, chat_id, from_id, limit
        )
        return [ItemMessage.model_validate(dict(row)) for row in rows]

    async def message(self, chat_id: uuid.UUID, message_id: int) -> ItemMessage | None:
        """One message the model sees, if the chat has it."""
        rows = await self._pool.fetch(_ONE, chat_id, message_id)
        return ItemMessage.model_validate(dict(rows[0])) if rows else None

    async def remove_parts(self, chat_id: uuid.UUID, message_id: int, indices: set[int]) -> bool:
        """Remove the message's parts of these (original) indices, the whole message when
        none is left; False if the message or one of the parts is gone already.
        `ConversationBusy` while the chat isn't idle. Streams get `transcript_edited`."""
        async with self._pool.acquire() as conn, conn.transaction():
            await self.hold_idle(conn, chat_id)
            row = await conn.fetchrow(_ONE + " FOR UPDATE OF m", chat_id, message_id)
            if row is None:
                return False
            message = ItemMessage.model_validate(dict(row))
            kept = [
                part
                for index, part in zip(
                    original_indices(len(message.parts), message.removed), row["parts"], strict=True
                )
                if index not in indices
            ]
            if len(kept) != len(message.parts) - len(indices):
                return False
            if kept:
                await conn.execute("UPDATE messages SET parts = $2 WHERE id = $1", message_id, kept)
                await conn.execute(
                    "INSERT INTO removed_parts (message_id, part_index)"
                    " SELECT $1, unnest($2::integer[])",
                    message_id,
                    sorted(indices),
                )
            else:
                await conn.execute("DELETE FROM messages WHERE id = $1", message_id)
            await append_events(
                conn, chat_id, [("transcript_edited", {"from_message_id": message_id})]
            )
            return True


_COLUMNS = """m.id, m.role, m.parts,
       ARRAY(SELECT r.part_index FROM removed_parts r WHERE r.message_id = m.id) AS removed"""
_SEEN = "m.chat_id = $1 AND NOT m.compressed AND m.visible"
_OLDEST_FIRST = f"""SELECT {_COLUMNS} FROM messages m
    WHERE {_SEEN} AND ($2::bigint IS NULL OR m.id >= $2) ORDER BY m.id LIMIT $3"""
_NEWEST_FIRST = f"""SELECT {_COLUMNS} FROM messages m
    WHERE {_SEEN} AND ($2::bigint IS NULL OR m.id <= $2) ORDER BY m.id DESC LIMIT $3"""
_ONE = f"SELECT {_COLUMNS} FROM messages m WHERE {_SEEN} AND m.id = $2"
