"""The built-in demo model: a tiny scripted assistant used when no API key is set."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from chatd.fake_provider.answer_formats import example_for, requested_schema
from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText, FakeToolCall, FakeUsage

__all__ = [
    "CURRENT_TIME_TOOL",
    "DEMO_MODEL",
    "TITLE_REQUEST",
    "DemoTurn",
    "demo_responder",
    "demo_title",
    "latest_turn",
]

DEMO_MODEL = "demo"
CURRENT_TIME_TOOL = "current_time"
_WORKER_TOOLS = frozenset(
    {CURRENT_TIME_TOOL, "read_file", "write_file", "edit_file", "list_files", "execute", "advisor"}
)
"""The built-in tools the workers run (the subagent tools end in `_agent`)."""
_TOOL_WORDS = re.compile(r"\b(time|clock|date|tools?)\b", re.IGNORECASE)
_DELTA_DELAY_S = 0.015
TITLE_REQUEST = "Write a short title"
"""How chatd's title activity begins its instructions (`activities.compaction`)."""
_TITLE_WORDS = 6


@dataclass(frozen=True)
class DemoTurn:
    """What the demo model looks at: the last user text and a trailing tool result."""

    user_text: str
    tool_result: str | None
    tool_names: tuple[str, ...]


def demo_responder(request: FakeRequest) -> FakeResponse:
    """Answer a request as the demo model (any of the three wire formats)."""
    turn = latest_turn(request)
    if _system_text(request).startswith(TITLE_REQUEST):
        return _reply(demo_title(turn.user_text), request)
    offered = _client_tool(request, turn.user_text) if turn.tool_result is None else None
    schema = requested_schema(request.api, request.body)
    if schema is not None and offered is None:
        return _reply(json.dumps(example_for(schema)), request)  # structured output
    if turn.tool_result is not None:
        text = f"[demo model] The tool says: {turn.tool_result}"
        return _reply(text, request)
    if offered is not None:
        name, schema = offered
        call = FakeToolCall(name=name, arguments=_arguments(schema, turn.user_text))
        return FakeResponse(parts=[call], usage=_usage(request), delta_delay_s=_DELTA_DELAY_S)
    if _TOOL_WORDS.search(turn.user_text):
        if CURRENT_TIME_TOOL in turn.tool_names:
            call = FakeToolCall(name=CURRENT_TIME_TOOL, arguments={})
            return FakeResponse(parts=[call], usage=_usage(request), delta_delay_s=_DELTA_DELAY_S)
        text = f"[demo model] I would call the {CURRENT_TIME_TOOL} tool, but it is not available."
        return _reply(text, request)
    said = turn.user_text.strip() or "(nothing)"
    text = (
        f"[demo model] Hello! You said: \u201c{said}\u201d. I am the built-in demo model; "
        "set an API key to talk to a real one. Ask me for the time to see a tool call."
    )
    return _reply(text, request)


def _client_tool(request: FakeRequest, said: str) -> tuple[str, dict[str, Any]] | None:
    """The first tool offered that the client runs (not a built-in, MCP or subagent tool)
    and the user's message names (a word of four letters or more of its name: "weather"
    for `get_weather`): the demo calls it, so a client sees its function-call round trip."""
    words = set(re.findall(r"[a-z]{4,}", said.lower()))
    for tool in request.body.get("tools") or []:
        if request.api == "openai_chat":
            tool = tool.get("function") or {}
        name = tool.get("name")
        schema = tool.get("input_schema") or tool.get("parameters") or {}
        if (
            isinstance(name, str)
            and name not in _WORKER_TOOLS
            and not name.endswith(("_agent", "_agents"))
            and "__" not in name  # an MCP server's tool
            and "type" in schema
            and words & set(re.findall(r"[a-z]{4,}", name.lower()))
        ):
            return name, schema
    return None


