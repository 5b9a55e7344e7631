"""Chats on Google's Gemini through the whole stack, the worker driving the real
`google-genai` SDK against the fake provider's Gemini wire: thinking, parallel tool calls,
a 429 retried after Google's delay, fallback to and from Anthropic, `/v1`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from harness import SseEvent, Stack, StackFactory
from openai import AsyncOpenAI
from support.names import model_name

from api.open_responses.model_catalog import PROVIDER_MODELS
from chatd.fake_provider.script import (
    FakeError,
    FakeReasoning,
    FakeRequest,
    FakeResponse,
    FakeSearchResult,
    FakeText,
    FakeToolCall,
    FakeWebSearch,
)

CALL_TWICE = FakeResponse(
    parts=[
        FakeReasoning(text="Two clocks to read."),
        FakeToolCall(name="current_time", id="call_gem_a"),
        FakeToolCall(name="current_time", id=""),  # Gemini 2.5 gives some calls no id
    ]
)


def _gemini(stack: Stack, *responses: FakeResponse) -> str:
    """A Gemini model answering by step: a request holding N model turns gets
    `responses[N]`, so a retried attempt gets the same answer."""

    def respond(request: FakeRequest) -> FakeResponse:
        turns = sum(1 for c in request.body.get("contents", []) if c.get("role") == "model")
        return responses[min(turns, len(responses) - 1)]

    name = f"gemini-{model_name()}"
    stack.fake.script(name, respond)
    return name


async def _answered(stack: Stack, chat_id: str, text: str) -> list[SseEvent]:
    await stack.send(chat_id, text)
    events = await stack.events_until(
        chat_id, lambda e: e.event == "status" and e.data["status"] in ("waiting", "error")
    )
    view = (await stack.http.get(f"/chats/{chat_id}")).json()
    assert (view["status"], view["last_error"]) == ("waiting", None)
    return events


async def test_a_gemini_chat_thinks_calls_tools_in_parallel_and_answers(stack: Stack) -> None:
    name = _gemini(stack, CALL_TWICE, FakeResponse.of_text("Both clocks say noon."))
    chat = await stack.create_chat(
        model={"provider": "google", "name": name, "reasoning_effort": "low"}
    )
    events = await _answered(stack, chat["id"], "what time is it, twice?")

    assert any(e.event == "message_part" and e.data["part"]["type"] == "reasoning" for e in events)
    assistant, tools, answer = (await stack.messages(chat["id"]))[1:]
    calls = [p for p in assistant["parts"] if p["type"] == "tool_call"]
    assert len(calls) == 2 and calls[0]["id"] == "call_gem_a"
    results = [p["tool_call_id"] for p in tools["parts"] if p["type"] == "tool_result"]
    assert results == [c["id"] for c in calls], "results in call order"
    assert [p["text"] for p in answer["parts"] if p["type"] == "text"] == ["Both clocks say noon."]

    second = stack.fake.requests(name)[-1].body
    model_turn, answers = second["contents"][1:]
    assert "thoughtSignature" in model_turn["parts"][0], "the first call's signature goes back"
    sent = [p["functionResponse"] for p in answers["parts"]]
    assert [(r["name"], r.get("id")) for r in sent] == [
        ("current_time", "call_gem_a"),
        ("current_time", None),
    ]


async def test_a_rate_limited_gemini_step_is_retried_after_google_s_delay(stack: Stack) -> None:
    name = f"gemini-{model_name()}"
    limited = FakeResponse.of_error(FakeError.rate_limited(retry_after_s=1))
    stack.fake.script(name, [limited, FakeResponse.of_text("after the wait")])
    chat = await stack.create_chat(model={"provider": "google", "name": name})
    events = await _answered(stack, chat["id"], "hello")

    (retry,) = [e.data for e in events if e.event == "retry"]
    assert (retry["error"]["kind"], retry["error"]["retry_after_ms"]) == ("rate_limit", 1000)
    assert retry["error"]["provider"] == "google"
    assert len(stack.fake.requests(name)) == 2


async def test_a_turn_falls_back_from_anthropic_to_gemini(stack: Stack) -> None:
    claude, overloaded = model_name(), FakeResponse(error=FakeError.overloaded())
    think_and_call = FakeResponse(
        parts=[
            FakeReasoning(text="the user wants the time"),
            FakeToolCall(name="current_time", id="toolu_time_1"),
        ]
    )
    stack.fake.script(claude, [think_and_call, overloaded, overloaded, overloaded])
    gemini = _gemini(stack, FakeResponse.of_text("it is noon"))
    chat = await stack.create_chat(
        model={"provider": "anthropic", "name": claude, "thinking_budget_tokens": 2048},
        fallback_models=[{"provider": "google", "name": gemini}],
    )
    await _answered(stack, chat["id"], "what time is it?")

    (request,) = stack.fake.requests(gemini)  # accepted: the fake validates the answers
    model_turn, answers = request.body["contents"][1:]
    assert model_turn["parts"] == [{"functionCall": {"name": "current_time", "args": {}}}], (
        "Claude's thinking and its call id stay behind"
    )
    assert [p["functionResponse"]["name"] for p in answers["parts"]] == ["current_time"]


async def test_a_turn_falls_back_from_gemini_to_anthropic(stack: Stack) -> None:
    limited = FakeResponse.of_error(FakeError.rate_limited())
    gemini = f"gemini-{model_name()}"
    stack.fake.script(gemini, [CALL_TWICE, limited, limited, limited])
    claude = model_name()
    stack.fake.script(claude, [FakeResponse.of_text("it is noon")])
    chat = await stack.create_chat(
        model={"provider": "google", "name": gemini, "reasoning_effort": "low"},
        fallback_models=[{"provider": "anthropic", "name": claude}],
    )
    await _answered(stack, chat["id"], "what time is it?")

    (request,) = stack.fake.requests(claude)
    assistant, results = request.body["messages"][1:]
    assert [b["type"] for b in assistant["content"]] == ["tool_use", "tool_use"]
    assert "thinking" not in json.dumps(assistant), "Gemini's signatures stay behind"
    ids = [b["id"] for b in assistant["content"]]
    assert [b["tool_use_id"] for b in results["content"]] == ids


async def test_v1_serves_google_models(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "a-key-of-the-gateway")
    found = [FakeSearchResult(url="https://clock.example/paris", title="Paris time")]
    searched = FakeResponse(
        parts=[FakeText(text="Noon in Paris."), FakeWebSearch(query="paris time", results=found)]
    )
    async with make_stack() as stack:
        name = _gemini(stack, FakeResponse(parts=[FakeText(text="Hi from Gemini.")]))
        searcher = _gemini(stack, searched)
        root = stack.base_url.removesuffix("/api/v1")
        async with AsyncOpenAI(base_url=f"{root}/v1", api_key=stack.key, max_retries=0) as sdk:
            listed = {model.id async for model in sdk.models.list()}
            assert {f"google/{n}" for n in PROVIDER_MODELS["google"]} <= listed
            events: list[Any] = []
            async with sdk.responses.stream(model=f"google/{name}", input="hello") as stream:
                events = [event async for event in stream]
                final = await stream.get_final_response()
            search = await sdk.responses.create(
                model=f"google/{searcher}", input="time in Paris?", tools=[{"type": "web_search"}]
            )
    assert final.status == "completed" and final.output_text == "Hi from Gemini."
    assert final.model == f"google/{name}"
    assert any(e.type == "response.output_text.delta" for e in events)

    assert search.output_text == "Noon in Paris."
    (call,) = [item.to_dict() for item in search.output if item.type == "web_search_call"]
    assert call["status"] == "completed"
    assert call["action"]["query"] == "paris time"
    assert call["action"]["sources"] == [{"type": "url", "url": "https://clock.example/paris"}]
    assert stack.fake.requests(searcher)[0].body["tools"] == [{"googleSearch": {}}]


async def test_an_answer_google_withholds_ends_the_turn_with_an_error_to_read(
    stack: Stack,
) -> None:
    withheld = FakeResponse(
        parts=[FakeText(text="Here is the full text of")], stop_reason="RECITATION"
    )
    name = _gemini(stack, withheld)
    chat = await stack.create_chat(model={"provider": "google", "name": name})
    await stack.send(chat["id"], "print the novel")
    await stack.wait_status(chat["id"], "error", within_s=60)

    error = (await stack.http.get(f"/chats/{chat['id']}")).json()["last_error"]
    assert (error["kind"], error["retryable"]) == ("content_filtered", False)
    assert "RECITATION" in error["message"]
    assert len(stack.fake.requests(name)) == 1, "a withheld answer is not asked for again"
