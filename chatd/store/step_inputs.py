"""What a model step reads before its request, in one statement: the chat, the step as a lost
attempt saved it (if one did), the turn's context and the budgets over the step; for a
turn's first step, also the events its owner's webhooks take (the turn's plan needs them).

Every step needs all four before it can send its request. Four statements at once would each
take a pooled connection and a round trip, and the slowest would set the step's pace; one
statement is one round trip, and one Postgres backend's work, from one snapshot.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg
from pydantic import TypeAdapter

from chatd.budgets import BudgetState
from chatd.store.chats import ChatRecord
from chatd.store.spend import budgets_sql
from chatd.store.step_keys import StepKey, stored_key
from chatd.store.transcript import StoredMessage, TurnContext, context_sql, turn_context
from chatd.webhooks.store import subscribed_events_sql

__all__ = ["StepInputs", "read_step_inputs"]

_budgets_adapter: TypeAdapter[list[BudgetState]] = TypeAdapter(list[BudgetState])

_OWNER = "(SELECT owner FROM chats WHERE id = $1)"

# $1 the chat, $2 the turn, $3 the step's stored key, $4 the turn's queued message (NULL
# after the turn's first step).
_STEP_INPUTS = f"""
SELECT (SELECT to_jsonb(c) - 'last_event_seq' FROM chats c WHERE c.id = $1)::text AS chat,
       (SELECT to_jsonb(m) FROM messages m WHERE m.chat_id = $1 AND m.step_key = $3)::text
           AS saved,
       context.messages, context.waiting,
       (SELECT coalesce(json_agg(b), '[]') FROM ({budgets_sql("$1", "$2")}) AS b)::text
           AS budgets,
       CASE WHEN $4::uuid IS NOT NULL THEN ({subscribed_events_sql(_OWNER)}) END
           AS webhook_events
FROM ({context_sql("$1", "$4", "NULL")}) AS context
"""


@dataclass(frozen=True)
class StepInputs:
    """A model step's reads, from one snapshot."""

    chat: ChatRecord | None
    """None if the chat is gone."""
    saved: StoredMessage | None
    """The step, if an earlier attempt saved it."""
    context: TurnContext
    budgets: list[BudgetState]
    webhook_events: list[str]
    """The events the chat owner's webhooks take, read for a turn's first step (the turn's
    plan); empty for the others."""


async def read_step_inputs(
    pool: asyncpg.Pool,
    chat_id: uuid.UUID,
    turn_id: str,
    step_key: StepKey,
    turn_message: uuid.UUID | None,
) -> StepInputs:
    """The step's inputs; `turn_message`, the turn's queued message, is in the context if it
    is still waiting (a turn's first step reads while its begin promotes it)."""
    row = await pool.fetchrow(
        _STEP_INPUTS, chat_id, turn_id, stored_key(turn_id, step_key), turn_message
    )
    assert row is not None  # an aggregate always has its row
    return StepInputs(
        chat=ChatRecord.model_validate_json(row["chat"]) if row["chat"] else None,
        saved=StoredMessage.model_validate_json(row["saved"]) if row["saved"] else None,
        context=turn_context(row["messages"], row["waiting"]),
        budgets=_budgets_adapter.validate_json(row["budgets"]),
        webhook_events=row["webhook_events"] or [],
    )
