"""Model fallback through the gateway: a chat whose model stays down mid-turn, after a tool
call, finishes the turn on its fallback model of another provider, whose API (the fake
provider's validation of it) accepts the crossed transcript."""

from __future__ import annotations

import json
from typing import Any

import pytest
from harness import SseEvent, Stack
from support.names import model_name

from chatd.fake_provider.script import (
    FakeError,
    FakeReasoning,
    FakeResponse,
    FakeText,
    FakeToolCall,
)

THINK_AND_CALL = FakeResponse(
    parts=[
        FakeReasoning(text="the user wants the time"),
        FakeText(text="let me check"),
        FakeToolCall(name="current_time", id="call_time_1"),
    ]
)
"""The first step: reasoning (the provider's own, signed or encrypted), then a tool call."""


async def _turn(stack: Stack, model: dict[str, Any], fallback: dict[str, Any]) -> list[SseEvent]:
    chat = await stack.create_chat(model=model, fallback_models=[fallback])
    await stack.send(chat["id"], "what time is it?")
    events = await stack.events_until(
        chat["id"], lambda e: e.event == "status" and e.data["status"] in ("waiting", "error")
    )
    view = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert (view["status"], view["last_error"]) == ("waiting", None)
    messages = await stack.messages(chat["id"])
    assert [p["text"] for p in messages[-1]["parts"]] == ["it is noon"]
    return events


def _retries(events: list[SseEvent]) -> list[tuple[int, str, str | None]]:
    retries = [e.data for e in events if e.event == "retry"]
    return [(r["attempt"], r["error"]["kind"], r.get("model")) for r in retries]


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_an_overloaded_anthropic_model_hands_the_turn_to_openai(
    stack: Stack, api: str
) -> None:
    claude, gpt = model_name(), model_name()
    overloaded = FakeResponse(error=FakeError.overloaded())
    stack.fake.script(claude, [THINK_AND_CALL, overloaded, overloaded, overloaded])
    stack.fake.script(gpt, [FakeResponse.of_text("it is noon")])
    events = await _turn(
        stack,
        {"provider": "anthropic", "name": claude, "thinking_budget_tokens": 2048},
        {"provider": "openai", "name": gpt, "openai_api": api},
    )
    assert _retries(events) == [
        (1, "overloaded", None),
        (2, "overloaded", None),
        (3, "overloaded", f"openai/{gpt}"),
    ]
    assert len(stack.fake.requests(claude)) == 4
    (request,) = stack.fake.requests(gpt)  # accepted: a refused one would end the turn
    sent = json.dumps(request.body)
    assert "call_time_1" in sent and "current_time" in sent, "the call and its result"
    assert "signature" not in sent and "the user wants the time" not in sent, "no thinking"


async def test_a_rate_limited_openai_model_hands_the_turn_to_a_thinking_anthropic_model(
    stack: Stack,
) -> None:
    gpt, claude = model_name(), model_name()
    limited = FakeResponse(error=FakeError.rate_limited())
    stack.fake.script(gpt, [THINK_AND_CALL, limited, limited, limited])
    stack.fake.script(claude, [FakeResponse.of_text("it is noon")])
    events = await _turn(
        stack,
        {"provider": "openai", "name": gpt, "openai_api": "responses", "reasoning_effort": "low"},
        {"provider": "anthropic", "name": claude, "thinking_budget_tokens": 2048},
    )
    assert _retries(events)[-1] == (3, "rate_limit", f"anthropic/{claude}")
    first = stack.fake.requests(gpt)[0].body
    assert "reasoning.encrypted_content" in first.get("include", []), "OpenAI's own reasoning"
    (request,) = stack.fake.requests(claude)
    body = request.body
    assert "thinking" not in body, "its open tool loop has no thinking of its own to send back"
    assistant, results = body["messages"][1:]
    assert [b["type"] for b in assistant["content"]][-1] == "tool_use"
    assert "reasoning" not in json.dumps(assistant), "OpenAI's encrypted reasoning stays behind"
    assert results["content"][0]["tool_use_id"] == "call_time_1"
