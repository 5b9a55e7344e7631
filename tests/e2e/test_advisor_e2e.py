"""The advisor end to end, on a worker whose registry the environment built (CHATD_ADVISOR):
consulted alone, mixed with another tool, past its cap, switched on and off, and in a
subagent. The fake provider records every request, the advisor's nested one included."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from harness import Stack, StackFactory

from chatd.fake_provider.script import FakeRequest, FakeResponse, FakeText, FakeToolCall
from chatd.fake_provider.server import FakeProviderServer
from chatd.store.chats import ChatStore
from chatd.tools.advisor import (
    ADVISOR_ENV,
    ADVISOR_MAX_USES_ENV,
    ADVISOR_MODEL_ENV,
    ADVISOR_SYSTEM_PROMPT,
    GUIDANCE,
)
from chatd.tools.defaults import default_registry


@pytest.fixture
async def advised_stack(
    make_stack: StackFactory, fake_provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    """A stack whose worker offers the advisor, switched on as an operator does; one use
    per turn, so the cap shows within a short script."""
    monkeypatch.setenv(ADVISOR_ENV, "1")
    monkeypatch.setenv(ADVISOR_MAX_USES_ENV, "1")
    monkeypatch.delenv(ADVISOR_MODEL_ENV, raising=False)
    registry = default_registry(providers=fake_provider.provider_settings())
    async with make_stack(registry=registry) as stack:
        yield stack


def _tool_names(request: FakeRequest) -> list[str]:
    return [t["name"] for t in request.body.get("tools", [])]


def _system(request: FakeRequest) -> str:
    system = request.body.get("system") or []
    return "".join(block["text"] for block in system)


def _results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for m in messages if m["role"] == "tool" for p in m["parts"]]


def _advisor_call(question: str) -> FakeToolCall:
    return FakeToolCall(name="advisor", arguments={"question": question})


async def _run_turn(
    stack: Stack, chat_id: str, content: str, *, after: int = 0
) -> tuple[list[dict[str, Any]], int]:
    """Send `content` and wait for its turn to end (its events follow `after`); the chat's
    tool results, and the stream's cursor after the turn."""
    await stack.send(chat_id, content)
    events = await stack.wait_status(chat_id, "waiting", after=after)
    return _results(await stack.messages(chat_id)), events[-1].id or after


async def test_advisor_alone_makes_one_tool_less_call_with_the_context_and_question(
    advised_stack: Stack,
) -> None:
    stack = advised_stack
    model = stack.scripted_model(
        FakeResponse(
            parts=[
                FakeText(text="Two ways to do this; let me ask."),
                _advisor_call("Migrate in place or copy the table?"),
            ]
        ),
        FakeResponse.of_text("Copy the table: in-place migration locks it."),
        FakeResponse.of_text("I will copy the table."),
    )
    chat = await stack.create_chat(model=model, system_prompt="You run databases.")
    [result], _ = await _run_turn(stack, chat["id"], "Add a column to the orders table.")
    assert not result.get("is_error")
    assert result["output"]["type"] == "advice"
    assert result["output"]["advice"] == "Copy the table: in-place migration locks it."
    assert result["output"]["remaining_uses"] == 0
    assert result["output"]["model"] == f"anthropic/{model['name']}"
    assert result["output"]["usage"]["output_tokens"] > 0

    first, nested, last = stack.fake.requests(model["name"])
    assert "advisor" in _tool_names(first) and "advisor" in _tool_names(last)
    assert "tools" not in nested.body
    assert _system(nested) == ADVISOR_SYSTEM_PROMPT
    [handoff] = nested.body["messages"]
    text = json.dumps(handoff["content"])
    for seen in [
        "You run databases.",
        "Add a column to the orders table.",
        "Two ways to do this; let me ask.",
        "Migrate in place or copy the table?",
    ]:
        assert seen in text


async def test_advisor_mixed_with_another_tool_gets_policy_errors_and_nothing_runs(
    advised_stack: Stack,
) -> None:
    stack = advised_stack
    model = stack.scripted_model(
        FakeResponse(
            parts=[_advisor_call("Is it late?"), FakeToolCall(name="current_time", arguments={})]
        ),
        FakeResponse.of_text("Retrying separately."),
    )
    chat = await stack.create_chat(model=model)
    (advisor, clock), _ = await _run_turn(stack, chat["id"], "What time is it?")
    assert advisor["is_error"] and clock["is_error"]
    assert advisor["output"].startswith("advisor must be called alone")
    assert clock["output"].startswith("this tool was skipped because advisor must run alone")
    assert len(stack.fake.requests(model["name"])) == 2  # no advisor call was made


