"""Compaction, context limits, prompt caching, titles and message editing, end to end."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from harness import Stack, StackFactory
from support.names import model_name

from activities.compaction import SUMMARY_PREAMBLE
from chatd.fake_provider.script import (
    FakeError,
    FakeReasoning,
    FakeResponse,
    FakeText,
    FakeToolCall,
    FakeUsage,
)

LIMIT = 1000  # threshold 0.7 -> compaction at 700 prompt tokens


def _answer(text: str, tokens: int, *calls: FakeToolCall) -> FakeResponse:
    return FakeResponse(parts=[FakeText(text=text), *calls], usage=FakeUsage(input_tokens=tokens))


def _summary(text: str = "the user wants a poem; half written") -> FakeResponse:
    return FakeResponse(parts=[FakeText(text=text)], usage=FakeUsage(input_tokens=900))


async def _chat(stack: Stack, responses: list[FakeResponse], **extra: Any) -> tuple[str, str]:
    name = model_name()
    stack.fake.script(name, responses)
    model = {"provider": "anthropic", "name": name, "context_limit": LIMIT}
    chat = await stack.create_chat(model=model, **extra)
    await stack.send(chat["id"], "write me a long poem")
    return chat["id"], name


def _texts(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


def _sent_text(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"])


async def test_below_the_threshold_nothing_is_compacted(stack: Stack) -> None:
    chat_id, name = await _chat(stack, [_answer("short", 699)])
    await stack.wait_status(chat_id, "waiting")
    assert len(stack.fake.requests(name)) == 1
    assert not any(m["compressed"] for m in await stack.messages(chat_id))


async def test_at_the_threshold_the_chat_is_summarised_and_the_work_continues(
    stack: Stack,
) -> None:
    chat_id, name = await _chat(
        stack,
        [
            _answer("first half", 700, FakeToolCall(name="current_time")),
            _summary(),
            _answer("second half", 100),
        ],
    )
    events = await stack.wait_status(chat_id, "waiting")
    messages = await stack.messages(chat_id)
    roles = [(m["role"], m["compressed"]) for m in messages]
    assert roles == [
        ("user", True),
        ("assistant", True),
        ("tool", True),
        ("user", False),
        ("assistant", False),
    ]
    summary = _texts(messages[3])
    assert summary.startswith(SUMMARY_PREAMBLE) and "half written" in summary
    requests = stack.fake.requests(name)
    assert len(requests) == 3
    after = requests[2].body
    assert [m["role"] for m in after["messages"]] == ["user"]
    assert "half written" in _sent_text(after) and "first half" not in _sent_text(after)
    parts = [e.data["part"] for e in events if e.event == "message_part"]
    marks = [(p["type"], p.get("status")) for p in parts if p.get("name") == "chat_summarized"]
    assert marks == [("tool_call", "running"), ("tool_result", "completed")]


async def test_compaction_on_the_final_step_re_enters_the_turn(stack: Stack) -> None:
    chat_id, name = await _chat(
        stack, [_answer("all done?", 800), _summary(), _answer("continuing", 50)]
    )
    await stack.wait_status(chat_id, "waiting")
    messages = await stack.messages(chat_id)
    assert _texts(messages[-1]) == "continuing"
    assert len(stack.fake.requests(name)) == 3


async def test_at_most_three_compactions_per_turn(stack: Stack) -> None:
    script: list[FakeResponse] = []
    for i in range(3):
        script += [_answer(f"step {i}", 800, FakeToolCall(name="current_time")), _summary()]
        script.append(_answer(f"fits {i}", 100, FakeToolCall(name="current_time")))
    script.append(_answer("over again, no more compactions", 800))
    chat_id, name = await _chat(stack, script)
    await stack.wait_status(chat_id, "waiting")
    assert len(stack.fake.requests(name)) == len(script)
    summaries = [m for m in await stack.messages(chat_id) if SUMMARY_PREAMBLE in _texts(m)]
    assert len(summaries) == 3


async def test_still_over_right_after_a_compaction_ends_with_context_exceeded(
    stack: Stack,
) -> None:
    chat_id, _ = await _chat(
        stack,
        [_answer("big", 800, FakeToolCall(name="current_time")), _summary(), _answer("x", 750)],
    )
    await stack.wait_status(chat_id, "error")
    chat = (await stack.http.get(f"/chats/{chat_id}")).json()
    assert chat["last_error"]["kind"] == "context_exceeded"


async def test_a_provider_context_error_compacts_once_and_retries(stack: Stack) -> None:
    too_long = FakeError(
        status=400,
        type="invalid_request_error",
        message="prompt is too long: 250000 tokens > 200000 maximum",
    )
    chat_id, name = await _chat(
        stack, [FakeResponse(error=too_long), _summary(), _answer("fits now", 100)]
    )
    await stack.wait_status(chat_id, "waiting")
    assert _texts((await stack.messages(chat_id))[-1]) == "fits now"
    assert len(stack.fake.requests(name)) == 3


async def test_an_expired_requires_action_compacts_before_the_turn_ends(stack: Stack) -> None:
    ask = {"name": "ask", "description": "ask the user", "input_schema": {"type": "object"}}
    chat_id, name = await _chat(
        stack,
        [_answer("asking", 800, FakeToolCall(name="ask")), _summary()],
        dynamic_tools=[ask],
        action_timeout_s=1,
    )
    await stack.wait_status(chat_id, "error")
    messages = await stack.messages(chat_id)
    assert SUMMARY_PREAMBLE in _texts(messages[-1])
    assert (await stack.http.get(f"/chats/{chat_id}")).json()["last_error"]["kind"] == "timeout"
    assert len(stack.fake.requests(name)) == 2


async def test_anthropic_requests_mark_the_system_prompt_and_last_two_messages_cacheable(
    stack: Stack,
) -> None:
    chat_id, name = await _chat(
        stack,
        [_answer("calling", 10, FakeToolCall(name="current_time")), _answer("done", 10)],
        system_prompt="You are terse.",
    )
    await stack.wait_status(chat_id, "waiting")
    body = stack.fake.requests(name)[1].body
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    marked = [
        i
        for i, m in enumerate(body["messages"])
        if any("cache_control" in block for block in m["content"])
    ]
    assert marked == [len(body["messages"]) - 2, len(body["messages"]) - 1]


async def test_usage_is_recorded_per_step_and_summed_per_chat(stack: Stack) -> None:
    name = model_name()
    usage = FakeUsage(input_tokens=10, output_tokens=5, cache_read_tokens=3, cache_write_tokens=2)
    stack.fake.script(
        name,
        [
            FakeResponse(parts=[FakeToolCall(name="current_time")], usage=usage),
            FakeResponse(parts=[FakeText(text="ok")], usage=usage),
            FakeResponse(parts=[FakeText(text="again")], usage=usage),
        ],
    )
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "hi")
    events = await stack.wait_status(chat["id"], "waiting")
    turn = events[-1].data["usage"]
    assert (turn["input_tokens"], turn["cache_read_tokens"]) == (20, 6), "summed per turn"
    steps = [m["usage"] for m in await stack.messages(chat["id"]) if m["role"] == "assistant"]
    assert steps[0]["cache_read_tokens"] == 3 and steps[0]["cache_write_tokens"] == 2
    total = (await stack.http.get(f"/chats/{chat['id']}")).json()["usage"]
    assert (total["input_tokens"], total["output_tokens"]) == (20, 10)
    assert (total["cache_read_tokens"], total["cache_write_tokens"]) == (6, 4)

    await stack.send(chat["id"], "more")
    events = await stack.wait_status(chat["id"], "waiting", after=events[-1].id or 0)
    turn = events[-1].data["usage"]
    assert (turn["input_tokens"], turn["output_tokens"]) == (10, 5), "only this turn's step"
    total = (await stack.http.get(f"/chats/{chat['id']}")).json()["usage"]
    assert (total["input_tokens"], total["output_tokens"]) == (30, 15), "every turn's steps"


async def test_editing_a_user_message_drops_what_followed_and_reruns(stack: Stack) -> None:
    chat_id, name = await _chat(stack, [_answer("a poem about cats", 10)])
    await stack.wait_status(chat_id, "waiting")
    first = (await stack.messages(chat_id))[0]
    stack.fake.script(name, [_answer("a poem about dogs", 10)])
    response = await stack.http.patch(
        f"/chats/{chat_id}/messages/{first['id']}", json={"content": "about dogs, please"}
    )
    assert response.status_code == 202, response.text
    rerun = await stack.events_until(
        chat_id, lambda e: e.event == "message" and _texts(e.data) == "a poem about dogs"
    )
    await stack.wait_status(chat_id, "waiting", after=rerun[-1].id or 0)
    messages = await stack.messages(chat_id)
    assert [(m["role"], _texts(m)) for m in messages] == [
        ("user", "about dogs, please"),
        ("assistant", "a poem about dogs"),
    ]
    assert "cats" not in _sent_text(stack.fake.requests(name)[-1].body)
    assistant = messages[1]["id"]
    refused = await stack.http.patch(
        f"/chats/{chat_id}/messages/{assistant}", json={"content": "x"}
    )
    assert refused.status_code == 400


def _asks_title(request: Any) -> bool:
    return "short title" in json.dumps(request.body.get("system", ""))


@pytest.fixture
async def titled_stack(make_stack: StackFactory) -> AsyncIterator[Stack]:
    async with make_stack(generate_titles=True) as stack:
        yield stack


async def test_a_title_is_generated_after_the_first_message_but_never_over_the_users(
    titled_stack: Stack,
) -> None:
    stack = titled_stack
    name = model_name()

    def respond(request: Any) -> FakeResponse:
        return _answer("Cats In Poetry" if _asks_title(request) else "meow", 5)

    stack.fake.script(name, respond)
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "write about cats")
    events = await stack.events_until(chat["id"], lambda e: e.event == "chat")
    assert events[-1].data == {"title": "Cats In Poetry"}
    named = await stack.create_chat(
        model={"provider": "anthropic", "name": name},
        title="Mine",
        message={"content": "hello"},
    )
    await stack.wait_status(named["id"], "waiting")
    assert (await stack.http.get(f"/chats/{named['id']}")).json()["title"] == "Mine"
    assert len([r for r in stack.fake.requests(name) if _asks_title(r)]) == 1


async def test_a_title_slower_than_its_turn_is_still_saved(titled_stack: Stack) -> None:
    """The title call outlives the turn's run; closing the run must not cut it off."""
    stack = titled_stack
    name = model_name()

    def respond(request: Any) -> FakeResponse:
        if _asks_title(request):
            title = FakeText(text="Slow Title Here", chunk_size=1)
            return FakeResponse(parts=[title], delta_delay_s=0.4)  # ~6 s: outlives the run
        return _answer("quick", 5)

    stack.fake.script(name, respond)
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "hi")
    await stack.wait_status(chat["id"], "waiting")
    await stack.temporal.get_workflow_handle(f"chat-{chat['id']}").result()  # the run is over
    untitled = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert untitled["title"] is None, "the title call is still running when the run ends"
    events = await stack.events_until(chat["id"], lambda e: e.event == "chat", within_s=30)
    assert events[-1].data == {"title": "Slow Title Here"}


