"""The per-chat event log behind the SSE stream.

Each event gets the next per-chat sequence number (its SSE id) in the same transaction
that inserts it, and a `pg_notify` wakes the gateways' listeners when it commits: all three
in `chatd_append_events` (migration 008), which every publishing statement calls.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeAlias, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from pydantic import BaseModel

__all__ = [
    "NOTIFY_CHANNEL",
    "READ_BATCH_BYTES",
    "READ_BATCH_EVENTS",
    "ChatEvent",
    "Conn",
    "CursorExpired",
    "EventLog",
    "EventPage",
    "append_events",
    "page_of",
    "read_after_sql",
]

NOTIFY_CHANNEL = "chatd_events"
"""The channel `chatd_append_events` notifies; the payload is `<chat id>:<last seq>`."""


READ_BATCH_EVENTS = 500
"""Events per read (one SSE write)."""
READ_BATCH_BYTES = 1024 * 1024
"""JSON data per read: a chat of large events (files, long tool results) is sent in several
writes, not one that holds them all in the gateway's memory."""


class CursorExpired(LookupError):
    """Events after the cursor were pruned: resuming from it would skip them."""

    def __init__(self, chat_id: uuid.UUID, cursor: int) -> None:
        super().__init__(f"events of chat {chat_id} after {cursor} were pruned")
        self.chat_id = chat_id
        self.cursor = cursor


class ChatEvent(BaseModel):
    """One stream event as stored."""

    seq: int
    event: str
    data: dict[str, Any]
    created_at: datetime


E = TypeVar("E", bound=BaseModel)

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
    SELECT t.chat, array_agg(t.e ORDER BY t.n) AS names, array_agg(t.d ORDER BY t.n) AS payloads
    FROM unnest($1::uuid[], $2::text[], $3::jsonb[]) WITH ORDINALITY AS t(chat, e, d, n)
    LEFT JOIN chats c ON c.id = t.chat
    GROUP BY t.chat, c.depth ORDER BY c.depth DESC NULLS LAST, t.chat
) AS batch
"""
"""Chats are locked deepest first: a child's status change locks the child, then (its
`subagent` event) the parent, and a batch must take them in the same order."""


def read_after_sql(events: str, key: str, columns: tuple[str, ...]) -> str:
    """The read of one log's events after a cursor (a chat's, `key` `chat_id`; an owner's,
    `owner`): its pruned-through mark and, if the cursor ($2) is not below it, the events
    after it, up to $3 of them, while their JSON adds up to at most $4 bytes (the first
    always), each row saying whether events the page left out follow (`more`). One
    statement, one snapshot: a prune commits wholly before it or after it. `events` names
    the table (its marks are in `<events>_pruned`); all are our constants."""
    listed = ", ".join(columns)
    return f"""
SELECT mark.pruned_through, batch.more, {", ".join(f"batch.{c}" for c in columns)}
FROM (
    SELECT coalesce(max(through_seq), 0) AS pruned_through
    FROM {events}_pruned WHERE {key} = $1
) AS mark
LEFT JOIN LATERAL (
    SELECT {listed}, sized.read > count(*) OVER () AS more
    FROM (
        SELECT page.*, row_number() OVER w AS n, sum(octet_length(page.data::text)) OVER w AS bytes,
            count(*) OVER () AS read
        FROM (
            SELECT {listed} FROM {events}
            WHERE {key} = $1 AND seq > $2 ORDER BY seq LIMIT $3 + 1
        ) AS page
        WINDOW w AS (ORDER BY seq)
    ) AS sized
    WHERE (n = 1 OR bytes <= $4) AND n <= $3
) AS batch ON mark.pruned_through <= $2
ORDER BY batch.seq
"""


_READ_AFTER = read_after_sql("chat_events", "chat_id", ("seq", "event", "data", "created_at"))


@dataclass(frozen=True)
class EventPage(Generic[E]):
    """Events after a cursor, and whether more follow them: a page cut short by its limits
    is read on at once; one that wasn't, only when a notification says there is more."""

    events: list[E]
    more: bool


def page_of(rows: list[asyncpg.Record], model: type[E]) -> EventPage[E]:
    """The events of a `read_after_sql` result (its one row without an event when none)."""
    events = [model.model_validate(dict(r)) for r in rows if r["seq"] is not None]
    return EventPage(events, bool(events) and bool(rows[0]["more"]))


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

    async def read_page(
        self,
        chat_id: uuid.UUID,
        seq: int,
        limit: int = READ_BATCH_EVENTS,
        max_bytes: int = READ_BATCH_BYTES,
    ) -> EventPage[ChatEvent]:
        """Events with a sequence number above `seq`, in order: at most `limit`, and no more
        than `max_bytes` of JSON data unless the first alone is larger (it still comes).

        Raises `CursorExpired` if events after `seq` were pruned: checked in the same
        statement, so a round pruning meanwhile can't make the batch skip events.
        """
        rows = await self._pool.fetch(_READ_AFTER, chat_id, seq, limit, max_bytes)
        if rows and rows[0]["pruned_through"] > seq:
            raise CursorExpired(chat_id, seq)
        return page_of(rows, ChatEvent)

    async def cursor_expired(self, chat_id: uuid.UUID, cursor: int) -> bool:
        """Whether events after `cursor` were pruned (so resuming from it would skip some)."""
        pruned_through = await self._pool.fetchval(
            "SELECT through_seq FROM chat_events_pruned WHERE chat_id = $1", chat_id
        )
        return pruned_through is not None and cursor < pruned_through

    async def last_seq(self, chat_id: uuid.UUID) -> int:
        """The id of the chat's newest event (0 if none)."""
        value = await self._pool.fetchval("SELECT last_event_seq FROM chats WHERE id = $1", chat_id)
        return int(value or 0)