async def test_past_its_cap_the_advisor_answers_limit_reached_without_a_model_call(
    advised_stack: Stack,
) -> None:
    stack = advised_stack
    model = stack.scripted_model(
        FakeResponse(parts=[_advisor_call("First question?")]),
        FakeResponse.of_text("First advice."),
        FakeResponse(parts=[_advisor_call("Second question?")]),
        FakeResponse.of_text("Done without more advice."),
    )
    chat = await stack.create_chat(model=model)
    (first, second), cursor = await _run_turn(stack, chat["id"], "Plan the release.")
    assert first["output"]["type"] == "advice" and first["output"]["remaining_uses"] == 0
    assert second["output"]["type"] == "limit_reached"
    assert second["output"]["remaining_uses"] == 0
    assert len(stack.fake.requests(model["name"])) == 4

    # The cap is per turn: the next turn may consult the advisor again.
    stack.fake.script(
        model["name"],
        [
            FakeResponse(parts=[_advisor_call("Third question?")]),
            FakeResponse.of_text("Third advice."),
            FakeResponse.of_text("Thanks."),
        ],
    )
    (*_, third), _ = await _run_turn(stack, chat["id"], "And the next release?", after=cursor)
    assert third["output"]["type"] == "advice" and third["output"]["advice"] == "Third advice."


async def test_switched_on_the_tool_and_its_guidance_appear_together(
    advised_stack: Stack,
) -> None:
    stack = advised_stack
    model = stack.scripted_model(FakeResponse.of_text("Hello."))
    chat = await stack.create_chat(model=model, system_prompt="You are terse.")
    await _run_turn(stack, chat["id"], "Hi.")
    [request] = stack.fake.requests(model["name"])
    assert "advisor" in _tool_names(request)
    assert _system(request) == f"You are terse.\n\n{GUIDANCE}"


async def test_switched_off_neither_the_tool_nor_its_guidance_appears(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ADVISOR_ENV, raising=False)
    async with make_stack(registry=default_registry()) as stack:
        model = stack.scripted_model(FakeResponse.of_text("Hello."))
        chat = await stack.create_chat(model=model, system_prompt="You are terse.")
        await _run_turn(stack, chat["id"], "Hi.")
        [request] = stack.fake.requests(model["name"])
    assert "advisor" not in _tool_names(request)
    assert "current_time" in _tool_names(request)
    assert _system(request) == "You are terse."


async def _child_of(stack: Stack, parent_id: str, model: dict[str, str]) -> str:
    """A subagent of `parent_id`, made as a spawn makes one (in the store)."""
    chats = ChatStore(stack.pool)
    parent = await chats.get(uuid.UUID(parent_id))
    assert parent is not None
    child = await chats.create(
        owner=parent.owner,
        model=parent.model.model_copy(update={"name": model["name"]}),
        system_prompt="You are a subagent.",
        parent_chat_id=parent.id,
    )
    return str(child.id)


async def test_a_subagent_is_offered_neither_the_advisor_nor_its_guidance(
    advised_stack: Stack,
) -> None:
    stack = advised_stack
    parent = await stack.create_chat(model=stack.scripted_model())
    model = stack.scripted_model(FakeResponse.of_text("Child done."))
    child_id = await _child_of(stack, parent["id"], model)
    await _run_turn(stack, child_id, "Do your part.")
    [request] = stack.fake.requests(model["name"])
    assert "advisor" not in _tool_names(request)
    assert "current_time" in _tool_names(request)
    assert _system(request) == "You are a subagent."


async def test_a_subagent_that_calls_the_advisor_anyway_gets_no_advice(
    advised_stack: Stack,
) -> None:
    stack = advised_stack
    parent = await stack.create_chat(model=stack.scripted_model())
    model = stack.scripted_model(
        FakeResponse(parts=[_advisor_call("Should I?")]), FakeResponse.of_text("On my own.")
    )
    child_id = await _child_of(stack, parent["id"], model)
    [result], _ = await _run_turn(stack, child_id, "Do your part.")
    assert result["output"]["type"] == "error"
    assert result["output"]["message"] == "The advisor is not available to subagents."
    assert len(stack.fake.requests(model["name"])) == 2  # no advisor call was made
