"""Context compaction and title generation: model calls that shape the chat, not answer it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
from temporalio import activity

from activities.attempt_spend import record_spend
from activities.failures import classified_failures, model_failure
from activities.heartbeat import heartbeating
from chatd.context import (
    SUMMARY_PREAMBLE,
    context_limit,
    estimate_message_tokens,
    estimate_tokens,
    newest_that_fit,
    reported_context_limit,
)
from chatd.models import ModelConfig, ModelError
from chatd.parts import Message, Part, PartDelta, TextPart, Usage
from chatd.prices import Prices
from chatd.providers import make_provider
from chatd.providers.base import ModelRequest, ProviderError, StepFinish
from chatd.settings import ProviderSettings
from chatd.store.chats import ChatRecord, ChatStore
from chatd.store.events import EventLog
from chatd.store.spend import AttemptKey, SpendStore
from chatd.store.step_keys import StepKey, stored_key
from chatd.store.transcript import TranscriptStore
from chatd.telemetry import METRICS
from workflows.payloads import (
    CompactInput,
    CompactResult,
    SummariseWindowInput,
    SummariseWindowResult,
    TitleInput,
)

__all__ = ["SUMMARY_PREAMBLE", "CompactionActivities", "summarise_transcript"]

SUMMARY_TOOL = "chat_summarized"
SUMMARY_INSTRUCTIONS = """\
Summarise the conversation so far so that the work can continue seamlessly from this summary
alone. Include:
1. What the user asked for, in their own terms, and any constraints or preferences.
2. Decisions made and why.
3. Files, identifiers, facts and results in play (exact names, paths, values).
4. What is done.
5. What is in progress, and exactly what the assistant was doing at the moment of this summary
   (the last action, its arguments, and what it was waiting for).
6. What remains to be done, in order.
Write it as notes for the assistant itself. Do not answer the user; do not call tools."""
TRIMMED_NOTE = (
    "[The {count} oldest messages of this conversation are left out here: they do not fit "
    "the context window. Summarise what follows, and say that earlier context was lost.]"
)
SUMMARY_OUTPUT_RESERVE = 4096
"""Tokens of the window kept for the summary when the chat's model sets no output limit."""
ESTIMATE_MARGIN = 0.9
"""Our token estimate is rough: fill at most this share of what the window leaves."""
MAX_SUMMARY_ATTEMPTS = 4
"""Summary requests per compaction, each leaving out more when the provider says too long."""
TITLE_INSTRUCTIONS = (
    "Write a short title (at most 6 words) for a chat that starts with the message below. "
    "Answer with the title only, no quotes."
)


