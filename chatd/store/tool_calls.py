"""Tool calls of a step on their way to the transcript: start markers and staged results.

Both are keyed by the call within its turn and step (`CallKey`), never by its id alone: a
server that omits or reuses call ids ("call_0" in every response) makes a new call each
time, and an earlier call's result or start must not stand in for it.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

import asyncpg

from chatd.parts import ToolResultPart

__all__ = ["CallKey", "Start", "ToolCallStore"]


class CallKey(NamedTuple):
    """One tool call: its id within the step `step` of turn `turn_id`."""

    chat_id: uuid.UUID
    turn_id: str
    step: int
    tool_call_id: str


class Start(NamedTuple):
    """Who started a call first: the activity (stable across its retries) and its attempt."""

    activity_id: str
    attempt: int


_MARK_STARTED = """
INSERT INTO tool_call_starts (chat_id, turn_id, step, tool_call_id, activity_id, attempt)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (chat_id, turn_id, step, tool_call_id)
DO UPDATE SET activity_id = tool_call_starts.activity_id  -- keep the first; lock and return it
RETURNING activity_id, attempt
"""

_STAGE = """
INSERT INTO tool_results (chat_id, turn_id, step, tool_call_id, part) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (chat_id, turn_id, step, tool_call_id) DO UPDATE SET part = tool_results.part
RETURNING part
"""

_STAGE_MANY = """
INSERT INTO tool_results (chat_id, turn_id, step, tool_call_id, part)
SELECT $1, $2, $3, r.id, r.part
FROM unnest($4::text[], $5::jsonb[]) WITH ORDINALITY AS r(id, part, n) ORDER BY r.n
ON CONFLICT (chat_id, turn_id, step, tool_call_id) DO NOTHING
"""


class ToolCallStore:
    """Marks built-in calls started and stages every call's result until it is recorded."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def mark_started(self, key: CallKey, start: Start) -> Start:
        """Record that the call starts now, unless it started before; return the first start.

        Written just before the tool runs, so a retry that finds no start knows the tool
        never ran, and one that finds its own earlier attempt knows it may have.
        """
        row = await self._pool.fetchrow(_MARK_STARTED, *key, *start)
        assert row is not None
        return Start(row["activity_id"], row["attempt"])

    async def stage(self, key: CallKey, part: ToolResultPart) -> ToolResultPart:
        """Store the call's result once; return the stored one (first write wins)."""
        row = await self._pool.fetchrow(_STAGE, *key, part.model_dump(exclude_none=True))
        assert row is not None
        return ToolResultPart.model_validate(row["part"])

    async def stage_client_results(
        self, chat_id: uuid.UUID, turn_id: str, step: int, parts: list[ToolResultPart]
    ) -> None:
        """Stage a client's results for the calls of a turn's step (first write wins per
        call, in order)."""
        await self._pool.execute(
            _STAGE_MANY,
            chat_id,
            turn_id,
            step,
            [p.tool_call_id for p in parts],
            [p.model_dump(exclude_none=True) for p in parts],
        )

    async def staged(
        self, chat_id: uuid.UUID, turn_id: str, step: int, call_ids: list[str]
    ) -> dict[str, ToolResultPart]:
        """Staged results of these calls of the step, by call id."""
        rows = await self._pool.fetch(
            "SELECT tool_call_id, part FROM tool_results WHERE chat_id = $1 AND turn_id = $2"
            " AND step = $3 AND tool_call_id = ANY($4::text[])",
            chat_id,
            turn_id,
            step,
            call_ids,
        )
        return {r["tool_call_id"]: ToolResultPart.model_validate(r["part"]) for r in rows}
