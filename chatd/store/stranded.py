"""Messages stored for a while and not yet taken by a turn: the reconciler's candidates for a
hand-over their gateway may not have made (it died between storing and handing over)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import asyncpg
from pydantic import BaseModel

__all__ = ["WaitingMessage", "WaitingMessageStore"]


class WaitingMessage(BaseModel):
    """A queued message no turn has taken, stored at `created_at`."""

    id: uuid.UUID
    chat_id: uuid.UUID
    created_at: datetime


# Keyset-paged on the partial index queued_messages_unpromoted (migration 021).
_WAITING_SQL = """
SELECT id, chat_id, created_at FROM queued_messages
WHERE promoted_at IS NULL
  AND created_at < now() - $1::interval
  AND ($2::timestamptz IS NULL OR (created_at, id) > ($2, $3::uuid))
ORDER BY created_at, id
LIMIT $4
"""


class WaitingMessageStore:
    """Reads the messages waiting for a turn."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def waiting(
        self, *, stored_for: timedelta, after: WaitingMessage | None, limit: int
    ) -> list[WaitingMessage]:
        """Untaken messages stored over `stored_for` ago, after `after` in (created_at, id)
        order; at most `limit`."""
        rows = await self._pool.fetch(
            _WAITING_SQL,
            stored_for,
            after.created_at if after else None,
            after.id if after else None,
            limit,
        )
        return [WaitingMessage.model_validate(dict(row)) for row in rows]