class CompactionActivities:
    """Summarises long chats and names new ones with the chat's model."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: ProviderSettings,
        *,
        generate_titles: bool = True,
        prices: Prices | None = None,
    ) -> None:
        self._titles = generate_titles
        self._spend = SpendStore(pool)
        self._prices = prices or Prices()
        self._chats = ChatStore(pool)
        self._transcript = TranscriptStore(pool)
        self._events = EventLog(pool)
        self._settings = settings

    @activity.defn(name="compact_context")
    async def compact_context(self, input: CompactInput) -> CompactResult:
        """Replace the prompt with a user-role summary; older messages become `compressed`."""
        # Heartbeats throughout: reading a long transcript, the model call and the write may
        # each take a while, and a dead worker must still show.
        async with heartbeating(), classified_failures("compaction"):
            return await self._compact(input)

    async def _compact(self, input: CompactInput) -> CompactResult:
        chat_id = uuid.UUID(input.chat_id)
        step_key = StepKey.summary(input.step, input.index)
        done = await self._transcript.find(chat_id, input.turn_id, step_key)
        if done is not None:
            return CompactResult(message_id=done.id, estimated_tokens=_estimate(done.parts))
        chat = await self._chats.get(chat_id)
        if chat is None:
            raise model_failure(ModelError(message=f"chat {chat_id} not found", kind="internal"))
        call_id = f"compaction-{input.turn_id}-{input.index}"
        await self._events.publish(chat_id, [_summary_part(call_id, "running")])
        messages = await self._transcript.for_model(chat_id)
        model = chat.model_in_use(input.model_index) or chat.model
        limit = context_limit(model, await reported_context_limit(model, self._settings))
        try:
            summarised = await summarise_transcript(model, messages, limit, self._settings)
        except ProviderError as err:
            # The transcript stays as it was: nothing is compressed without its summary.
            await self._events.publish(
                chat_id, [_summary_part(call_id, "error", err.error.message)]
            )
            raise model_failure(err.error, non_retryable=not err.error.retryable) from None
        summary = summarised.text
        await self._spent(chat, input.turn_id, str(step_key), model, summarised.usage)
        saved = await self._transcript.replace_with_summary(
            chat_id,
            turn_id=input.turn_id,
            step_key=step_key,
            summary=[TextPart(text=f"{SUMMARY_PREAMBLE}\n\n{summary}")],
            events=[
                _summary_part(call_id, "completed", f"summarised {len(messages)} earlier messages")
            ],
        )
        METRICS.compactions.add(1)
        return CompactResult(message_id=saved.id, estimated_tokens=_estimate(saved.parts))

    @activity.defn(name="summarise_window")
    async def summarise_window(self, input: SummariseWindowInput) -> SummariseWindowResult:
        """The summary `POST /v1/responses/compact` seals into a `compaction` item."""
        async with heartbeating(), classified_failures("compaction"):
            messages = []
            if input.chat_id is not None:
                messages = await self._transcript.for_model(
                    uuid.UUID(input.chat_id), through=input.through_message_id
                )
            messages += input.messages
            limit = context_limit(
                input.model, await reported_context_limit(input.model, self._settings)
            )
            try:
                done = await summarise_transcript(input.model, messages, limit, self._settings)
            except ProviderError as err:
                raise model_failure(err.error, non_retryable=not err.error.retryable) from None
            return SummariseWindowResult(summary=done.text, usage=done.usage)

    @activity.defn(name="generate_title")
    async def generate_title(self, input: TitleInput) -> None:
        """Name the chat after its first message, unless someone already named it.

        It does not heartbeat: the turn's run may end before the title is back, and the
        cancellation a heartbeat would then bring (the run is gone) must not drop the title.
        """
        chat_id = uuid.UUID(input.chat_id)
        chat = await self._chats.get(chat_id)
        if not self._titles or chat is None or chat.title is not None:
            return
        parts = await self._first_message(chat_id, input.turn_id)
        first = " ".join(p.text for p in parts if isinstance(p, TextPart))
        if not first.strip():
            return
        request = ModelRequest(
            model=_title_model(chat.model), system=TITLE_INSTRUCTIONS, messages=[_user(first)]
        )
        try:
            done = await _complete(request, self._settings)
        except ProviderError as err:
            raise model_failure(err.error, non_retryable=not err.error.retryable) from None
        await self._spent(chat, input.turn_id or "", "title", request.model, done.usage)
        title = _clean_title(done.text) or _clean_title(first)
        if title:
            await self._chats.set_generated_title(chat_id, title)

    async def _spent(
        self, chat: ChatRecord, turn_id: str, key: str, model: ModelConfig, usage: Usage
    ) -> None:
        """Record what a summary or a title cost: it counts toward the turn's budgets too
        (one row per activity attempt that got an answer)."""
        attempt = AttemptKey(
            chat_id=chat.id,
            turn_id=turn_id,
            step_key=stored_key(turn_id, key),
            attempt=str(activity.info().attempt),
        )
        await record_spend(
            self._spend, self._prices, attempt, chat.owner, model, usage, estimated=False
        )

    async def _first_message(self, chat_id: uuid.UUID, turn_id: str | None) -> Sequence[Part]:
        """The turn's message (which its first step may not have promoted yet), or else
        the transcript's first."""
        if turn_id is not None:
            queued = await self._transcript.queued_message(chat_id, uuid.UUID(turn_id))
            return queued.parts if queued else []
        messages = await self._transcript.for_model(chat_id)
        return messages[0].parts if messages else []