async def test_an_openai_compatible_servers_reported_window_sets_the_threshold(
    stack: Stack,
) -> None:
    name = model_name()
    stack.fake.book.model_info[name] = {"max_model_len": 2000}  # as vLLM reports it
    stack.fake.script(name, [_answer("long", 1400), _summary(), _answer("short", 100)])
    chat = await stack.create_chat(model={"provider": "openai", "name": name})
    await stack.send(chat["id"], "go")
    await stack.wait_status(chat["id"], "waiting")
    assert len(stack.fake.requests(name)) == 3, "70% of 2000 reached: compacted, went on"
    assert any(SUMMARY_PREAMBLE in _texts(m) for m in await stack.messages(chat["id"]))


async def test_a_compaction_without_summary_ends_the_turn_and_compresses_nothing(
    stack: Stack,
) -> None:
    """The model spent its output on reasoning: an error, and the context is kept."""
    reasoning_only = FakeResponse(
        parts=[FakeReasoning(text="let me think about how to summarise this")],
        stop_reason="max_tokens",
        usage=FakeUsage(input_tokens=900),
    )
    chat_id, name = await _chat(
        stack, [_answer("first half", 800, FakeToolCall(name="current_time")), reasoning_only]
    )
    events = await stack.wait_status(chat_id, "error")
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert not any(m["compressed"] for m in messages), "nothing compressed without a summary"
    error = (await stack.http.get(f"/chats/{chat_id}")).json()["last_error"]
    assert error["message"] == "compaction produced no summary"
    assert len(stack.fake.requests(name)) == 2, "an empty summary is not retried"
    parts = [e.data["part"] for e in events if e.event == "message_part"]
    marks = [(p["type"], p.get("status")) for p in parts if p.get("name") == "chat_summarized"]
    assert marks == [("tool_call", "running"), ("tool_result", "error")]


