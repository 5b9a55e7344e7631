"""Chat status transitions of a turn, each with its `status` event in one statement."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from chatd.budgets import PendingBudget
from chatd.chat_status import ChatStatus, busy_sql
from chatd.models import ModelError
from chatd.parts import Usage
from chatd.store.spend import (
    TURN_COST,
    SettledSpend,
    settled_spend_sql,
    turn_cost_settling_sql,
)
from chatd.store.step_keys import stored_key, user_message_key
from chatd.store.transcript import (
    INSERT_STEP,
    MESSAGE_EVENT_SQL,
    QUEUED_ROLE_SQL,
    NewMessage,
    StoredMessage,
)

__all__ = ["INTERRUPT_CHANNEL", "TurnStore"]

INTERRUPT_CHANNEL = "chatd_interrupts"
"""NOTIFY channel of interrupt requests; the payload is the turn's id."""


def _usage_sum(*, plus_step: str | None = None) -> str:
    """SQL: chat $1's usage summed over its messages, with the step being saved in the same
    statement (CTE `plus_step`, not yet visible in the table) counted in, if given.

    Chat usage is derived from the persisted steps, so recounting it is idempotent.
    """
    step = " + coalesce((SELECT ({m}.usage ->> '{k}')::bigint FROM {m}), 0)"
    fields = ", ".join(
        f"'{k}', coalesce(sum((usage ->> '{k}')::bigint), 0)"
        + (step.format(m=plus_step, k=k) if plus_step else "")
        for k in Usage.model_fields
    )
    return f"SELECT jsonb_build_object({fields}) FROM messages WHERE chat_id = $1"


_TURN_COST = TURN_COST.format(turn="$7::text")
_TURN_COST_SETTLING = turn_cost_settling_sql(
    turn="$7::text", chat="$1", step_key="$2", attempt="$8"
)

_USAGE_SUM = _usage_sum()
_USAGE_SUM_WITH_STEP = _usage_sum(plus_step="m")


_IN_TURN = f"""
    AND {busy_sql("before.status")}
    AND (
        before.turn_id IS NULL OR before.turn_id = $7
        OR EXISTS (  -- left by a turn that a release before chats.turn_id began after it
            SELECT 1 FROM queued_messages noted
            WHERE noted.id = before.turn_id::uuid
              AND noted.promoted_at < (
                  SELECT promoted_at FROM queued_messages WHERE id = $7::text::uuid
              )
        )
    )
    AND NOT EXISTS (
        SELECT 1 FROM queued_messages later
        WHERE later.chat_id = $1
          AND later.promoted_at > (
              SELECT promoted_at FROM queued_messages WHERE id = $7::text::uuid
          )
    )"""
"""The chat is still in turn $7: running it, and its turn (on the locked, newest row: a begin
that commits while this waits is seen) is $7, or none, or an older one (a turn begun by a
release before `chats.turn_id` leaves its predecessor's); and no message promoted after its
own (as of the statement's start)."""


# Beginning turn $3 (queued message $2): move the message into the transcript, mark the chat
# running, publish the message, the queue change and the status, and notify. One statement:
# a concurrent begin waits on the queued row's lock, then finds it promoted and does nothing.
_BEGIN = f"""
WITH queued AS (
    UPDATE queued_messages SET promoted_at = now(), promoted_by = $5
    WHERE id = $2 AND chat_id = $1 AND promoted_at IS NULL RETURNING parts
), m AS (
    INSERT INTO messages (chat_id, turn_id, step_key, role, parts)
    SELECT $1, $3, $4, {QUEUED_ROLE_SQL}, parts FROM queued RETURNING *
), c AS (
    UPDATE chats SET status = 'running', turn_id = $3, last_error = NULL, pending_tool_calls = NULL,
                     pending_budget = NULL, action_expires_at = NULL, updated_at = now()
    FROM m WHERE chats.id = $1
    RETURNING chats.id
)
SELECT chatd_append_events(
           $1,
           ARRAY['message', 'queue', 'status'],
           ARRAY[{MESSAGE_EVENT_SQL},
                 '{{}}',
                 jsonb_build_object('status', 'running', 'turn_id', $3::text, 'run_id', $5::text)]
       ) IS NOT NULL AS promoted
FROM m, c
"""

# A promoted message's run: claimed by `$3` if a gateway began it; NULL if not promoted yet.
_CLAIM = """
WITH claim AS (
    UPDATE queued_messages SET promoted_by = $3
    WHERE id = $1 AND chat_id = $2 AND promoted_at IS NOT NULL AND promoted_by IS NULL
      AND $3::text IS NOT NULL
    RETURNING promoted_by
)
SELECT COALESCE((SELECT promoted_by FROM claim), q.promoted_by) AS promoted_by
FROM queued_messages q WHERE q.id = $1 AND q.chat_id = $2 AND q.promoted_at IS NOT NULL
"""


