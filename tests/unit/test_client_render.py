"""The terminal client's rendering of stream events, transcripts and chat lists."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from chatd.client.http import ChatView, MessageView
from chatd.client.render import (
    Renderer,
    Style,
    chats_table,
    compact_args,
    message_lines,
    retry_line,
    tool_result_line,
    use_color,
)
from chatd.sse import Event, parse_sse

ANSI = "\x1b["


def _part(part: dict[str, Any], role: str = "assistant") -> Event:
    return Event(id=None, event="message_part", data={"role": role, "part": part})


def _text(text: str, index: int = 0, kind: str = "text") -> Event:
    return _part({"index": index, "type": kind, "text": text})


def _status(status: str) -> Event:
    return Event(id=None, event="status", data={"status": status, "turn_id": "t"})


def _render(events: list[Event], color: bool = False) -> str:
    out = io.StringIO()
    renderer = Renderer(out, Style(color))
    for event in events:
        renderer.handle(event)
    return out.getvalue()


RETRY = Event(
    id=None,
    event="retry",
    data={"attempt": 2, "delay_ms": 4000, "retrying_at": "x", "error": {"kind": "overloaded"}},
)
ERROR = Event(id=None, event="error", data={"kind": "rate_limit", "message": "Rate limit exceeded"})
CALL = [
    _part({"index": 1, "type": "tool_call", "id": "c1", "name": "read_file"}),
    _part({"index": 1, "type": "tool_call", "args_delta": '{"path":'}),
    _part({"index": 1, "type": "tool_call", "args_delta": ' "a.txt"}'}),
]
RESULT = _part(
    {"type": "tool_result", "tool_call_id": "c1", "name": "read_file", "output": "one\ntwo\n3"},
    role="tool",
)
EVERY_KIND = [
    _text("hmm", kind="reasoning"),
    _text("Hello"),
    *CALL,
    RESULT,
    RETRY,
    Event(id=None, event="reset", data={}),
    ERROR,
    _status("error"),
]


def test_text_streams_as_it_arrives_and_the_turn_ends_the_line() -> None:
    assert _render([_status("running"), _text("Hel"), _text("lo!"), _status("waiting")]) == (
        "Hello!\n"
    )


def test_reasoning_is_dimmed_on_its_own_line_then_text_follows() -> None:
    plain = _render([_text("think", kind="reasoning"), _text("answer"), _status("waiting")])
    assert plain == "think\nanswer\n"
    colored = _render([_text("think", kind="reasoning"), _text("answer")], color=True)
    assert colored == "\x1b[2mthink\x1b[0m\nanswer"


def test_a_tool_call_is_shown_once_its_arguments_are_complete() -> None:
    out = _render([_text("Reading."), *CALL, Event(None, "message", {"role": "assistant"})])
    assert out == 'Reading.\n→ read_file({"path": "a.txt"})\n'


def test_tool_results_show_their_first_line_and_line_count() -> None:
    assert _render([RESULT]) == "← read_file: one… (3 lines)\n"
    failed = {"type": "tool_result", "name": "x", "output": "boom", "is_error": True}
    assert _render([_part(failed, role="tool")]) == "← x: error: boom\n"
    assert _render([_part(failed, role="tool")], color=True) == "\x1b[31m← x: error: boom\x1b[0m\n"


def test_a_provider_executed_result_and_a_source_arrive_as_whole_parts() -> None:
    search = {"type": "tool_result", "name": "web_search", "output": [{"url": "u"}]}
    source = {"type": "source", "url": "https://e.org", "title": "E"}
    out = _render(
        [
            _part({"index": 0, "type": "tool_result", "part": search}),
            _part({"index": 1, "type": "source", "part": source}),
        ]
    )
    assert out == '← web_search: [{"url": "u"}]\n[source] E <https://e.org>\n'


def test_retry_and_error_lines() -> None:
    assert _render([RETRY]) == "↻ retrying in 4 s: overloaded (attempt 2)\n"
    assert retry_line({"delay_ms": 1500, "error": {"kind": "rate_limit"}}) == (
        "↻ retrying in 1.5 s: rate_limit"
    )
    assert _render([_text("partial"), ERROR]) == (
        "partial\n✗ error (rate_limit): Rate limit exceeded\n"
    )


def test_reset_voids_the_partial_step_with_a_note_and_starts_anew() -> None:
    reset = Event(id=None, event="reset", data={"turn_id": "t", "step": 0})
    out = _render([_text("Hal"), *CALL[:2], RETRY, reset, _text("Hello")])
    assert out == (
        "Hal\n↻ retrying in 4 s: overloaded (attempt 2)\n"
        "(the partial answer above is void; the step starts again)\nHello"
    )
    assert _render([RETRY, reset, _text("Hi")]) == (
        "↻ retrying in 4 s: overloaded (attempt 2)\nHi"
    ), "nothing was shown, so nothing to void"


def test_no_ansi_when_colour_is_off_and_some_when_on() -> None:
    assert ANSI not in _render(EVERY_KIND)
    colored = _render(EVERY_KIND, color=True)
    assert all(code in colored for code in ("\x1b[2m", "\x1b[31m", "\x1b[33m", "\x1b[36m"))


def test_colour_needs_a_terminal_and_no_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert use_color(Tty()) and not use_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(Tty())


def test_compact_arguments_and_results() -> None:
    assert compact_args('{"a":1,\n "b":[1,2]}') == '{"a": 1, "b": [1, 2]}'
    assert compact_args("") == "" and compact_args("not json") == "not json"
    assert compact_args({"text": "x" * 100}).endswith("x…")
    assert len(compact_args({"text": "x" * 100})) == 60
    assert tool_result_line("t", {"ok": True}) == '← t: {"ok": true}'
    assert tool_result_line("t", "") == "← t: (empty)"


def test_history_messages_are_compact() -> None:
    user = MessageView(id=1, turn_id="t", role="user", parts=[{"type": "text", "text": "hi\nyou"}])
    assistant = MessageView(
        id=2,
        turn_id="t",
        role="assistant",
        parts=[
            {"type": "reasoning", "text": "secret"},
            {"type": "text", "text": "a\nb\nc\nd\ne"},
            {"type": "tool_call", "id": "c", "name": "ask", "arguments": '{"q": 1}'},
        ],
    )
    style = Style()
    assert message_lines(user, style) == ["you> hi you"]
    assert message_lines(assistant, style) == ["a", "b", "c", "… (2 more lines)", '→ ask({"q": 1})']


def test_chats_table_is_aligned() -> None:
    when = datetime(2025, 1, 2, 3, 4, tzinfo=UTC)
    chats = [
        ChatView(
            id="c1",
            title="a title",
            model={"provider": "demo", "name": "demo"},
            status="waiting",
            updated_at=when,
        ),
        ChatView(
            id="chat-2",
            model={"provider": "anthropic", "name": "m"},
            status="requires_action",
            updated_at=when,
        ),
    ]
    header, first, second = chats_table(chats).splitlines()
    assert header.index("STATUS") == first.index("waiting") == second.index("requires_action")
    assert header.index("MODEL") == first.index("demo/demo") == second.index("anthropic/m")
    assert second.split()[2] == "-"
    assert chats_table([]) == "no chats yet"


async def test_sse_frames_are_parsed_and_comments_skipped() -> None:
    async def lines() -> AsyncIterator[str]:
        for line in [
            "retry: 2000",
            "",
            ": ping",
            "id: 7",
            "event: status",
            'data: {"status":',
            'data: "waiting"}',
            "",
        ]:
            yield line

    events = [e async for e in parse_sse(lines())]
    assert events == [Event(id=7, event="status", data={"status": "waiting"})]
