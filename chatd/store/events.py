"""The per-chat event log behind the SSE stream.

Each event gets the next per-chat sequence number (its SSE id) in the same transaction
that inserts it, and a `pg_notify` wakes the gateways' listeners when it commits: all three
in `chatd_append_events` (migration 008), which every publishing statement calls.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from pydantic import BaseModel

__all__ = ["NOTIFY_CHANNEL", "ChatEvent", "Conn", "EventLog", "append_events"]

NOTIFY_CHANNEL = "chatd_events"
"""The channel `chatd_append_events` notifies; the payload is `<chat id>:<last seq>`."""


class ChatEvent(BaseModel):
    """One stream event as stored."""

    seq: int
    event: str
    data: dict[str, Any]
    created_at: datetime


Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
"""A plain or pooled connection."""


# Every write that publishes events appends them with `chatd_append_events` (migration 008):
# next sequence numbers, the events under them, and a notification when it commits.
_APPEND = "SELECT chatd_append_events($1, $2::text[], $3::jsonb[])"


async def append_events(
    conn: Conn | asyncpg.Pool, chat_id: uuid.UUID, events: list[tuple[str, dict[str, Any]]]
) -> int:
    """Append events (inside the caller's transaction, if any); return the last sequence."""
    if not events:
        return 0
    last = await conn.fetchval(
        _APPEND, chat_id, [name for name, _ in events], [data for _, data in events]
    )
    if last is None:
        raise LookupError(f"chat {chat_id} does not exist")
    return int(last)


# The same for events of many chats at once (the worker's delta batches): each chat's in
# their order, the chats in id order (so concurrent batches lock their rows in one order).
_APPEND_MANY = """
SELECT chatd_append_events(batch.chat, batch.names, batch.payloads)
FROM (
    SELECT chat, array_agg(e ORDER BY n) AS names, array_agg(d ORDER BY n) AS payloads
    FROM unnest($1::uuid[], $2::text[], $3::jsonb[]) WITH ORDINALITY AS t(chat, e, d, n)
    GROUP BY chat ORDER BY chat
) AS batch
"""


class EventLog:
    """Publishes and reads a chat's events."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def publish(self, chat_id: uuid.UUID, events: list[tuple[str, dict[str, Any]]]) -> int:
        """Append events (one statement, one round trip); return the last sequence number."""
        return await append_events(self._pool, chat_id, events)

    async def publish_many(self, events: list[tuple[uuid.UUID, str, dict[str, Any]]]) -> None:
        """Append events of several chats, each chat's in the given order, in one statement."""
        if events:
            await self._pool.execute(
                _APPEND_MANY,
                [chat for chat, _, _ in events],
                [name for _, name, _ in events],
                [data for _, _, data in events],
            )

    async def read_after(self, chat_id: uuid.UUID, seq: int, limit: int = 500) -> list[ChatEvent]:
        """Events with a sequence number above `seq`, in order."""
        rows = await self._pool.fetch(
            "SELECT seq, event, data, created_at FROM chat_events"
            " WHERE chat_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            chat_id,
            seq,
            limit,
        )
        return [ChatEvent.model_validate(dict(r)) for r in rows]

    async def prune(self, older_than: timedelta) -> int:
        """Forget events older than `older_than`; a cursor before them gets 410 afterwards."""
        result = await self._pool.execute(
            "DELETE FROM chat_events WHERE created_at < now() - $1::interval", older_than
        )
        return int(result.split()[-1])

    async def cursor_expired(self, chat_id: uuid.UUID, cursor: int) -> bool:
        """Whether events after `cursor` were pruned (so resuming from it would skip some)."""
        row = await self._pool.fetchrow(
            """SELECT c.last_event_seq AS last, min(e.seq) AS oldest
               FROM chats c LEFT JOIN chat_events e ON e.chat_id = c.id
               WHERE c.id = $1 GROUP BY c.last_event_seq""",
            chat_id,
        )
        if row is None or cursor >= row["last"]:
            return False
        return row["oldest"] is None or row["oldest"] > cursor + 1

    async def last_seq(self, chat_id: uuid.UUID) -> int:
        """The id of the chat's newest event (0 if none)."""
        value = await self._pool.fetchval("SELECT last_event_seq FROM chats WHERE id = $1", chat_id)
        return int(value or 0)
