"""Turn bookkeeping activities: begin, finish and retry notices (run as local activities)."""

from __future__ import annotations

import uuid

import asyncpg
from temporalio import activity

from chatd.store.chats import ChatStore
from chatd.store.events import EventLog
from chatd.store.transcript import TranscriptStore
from chatd.store.turns import TurnStore
from workflows.payloads import (
    BeginTurnInput,
    BeginTurnResult,
    FinishTurnInput,
    PublishRetryInput,
)

__all__ = ["TurnActivities"]


class TurnActivities:
    """Status transitions at a turn's edges; each write is idempotent."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._chats = ChatStore(pool)
        self._transcript = TranscriptStore(pool)
        self._turns = TurnStore(pool)
        self._events = EventLog(pool)

    @activity.defn(name="begin_turn")
    async def begin_turn(self, input: BeginTurnInput) -> BeginTurnResult:
        """Move the turn's queued message into the transcript and mark the chat running."""
        chat_id = uuid.UUID(input.chat_id)
        chat = await self._chats.get(chat_id)
        if chat is None:
            return BeginTurnResult(started=False)
        message = await self._transcript.promote(chat_id, uuid.UUID(input.turn_id))
        if message is None:
            return BeginTurnResult(started=False)
        await self._turns.set_status(chat_id, input.turn_id, "running", clear_error=True)
        return BeginTurnResult(started=True, max_steps=chat.max_steps, model_label=chat.model.label)

    @activity.defn(name="finish_turn")
    async def finish_turn(self, input: FinishTurnInput) -> None:
        """Record the turn's final status, usage and error."""
        await self._turns.set_status(
            uuid.UUID(input.chat_id),
            input.turn_id,
            input.status,
            last_error=input.error,
            recount_usage=True,
        )

    @activity.defn(name="publish_retry")
    async def publish_retry(self, input: PublishRetryInput) -> None:
        """Publish the `retry` event before a backoff wait."""
        await self._events.publish(
            uuid.UUID(input.chat_id),
            [
                (
                    "retry",
                    {
                        "attempt": input.attempt,
                        "delay_ms": input.delay_ms,
                        "retrying_at": input.retrying_at.isoformat(),
                        "error": input.error.model_dump(),
                    },
                )
            ],
        )
