"""Chat status transitions of a turn, each with its `status` event in one transaction."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from chatd.models import ModelError
from chatd.parts import Usage
from chatd.store.chats import ChatStatus
from chatd.store.events import NOTIFY_CHANNEL, Conn
from chatd.store.transcript import promote_queued

__all__ = ["TurnStore"]

# Chat usage is derived from the persisted steps, so recounting it is idempotent.
_USAGE_FIELDS = ", ".join(
    f"'{k}', coalesce(sum((usage ->> '{k}')::bigint), 0)" for k in Usage.model_fields
)
_USAGE_SUM = f"SELECT jsonb_build_object({_USAGE_FIELDS}) FROM messages WHERE chat_id = $1"


_IN_TURN = """
    AND before.status IN ('running', 'requires_action')
    AND NOT EXISTS (
        SELECT 1 FROM queued_messages later
        WHERE later.chat_id = $1
          AND later.promoted_at > (
              SELECT promoted_at FROM queued_messages WHERE id = $8::text::uuid
          )
    )"""
"""The chat is still in turn $8: running it, and no message promoted after its own."""


class TurnStore:
    """Writes a chat's status as its turn moves along."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def begin(self, chat_id: uuid.UUID, turn_id: str) -> bool | None:
        """Promote the turn's queued message and mark the chat running, in one transaction.

        Idempotent and safe to race (the gateway that started the turn and the turn's first
        step both call it): only the call that promotes the message writes the status. True
        if this call began the turn, False if it had begun, None if its message was deleted.
        """
        queued_id = uuid.UUID(turn_id)
        async with self._pool.acquire() as conn, conn.transaction():
            promoted = await promote_queued(conn, chat_id, queued_id)
            if promoted is None:  # promoted before (False), or deleted (None)
                promoted_before = await conn.fetchval(
                    "SELECT promoted_at IS NOT NULL FROM queued_messages"
                    " WHERE id = $1 AND chat_id = $2",
                    queued_id,
                    chat_id,
                )
                return False if promoted_before else None
            _, events = promoted
            await _write_status(
                conn, chat_id, turn_id, "running", clear_error=True, events_before=events
            )
            return True

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

    async def set_status(
        self,
        chat_id: uuid.UUID,
        turn_id: str,
        status: ChatStatus,
        *,
        pending_tool_calls: list[dict[str, Any]] | None = None,
        action_expires_at: datetime | None = None,
    ) -> None:
        """Move the chat to `status` within its turn (requires_action and back); publish it."""
        await _write_status(
            self._pool,
            chat_id,
            turn_id,
            status,
            pending_tool_calls=pending_tool_calls,
            action_expires_at=action_expires_at,
        )


# One statement, atomic on its own: the status change, the events before it and its own
# `status` event (numbered as `events.append_events` numbers them), and the notification.
_WRITE_STATUS = """
WITH c AS (
    UPDATE chats SET
        status = $2,
        last_error = CASE WHEN $3::jsonb IS NOT NULL THEN $3::jsonb
                          WHEN $4 THEN NULL ELSE last_error END,
        pending_tool_calls = $5,
        action_expires_at = $6,
        usage = CASE WHEN $7 THEN ({usage_sum}) ELSE usage END,
        updated_at = now(),
        last_event_seq = chats.last_event_seq + cardinality($9::text[]) + 1
    FROM (SELECT status AS status FROM chats WHERE id = $1 FOR UPDATE) AS before
    WHERE id = $1 {guard}
    RETURNING before.status AS previous, chats.last_event_seq,
              CASE WHEN $7 THEN ({usage_sum} AND turn_id = $8) END AS turn_usage
), events AS (
    SELECT t.e, t.d, t.n FROM unnest($9::text[], $10::jsonb[]) WITH ORDINALITY AS t(e, d, n)
    UNION ALL
    SELECT 'status',
           jsonb_build_object('status', $2::text, 'turn_id', $8::text)
             || CASE WHEN $7 THEN jsonb_build_object('usage', c.turn_usage) ELSE '{{}}' END,
           cardinality($9::text[]) + 1
    FROM c
), ins AS (
    INSERT INTO chat_events (chat_id, seq, event, data)
    SELECT $1, c.last_event_seq - cardinality($9::text[]) - 1 + events.n, events.e, events.d
    FROM c, events
)
SELECT c.previous
FROM c, LATERAL (SELECT pg_notify($11, $1::text || ':' || c.last_event_seq)) AS notified
"""
_STATUS_IN_TURN = _WRITE_STATUS.format(usage_sum=_USAGE_SUM, guard=_IN_TURN)
_STATUS_ANY_TIME = _WRITE_STATUS.format(usage_sum=_USAGE_SUM, guard="")


async def _write_status(
    conn: Conn | asyncpg.Pool,
    chat_id: uuid.UUID,
    turn_id: str,
    status: ChatStatus,
    *,
    last_error: ModelError | None = None,
    clear_error: bool = False,
    pending_tool_calls: list[dict[str, Any]] | None = None,
    action_expires_at: datetime | None = None,
    events_before: list[tuple[str, dict[str, Any]]] | None = None,
    ending: bool = False,
) -> ChatStatus | None:
    """The status change, `events_before` and its `status` event: one statement (atomic on
    its own; inside the caller's transaction, if any).

    `ending` the turn: only while the chat runs turn `turn_id` and no later turn began, with
    the chat's usage recounted and the turn's reported in the event. Returns the status it
    had (None if the chat is gone, or nothing changed).
    """
    # The error comes first so a client that stops at the status has seen it.
    events = list(events_before or [])
    if last_error is not None:
        events.append(("error", last_error.model_dump()))
    previous: ChatStatus | None = await conn.fetchval(
        _STATUS_IN_TURN if ending else _STATUS_ANY_TIME,
        chat_id,
        status,
        last_error.model_dump() if last_error else None,
        clear_error,
        pending_tool_calls,
        action_expires_at,
        ending,
        turn_id,
        [name for name, _ in events],
        [data for _, data in events],
        NOTIFY_CHANNEL,
    )
    return previous
