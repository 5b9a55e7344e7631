"""The gateway's staging of a client's tool results: the results go to Postgres, where the
worker reads staged results, and only their call ids travel to the workflow, so no result a
client sends ever enters a Temporal history."""

from __future__ import annotations

import uuid

import asyncpg

from chatd.parts import ToolResultPart
from chatd.store.step_keys import StepKey
from chatd.store.tool_calls import ToolCallStore

__all__ = ["ClientResultStaging"]

# The step whose calls wait: the newest assistant message of the turn that made the call
# (results are keyed by call within its step, as the worker stages them).
_STEP_OF_CALL = """
SELECT step_key FROM messages
WHERE chat_id = $1 AND turn_id = $2 AND role = 'assistant'
  AND parts @> jsonb_build_array(jsonb_build_object('type', 'tool_call', 'id', $3::text))
ORDER BY id DESC LIMIT 1
"""


class ClientResultStaging:
    """Stages a client's results for the dynamic calls its chat's turn waits on."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._calls = ToolCallStore(pool)

    async def stage(self, chat_id: uuid.UUID, turn_id: str, results: list[ToolResultPart]) -> bool:
        """Stage the results in the step that made the calls (first write wins per call);
        False if the turn has no such step.

        Staged in call-id order, so of two submissions racing one wins every call, not some
        each.
        """
        if not results:
            return False
        stored = await self._pool.fetchval(_STEP_OF_CALL, chat_id, turn_id, results[0].tool_call_id)
        if stored is None:
            return False
        step = StepKey.parse(turn_id, stored).step
        ordered = sorted(results, key=lambda r: r.tool_call_id)
        await self._calls.stage_client_results(chat_id, turn_id, step, ordered)
        return True
