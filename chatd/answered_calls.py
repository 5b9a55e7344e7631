"""Every tool call the model sees has its result.

A turn that fails between a step that called tools and the results of those calls (their
recording gave up, the turn's deadline passed) ends with calls the transcript never
answers. Providers refuse such a history (Anthropic: "`tool_use` ids were found without
`tool_result` blocks"), so every later turn of the chat would fail the same way. The model is
shown an error result for each such call instead; the transcript keeps what happened.
"""

from __future__ import annotations

from collections.abc import Sequence

from chatd.parts import Message, ToolCallPart, ToolResultPart, error_result

__all__ = ["UNANSWERED_RESULT", "every_call_answered", "unanswered_calls"]

UNANSWERED_RESULT = "the turn ended before this tool call produced a result"


def every_call_answered(messages: Sequence[Message]) -> list[Message]:
    """`messages`, with a tool message of error results after each assistant step whose
    calls the tool messages right after it leave unanswered."""
    out: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        out.append(message)
        index += 1
        if message.role != "assistant":
            continue
        results: list[Message] = []
        while index < len(messages) and messages[index].role == "tool":
            results.append(messages[index])
            index += 1
        out += results
        missing = [error_result(c, UNANSWERED_RESULT) for c in unanswered_calls(message, results)]
        if missing:
            out.append(Message(role="tool", parts=list(missing)))
    return out


def unanswered_calls(step: Message, after: Sequence[Message]) -> list[ToolCallPart]:
    """The tool calls of `step` (none unless it is the model's) that no tool message in
    `after` answers; provider-run calls carry their results in the step itself."""
    if step.role != "assistant":
        return []
    answered = {
        p.tool_call_id
        for m in after
        if m.role == "tool"
        for p in m.parts
        if isinstance(p, ToolResultPart)
    }
    return [
        p
        for p in step.parts
        if isinstance(p, ToolCallPart) and not p.provider_executed and p.id not in answered
    ]
