"""The `advisor` tool: a second, tool-less opinion the model asks for before it acts.

One switch (`CHATD_ADVISOR`) registers the tool, and the model step adds the guidance block
to the system prompt exactly when the tool is offered (`advisor_gate`): the model never reads
about a tool it doesn't have, nor has one it wasn't told how to use. Subagents (chats with a
parent) get neither, so advice can't recurse through children or multiply their cost.

A call makes one model request without tools: the advisor prompt, the context the parent
model saw (the same rows the model step read) with the text of the current step, and the
question. Its usage is reported in the result, apart from the parent's steps.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from chatd.context import context_limit
from chatd.models import ModelConfig
from chatd.parts import Message, PartDelta, TextPart, ToolResultPart, Usage
from chatd.providers import make_provider
from chatd.providers.base import ModelRequest, ProviderError, StepAccumulator, ToolSpec
from chatd.settings import ProviderSettings
from chatd.store.chats import ChatRecord
from chatd.store.transcript import TranscriptStore
from chatd.telemetry import METRICS
from chatd.tools.advisor_handoff import handoff_text, split_at_call
from chatd.tools.base import Tool, ToolContext, ToolOutput

__all__ = [
    "ADVISOR_ENV",
    "ADVISOR_MAX_USES_ENV",
    "ADVISOR_MODEL_ENV",
    "ADVISOR_SYSTEM_PROMPT",
    "ADVISOR_TOOL_NAME",
    "DEFAULT_MAX_USES",
    "GUIDANCE",
    "AdvisorArgs",
    "AdvisorConfig",
    "AdvisorResult",
    "advisor_gate",
    "advisor_guidance",
    "advisor_offered",
    "make_advisor_tool",
]

ADVISOR_TOOL_NAME = "advisor"
ADVISOR_ENV = "CHATD_ADVISOR"
"""Set to 1, true or yes to offer the advisor (off by default)."""
ADVISOR_MODEL_ENV = "CHATD_ADVISOR_MODEL"
"""`provider/name` of the advisor model; unset: each chat's own model."""
ADVISOR_MAX_USES_ENV = "CHATD_ADVISOR_MAX_USES"
"""How many times a turn may consult the advisor."""
DEFAULT_MAX_USES = 3
MAX_OUTPUT_TOKENS = 4096
"""The advisor's answer limit unless its model config sets one: advice is meant to be short."""
CONTEXT_BUDGET_TOKENS = 24_000
"""The most context the advisor is sent (less for a model with a small window)."""
MAX_QUESTION_CHARS = 4000

ADVISOR_SYSTEM_PROMPT = """\
You advise another AI agent that has paused in the middle of a task to ask you a question.
You are shown what the agent was shown: its instructions, the conversation so far (its \
oldest part may be left out), what it was writing when it paused, and its question.

Speak to the agent, not to the person it works for. You have no tools and you have done \
nothing: never say or imply that something was run, checked or changed. Give short, \
concrete guidance: the approach you recommend and why, the main risks and tradeoffs, and \
what the agent should verify before it acts. If the context is not enough to judge, say \
what is missing instead of guessing."""

GUIDANCE = """\
<advisor-guidance>
You can consult an `advisor`: a second model that reads this conversation and answers a \
question you ask it, without tools of its own. Ask it before committing to a hard or risky \
course of action (an ambiguous request, a plan with real tradeoffs, an approach that keeps \
failing), not for routine steps. Call it on its own, never in the same response as other \
tools. Each turn allows only a few consultations; every answer says how many remain. Weigh \
the advice yourself: you remain responsible for what you do.
</advisor-guidance>"""


class AdvisorArgs(BaseModel):
    """What the model asks the advisor."""

    question: str = Field(
        min_length=1,
        max_length=MAX_QUESTION_CHARS,
        description="What you want advice on: the decision in front of you and its options.",
    )

    @field_validator("question")
    @classmethod
    def _not_blank(cls, question: str) -> str:
        if not question.strip():
            raise ValueError("the question is blank")
        return question


