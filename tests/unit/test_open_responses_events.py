"""A response's stream is a pure function of its chat's events: the same events give the
same numbered stream, and an attempt abandoned by a crash is closed, not continued."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from api.open_responses.client_tools import ClientTool
from api.open_responses.events import ResponseEvents
from chatd.store.events import ChatEvent

_AT = datetime(2026, 1, 1, tzinfo=UTC)
_RESOURCE: dict[str, Any] = {"status": "in_progress"}


def _events(*pairs: tuple[str, dict[str, Any]]) -> list[ChatEvent]:
    return [
        ChatEvent(seq=i + 1, event=kind, data=data, created_at=_AT)
        for i, (kind, data) in enumerate(pairs)
    ]


def _delta(text: str) -> tuple[str, dict[str, Any]]:
    return (
        "message_part",
        {"role": "assistant", "part": {"index": 0, "type": "text", "text": text}},
    )


_STEP = ("message", {"id": 7, "turn_id": "t1", "role": "assistant",
                     "parts": [{"type": "text", "text": "Hello world"}], "compressed": False,
                     "created_at": "2026-01-01T00:00:00Z"})  # fmt: skip
_CRASHED = _events(
    ("status", {"status": "running", "turn_id": "t1"}),
    _delta("Hel"),
    ("reset", {"turn_id": "t1", "step": 0}),
    _delta("Hello "),
    _delta("world"),
    _STEP,
    ("status", {"status": "waiting", "turn_id": "t1"}),
)


def _translate(events: list[ChatEvent], *, extensions: bool = False) -> list[dict[str, Any]]:
    translator = ResponseEvents("resp_abc", "t1", set(), set(), extensions=extensions)
    out = translator.opening(_RESOURCE)
    for event in events:
        out += translator.feed(event, _RESOURCE)
    assert translator.ended
    return out + translator.closing({"status": "completed"})


def test_the_same_events_give_the_same_stream() -> None:
    first, again = _translate(_CRASHED), _translate(_CRASHED)
    assert first == again
    assert [e["sequence_number"] for e in first] == list(range(len(first)))


def test_an_abandoned_attempt_is_closed_incomplete_and_the_retry_is_a_new_item() -> None:
    events = _translate(_CRASHED)
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [(i["id"], i["status"]) for i in done] == [
        ("msg_abc_0", "incomplete"),
        ("msg_abc_1", "completed"),
    ]
    assert done[1]["content"][0]["text"] == "Hello world"
    assert "chatd:reset" not in {e["type"] for e in events}, "only for clients that ask"
    flagged = _translate(_CRASHED, extensions=True)
    (reset,) = [e for e in flagged if e["type"] == "chatd:reset"]
    assert reset["item_ids"] == ["msg_abc_0"]


def test_a_step_persisted_without_deltas_still_streams_its_text() -> None:
    events = _translate(_events(("status", {"status": "running", "turn_id": "t1"}), _STEP,
                                ("status", {"status": "waiting", "turn_id": "t1"})))  # fmt: skip
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert deltas == ["Hello world"]
    assert events[-1]["type"] == "response.completed"


def test_events_of_another_turn_are_not_this_responses() -> None:
    other = _events(
        ("status", {"status": "running", "turn_id": "t0"}),
        ("status", {"status": "waiting", "turn_id": "t0"}),
    )
    translator = ResponseEvents("resp_abc", "t1", set(), set())
    for event in other:
        assert translator.feed(event, _RESOURCE) == []
    assert not translator.ended


def _call_delta(call_id: str, args: str) -> tuple[str, dict[str, Any]]:
    part = {"index": 0, "type": "tool_call", "id": call_id, "name": "run", "args_delta": args}
    return ("message_part", {"role": "assistant", "part": part})


def test_a_clients_call_shows_only_once_its_step_is_saved() -> None:
    """A worker dies while the model writes a call of the client's tool; the retried step
    calls it with other arguments. The client sees one call, the saved one: a client that
    runs a call once its item is done (Codex) never runs the abandoned one."""
    saved = {"type": "tool_call", "id": "call_2", "name": "run", "arguments": '{"cmd": "ls"}'}
    events = _events(
        ("status", {"status": "running", "turn_id": "t1"}),
        _call_delta("call_1", '{"cmd": "rm'),
        ("reset", {"turn_id": "t1", "step": 0}),
        _call_delta("call_2", '{"cmd": "ls"}'),
        ("message", {**_STEP[1], "parts": [saved]}),
        ("status", {"status": "requires_action", "turn_id": "t1"}),
    )
    translator = ResponseEvents(
        "resp_abc", "t1", {"run": ClientTool(kind="function", name="run")}, set()
    )
    out = translator.opening(_RESOURCE)
    for event in events:
        out += translator.feed(event, _RESOURCE)
    added = [e["item"] for e in out if e["type"] == "response.output_item.added"]
    done = [e["item"] for e in out if e["type"] == "response.output_item.done"]
    assert [(i["type"], i["call_id"]) for i in added] == [("function_call", "call_2")]
    assert [(i["call_id"], i["arguments"], i["status"]) for i in done] == [
        ("call_2", '{"cmd": "ls"}', "completed")
    ]
    deltas = [e["delta"] for e in out if e["type"] == "response.function_call_arguments.delta"]
    assert deltas == ['{"cmd": "ls"}'], "its arguments in one delta, once saved"
