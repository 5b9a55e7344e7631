"""Every tool call the model sees has its result.

A turn that fails between a step that called tools and the results of those calls (their
recording gave up, the turn's deadline passed) ends with calls the transcript never
answers. Providers refuse such a history (Anthropic: "`tool_use` ids were found without
`tool_result` blocks"), so every later turn of the chat would fail the same way. The model is
shown an error result for each such call instead; the transcript keeps what happened.
"""

from __future__ import annotations

from collections.abc import Sequence

from chatd.parts import Message, ToolCallPart, ToolResultPart

__all__ = ["UNANSWERED_RESULT", "every_call_answered"]

UNANSWERED_RESULT = "the turn ended before this tool call produced a result"


def every_call_answered(messages: Sequence[Message]) -> list[Message]:
    """`messages`, with a tool message of error results after each assistant step whose
    calls the tool messages right after it leave unanswered (provider-run calls carry their
    results in the step itself)."""
    out: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        out.append(message)
        index += 1
        if message.role != "assistant":
            continue
        calls = [
            p for p in message.parts if isinstance(p, ToolCallPart) and not p.provider_executed
        ]
        answered: set[str] = set()
        while index < len(messages) and messages[index].role == "tool":
            answered |= {
                p.tool_call_id for p in messages[index].parts if isinstance(p, ToolResultPart)
            }
            out.append(messages[index])
            index += 1
        missing = [
            ToolResultPart(tool_call_id=c.id, name=c.name, output=UNANSWERED_RESULT, is_error=True)
            for c in calls
            if c.id not in answered
        ]
        if missing:
            out.append(Message(role="tool", parts=list(missing)))
    return out
