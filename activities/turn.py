"""A turn's edges, begin and finish, and the status changes and retry notices within it.

A turn begins in `TurnLifecycleWrites.begin` and ends in `TurnLifecycleWrites.finish` (or
`save_last_step`, its one-statement form for a last step): called inside the turn's first
and last model steps, or as the `begin_turn` / `finish_turn` local activities when those
steps didn't.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable
from typing import Any

import asyncpg
from temporalio import activity

from activities.failures import classified_failures
from chatd.chat_status import ChatStatus
from chatd.context import context_limit, reported_context_limit
from chatd.models import ModelConfig, ModelError
from chatd.parts import ToolCallPart
from chatd.settings import ProviderSettings
from chatd.store.chats import ChatRecord, ChatStore
from chatd.store.events import EventLog
from chatd.store.spend import SettledSpend
from chatd.store.step_keys import StepKey
from chatd.store.transcript import NewMessage, StoredMessage, TranscriptStore
from chatd.store.turns import TurnStore
from chatd.telemetry import METRICS
from chatd.webhooks.store import WebhookStore
from workflows.payloads import (
    BeginTurnInput,
    BeginTurnResult,
    FinishTurnInput,
    PlannedModel,
    PublishRetryInput,
    SetStatusInput,
    TurnPlan,
)

__all__ = ["TurnActivities", "TurnLifecycleWrites"]


class TurnLifecycleWrites:
    """Beginning and finishing a turn: as local activities, or inside its first and last step.

    A one-step turn whose step begins and finishes it needs no local activity at all (each
    costs a workflow-task round trip on the turn's critical path); the writes are the same.
    """

    def __init__(self, pool: asyncpg.Pool, providers: ProviderSettings) -> None:
        self._providers = providers
        self._chats = ChatStore(pool)
        self._turns = TurnStore(pool)
        self._webhooks = WebhookStore(pool)

    async def begin(
        self,
        chat_id: uuid.UUID,
        turn_id: str,
        run_id: str | None,
        *,
        plan_read: Awaitable[tuple[ChatRecord | None, list[str]]] | None = None,
    ) -> tuple[ChatRecord | None, BeginTurnResult]:
        """Move the turn's queued message into the transcript and mark the chat running,
        unless another workflow run took it (`TurnStore.begin`).

        Returns the chat too (read alongside: the plan is made from it); `plan_read`, the
        caller's read under way of the chat and the events its owner's webhooks take,
        spares reading them again.
        """
        (chat, webhook_events, limits), began = await asyncio.gather(
            self._plan_inputs(chat_id, plan_read), self._turns.begin(chat_id, turn_id, run_id)
        )
        if chat is None or began is None:
            return chat, BeginTurnResult(
                started=False, chat_status=chat.status if chat is not None else None
            )
        if began:  # not again when a retried attempt (or the gateway) began it before
            METRICS.active_turns.add(1)
        limit, *fallback_limits = limits
        plan = TurnPlan(
            turn_id=turn_id,
            max_steps=chat.max_steps,
            model_label=chat.model.label,
            action_timeout_s=chat.action_timeout_s,
            compact_at_tokens=round(limit * chat.compaction_threshold),
            compacts_on_overflow=chat.compaction_threshold > 0,
            context_limit=limit,
            fallbacks=[
                PlannedModel(label=model.label, context_limit=window)
                for model, window in zip(chat.fallback_models, fallback_limits, strict=True)
            ],
            webhook_events=webhook_events,
        )
        return chat, BeginTurnResult(started=True, plan=plan)

    async def _plan_inputs(
        self,
        chat_id: uuid.UUID,
        plan_read: Awaitable[tuple[ChatRecord | None, list[str]]] | None,
    ) -> tuple[ChatRecord | None, list[str], list[int]]:
        """The chat and the events its owner's webhooks take, then its models' context
        windows: read while the turn begins (reads that wait for its commit would add a
        round trip to every first step)."""
        chat, events = await (plan_read if plan_read is not None else self._plan_read(chat_id))
        if chat is None:
            return None, [], []
        limits = await asyncio.gather(
            *(self._context_limit(m) for m in [chat.model, *chat.fallback_models])
        )
        return chat, events, list(limits)

    async def _plan_read(self, chat_id: uuid.UUID) -> tuple[ChatRecord | None, list[str]]:
        chat = await self._chats.get(chat_id)
        if chat is None:
            return None, []
        return chat, await self._webhooks.subscribed_events(chat.owner)

    async def _context_limit(self, model: ModelConfig) -> int:
        return context_limit(model, await reported_context_limit(model, self._providers))

    async def save_last_step(
        self,
        chat_id: uuid.UUID,
        turn_id: str,
        step: NewMessage,
        settled: SettledSpend,
        events_before: list[tuple[str, dict[str, Any]]],
    ) -> StoredMessage | None:
        """Save the step that ends the turn (published after `events_before`), its attempt's
        settled spend, and finish the turn, at once; None if the step was saved before (then
        nothing changed but the spend: save and finish the usual way)."""
        saved = await self._turns.save_last_step(chat_id, turn_id, step, settled, events_before)
        if saved is None:
            return None
        message, finished = saved
        if finished:
            METRICS.active_turns.add(-1)
        return message

    async def finish(
        self,
        chat_id: uuid.UUID,
        turn_id: str,
        status: ChatStatus,
        error: ModelError | None = None,
    ) -> None:
        """Record the turn's final status, usage and error (once, and only while in it)."""
        if await self._turns.finish(chat_id, turn_id, status, last_error=error):
            METRICS.active_turns.add(-1)


class TurnActivities:
    """Status transitions at a turn's edges; each write is idempotent."""

    def __init__(self, pool: asyncpg.Pool, edges: TurnLifecycleWrites) -> None:
        self._edges = edges
        self._transcript = TranscriptStore(pool)
        self._turns = TurnStore(pool)
        self._events = EventLog(pool)

    @activity.defn(name="begin_turn")
    async def begin_turn(self, input: BeginTurnInput) -> BeginTurnResult:
        """Begin a turn whose first step did not (an interrupt came first, or it failed)."""
        async with classified_failures("beginning the turn"):
            _, began = await self._edges.begin(
                uuid.UUID(input.chat_id), input.turn_id, input.run_id
            )
        return began

    @activity.defn(name="finish_turn")
    async def finish_turn(self, input: FinishTurnInput) -> None:
        """Record the turn's final status, usage and error.

        Retried for the turn's deadline: while Postgres is down nothing else can be recorded.
        """
        async with classified_failures("finishing the turn"):
            chat_id = uuid.UUID(input.chat_id)
            await self._edges.finish(chat_id, input.turn_id, input.status, input.error)

    @activity.defn(name="set_status")
    async def set_status(self, input: SetStatusInput) -> None:
        """Enter requires_action (with the pending calls' arguments) or go back to running."""
        async with classified_failures("a status change"):
            await self._set_status(input)

    async def _set_status(self, input: SetStatusInput) -> None:
        chat_id = uuid.UUID(input.chat_id)
        pending: list[dict[str, Any]] | None = None
        if input.status == "requires_action" and input.pending_budget is None:
            step = await self._transcript.find(
                chat_id, input.turn_id, StepKey.assistant(input.step)
            )
            calls = {p.id: p for p in (step.parts if step else []) if isinstance(p, ToolCallPart)}
            pending = [
                {
                    "id": c.id,
                    "name": c.name,
                    "arguments": _arguments(calls.get(c.id)),
                    "action": "client_tool" if c.kind == "dynamic" else "approval",
                }
                for c in input.pending
            ]
        await self._turns.set_status(
            chat_id,
            input.turn_id,
            input.status,
            pending_tool_calls=pending,
            action_expires_at=input.expires_at,
            pending_budget=input.pending_budget,
        )

    @activity.defn(name="publish_retry")
    async def publish_retry(self, input: PublishRetryInput) -> None:
        """Publish the `retry` event before a backoff wait."""
        METRICS.retries.add(1, {"kind": input.error.kind})
        retry: dict[str, Any] = {
            "attempt": input.attempt,
            "delay_ms": input.delay_ms,
            "retrying_at": input.retrying_at.isoformat(),
            "error": input.error.model_dump(),
        }
        if input.model is not None:
            retry["model"] = input.model
        await self._events.publish(uuid.UUID(input.chat_id), [("retry", retry)])


def _arguments(call: ToolCallPart | None) -> Any:
    """The call's arguments as JSON when they parse, else the raw text."""
    if call is None or not call.arguments:
        return {}
    try:
        return json.loads(call.arguments)
    except json.JSONDecodeError:
        return call.arguments
