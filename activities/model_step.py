"""The model-step activity: stream one step, publish its deltas, persist it once."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.publishing import DeltaPublisher
from activities.tools import assistant_step_key
from chatd.models import ModelError
from chatd.parts import PartDelta, ToolCallPart
from chatd.providers import make_provider
from chatd.providers.base import ModelRequest, ProviderError, StepAccumulator, StepFinish, ToolSpec
from chatd.settings import ProviderSettings
from chatd.store.chats import ChatRecord, ChatStore
from chatd.store.events import EventLog
from chatd.store.transcript import StoredMessage, TranscriptStore
from chatd.tools.base import ToolRegistry
from workflows.constants import MODEL_ERROR_TYPE
from workflows.payloads import StreamStepInput, StreamStepResult, ToolCallRef

__all__ = ["ModelStepActivities"]

_CLIENT_HIDDEN_FIELDS = {"signature"}
"""Provider metadata clients don't need while streaming (it stays in the persisted step)."""


class ModelStepActivities:
    """Streams model steps with this worker's provider credentials."""

    def __init__(
        self, pool: asyncpg.Pool, registry: ToolRegistry, settings: ProviderSettings
    ) -> None:
        self._chats = ChatStore(pool)
        self._transcript = TranscriptStore(pool)
        self._events = EventLog(pool)
        self._registry = registry
        self._settings = settings

    @activity.defn(name="stream_model_step")
    async def stream_model_step(self, input: StreamStepInput) -> StreamStepResult:
        """Generate step `input.step` from the persisted transcript (once: retries reuse it)."""
        chat_id = uuid.UUID(input.chat_id)
        done = await self._transcript.find(chat_id, input.turn_id, assistant_step_key(input.step))
        if done is not None:
            return _summary(done)
        chat = await self._chats.get(chat_id)
        if chat is None:
            raise ApplicationError(f"chat {chat_id} not found", non_retryable=True)
        publisher = DeltaPublisher(self._events, chat_id)
        if input.attempt > 1 or activity.info().attempt > 1:
            publisher.add("reset", {"turn_id": input.turn_id, "step": input.step})
        request = await self._request(chat)
        accumulator = StepAccumulator()
        try:
            finish = await self._stream(request, accumulator, publisher)
        except ProviderError as err:
            await publisher.drain()
            raise ApplicationError(
                err.error.message,
                err.error.model_dump(mode="json"),
                type=MODEL_ERROR_TYPE,
                non_retryable=True,
            ) from err
        await publisher.drain()
        saved = await self._transcript.save(
            chat_id,
            turn_id=input.turn_id,
            step_key=assistant_step_key(input.step),
            role="assistant",
            parts=accumulator.parts(),
            usage=finish.usage,
        )
        return _summary(saved, finish.stop_reason)

    async def _request(self, chat: ChatRecord) -> ModelRequest:
        tools = [t.spec() for t in self._registry.active(chat.active_tools)]
        tools += [ToolSpec.model_validate(t.model_dump()) for t in chat.dynamic_tools]
        return ModelRequest(
            model=chat.model,
            system=chat.system_prompt,
            messages=await self._transcript.for_model(chat.id),
            tools=tools,
        )

    async def _stream(
        self, request: ModelRequest, accumulator: StepAccumulator, publisher: DeltaPublisher
    ) -> StepFinish:
        provider = make_provider(request.model, self._settings)
        finish: StepFinish | None = None
        async for event in provider.stream_step(request):
            if isinstance(event, PartDelta):
                accumulator.apply(event)
                publisher.add("message_part", {"role": "assistant", "part": _client_part(event)})
                activity.heartbeat()
            else:
                finish = event
        if finish is None:
            raise ProviderError(
                ModelError(message="stream ended without a finish event", retryable=True)
            )
        return finish


def _client_part(delta: PartDelta) -> dict[str, Any]:
    return delta.model_dump(exclude_none=True, exclude=_CLIENT_HIDDEN_FIELDS)


def _summary(message: StoredMessage, stop_reason: str = "end_turn") -> StreamStepResult:
    calls = [p for p in message.parts if isinstance(p, ToolCallPart) and not p.provider_executed]
    usage = message.usage
    return StreamStepResult(
        message_id=message.id,
        tool_calls=[ToolCallRef(id=c.id, name=c.name) for c in calls],
        stop_reason="tool_use" if calls else stop_reason,
        input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
    )
