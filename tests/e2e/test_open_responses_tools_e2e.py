"""Open Responses' tool controls at `/v1`, driven by the `openai` SDK: `tool_choice` and
`parallel_tool_calls` as each provider receives them, `truncation`, and provider web search
as `web_search_call` items (streamed and canonical alike)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from harness import Stack
from openai import AsyncOpenAI
from support.names import model_name

from chatd.fake_provider.script import (
    FakeError,
    FakeResponse,
    FakeSearchResult,
    FakeText,
    FakeToolCall,
    FakeUsage,
    FakeWebSearch,
)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
EMAIL = {
    "type": "function",
    "name": "send_email",
    "description": "Send an email",
    "parameters": {"type": "object", "properties": {"to": {"type": "string"}}},
}
TOO_LONG = FakeError(
    status=400,
    type="invalid_request_error",
    message="prompt is too long: 250000 tokens > 200000 maximum",
)


def _client(stack: Stack) -> AsyncOpenAI:
    root = stack.base_url.removesuffix("/api/v1")
    return AsyncOpenAI(base_url=f"{root}/v1", api_key=stack.key, max_retries=0)


def _scripted(stack: Stack, *responses: FakeResponse, provider: str = "anthropic") -> str:
    name = model_name()
    stack.fake.script(name, list(responses))
    return f"{provider}/{name}"


def _sent(stack: Stack, model: str) -> list[dict[str, Any]]:
    """The bodies the provider received for `model`, oldest first."""
    return [r.body for r in stack.fake.requests(model.split("/", 1)[1])]


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]


async def test_required_binds_the_responses_first_step_and_not_the_tool_loop_after_it(
    stack: Stack,
) -> None:
    """A worker-run tool loops within the response: only its first step is forced, or the
    model could be made to call tools until the step limit."""
    model = _scripted(
        stack,
        FakeResponse(parts=[FakeToolCall(name="current_time", arguments={})]),
        FakeResponse(parts=[FakeText(text="It is now.")]),
    )
    async with _client(stack) as client:
        response = await client.responses.create(
            model=model,
            input="time?",
            tool_choice="required",
            extra_body={"chatd:tools": ["current_time"]},
        )
    assert response.status == "completed" and response.output_text == "It is now."
    assert response.tool_choice == "required"
    first, second = _sent(stack, model)
    assert first["tool_choice"] == {"type": "any"}
    assert "tool_choice" not in second, "the step after the worker's tool is the model's call"


async def test_a_named_function_one_call_at_a_time_binds_each_response_that_answers_it(
    stack: Stack,
) -> None:
    model = _scripted(
        stack,
        FakeResponse(parts=[FakeToolCall(name="get_weather", arguments={"city": "Oslo"})]),
        FakeResponse(parts=[FakeText(text="Sunny in Oslo.")]),
    )
    choice = {"type": "function", "name": "get_weather"}
    async with _client(stack) as client:
        first = await client.responses.create(
            model=model,
            input="Weather?",
            tools=[WEATHER, EMAIL],  # type: ignore[list-item]
            tool_choice=choice,  # type: ignore[arg-type]
            parallel_tool_calls=False,
        )
        assert first.tool_choice.to_dict() == choice  # type: ignore[union-attr]
        assert first.parallel_tool_calls is False
        (call,) = [i for i in first.output if i.type == "function_call"]
        second = await client.responses.create(
            model=model,
            previous_response_id=first.id,
            tools=[WEATHER, EMAIL],  # type: ignore[list-item]
            tool_choice=choice,  # type: ignore[arg-type]
            parallel_tool_calls=False,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        )
    assert second.output_text == "Sunny in Oslo."
    for body in _sent(stack, model):
        assert _tool_names(body) == ["get_weather"], "only the named function is shown"
        assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


async def test_allowed_tools_and_none_reach_openai_in_its_words(stack: Stack) -> None:
    model = _scripted(stack, *[FakeResponse(parts=[FakeText(text="ok")])] * 2, provider="openai")
    allowed = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": "send_email"}],
    }
    async with _client(stack) as client:
        first = await client.responses.create(
            model=model,
            input="hi",
            tools=[WEATHER, EMAIL],
            tool_choice=allowed,  # type: ignore[arg-type,list-item]
        )
        await client.responses.create(
            model=model,
            input="and?",
            previous_response_id=first.id,
            tools=[WEATHER, EMAIL],  # type: ignore[list-item]
            tool_choice="none",
        )
    limited, barred = _sent(stack, model)
    assert _tool_names(limited) == ["send_email"] and "tool_choice" not in limited
    assert _tool_names(barred) == ["get_weather", "send_email"], "none still shows them"
    assert barred["tool_choice"] == "none"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "['nope']"),
        ({"tool_choice": "required"}, "needs tools"),
        ({"tools": [WEATHER], "tool_choice": {"type": "mcp", "server_label": "x"}}, "tool_choice"),
        ({"tools": [{"type": "web_search", "filters": {"excluded": ["x.com"]}}]}, "excluded"),
        ({"tools": [{"type": "file_search"}]}, "tools"),
    ],
    ids=[
        "unknown-function",
        "required-without-tools",
        "mcp-choice",
        "search-option",
        "file-search",
    ],
)
async def test_a_tool_control_we_cannot_honour_is_a_400_naming_it(
    stack: Stack, fields: dict[str, Any], says: str
) -> None:
    root = stack.base_url.removesuffix("/api/v1")
    body = {"model": "demo/demo", "input": "hi", **fields}
    async with httpx.AsyncClient(
        base_url=root, headers={"Authorization": f"Bearer {stack.key}"}
    ) as http:
        response = await http.post("/v1/responses", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and says in error["message"], error


async def test_truncation_disabled_fails_an_overflowing_response_and_auto_compacts_it(
    stack: Stack,
) -> None:
    strict = _scripted(stack, FakeResponse(error=TOO_LONG))
    lenient = _scripted(
        stack,
        FakeResponse(error=TOO_LONG),
        FakeResponse(parts=[FakeText(text="The user said hi.")]),
        FakeResponse(parts=[FakeText(text="Hello.")], usage=FakeUsage(input_tokens=10)),
    )
    async with _client(stack) as client:
        failed = await client.responses.create(model=strict, input="hi", truncation="disabled")
        kept = await client.responses.create(model=lenient, input="hi", truncation="auto")
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.code == "context_length_exceeded"
    assert len(_sent(stack, strict)) == 1, "no summary was asked for: nothing was dropped"
    assert kept.status == "completed" and kept.output_text == "Hello."
    assert len(_sent(stack, lenient)) == 3, "the overflow, the summary, the step again"


SEARCH = FakeWebSearch(
    query="temporal durable execution",
    results=[
        FakeSearchResult(url="https://temporal.io/", title="Temporal"),
        FakeSearchResult(url="https://docs.temporal.io/", title="Docs"),
    ],
)


async def _searched(
    stack: Stack, model: str, search: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A streamed response with `search` as its tool: its events, and the response as GET
    returns it."""
    async with _client(stack) as client:
        events = []
        async with await client.responses.create(
            model=model,
            input="what is temporal?",
            tools=[search],  # type: ignore[list-item]
            stream=True,
        ) as stream:
            async for event in stream:
                events.append(event.to_dict())
        final = await client.responses.retrieve(events[0]["response"]["id"])
    return events, final.to_dict()


