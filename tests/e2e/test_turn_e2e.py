"""A chat turn end to end: gateway -> Temporal -> worker -> real SDK -> fake provider -> SSE."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from harness import Stack

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall, FakeUsage

MODES: list[dict[str, Any]] = [
    {"provider": "anthropic"},
    {"provider": "openai", "openai_api": "chat"},
    {"provider": "openai", "openai_api": "responses"},
]


def _model(**config: Any) -> dict[str, Any]:
    return {"name": f"m-{uuid.uuid4().hex[:10]}", **config}


def _texts(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(m.values()))
async def test_a_text_turn_streams_deltas_and_persists_the_answer(
    stack: Stack, mode: dict[str, Any]
) -> None:
    model = _model(**mode)
    answer = "Durable turns survive anything short of losing the cluster."
    stack.fake.script(
        model["name"],
        [
            FakeResponse(
                parts=[FakeText(text=answer, chunk_size=6)],
                usage=FakeUsage(input_tokens=42, output_tokens=12),
            )
        ],
    )
    chat = await stack.create_chat(model=model)
    sent = await stack.send(chat["id"], "Why Temporal?")
    assert sent["queued"] is False

    events = await stack.wait_status(chat["id"], "waiting")

    deltas = [e.data["part"]["text"] for e in events if e.event == "message_part"]
    assert len(deltas) > 1, "the answer must arrive as several deltas"
    assert "".join(deltas) == answer
    kinds = [e.event for e in events]
    assert kinds.index("message_part") < kinds.index("status", kinds.index("message_part"))
    ids = [e.id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)

    messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert _texts(messages[0]) == "Why Temporal?"
    assert _texts(messages[1]) == answer
    detail = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert detail["status"] == "waiting"
    assert detail["usage"]["input_tokens"] == 42
    assert detail["usage"]["output_tokens"] == 12


async def test_a_two_step_turn_runs_a_built_in_tool_and_answers(stack: Stack) -> None:
    model = _model(provider="anthropic")
    stack.fake.script(
        model["name"],
        [
            FakeResponse(parts=[FakeText(text="Let me check."), FakeToolCall(name="current_time")]),
            FakeResponse(parts=[FakeText(text="It is now.")]),
        ],
    )
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "What time is it?")
    events = await stack.wait_status(chat["id"], "waiting")

    messages = await stack.messages(chat["id"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    call = next(p for p in messages[1]["parts"] if p["type"] == "tool_call")
    result = messages[2]["parts"][0]
    assert result["tool_call_id"] == call["id"]
    assert result["is_error"] is False
    assert "utc" in result["output"]
    assert any(e.event == "message_part" and e.data["role"] == "tool" for e in events)
    second_request = stack.fake.requests(model["name"])[1].body
    sent_results = [
        block
        for message in second_request["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert [b["tool_use_id"] for b in sent_results] == [call["id"]]


async def test_a_message_sent_during_a_turn_is_queued_and_runs_next(stack: Stack) -> None:
    model = _model(provider="anthropic")
    stack.fake.script(
        model["name"],
        [
            FakeResponse(parts=[FakeText(text="first answer", chunk_size=2)], delta_delay_s=0.1),
            FakeResponse(parts=[FakeText(text="second answer")]),
        ],
    )
    chat = await stack.create_chat(model=model)
    first = await stack.send(chat["id"], "one")
    second = await stack.send(chat["id"], "two")
    assert (first["queued"], second["queued"]) == (False, True)
    queued = (await stack.http.get(f"/chats/{chat['id']}")).json()["queued_messages"]
    assert [q["id"] for q in queued] == [second["message_id"]]

    await stack.events_until(
        chat["id"],
        lambda e: e.event == "message" and _texts(e.data) == "second answer",
    )
    await stack.wait_status(chat["id"], "waiting", after=0)
    messages = await stack.messages(chat["id"])
    assert [(m["role"], _texts(m)) for m in messages] == [
        ("user", "one"),
        ("assistant", "first answer"),
        ("user", "two"),
        ("assistant", "second answer"),
    ]
    assert (await stack.http.get(f"/chats/{chat['id']}")).json()["queued_messages"] == []


async def test_responses_chain_mode_sends_only_the_new_message_with_the_previous_id(
    stack: Stack,
) -> None:
    model = _model(provider="openai", openai_api="responses", openai_chain=True)
    stack.fake.script(
        model["name"],
        [FakeResponse(parts=[FakeText(text="first")]), FakeResponse(parts=[FakeText(text="2nd")])],
    )
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "one")
    events = await stack.wait_status(chat["id"], "waiting")
    await stack.send(chat["id"], "two")
    await stack.wait_status(chat["id"], "waiting", after=events[-1].id or 0)
    first, second = (r.body for r in stack.fake.requests(model["name"]))
    assert first["store"] is True and "previous_response_id" not in first
    assert second["previous_response_id"].startswith("resp")
    assert second["input"] == [{"role": "user", "content": [{"type": "input_text", "text": "two"}]}]
