"""What retention deletes, in SQL: stream events per chat and per owner (the watch stream's)
by sequence number, and the rows of finished turns, each in bounded batches; read under an
advisory lock so one process prunes at a time.

Rows that a turn may still read are never candidates: a queued message is deleted only once
promoted and its chat out of any turn (a waiting one is never), a staged tool result, start
marker or turn's MCP tool list only once its chat is no longer in that turn.
"""

from __future__ import annotations

import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from chatd.chat_status import busy_sql
from chatd.store.advisory_locks import AdvisoryLock, try_lock

__all__ = [
    "CHAT_CREATIONS",
    "QUEUED_MESSAGES",
    "TOOL_CALL_STARTS",
    "TOOL_RESULTS",
    "TURN_MCP_TOOLS",
    "WEBHOOK_DELIVERIES",
    "FinishedRows",
    "OwnerPruneCandidate",
    "PruneCandidate",
    "RetentionStore",
]

_IN_TURN = busy_sql("c.status")


@dataclass(frozen=True)
class FinishedRows:
    """Rows of one table that no turn reads any more, older than a cutoff."""

    table: str
    key: str
    """The table's primary key columns, as a row constructor."""
    select: str
    """SQL selecting the keys of deletable rows; $1 is the retention (an interval)."""


QUEUED_MESSAGES = FinishedRows(
    "queued_messages",
    "(id)",
    f"""SELECT q.id FROM queued_messages q JOIN chats c ON c.id = q.chat_id
            WHERE q.promoted_at < now() - $1::interval AND NOT {_IN_TURN}""",
)
"""Messages a turn took into the transcript, of chats in no turn (never one still waiting)."""

# A chat in a turn whose id it does not know (begun before `chats.turn_id`) keeps all of its
# tool rows.
TOOL_RESULTS = FinishedRows(
    "tool_results",
    "(chat_id, turn_id, step, tool_call_id)",
    f"""SELECT r.chat_id, r.turn_id, r.step, r.tool_call_id
            FROM tool_results r JOIN chats c ON c.id = r.chat_id
            WHERE r.created_at < now() - $1::interval
              AND NOT ({_IN_TURN} AND (c.turn_id IS NULL OR c.turn_id = r.turn_id))""",
)
"""Staged results of calls whose turn the chat is no longer in."""

TOOL_CALL_STARTS = FinishedRows(
    "tool_call_starts",
    "(chat_id, turn_id, step, tool_call_id)",
    f"""SELECT s.chat_id, s.turn_id, s.step, s.tool_call_id
            FROM tool_call_starts s JOIN chats c ON c.id = s.chat_id
            WHERE s.started_at < now() - $1::interval
              AND NOT ({_IN_TURN} AND (c.turn_id IS NULL OR c.turn_id = s.turn_id))""",
)
"""Start markers of calls whose turn the chat is no longer in."""

TURN_MCP_TOOLS = FinishedRows(
    "turn_mcp_tools",
    "(chat_id, turn_id)",
    f"""SELECT t.chat_id, t.turn_id FROM turn_mcp_tools t JOIN chats c ON c.id = t.chat_id
            WHERE t.listed_at < now() - $1::interval
              AND NOT ({_IN_TURN} AND (c.turn_id IS NULL OR c.turn_id = t.turn_id))""",
)
"""MCP tool lists of turns the chat is no longer in."""


WEBHOOK_DELIVERIES = FinishedRows(
    "webhook_deliveries",
    "(id)",
    """SELECT id FROM webhook_deliveries
            WHERE status <> 'pending' AND updated_at < now() - $1::interval""",
)
"""Deliveries that succeeded or failed for good, this long after their last attempt (their
attempts go with them)."""


CHAT_CREATIONS = FinishedRows(
    "chat_creations",
    "(owner, idempotency_key)",
    "SELECT owner, idempotency_key FROM chat_creations WHERE created_at < now() - $1::interval",
)
"""Idempotency keys of `POST /chats`: a retried create is recognised as long as they are kept."""


@dataclass(frozen=True)
class PruneCandidate:
    """A chat whose oldest kept stream event is older than the cutoff."""

    chat_id: uuid.UUID
    through_seq: int
    """Its events up to here are pruned already."""


