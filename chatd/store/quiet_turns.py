"""Chats whose status says a turn runs and has not changed for a while: the reconciler's
candidates, read under an advisory lock so one reconciler sweeps at a time."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta

import asyncpg
from pydantic import BaseModel

from chatd.chat_status import BusyStatus, busy_sql

__all__ = ["QUIET_TURNS_SQL", "RECONCILER_LOCK", "QuietTurn", "QuietTurnStore"]

RECONCILER_LOCK = 7_400_002
"""Advisory lock key of the reconciler's sweep (the migrations hold 7_400_001)."""


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

    @asynccontextmanager
    async def sweep_lock(self) -> AsyncIterator[bool]:
        """Try the reconciler's lock for the duration of the block: True if this holds it.

        A transaction-level lock: it ends with the block, or with the connection if this
        process dies, so no reconciler can keep it from the others.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            yield bool(await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", RECONCILER_LOCK))

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