class AdvisorResult(BaseModel):
    """What a consultation gives the model: advice, or why there is none."""

    type: Literal["advice", "limit_reached", "error"]
    advice: str | None = None
    message: str | None = None
    """Why there is no advice (`limit_reached`, `error`)."""
    remaining_uses: int = Field(ge=0)
    model: str
    """The advisor model, `provider/name`."""
    usage: Usage | None = None
    """The advisor call's own tokens (not counted in the chat's steps)."""


@dataclass(frozen=True)
class AdvisorConfig:
    """How a worker's advisor calls models."""

    providers: ProviderSettings
    model: ModelConfig | None = None
    """None: each chat's own model."""
    max_uses: int = DEFAULT_MAX_USES
    context_budget_tokens: int = CONTEXT_BUDGET_TOKENS
    max_output_tokens: int = MAX_OUTPUT_TOKENS
    timeout: timedelta = timedelta(seconds=120)

    @classmethod
    def from_env(cls, providers: ProviderSettings) -> AdvisorConfig:
        """`CHATD_ADVISOR_MODEL` and `CHATD_ADVISOR_MAX_USES`; a bad value fails the worker's
        start rather than every consultation."""
        return cls(
            providers=providers,
            model=_model_from_env(),
            max_uses=_max_uses_from_env(),
        )

    def model_for(self, chat: ChatRecord) -> ModelConfig:
        """The model the advisor asks for `chat`, set up for one tool-less answer: no
        provider tools (web search), no response chain, a bounded output."""
        model = self.model or chat.model
        return model.model_copy(
            update={
                "web_search": None,
                "openai_chain": False,
                "max_output_tokens": model.max_output_tokens or self.max_output_tokens,
            }
        )


def _model_from_env() -> ModelConfig | None:
    raw = os.environ.get(ADVISOR_MODEL_ENV, "").strip()
    if not raw:
        return None
    provider, _, name = raw.partition("/")
    try:
        return ModelConfig.model_validate({"provider": provider, "name": name})
    except ValueError:
        raise ValueError(
            f"{ADVISOR_MODEL_ENV} must be provider/name (anthropic, openai or demo), got {raw!r}"
        ) from None


