"""What the advisor model is told: the parent's context as text, cut to a budget.

The parent's messages are rendered as text rather than passed as messages: the nested call is
tool-less, and providers refuse tool calls and results in a request that declares no tools.
When the context is over the budget the oldest messages go first; the question always stays.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from chatd.parts import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    SourcePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

__all__ = ["handoff_text", "render_message", "split_at_call"]

_SYSTEM_SHARE = 8
"""The parent's system prompt gets at most 1/8 of the budget (its head: rules come first)."""
_STEP_SHARE = 4
"""The current step's text gets at most 1/4 of the budget (its tail: the latest thought)."""


def split_at_call(messages: Sequence[Message], call_id: str) -> tuple[list[Message], str]:
    """The messages before the step that made call `call_id`, and that step's text before
    the call (what the model wrote while deciding to ask).

    The step is the newest assistant message holding the call; when none does (it cannot be
    read), every message counts as context and the step has no text.
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "assistant":
            continue
        ids = [p.id for p in message.parts if isinstance(p, ToolCallPart)]
        if call_id in ids:
            return list(messages[:index]), _text_before_call(message.parts, call_id)
    return list(messages), ""


def _text_before_call(parts: Sequence[Part], call_id: str) -> str:
    texts: list[str] = []
    for part in parts:
        if isinstance(part, ToolCallPart) and part.id == call_id:
            break
        if isinstance(part, TextPart):
            texts.append(part.text)
    return "\n".join(t for t in texts if t)


def render_message(message: Message) -> str:
    """One message as the advisor reads it: its role, then each part on its own lines.

    Reasoning is left out: it is often encrypted, and the text says what the model concluded.
    """
    lines = [f"[{message.role}]"]
    for part in message.parts:
        rendered = _render_part(part)
        if rendered:
            lines.append(rendered)
    return "\n".join(lines)


def _render_part(part: Part) -> str:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ReasoningPart):
        return ""
    if isinstance(part, ToolCallPart):
        return f"(called tool {part.name} with {part.arguments or '{}'})"
    if isinstance(part, ToolResultPart):
        status = "error" if part.is_error else "result"
        return f"({status} of tool {part.name}: {_output_text(part)})"
    if isinstance(part, SourcePart):
        return f"(source: {part.title or ''} {part.url})"
    if isinstance(part, FilePart):
        return f"(attached file {part.name or ''} of type {part.media_type})"
    return ""


def _output_text(part: ToolResultPart) -> str:
    if part.media_type is not None:
        return f"[{part.media_type} data]"
    if isinstance(part.output, str):
        return part.output
    return json.dumps(part.output)


def handoff_text(
    *,
    question: str,
    system_prompt: str | None,
    messages: Sequence[Message],
    step_text: str,
    budget_chars: int,
) -> str:
    """The advisor's one user message: the parent's instructions, the conversation (newest
    kept), the current step's text and the question, in about `budget_chars` characters.

    The question is always whole (its length is bounded by the tool's arguments); the rest
    shares what remains of the budget.
    """
    tail = _section("question", question)
    room = max(budget_chars - len(tail), 0)
    step = _section("current_step", _tail(step_text, room // _STEP_SHARE)) if step_text else ""
    system = (
        _section("instructions", _head(system_prompt, room // _SYSTEM_SHARE))
        if system_prompt
        else ""
    )
    room -= len(step) + len(system)
    conversation = _section("conversation", _newest(messages, room - _SECTION_OVERHEAD))
    return "".join(s for s in (system, conversation, step, tail) if s).rstrip("\n")


_SECTION_OVERHEAD = len("<conversation>\n\n</conversation>\n")


def _section(tag: str, body: str) -> str:
    return f"<{tag}>\n{body}\n</{tag}>\n"


def _newest(messages: Sequence[Message], room: int) -> str:
    """The newest rendered messages within `room` characters, oldest first; the oldest one
    kept is cut from its start if it alone would not fit, and what was left out is noted."""
    room -= len(_OMITTED_NOTE.format(count=len(messages))) + 2  # the note's place, if needed
    kept: list[str] = []
    used = 0
    for message in reversed(messages):
        block = render_message(message)
        fits = room - used - 2
        if len(block) > fits:
            if fits >= _SHRED:
                kept.append(_tail(block, fits))
            break
        kept.append(block)
        used += len(block) + 2
    omitted = len(messages) - len(kept)
    if omitted:
        kept.append(_OMITTED_NOTE.format(count=omitted))
    return "\n\n".join(reversed(kept))


_SHRED = 200
"""A message cut to fewer characters than this is left out: a shred of it helps no one."""
_OMITTED_NOTE = "[{count} earlier message(s) left out to fit the advisor's budget]"


def _head(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - 12, 0)] + " [cut here]"


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return "[cut here] " + text[len(text) - max(limit - 11, 0) :]
