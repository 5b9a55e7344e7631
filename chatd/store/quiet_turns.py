"""Chats whose status says a turn runs and has not changed for a while: the reconciler's
candidates, read under an advisory lock so one reconciler sweeps at a time."""

from __future__ import annotations

import uuid
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta

import asyncpg
from pydantic import BaseModel

from chatd.chat_status import BusyStatus, busy_sql
from chatd.store.advisory_locks import AdvisoryLock, try_lock

__all__ = ["QUIET_TURNS_SQL", "QuietTurn", "QuietTurnStore"]


class QuietTurn(BaseModel):
    """A chat in a turn whose row has not changed since `updated_at`."""

    chat_id: uuid.UUID
    turn_id: str | None
    """`chats.turn_id`, or for a turn begun before that column, its newest promoted message."""
    status: BusyStatus
    updated_at: datetime


# Keyset-paged on the partial index chats_in_turn (migration 006), oldest change first.
QUIET_TURNS_SQL = f"""
SELECT id AS chat_id, status, updated_at,
       coalesce(turn_id, (
           SELECT q.id::text FROM queued_messages q
           WHERE q.chat_id = chats.id AND q.promoted_at IS NOT NULL
           ORDER BY q.promoted_at DESC LIMIT 1
       )) AS turn_id
FROM chats
WHERE {busy_sql()}
  AND updated_at < now() - $1::interval
  AND ($2::timestamptz IS NULL OR (updated_at, id) > ($2, $3::uuid))
ORDER BY updated_at, id
LIMIT $4
"""
"""Keyset-paged on the partial index chats_in_turn (migration 007), oldest change first."""


class QuietTurnStore:
    """Reads the reconciler's candidates."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    def sweep_lock(self) -> AbstractAsyncContextManager[bool]:
        """The reconciler's sweep lock (`try_lock`)."""
        return try_lock(self._pool, AdvisoryLock.RECONCILER_SWEEP)

    async def quiet_turns(
        self, *, unchanged_for: timedelta, after: QuietTurn | None, limit: int
    ) -> list[QuietTurn]:
        """Chats in a turn whose row is older than `unchanged_for`, after `after` in
        (updated_at, chat id) order; at most `limit`."""
        rows = await self._pool.fetch(
            QUIET_TURNS_SQL,
            unchanged_for,
            after.updated_at if after else None,
            after.chat_id if after else None,
            limit,
        )
        return [QuietTurn.model_validate(dict(row)) for row in rows]
