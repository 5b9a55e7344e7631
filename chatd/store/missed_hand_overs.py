"""Messages stored a while ago that no hand-over reached Temporal with: the reconciler's to
hand over (their gateway died between storing and handing over, and no later send of the
chat handed them over first)."""

from __future__ import annotations

import uuid
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta

import asyncpg
from pydantic import BaseModel

from chatd.store.advisory_locks import AdvisoryLock, try_lock

__all__ = ["MissedHandOverStore", "WaitingMessage"]


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

    def pass_lock(self) -> AbstractAsyncContextManager[bool]:
        """The hand-over pass's lock (`try_lock`)."""
        return try_lock(self._pool, AdvisoryLock.HAND_OVER_PASS)

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