_SAVE_LAST_STEP_INSERT = INSERT_STEP.format(
    chat_id="$1",
    turn_id="$7",
    step_key="$2",
    role="$6",
    parts="$3",
    usage="$4",
    response_id="$5",
)


# Saving the step that ends turn $7 and finishing the turn: the attempt's settled spend
# (attempt $8, model $9, cost $10; its usage is the step's), the step's message (unless its
# step key is taken), then the events before it ($11, $12: the step's last deltas), its
# `message` event, and, if the chat is still in the turn, the status `waiting` with the usage
# recounted and the turn's cost, and its `status` event; then notify. One statement, one round
# trip where the spend, the deltas, the save and the finish took four.
_SETTLED_SPEND = settled_spend_sql(
    chat="$1",
    step_key="$2",
    attempt="$8",
    turn="$7",
    model="$9",
    usage="coalesce($4::jsonb, '{}')",
    cost="$10",
)
_SAVE_LAST_STEP = f"""
WITH RECURSIVE {_SETTLED_SPEND}, m AS (
    {_SAVE_LAST_STEP_INSERT}
), ending AS (
    SELECT true {_IN_TURN} AS yes
    -- Locked after the insert (as every writer does: insert, then lock the chat), and only
    -- if it inserted.
    FROM m, LATERAL (SELECT status, turn_id FROM chats WHERE id = m.chat_id FOR UPDATE) AS before
), c AS (
    UPDATE chats SET status = 'waiting', pending_tool_calls = NULL, pending_budget = NULL,
                     action_expires_at = NULL, usage = ({_USAGE_SUM_WITH_STEP}), turn_id = NULL,
                     updated_at = now()
    FROM ending WHERE chats.id = $1 AND ending.yes
    RETURNING true AS ended, ({_USAGE_SUM_WITH_STEP} AND turn_id = $7) AS turn_usage
)
SELECT m.*, coalesce(c.ended, false) AS ended,
       chatd_append_events(
           $1,
           $11::text[] || array_remove(ARRAY['message', CASE WHEN c.ended THEN 'status' END], NULL),
           $12::jsonb[] || array_remove(
               ARRAY[{MESSAGE_EVENT_SQL},
                     CASE WHEN c.ended THEN jsonb_build_object(
                         'status', 'waiting', 'turn_id', $7::text, 'usage', c.turn_usage,
                         'cost_usd', {_TURN_COST_SETTLING}) END],
               NULL
           )
       ) AS last_event_seq
FROM m LEFT JOIN c ON true
"""