# One page of chats in id order, each flagged if its oldest kept event (one primary-key
# probe) is older than the cutoff: no index on `created_at` is needed for the busiest table.
_CANDIDATES = """
SELECT c.id AS chat_id, coalesce(p.through_seq, 0) AS through_seq,
       c.last_event_seq > coalesce(p.through_seq, 0) AND coalesce((
           SELECT e.created_at < $2 FROM chat_events e
           WHERE e.chat_id = c.id AND e.seq > coalesce(p.through_seq, 0)
           ORDER BY e.seq LIMIT 1
       ), false) AS prunable
FROM chats c LEFT JOIN chat_events_pruned p ON p.chat_id = c.id
WHERE c.id > $1
ORDER BY c.id
LIMIT $3
"""

_WINDOW = """
SELECT seq, created_at FROM chat_events WHERE chat_id = $1 AND seq > $2 ORDER BY seq LIMIT $3
"""

# Delete a prefix of the chat's events and record how far, in one statement: a reader sees
# both or neither. Appends lock the chat's row, never this one.
_PRUNE = """
WITH gone AS (
    DELETE FROM chat_events WHERE chat_id = $1 AND seq > $2 AND seq <= $3 RETURNING 1
), moved AS (
    INSERT INTO chat_events_pruned (chat_id, through_seq) VALUES ($1, $3)
    ON CONFLICT (chat_id) DO UPDATE
    SET through_seq = greatest(chat_events_pruned.through_seq, excluded.through_seq)
)
SELECT count(*) FROM gone
"""


@dataclass(frozen=True)
class OwnerPruneCandidate:
    """An owner whose oldest kept watch-stream event is older than the cutoff."""

    owner: str
    through_seq: int
    """Its events up to here are pruned already."""


# As `_CANDIDATES`, a page of owners (those that ever had an event) in owner order.
_OWNER_CANDIDATES = """
SELECT s.owner, coalesce(p.through_seq, 0) AS through_seq,
       s.last_seq > coalesce(p.through_seq, 0) AND coalesce((
           SELECT e.created_at < $2 FROM owner_events e
           WHERE e.owner = s.owner AND e.seq > coalesce(p.through_seq, 0)
           ORDER BY e.seq LIMIT 1
       ), false) AS prunable
FROM owner_event_seqs s LEFT JOIN owner_events_pruned p ON p.owner = s.owner
WHERE s.owner > $1
ORDER BY s.owner
LIMIT $3
"""

# An owner's event times grow with their numbers (both are taken under the owner's lock at
# commit, migration 017), so the events older than the cutoff are the ones before the first
# that is not: a prefix, up to $4 of them, deleted and recorded in one statement. A clock
# stepped back can only make it stop early.
_PRUNE_OWNER = """
WITH page AS (
    SELECT seq, created_at FROM owner_events WHERE owner = $1 AND seq > $2 ORDER BY seq LIMIT $4
), bound AS (
    SELECT max(seq) AS through FROM page
    WHERE seq < coalesce((SELECT min(seq) FROM page WHERE created_at >= $3), $2 + $4 + 1)
), gone AS (
    DELETE FROM owner_events e USING bound
    WHERE e.owner = $1 AND e.seq > $2 AND e.seq <= bound.through
), moved AS (
    INSERT INTO owner_events_pruned (owner, through_seq)
    SELECT $1, through FROM bound WHERE through IS NOT NULL
    ON CONFLICT (owner) DO UPDATE
    SET through_seq = greatest(owner_events_pruned.through_seq, excluded.through_seq)
)
SELECT through FROM bound
"""

# The prefix `_PRUNE_OWNER` would delete, deleting nothing (a dry run).
_OWNER_PREFIX_END = """
WITH page AS (
    SELECT seq, created_at FROM owner_events WHERE owner = $1 AND seq > $2 ORDER BY seq LIMIT $4
)
SELECT max(seq) FROM page
WHERE seq < coalesce((SELECT min(seq) FROM page WHERE created_at >= $3), $2 + $4 + 1)
"""