def _max_uses_from_env() -> int:
    raw = os.environ.get(ADVISOR_MAX_USES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_USES
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{ADVISOR_MAX_USES_ENV} must be a positive integer, got {raw!r}")
    return int(raw)


def advisor_offered(chat: ChatRecord, offered: Iterable[str]) -> bool:
    """The one switch: the worker offers the tool to this chat, and the chat is no subagent."""
    return chat.parent_chat_id is None and ADVISOR_TOOL_NAME in offered


def advisor_guidance(chat: ChatRecord, offered: Iterable[str]) -> str | None:
    """The guidance block, when the advisor is among the tools the chat is offered."""
    return GUIDANCE if advisor_offered(chat, offered) else None


def advisor_gate(chat: ChatRecord, specs: list[ToolSpec]) -> tuple[list[ToolSpec], str | None]:
    """The tools and system prompt of a model step: with the advisor and its guidance, or
    with neither (a subagent's step loses the tool the worker would offer it)."""
    names = [s.name for s in specs]
    if not advisor_offered(chat, names):
        return [s for s in specs if s.name != ADVISOR_TOOL_NAME], chat.system_prompt
    system = f"{chat.system_prompt}\n\n{GUIDANCE}" if chat.system_prompt else GUIDANCE
    return specs, system


def make_advisor_tool(config: AdvisorConfig) -> Tool[AdvisorArgs]:
    """The `advisor` tool of a worker; exclusive (the workflow refuses a batch that mixes it
    with other tools) and safe to retry (it changes nothing)."""

    async def consult(args: AdvisorArgs, context: ToolContext) -> ToolOutput:
        result = await _consult(config, args.question, context)
        return result.model_dump(mode="json", exclude_none=True)

    return Tool(
        name=ADVISOR_TOOL_NAME,
        description=(
            "Ask a second model for advice before you act: it reads this conversation and "
            "answers your question. It has no tools and does nothing itself. Call it alone, "
            "not together with other tools."
        ),
        args=AdvisorArgs,
        run=consult,
        timeout=config.timeout,
        exclusive=True,
        read_only=True,
    )


async def _consult(config: AdvisorConfig, question: str, context: ToolContext) -> AdvisorResult:
    chat, transcript = context.chat, context.transcript
    if chat is None or transcript is None or context.turn_id is None:
        raise RuntimeError("the advisor needs the chat, its transcript and the turn")
    model = config.model_for(chat)
    label = model.label
    if chat.parent_chat_id is not None:
        message = "The advisor is not available to subagents."
        return AdvisorResult(type="error", message=message, remaining_uses=0, model=label)
    used = await _uses_in_turn(transcript, chat.id, context.turn_id)
    remaining = max(config.max_uses - used, 0)
    if remaining == 0:
        message = f"The advisor may be consulted {config.max_uses} time(s) per turn."
        return AdvisorResult(type="limit_reached", message=message, remaining_uses=0, model=label)
    seen, step_text = split_at_call(await transcript.for_model(chat.id), context.tool_call_id)
    budget = min(config.context_budget_tokens, context_limit(model) // 2) * 4
    handoff = handoff_text(
        question=question,
        system_prompt=chat.system_prompt,
        messages=seen,
        step_text=step_text,
        budget_chars=budget,
    )
    request = ModelRequest(
        model=model.for_prose(),
        system=ADVISOR_SYSTEM_PROMPT,
        messages=[Message(role="user", parts=[TextPart(text=handoff)])],
        tools=[],
    )
    try:
        advice, usage = await _answer(request, config.providers)
    except ProviderError as err:
        message = f"The advisor model failed: {err.error.message}"
        return AdvisorResult(type="error", message=message, remaining_uses=remaining, model=label)
    return AdvisorResult(
        type="advice", advice=advice, remaining_uses=remaining - 1, model=label, usage=usage
    )


async def _answer(request: ModelRequest, providers: ProviderSettings) -> tuple[str, Usage]:
    """The model's text and usage for a one-step request."""
    accumulator = StepAccumulator()
    usage = Usage()
    async for event in make_provider(request.model, providers).stream_step(request):
        if isinstance(event, PartDelta):
            accumulator.apply(event)
        else:
            usage = event.usage
    text = "\n".join(p.text for p in accumulator.parts() if isinstance(p, TextPart)).strip()
    for kind, count in usage.model_dump().items():
        if count:
            attributes = {"model": request.model.label, "kind": kind.removesuffix("_tokens")}
            METRICS.tokens.add(count, {**attributes, "purpose": ADVISOR_TOOL_NAME})
    return text, usage


async def _uses_in_turn(transcript: TranscriptStore, chat_id: uuid.UUID, turn_id: str) -> int:
    """How many times this turn got advice: the turn's recorded advisor results of type
    `advice` (refused, failed and capped calls cost no model call, so they don't count).

    Compacted messages count too: read from the turn's first message on, not from the
    context, so a compaction mid-turn doesn't reset the cap.
    """
    first = await transcript.find(chat_id, turn_id, "user")
    after, used, more = (first.id if first else 0), 0, True
    while more:
        page = await transcript.page(chat_id, after_id=after, limit=500)
        for message in page.rows:
            if message.turn_id == turn_id and message.role == "tool":
                used += sum(_is_advice(p) for p in message.parts)
        more = page.more and bool(page.rows)
        after = page.rows[-1].id if page.rows else after
    return used


def _is_advice(part: object) -> bool:
    return (
        isinstance(part, ToolResultPart)
        and part.name == ADVISOR_TOOL_NAME
        and not part.is_error
        and isinstance(part.output, dict)
        and part.output.get("type") == "advice"
    )