def _events_of(events: list[dict[str, Any]], item_id: str) -> list[str]:
    """The types of the stream's events about one output item, in order."""
    return [
        e["type"]
        for e in events
        if e.get("item_id") == item_id or e.get("item", {}).get("id") == item_id
    ]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_provider_web_search_is_a_web_search_call_item_streamed_in_place(
    stack: Stack, provider: str
) -> None:
    model = _scripted(
        stack,
        FakeResponse(parts=[FakeText(text="Searching."), SEARCH, FakeText(text="Found it.")]),
        provider=provider,
    )
    search = {"type": "web_search", "filters": {"allowed_domains": ["temporal.io"]}}
    events, final = await _searched(stack, model, search)
    output = final["output"]
    assert [i["type"] for i in output] == ["message", "web_search_call", "message"]
    searched = output[1]
    assert searched["status"] == "completed"
    assert searched["action"]["query"] == "temporal durable execution"
    assert [s["url"] for s in searched["action"]["sources"]] == [
        "https://temporal.io/",
        "https://docs.temporal.io/",
    ]
    done = {
        e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"
    }
    assert [done[i] for i in sorted(done)] == output, "the stream's items are the canonical ones"
    assert _events_of(events, searched["id"]) == [
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.output_item.done",
    ]
    (body,) = _sent(stack, model)
    (tool,) = [t for t in body["tools"] if str(t.get("type")).startswith("web_search")]
    domains = tool.get("allowed_domains") or tool.get("filters", {}).get("allowed_domains")
    assert domains == ["temporal.io"]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_search_the_provider_reports_failed_is_a_failed_item_and_the_answer_goes_on(
    stack: Stack, provider: str
) -> None:
    failing = FakeWebSearch(query="temporal", error_code="unavailable")
    model = _scripted(
        stack,
        FakeResponse(parts=[failing, FakeText(text="The search failed; from memory: ...")]),
        provider=provider,
    )
    events, final = await _searched(stack, model, {"type": "web_search"})
    assert final["status"] == "completed"
    output = final["output"]
    assert [(i["type"], i["status"]) for i in output] == [
        ("web_search_call", "failed"),
        ("message", "completed"),
    ]
    assert _events_of(events, output[0]["id"]) == [
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.output_item.done",
    ], "a failed search is never reported completed"
    assert events[-1]["type"] == "response.completed"


async def test_a_tool_choice_the_provider_refuses_fails_the_response_once(stack: Stack) -> None:
    """A refusal is the request's fault: the response fails with the provider's words, it is
    not retried, and the chat takes the next response."""
    refusal = FakeError(
        status=400,
        type="invalid_request_error",
        message="tool_choice 'any' is not supported by this model",
    )
    model = _scripted(stack, FakeResponse(error=refusal), FakeResponse(parts=[FakeText(text="ok")]))
    async with _client(stack) as client:
        failed = await client.responses.create(
            model=model, input="hi", tools=[WEATHER], tool_choice="required"
        )
        assert failed.status == "failed" and failed.error is not None
        assert "tool_choice 'any' is not supported" in failed.error.message
        assert len(_sent(stack, model)) == 1, "a refused request is not retried"
        again = await client.responses.create(
            model=model, input="then answer", previous_response_id=failed.id, tools=[WEATHER]
        )
    assert again.status == "completed" and again.output_text == "ok"
    first, second = _sent(stack, model)
    assert first["tool_choice"]["type"] == "any"
    assert second.get("tool_choice", {"type": "auto"})["type"] == "auto"