class RetentionStore:
    """Finds and deletes what retention forgets."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    def round_lock(self) -> AbstractAsyncContextManager[bool]:
        """The retention round's lock (`try_lock`)."""
        return try_lock(self._pool, AdvisoryLock.RETENTION_ROUND)

    async def event_candidates(
        self, *, after: uuid.UUID, cutoff: datetime, limit: int
    ) -> tuple[list[PruneCandidate], uuid.UUID | None]:
        """The chats after `after` (id order, a page of `limit`) with events older than
        `cutoff`, and where the next page starts (None after the last)."""
        rows = await self._pool.fetch(_CANDIDATES, after, cutoff, limit)
        candidates = [
            PruneCandidate(r["chat_id"], int(r["through_seq"])) for r in rows if r["prunable"]
        ]
        return candidates, (rows[-1]["chat_id"] if len(rows) == limit else None)

    async def event_boundary(
        self, chat: PruneCandidate, *, cutoff: datetime, settled: timedelta, window: int
    ) -> int:
        """The highest sequence number of the chat's events older than `cutoff`.

        Read in sequence order, `window` events at a time, until an event `settled` past
        the cutoff: an event's time is its transaction's start while its number is taken
        under the chat's lock, so a slightly older event can follow a newer one.
        """
        boundary = scanned = chat.through_seq
        while True:
            rows = await self._pool.fetch(_WINDOW, chat.chat_id, scanned, window)
            for row in rows:
                if row["created_at"] < cutoff:
                    boundary = row["seq"]
            if len(rows) < window or rows[-1]["created_at"] >= cutoff + settled:
                return int(boundary)
            scanned = rows[-1]["seq"]

    async def prune_events(self, chat_id: uuid.UUID, after: int, through: int) -> int | None:
        """Delete the chat's events in (`after`, `through`] and record it pruned through
        `through`; the number deleted, or None if the chat was deleted meanwhile."""
        try:
            return int(await self._pool.fetchval(_PRUNE, chat_id, after, through))
        except asyncpg.ForeignKeyViolationError:
            return None

    async def count_events(self, chat_id: uuid.UUID, after: int, through: int) -> int:
        """How many of the chat's events lie in (`after`, `through`]."""
        return int(
            await self._pool.fetchval(
                "SELECT count(*) FROM chat_events WHERE chat_id = $1 AND seq > $2 AND seq <= $3",
                chat_id,
                after,
                through,
            )
        )

    async def owner_event_candidates(
        self, *, after: str, cutoff: datetime, limit: int
    ) -> tuple[list[OwnerPruneCandidate], str | None]:
        """The owners after `after` (a page of `limit`) with watch-stream events older than
        `cutoff`, and where the next page starts (None after the last)."""
        rows = await self._pool.fetch(_OWNER_CANDIDATES, after, cutoff, limit)
        candidates = [
            OwnerPruneCandidate(r["owner"], int(r["through_seq"])) for r in rows if r["prunable"]
        ]
        return candidates, (rows[-1]["owner"] if len(rows) == limit else None)

    async def prune_owner_events(self, owner: str, after: int, cutoff: datetime, limit: int) -> int:
        """Delete up to `limit` of the owner's events after `after` that are older than
        `cutoff` (a prefix) and record them pruned; the last one's number (`after`: none)."""
        through = await self._pool.fetchval(_PRUNE_OWNER, owner, after, cutoff, limit)
        return int(through or after)

    async def owner_events_through(
        self, owner: str, after: int, cutoff: datetime, limit: int
    ) -> int:
        """Where `prune_owner_events` with these arguments would stop, deleting nothing."""
        through = await self._pool.fetchval(_OWNER_PREFIX_END, owner, after, cutoff, limit)
        return int(through or after)

    async def delete_finished(self, rows: FinishedRows, retention: timedelta, limit: int) -> int:
        """Delete up to `limit` of the rows; how many went."""
        result = await self._pool.execute(
            f"DELETE FROM {rows.table} WHERE {rows.key} IN ({rows.select} LIMIT $2)",
            retention,
            limit,
        )
        return int(result.split()[-1])

    async def count_finished(self, rows: FinishedRows, retention: timedelta) -> int:
        """How many of the rows there are."""
        return int(
            await self._pool.fetchval(f"SELECT count(*) FROM ({rows.select}) AS x", retention)
        )

    async def busy_chats(self, chat_ids: list[uuid.UUID], idle_for: timedelta) -> set[uuid.UUID]:
        """Those of the chats that exist and are in a turn or changed within `idle_for`."""
        rows = await self._pool.fetch(
            f"""SELECT c.id FROM chats c WHERE c.id = ANY($1::uuid[])
                AND ({_IN_TURN} OR c.updated_at >= now() - $2::interval)""",
            chat_ids,
            idle_for,
        )
        return {r["id"] for r in rows}
