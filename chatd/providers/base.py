"""The interface every model provider implements, and the step accumulator.

A provider only maps: our request -> its SDK call, its stream events -> `PartDelta`
and `StepFinish`, its SDK errors -> `ProviderError` (classified once, in its module).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Protocol

from pydantic import BaseModel

from chatd.models import ModelConfig, ModelError
from chatd.parts import (
    Message,
    Part,
    PartDelta,
    ReasoningPart,
    SourcePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    calls_to_run,
)
from chatd.tool_use import ToolUse

__all__ = [
    "ANTHROPIC_DEFAULT_OUTPUT_TOKENS",
    "BUDGETED_OUTPUT_TOKENS",
    "COUNT_TIMEOUT_S",
    "LEADING_USER_TEXT",
    "ModelProvider",
    "ModelRequest",
    "ProviderError",
    "StepAccumulator",
    "StepFinish",
    "StreamEvent",
    "ToolSpec",
    "default_output_tokens",
    "guarded_count",
]

ANTHROPIC_DEFAULT_OUTPUT_TOKENS = 4096
"""What an Anthropic step may write when the chat sets no `max_output_tokens` (the API
requires a figure)."""
BUDGETED_OUTPUT_TOKENS = 16_384
"""What a step of another provider's model with no `max_output_tokens` may write under a
budget: below every current model's maximum (a larger cap could be refused), and a figure
that keeps the step within what the budget can pay."""


def default_output_tokens(model: ModelConfig) -> int:
    """The output cap a budgeted step of `model` starts from when the chat sets none: the
    Anthropic API's own default here, else `BUDGETED_OUTPUT_TOKENS` (the providers' own
    defaults are the model's maximum, which a budget can't bound)."""
    if model.max_output_tokens is not None:
        return model.max_output_tokens
    if model.provider in ("anthropic", "anthropic-bedrock", "anthropic-vertex", "demo"):
        return ANTHROPIC_DEFAULT_OUTPUT_TOKENS
    return BUDGETED_OUTPUT_TOKENS


log = logging.getLogger(__name__)


LEADING_USER_TEXT = "(The conversation so far:)"
"""The user turn put before a transcript that opens with the model's turn (a history given
as input on `/v1` may), for the APIs whose conversations open with the user's."""


class ToolSpec(BaseModel):
    """A tool as the model sees it."""

    name: str
    description: str
    input_schema: dict[str, Any]


class ModelRequest(BaseModel):
    """Everything one model step needs."""

    model: ModelConfig
    system: str | None = None
    messages: list[Message]
    tools: list[ToolSpec] = []
    """The tools the model is shown (`tool_use.offered` already applied)."""
    tool_use: ToolUse = ToolUse()
    """How this step may call them (`ToolUse.for_step` already applied)."""


class StepFinish(BaseModel):
    """The end of a model step: why it stopped and what it cost."""

    stop_reason: str
    """Provider-neutral: `end_turn`, `tool_use`, `max_tokens`, or the provider's own word."""
    usage: Usage = Usage()
    response_id: str | None = None
    """The provider's id for this response (OpenAI Responses chain mode)."""


StreamEvent = PartDelta | StepFinish


class ProviderError(Exception):
    """A provider failure, already classified."""

    def __init__(self, error: ModelError) -> None:
        super().__init__(error.message)
        self.error = error


class ModelProvider(Protocol):
    """Streams one model step, and counts its input where the provider can."""

    def stream_step(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Yield deltas in stream order, then exactly one `StepFinish`; raise `ProviderError`."""
        ...

    async def count_input_tokens(self, request: ModelRequest) -> int | None:
        """The input tokens of `request` as `stream_step` would send it (messages, system
        prompt, tools and what else shapes the input), by the provider's own token counting.

        None where the provider has no counting API (this default), and when counting fails
        or takes longer than `COUNT_TIMEOUT_S`: it never raises, the caller estimates instead.
        """
        return None


COUNT_TIMEOUT_S = 10.0
"""How long a provider's token counting may take before the step goes on without it."""

_NOT_OFFERED = {404, 405, 501}
"""Statuses of a server without the counting endpoint (an OpenAI-compatible one, say): a
count that fails on every step, logged quietly."""


async def guarded_count(provider: str, count: Awaitable[int | None]) -> int | None:
    """`count`'s tokens; None, logged, if it fails or takes over `COUNT_TIMEOUT_S` (a count
    never fails a step). Cancellation still propagates."""
    try:
        async with asyncio.timeout(COUNT_TIMEOUT_S):
            return await count
    except Exception as exc:
        status = getattr(exc, "status_code", None) or getattr(exc, "code", None)
        level = logging.DEBUG if status in _NOT_OFFERED else logging.WARNING
        reason = str(exc) or type(exc).__name__
        log.log(level, "%s: input token count failed, estimating: %s", provider, reason[:300])
        log.debug("%s: input token count failure", provider, exc_info=True)
        return None


class StepAccumulator:
    """Builds the parts of a step from its deltas; usable mid-stream (for interrupts)."""

    def __init__(self) -> None:
        self._parts: dict[int, Part] = {}

    def apply(self, delta: PartDelta) -> None:
        """Grow the part at `delta.index`."""
        if delta.part is not None:
            self._parts[delta.index] = _whole_part(delta.part)
            return
        part = self._parts.get(delta.index)
        if delta.type == "text":
            text = part.text if isinstance(part, TextPart) else ""
            self._parts[delta.index] = TextPart(text=text + (delta.text or ""))
        elif delta.type == "reasoning":
            current = part if isinstance(part, ReasoningPart) else ReasoningPart()
            current.text += delta.text or ""
            if delta.signature:
                current.signature = (current.signature or "") + delta.signature
            self._parts[delta.index] = current
        elif delta.type == "tool_call":
            call = part if isinstance(part, ToolCallPart) else ToolCallPart(id="", name="")
            call.id = delta.id or call.id
            call.name = delta.name or call.name
            call.arguments += delta.args_delta or ""
            self._parts[delta.index] = call

    def parts(self) -> list[Part]:
        """The parts in stream order, dropping empty text."""
        ordered = [self._parts[i] for i in sorted(self._parts)]
        return [p for p in ordered if not (isinstance(p, TextPart) and p.text == "")]

    def tool_calls(self) -> list[ToolCallPart]:
        """Client/worker-executed tool calls of the step, in call order."""
        return calls_to_run(self.parts())


def _whole_part(data: dict[str, Any]) -> Part:
    kinds: dict[str, type[BaseModel]] = {
        "text": TextPart,
        "reasoning": ReasoningPart,
        "tool_call": ToolCallPart,
        "tool_result": ToolResultPart,
        "source": SourcePart,
    }
    model = kinds.get(str(data.get("type")))
    if model is None:
        raise ValueError(f"unknown part type in delta: {json.dumps(data)[:200]}")
    return model.model_validate(data)  # type: ignore[return-value]