async def test_after_a_prompt_too_long_error_compaction_leaves_out_the_oldest_and_succeeds(
    stack: Stack,
) -> None:
    """A real provider refuses the overflowing transcript, so the summary request trims it."""
    window = 4000  # tokens, as the fake counts them (the prompt's JSON over four)
    name = model_name()
    stack.fake.book.context_windows[name] = window
    stack.fake.script(
        name,
        [_answer("noted", 50), _summary("the user sent two long notes"), _answer("fits now", 50)],
    )
    model = {"provider": "anthropic", "name": name, "context_limit": window}
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "first note: " + "a" * 8000)
    seen = await stack.wait_status(chat["id"], "waiting")
    await stack.send(chat["id"], "second note: " + "b" * 8400)  # the two overflow the window
    await stack.wait_status(chat["id"], "waiting", after=seen[-1].id or 0)

    messages = await stack.messages(chat["id"])
    assert _texts(messages[-1]) == "fits now"
    assert [m["compressed"] for m in messages] == [True, True, True, False, False]
    requests = stack.fake.requests(name)
    refused, summary = requests[1].body, requests[2].body
    assert "a" * 8000 in _sent_text(refused) and "b" * 8400 in _sent_text(refused)
    sent = _sent_text(summary)
    assert "a" * 8000 not in sent and "b" * 8400 in sent, "the oldest messages left out"
    assert "oldest messages of this conversation are left out" in sent
    assert len(requests) == 4, "refused step, summary, retried step"
