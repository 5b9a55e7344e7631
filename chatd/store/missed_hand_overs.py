"""Messages stored a while ago that no hand-over reached Temporal with: the reconciler's to
hand over (their gateway died between storing and handing over, and no later send of the
chat handed them over first)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta

import asyncpg
from pydantic import BaseModel

__all__ = ["HAND_OVER_LOCK", "MissedHandOverStore", "WaitingMessage"]

HAND_OVER_LOCK = 7_400_003
"""Advisory lock key of the reconciler's hand-over pass (its turn sweep holds 7_400_002)."""


class WaitingMessage(BaseModel):
    """A message no hand-over has reached Temporal with, stored at `created_at`."""

    id: uuid.UUID
    chat_id: uuid.UUID
    created_at: datetime


# Keyset-paged on the partial index queued_messages_unpromoted (migration 021).
_WAITING_SQL = """
SELECT id, chat_id, created_at FROM queued_messages
WHERE promoted_at IS NULL AND handed_over_at IS NULL
  AND created_at < now() - $1::interval
  AND ($2::timestamptz IS NULL OR (created_at, id) > ($2, $3::uuid))
ORDER BY created_at, id
LIMIT $4
"""


class MissedHandOverStore:
    """Reads the messages waiting for a hand-over."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @asynccontextmanager
    async def pass_lock(self) -> AsyncIterator[bool]:
        """Try the hand-over pass's lock for the block: True if this holds it (it ends with
        the block, or with the connection if this process dies)."""
        async with self._pool.acquire() as conn, conn.transaction():
            yield bool(await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", HAND_OVER_LOCK))

    async def waiting(
        self, *, stored_for: timedelta, after: WaitingMessage | None, limit: int
    ) -> list[WaitingMessage]:
        """Messages not handed over and stored over `stored_for` ago, after `after` in
        (created_at, id) order; at most `limit`."""
        rows = await self._pool.fetch(
            _WAITING_SQL,
            stored_for,
            after.created_at if after else None,
            after.id if after else None,
            limit,
        )
        return [WaitingMessage.model_validate(dict(row)) for row in rows]