class TurnStore:
    """Writes a chat's status as its turn moves along."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def begin(
        self, chat_id: uuid.UUID, turn_id: str, run_id: str | None = None
    ) -> bool | None:
        """Promote the turn's queued message and mark the chat running, in one statement.

        Idempotent and safe to race (the gateway that started the turn and the turn's first
        step both call it): only the call that promotes the message writes the status. True
        if this call began the turn, False if it had begun (in workflow run `run_id`, or by
        a gateway), None if there is no turn for this call: its message was deleted, or
        another workflow run took it (a message handed over twice, see 019_promoted_by).
        """
        queued_id = uuid.UUID(turn_id)
        begun = await self._pool.fetchval(
            _BEGIN, chat_id, queued_id, str(queued_id), user_message_key(str(queued_id)), run_id
        )
        if begun:
            return True
        taken_by = await self._pool.fetchrow(_CLAIM, queued_id, chat_id, run_id)
        if taken_by is None:
            return None  # deleted
        return False if run_id is None or taken_by["promoted_by"] in (None, run_id) else None

    async def finish(
        self,
        chat_id: uuid.UUID,
        turn_id: str,
        status: ChatStatus,
        *,
        last_error: ModelError | None = None,
    ) -> ChatStatus | None:
        """End the turn: its final status, error and usage, if the chat is still in it.

        A late or repeated finish (an attempt that timed out committing after its retry did,
        or after the next turn began) changes and publishes nothing. Returns the status it
        had, or None if nothing changed.
        """
        return await _write_status(
            self._pool, chat_id, turn_id, status, last_error=last_error, ending=True
        )

    async def save_last_step(
        self,
        chat_id: uuid.UUID,
        turn_id: str,
        step: NewMessage,
        settled: SettledSpend,
        events_before: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> tuple[StoredMessage, bool] | None:
        """Save the step that ends the turn, with the settled spend of the attempt that
        streamed it (its usage the step's), and finish the turn (`waiting`) with it. The
        step's `message` event follows `events_before`.

        None if the step was saved before (by a lost attempt): nothing changed but the
        spend, and the caller saves and finishes the usual way, from the step as saved.
        Otherwise the saved step, and whether the turn was finished now (not if it had
        ended, or a later one began).
        """
        row = await self._pool.fetchrow(
            _SAVE_LAST_STEP,
            chat_id,
            stored_key(turn_id, step.step_key),
            [p.model_dump(exclude_none=True) for p in step.parts],
            step.usage.model_dump() if step.usage else None,
            step.response_id,
            step.role,
            turn_id,
            settled.key.attempt,
            settled.model,
            settled.cost_usd,
            [name for name, _ in events_before],
            [data for _, data in events_before],
        )
        if row is None:
            return None
        return StoredMessage.model_validate(dict(row)), bool(row["ended"])

    async def set_status(
        self,
        chat_id: uuid.UUID,
        turn_id: str,
        status: ChatStatus,
        *,
        pending_tool_calls: list[dict[str, Any]] | None = None,
        action_expires_at: datetime | None = None,
        pending_budget: PendingBudget | None = None,
    ) -> None:
        """Move the chat to `status` within its turn (requires_action and back, for calls
        or for a budget); publish it."""
        await _write_status(
            self._pool,
            chat_id,
            turn_id,
            status,
            pending_tool_calls=pending_tool_calls,
            action_expires_at=action_expires_at,
            pending_budget=pending_budget,
        )

    async def announce_interrupt(self, chat_id: uuid.UUID, turn_id: str) -> None:
        """Tell the workers that turn `turn_id` was interrupted, if it is still the chat's.

        Only a shortcut: the workflow's `interrupt` signal, sent first, decides. A worker
        streaming the turn's step stops at once instead of at its next heartbeat, whose
        answer carries the workflow's cancellation. `turn_id` is the turn the caller saw
        before signalling: a later turn, begun meanwhile, got no signal and is not named.
        """
        await self._pool.execute(_ANNOUNCE_INTERRUPT, chat_id, turn_id, INTERRUPT_CHANNEL)


_ANNOUNCE_INTERRUPT = """
SELECT pg_notify($3, turn_id) FROM chats WHERE id = $1 AND turn_id = $2
"""

# One statement: the status change, the error event (if any) and the `status` event, and
# the notification.
_WRITE_STATUS = """
WITH c AS (
    UPDATE chats SET
        status = $2,
        last_error = coalesce($3::jsonb, last_error),
        pending_tool_calls = $4,
        action_expires_at = $5,
        pending_budget = $8::jsonb,
        usage = CASE WHEN $6 THEN ({usage_sum}) ELSE usage END,
        turn_id = CASE WHEN $6 THEN NULL ELSE chats.turn_id END,
        updated_at = now()
    FROM (SELECT status, turn_id FROM chats WHERE id = $1 FOR UPDATE) AS before
    WHERE id = $1 {guard}
    RETURNING before.status AS previous,
              CASE WHEN $6 THEN ({usage_sum} AND turn_id = $7) END AS turn_usage
)
SELECT c.previous,
       chatd_append_events(
           $1,
           array_remove(ARRAY[CASE WHEN $3::jsonb IS NOT NULL THEN 'error' END, 'status'], NULL),
           array_remove(
               ARRAY[$3::jsonb,
                     jsonb_build_object('status', $2::text, 'turn_id', $7::text)
                     || CASE WHEN $6 THEN jsonb_build_object('usage', c.turn_usage,
                                                             'cost_usd', {turn_cost})
                             ELSE '{{}}' END
                     || CASE WHEN $8::jsonb IS NOT NULL
                             THEN jsonb_build_object('pending_budget', $8::jsonb)
                             ELSE '{{}}' END],
               NULL
           )
       ) AS last_event_seq
FROM c
"""
_STATUS_IN_TURN = _WRITE_STATUS.format(usage_sum=_USAGE_SUM, guard=_IN_TURN, turn_cost=_TURN_COST)
_STATUS_ANY_TIME = _WRITE_STATUS.format(usage_sum=_USAGE_SUM, guard="", turn_cost=_TURN_COST)


async def _write_status(
    pool: asyncpg.Pool,
    chat_id: uuid.UUID,
    turn_id: str,
    status: ChatStatus,
    *,
    last_error: ModelError | None = None,
    pending_tool_calls: list[dict[str, Any]] | None = None,
    action_expires_at: datetime | None = None,
    pending_budget: PendingBudget | None = None,
    ending: bool = False,
) -> ChatStatus | None:
    """The status change with its events (the error first, so a client that stops at the
    status has seen it).

    `ending` the turn: only while the chat runs turn `turn_id` and no later turn began, with
    the chat's usage recounted and the turn's reported in the event. Returns the status it
    had (None if the chat is gone, or nothing changed).
    """
    previous: ChatStatus | None = await pool.fetchval(
        _STATUS_IN_TURN if ending else _STATUS_ANY_TIME,
        chat_id,
        status,
        last_error.model_dump() if last_error else None,
        pending_tool_calls,
        action_expires_at,
        ending,
        turn_id,
        pending_budget.model_dump() if pending_budget else None,
    )
    return previous