def _arguments(schema: dict[str, Any], said: str) -> dict[str, Any]:
    """Arguments for the demo's call: the user's words for each required string field."""
    properties = schema.get("properties") or {}
    return {
        name: said
        for name in schema.get("required") or []
        if (properties.get(name) or {}).get("type") == "string"
    }


def demo_title(message: str) -> str:
    """A chat's first words as its title (a scripted answer would name every demo chat
    "[demo model] Hello! ...")."""
    words = message.split()[:_TITLE_WORDS]
    if not words:
        return "New chat"
    title = " ".join(words).rstrip(".,;:!?")
    return title[:1].upper() + title[1:]


def _system_text(request: FakeRequest) -> str:
    """The request's instructions, in any of the three wire formats."""
    body = request.body
    if request.api == "anthropic":
        return _text_of(body.get("system"))
    if request.api == "openai_chat":
        messages: list[dict[str, Any]] = body.get("messages") or []
        system = [m for m in messages if m.get("role") in ("system", "developer")]
        return _text_of(system[0].get("content")) if system else ""
    return _text_of(body.get("instructions"))


def _reply(text: str, request: FakeRequest) -> FakeResponse:
    part = FakeText(text=text, chunk_size=12)
    return FakeResponse(parts=[part], usage=_usage(request), delta_delay_s=_DELTA_DELAY_S)


def _usage(request: FakeRequest) -> FakeUsage:
    return FakeUsage(input_tokens=max(1, len(json.dumps(request.body)) // 4))


def latest_turn(request: FakeRequest) -> DemoTurn:
    """Extract the demo's view of the transcript from any of the three request formats."""
    body = request.body
    if request.api == "anthropic":
        return _anthropic_turn(body)
    if request.api == "openai_chat":
        return _chat_turn(body)
    return _responses_turn(body)


def _text_of(content: Any) -> str:
    """Text of a string or a list of text-ish blocks (`text`, `input_text`, `output_text`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b.get("text", "") for b in content if isinstance(b, dict)]
        return "".join(t for t in texts if isinstance(t, str))
    return "" if content is None else json.dumps(content)


def _anthropic_turn(body: dict[str, Any]) -> DemoTurn:
    messages: list[dict[str, Any]] = body.get("messages") or []
    tools = tuple(str(t.get("name")) for t in body.get("tools") or [])
    last = messages[-1] if messages else {}
    content = last.get("content")
    results = (
        [b for b in content if b.get("type") == "tool_result"] if isinstance(content, list) else []
    )
    user_texts = [
        _text_of([b for b in m["content"] if b.get("type") == "text"])
        if isinstance(m.get("content"), list)
        else _text_of(m.get("content"))
        for m in messages
        if m.get("role") == "user"
    ]
    result = _text_of(results[-1].get("content")) if results else None
    return DemoTurn(_last_nonempty(user_texts), result, tools)


def _chat_turn(body: dict[str, Any]) -> DemoTurn:
    messages: list[dict[str, Any]] = body.get("messages") or []
    tools = tuple(str((t.get("function") or {}).get("name")) for t in body.get("tools") or [])
    last = messages[-1] if messages else {}
    result = _text_of(last.get("content")) if last.get("role") == "tool" else None
    user_texts = [_text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    return DemoTurn(_last_nonempty(user_texts), result, tools)


def _responses_turn(body: dict[str, Any]) -> DemoTurn:
    items = body.get("input")
    tools = tuple(str(t.get("name")) for t in body.get("tools") or [])
    if isinstance(items, str):
        return DemoTurn(items, None, tools)
    items = items or []
    last = items[-1] if items else {}
    result = _text_of(last.get("output")) if last.get("type") == "function_call_output" else None
    user_texts = [_text_of(i.get("content")) for i in items if i.get("role") == "user"]
    return DemoTurn(_last_nonempty(user_texts), result, tools)


def _last_nonempty(texts: list[str]) -> str:
    return next((t for t in reversed(texts) if t.strip()), "")
