"""The owner's event log behind the watch stream (`GET /api/v1/stream`).

Each `status`, `chat`, `error` and `subagent` event of a chat is copied to its owner's log
under the owner's next sequence number when its transaction commits, and a notification on
`NOTIFY_CHANNEL` (payload: `owner_key`) wakes the gateways' watch streams: all in the trigger
of migration 017, so no writer can publish a chat event without it.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel

from chatd.store.events import (
    READ_BATCH_BYTES,
    READ_BATCH_EVENTS,
    EventPage,
    page_of,
    read_after_sql,
)

__all__ = [
    "NOTIFY_CHANNEL",
    "WATCHED_EVENTS",
    "OwnerCursorExpired",
    "OwnerEvent",
    "OwnerEventLog",
    "owner_key",
]

NOTIFY_CHANNEL = "chatd_owner_events"
"""The channel migration 017's trigger notifies; the payload is the owner's `owner_key`."""

WATCHED_EVENTS = frozenset({"status", "chat", "error", "subagent"})
"""The chat events an owner's log copies (the trigger's WHEN says the same)."""


def owner_key(owner: str) -> uuid.UUID:
    """The owner as a notification key: the first 128 bits of the SHA-256 of its UTF-8 bytes,
    as the trigger computes it (an owner id may be longer than a payload may be)."""
    return uuid.UUID(hashlib.sha256(owner.encode()).hexdigest()[:32])


class OwnerCursorExpired(LookupError):
    """Events of the owner after the cursor were pruned: resuming from it would skip them."""

    def __init__(self, cursor: int) -> None:
        super().__init__(f"owner events after {cursor} were pruned")
        self.cursor = cursor


class OwnerEvent(BaseModel):
    """One event of an owner's log as stored."""

    seq: int
    chat_id: uuid.UUID
    """The chat whose stream had the event (the data names it too)."""
    event: str
    data: dict[str, Any]
    created_at: datetime


_READ_AFTER = read_after_sql(
    "owner_events", "owner", ("seq", "chat_id", "event", "data", "created_at")
)


class OwnerEventLog:
    """Reads an owner's events (the trigger writes them)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def read_page(
        self,
        owner: str,
        seq: int,
        limit: int = READ_BATCH_EVENTS,
        max_bytes: int = READ_BATCH_BYTES,
    ) -> EventPage[OwnerEvent]:
        """The owner's events numbered above `seq`, in order: at most `limit`, and no more
        than `max_bytes` of JSON data unless the first alone is larger.

        Raises `OwnerCursorExpired` if events after `seq` were pruned (checked in the same
        statement, so a prune meanwhile can't make the page skip events).
        """
        rows = await self._pool.fetch(_READ_AFTER, owner, seq, limit, max_bytes)
        if rows and rows[0]["pruned_through"] > seq:
            raise OwnerCursorExpired(seq)
        return page_of(rows, OwnerEvent)

    async def position(self, owner: str) -> tuple[int, int]:
        """The owner's last event number and how far its events are pruned (0 for none)."""
        row = await self._pool.fetchrow(
            """SELECT (SELECT last_seq FROM owner_event_seqs WHERE owner = $1) AS last_seq,
                      (SELECT through_seq FROM owner_events_pruned WHERE owner = $1) AS pruned""",
            owner,
        )
        assert row is not None
        return int(row["last_seq"] or 0), int(row["pruned"] or 0)