async def summarise_transcript(
    model: ModelConfig, messages: list[Message], limit: int, settings: ProviderSettings
) -> Completion:
    """The summary of `messages`, from a request that fits the model's `limit`.

    The compaction that follows a "prompt too long" error must not send that prompt again:
    the oldest messages that don't fit the window are left out, and more of them each time
    the provider still finds the request too long. Raises `ProviderError`.
    """
    budget = _transcript_budget(model, limit)
    for _ in range(MAX_SUMMARY_ATTEMPTS):
        kept = newest_that_fit(messages, budget)
        if not kept:
            raise ProviderError(_newest_too_long(model, limit))
        try:
            summary = await _complete(_summary_request(model, messages, kept), settings)
        except ProviderError as err:
            if err.error.kind != "context_exceeded":
                raise
            budget = sum(map(estimate_message_tokens, kept)) // 2  # our estimate was too low
            continue
        if not summary.text:  # e.g. the model spent all its output tokens on reasoning
            raise ProviderError(_no_summary(model))
        return summary
    raise ProviderError(_newest_too_long(model, limit))


def _transcript_budget(model: ModelConfig, limit: int) -> int:
    """Tokens the transcript may take in a summary request: the window less room for the
    summary, the instructions (sent twice) and a margin for our rough estimate."""
    reserve = min(model.max_output_tokens or SUMMARY_OUTPUT_RESERVE, limit // 4)
    instructions = 2 * estimate_tokens(len(SUMMARY_INSTRUCTIONS))
    return int((limit - reserve) * ESTIMATE_MARGIN) - instructions


def _summary_request(
    model: ModelConfig, messages: list[Message], kept: list[Message]
) -> ModelRequest:
    """The summary request for the `kept` newest of `messages`, saying what was left out."""
    left_out = len(messages) - len(kept)
    note = [_user(TRIMMED_NOTE.format(count=left_out))] if left_out else []
    return ModelRequest(
        model=model.for_prose(),
        system=SUMMARY_INSTRUCTIONS,
        messages=[*note, *kept, _user(SUMMARY_INSTRUCTIONS)],
    )


def _newest_too_long(model: ModelConfig, limit: int) -> ModelError:
    return ModelError(
        message=(
            f"compaction could not fit the newest messages into the model's {limit}-token "
            "context window"
        ),
        kind="context_exceeded",
        provider=model.provider,
        detail={"limit": limit},
    )


def _no_summary(model: ModelConfig) -> ModelError:
    return ModelError(
        message="compaction produced no summary",
        kind="generic",
        provider=model.provider,
        detail={"type": "empty_summary"},
    )


@dataclass(frozen=True)
class Completion:
    """The text of a model step that calls no tools, and what it cost."""

    text: str
    usage: Usage


async def _complete(request: ModelRequest, settings: ProviderSettings) -> Completion:
    """One non-tool model step; raises `ProviderError`."""
    text: list[str] = []
    usage = Usage()
    async for event in make_provider(request.model, settings).stream_step(request):
        if isinstance(event, PartDelta) and event.type == "text" and event.text:
            text.append(event.text)
        elif isinstance(event, StepFinish):
            usage = event.usage
    return Completion("".join(text).strip(), usage)


def _user(text: str) -> Message:
    return Message(role="user", parts=[TextPart(text=text)])


def _title_model(model: ModelConfig) -> ModelConfig:
    return model.model_copy(
        update={"max_output_tokens": 32, "thinking_budget_tokens": None, "output_format": None}
    )


def _clean_title(text: str) -> str:
    words = text.strip().strip("\"'").split()
    return " ".join(words[:8])[:80]


def _estimate(parts: Sequence[Part]) -> int:
    return estimate_tokens(sum(len(p.text) for p in parts if isinstance(p, TextPart)))


def _summary_part(call_id: str, status: str, output: str = "") -> tuple[str, dict[str, object]]:
    """The `chat_summarized` call (`running`) or its result (`completed`, `error`)."""
    part: dict[str, object]
    if status == "running":
        part = {"type": "tool_call", "id": call_id, "name": SUMMARY_TOOL, "status": "running"}
    else:
        part = {
            "type": "tool_result",
            "tool_call_id": call_id,
            "name": SUMMARY_TOOL,
            "output": output,
            "status": status,
        }
    return ("message_part", {"role": "assistant", "part": part})
