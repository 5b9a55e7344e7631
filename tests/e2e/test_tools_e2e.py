"""Tools end to end: parallel built-ins, error results, policies, dynamic tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from harness import Stack, StackFactory
from pydantic import BaseModel
from support.names import model_name
from temporalio.api.enums.v1 import EventType

from chatd.fake_provider.script import FakeError, FakeResponse, FakeText, FakeToolCall
from chatd.tools.base import Tool, ToolContext, ToolOutput, ToolRegistry
from workflows.constants import workflow_id

_b_started = asyncio.Event()


class _Word(BaseModel):
    word: str


async def _slow_echo(args: _Word, ctx: ToolContext) -> ToolOutput:
    # Finishes only after `fast_echo` has started: proves the calls run in parallel.
    await asyncio.wait_for(_b_started.wait(), 30)
    return f"slow:{args.word}"


async def _fast_echo(args: _Word, ctx: ToolContext) -> ToolOutput:
    _b_started.set()
    return f"fast:{args.word}"


async def _boom(args: _Word, ctx: ToolContext) -> ToolOutput:
    raise RuntimeError("the disk is on fire")


async def _sleepy(args: _Word, ctx: ToolContext) -> ToolOutput:
    await asyncio.sleep(30)
    return "never"


async def _bad_output(args: _Word, ctx: ToolContext) -> ToolOutput:
    return object()  # type: ignore[return-value]


async def _done(args: _Word, ctx: ToolContext) -> ToolOutput:
    return "finished"


_held_started = asyncio.Event()
_held_released = asyncio.Event()


async def _held(args: _Word, ctx: ToolContext) -> ToolOutput:
    _held_started.set()
    await asyncio.wait_for(_held_released.wait(), 30)
    return "released"


def _tool(name: str, run: Any, **flags: Any) -> Tool[_Word]:
    return Tool(name=name, description=f"test tool {name}", args=_Word, run=run, **flags)


TEST_TOOLS = [
    _tool("slow_echo", _slow_echo),
    _tool("fast_echo", _fast_echo),
    _tool("boom", _boom),
    _tool("sleepy", _sleepy, timeout=timedelta(milliseconds=300)),
    _tool("bad_output", _bad_output),
    _tool("solo", _done, exclusive=True),
    _tool("finish_task", _done, stop_after=True),
    _tool("quick", _done, inline=True),
    _tool("quick_boom", _boom, inline=True),
    _tool("quick_held", _held, inline=True),
]


@pytest.fixture
async def tool_stack(make_stack: StackFactory) -> AsyncIterator[Stack]:
    async with make_stack(registry=ToolRegistry.of(TEST_TOOLS)) as stack:
        yield stack


def _results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for m in messages if m["role"] == "tool" for p in m["parts"]]


async def _turn(stack: Stack, responses: list[FakeResponse], **chat: Any) -> tuple[str, str]:
    name = model_name()
    stack.fake.script(name, responses)
    created = await stack.create_chat(model={"provider": "anthropic", "name": name}, **chat)
    await stack.send(created["id"], "go")
    return created["id"], name


async def test_parallel_calls_run_concurrently_and_results_keep_call_order(
    tool_stack: Stack,
) -> None:
    _b_started.clear()
    chat_id, _ = await _turn(
        tool_stack,
        [
            FakeResponse(
                parts=[
                    FakeToolCall(name="slow_echo", arguments={"word": "a"}),
                    FakeToolCall(name="fast_echo", arguments={"word": "b"}),
                ]
            ),
            FakeResponse(parts=[FakeText(text="done")]),
        ],
    )
    await tool_stack.wait_status(chat_id, "waiting")
    messages = await tool_stack.messages(chat_id)
    calls = [p for p in messages[1]["parts"] if p["type"] == "tool_call"]
    results = _results(messages)
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in calls]
    assert [r["output"] for r in results] == ["slow:a", "fast:b"]


async def test_inline_calls_run_in_the_workflow_task_and_keep_call_order(
    tool_stack: Stack,
) -> None:
    """Inline tools run as local activities: the server schedules an activity only for the
    regular call, and every result (an inline tool's error too) comes in call order."""
    chat_id, _ = await _turn(
        tool_stack,
        [
            FakeResponse(
                parts=[
                    FakeToolCall(name="quick", arguments={"word": "a"}),
                    FakeToolCall(name="fast_echo", arguments={"word": "b"}),
                    FakeToolCall(name="quick_boom", arguments={"word": "c"}),
                ]
            ),
            FakeResponse(parts=[FakeText(text="done")]),
        ],
    )
    await tool_stack.wait_status(chat_id, "waiting")
    results = _results(await tool_stack.messages(chat_id))
    assert [(r["output"], r["is_error"]) for r in results][:2] == [
        ("finished", False),
        ("fast:b", False),
    ]
    assert results[2]["is_error"] and "the disk is on fire" in results[2]["output"]
    handle = tool_stack.temporal.get_workflow_handle(workflow_id(chat_id))
    scheduled = [
        json.loads(event.user_metadata.summary.data)
        async for event in handle.fetch_history_events()
        if event.HasField("activity_task_scheduled_event_attributes")
    ]
    assert [s for s in scheduled if s.startswith("tool ")] == ["tool fast_echo (step 0)"]


async def _scheduled(stack: Stack, chat_id: str) -> list[tuple[str, int]]:
    """The turn's activities as the server scheduled them: type, and a model step's step."""
    handle = stack.temporal.get_workflow_handle(workflow_id(chat_id))
    scheduled = []
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            summary = json.loads(event.user_metadata.summary.data)
            step = (
                int(summary.rsplit(" ", 1)[-1])
                if attrs.activity_type.name == "stream_model_step"
                else -1
            )
            scheduled.append((attrs.activity_type.name, step))
    return [s for s in scheduled if s[0] != "generate_title"]


async def _local_activities(stack: Stack, chat_id: str) -> int:
    handle = stack.temporal.get_workflow_handle(workflow_id(chat_id))
    return sum(
        [
            event.HasField("marker_recorded_event_attributes")
            async for event in handle.fetch_history_events()
        ]
    )


async def test_steps_whose_calls_are_all_quick_go_on_in_one_activity(tool_stack: Stack) -> None:
    """A step whose calls are all quick tools runs them and streams the next step in the same
    activity: the server schedules one activity for the whole turn and the workflow runs no
    local one, while the transcript is what the workflow's own tool phase writes."""
    chat_id, name = await _turn(
        tool_stack,
        [
            FakeResponse(
                parts=[
                    FakeToolCall(name="quick", arguments={"word": "a"}),
                    FakeToolCall(name="quick_boom", arguments={"word": "b"}),
                ]
            ),
            FakeResponse.of_tool_call("quick", {"word": "c"}),
            FakeResponse(parts=[FakeText(text="done")]),
        ],
    )
    await tool_stack.wait_status(chat_id, "waiting")
    messages = await tool_stack.messages(chat_id)
    roles = ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m["role"] for m in messages] == roles
    calls = [p["id"] for m in messages for p in m["parts"] if p["type"] == "tool_call"]
    results = _results(messages)
    assert [r["tool_call_id"] for r in results] == calls
    assert [r["is_error"] for r in results] == [False, True, False]
    assert "the disk is on fire" in results[1]["output"]
    requests = tool_stack.fake.requests(name)
    assert len(requests) == 3
    assert "the disk is on fire" in json.dumps(requests[1].body), "the model saw the results"
    assert await _scheduled(tool_stack, chat_id) == [("stream_model_step", 0)]
    assert await _local_activities(tool_stack, chat_id) == 0, "begun and finished by the step"


async def test_a_retried_step_goes_on_from_the_steps_its_first_attempt_saved(
    tool_stack: Stack,
) -> None:
    """The second step of an activity fails on the model: the workflow's retry asks for the
    first step again, which is saved, so its request is not sent again and its results stay
    as they were; the step that failed streams anew."""
    chat_id, name = await _turn(
        tool_stack,
        [
            FakeResponse.of_tool_call("quick", {"word": "a"}),
            FakeResponse.of_error(FakeError.overloaded()),
            FakeResponse(parts=[FakeText(text="done")]),
        ],
    )
    await tool_stack.wait_status(chat_id, "waiting")
    messages = await tool_stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert [(r["output"], r["is_error"]) for r in _results(messages)] == [("finished", False)]
    assert messages[-1]["parts"][0]["text"] == "done"
    assert len(tool_stack.fake.requests(name)) == 3
    assert await _scheduled(tool_stack, chat_id) == [
        ("stream_model_step", 0),
        ("stream_model_step", 0),
    ]


async def test_the_step_limit_stops_an_activity_going_on(tool_stack: Stack) -> None:
    """With a limit of two steps, the activity goes on to the second step only; its calls are
    then the workflow's to run, and the turn ends after their results."""
    call = FakeResponse.of_tool_call("quick", {"word": "again"})
    chat_id, name = await _turn(tool_stack, [call, call, call], max_steps=2)
    await tool_stack.wait_status(chat_id, "waiting")
    messages = await tool_stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert len(tool_stack.fake.requests(name)) == 2
    assert await _scheduled(tool_stack, chat_id) == [("stream_model_step", 0)]


async def test_an_interrupt_while_a_steps_quick_calls_run_ends_the_turn_after_their_results(
    tool_stack: Stack,
) -> None:
    """The activity runs the step's quick call to its end, records its result, and does not
    go on to the next step: the turn ends there, waiting."""
    _held_started.clear()
    _held_released.clear()
    chat_id, name = await _turn(
        tool_stack,
        [
            FakeResponse.of_tool_call("quick_held", {"word": "a"}),
            FakeResponse(parts=[FakeText(text="never asked for")]),
        ],
    )
    await asyncio.wait_for(_held_started.wait(), 30)
    response = await tool_stack.http.post(f"/chats/{chat_id}/interrupt")
    assert response.status_code == 202, response.text
    handle = tool_stack.temporal.get_workflow_handle(workflow_id(chat_id))
    cancel = EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
    for _ in range(600):  # until the workflow has taken the interrupt and stops the step
        if [e async for e in handle.fetch_history_events() if e.event_type == cancel]:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the workflow never asked the step to stop")
    _held_released.set()
    await tool_stack.wait_status(chat_id, "waiting")
    messages = await tool_stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert [(r["output"], r["is_error"]) for r in _results(messages)] == [("released", False)]
    assert len(tool_stack.fake.requests(name)) == 1
    detail = (await tool_stack.http.get(f"/chats/{chat_id}")).json()
    assert detail["last_error"] is None


async def test_every_failure_becomes_an_error_result_and_the_turn_goes_on(
    tool_stack: Stack,
) -> None:
    calls = [
        FakeToolCall(name="boom", arguments={"word": "x"}),
        FakeToolCall(name="sleepy", arguments={"word": "x"}),
        FakeToolCall(name="bad_output", arguments={"word": "x"}),
        FakeToolCall(name="no_such_tool", arguments={}),
        FakeToolCall(name="fast_echo", arguments="{not json"),
        FakeToolCall(name="fast_echo", arguments={"wrong": 1}),
        FakeToolCall(name="slow_echo", arguments={"word": "x"}),
    ]
    chat_id, name = await _turn(
        tool_stack,
        [FakeResponse(parts=calls), FakeResponse(parts=[FakeText(text="recovered")])],
        active_tools=["boom", "sleepy", "bad_output", "fast_echo"],
    )
    await tool_stack.wait_status(chat_id, "waiting")
    results = _results(await tool_stack.messages(chat_id))
    assert all(r["is_error"] for r in results)
    outputs = [r["output"] for r in results]
    assert "RuntimeError: the disk is on fire" in outputs[0]
    assert "timed out" in outputs[1]
    assert "bad_output returned object" in outputs[2]
    assert outputs[3] == "Tool not found: no_such_tool"
    assert outputs[4].startswith("Invalid arguments for fast_echo") and "JSON" in outputs[4]
    assert outputs[5].startswith("Invalid arguments for fast_echo") and "word" in outputs[5]
    assert outputs[6] == "Tool not active in this turn: slow_echo"
    assert len(tool_stack.fake.requests(name)) == 2, "the model saw the errors and went on"


async def test_an_exclusive_tool_with_company_runs_nothing_and_explains(tool_stack: Stack) -> None:
    chat_id, _ = await _turn(
        tool_stack,
        [
            FakeResponse(
                parts=[
                    FakeToolCall(name="solo", arguments={"word": "x"}),
                    FakeToolCall(name="fast_echo", arguments={"word": "y"}),
                ]
            ),
            FakeResponse(parts=[FakeText(text="ok, separately then")]),
        ],
    )
    await tool_stack.wait_status(chat_id, "waiting")
    results = _results(await tool_stack.messages(chat_id))
    assert results[0]["output"] == (
        "solo must be called alone, without other tools in the same batch. "
        "Retry with only the solo call."
    )
    assert results[1]["output"] == (
        "this tool was skipped because solo must run alone in its batch. "
        "Retry your tool calls without solo, or call solo separately first."
    )
    assert all(r["is_error"] for r in results)


async def test_a_successful_stop_after_tool_ends_the_turn(tool_stack: Stack) -> None:
    chat_id, name = await _turn(
        tool_stack,
        [FakeResponse(parts=[FakeToolCall(name="finish_task", arguments={"word": "x"})])],
    )
    await tool_stack.wait_status(chat_id, "waiting")
    messages = await tool_stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert len(tool_stack.fake.requests(name)) == 1


async def test_max_steps_ends_the_turn_after_answering_the_last_calls(tool_stack: Stack) -> None:
    call = FakeResponse(parts=[FakeToolCall(name="fast_echo", arguments={"word": "again"})])
    chat_id, name = await _turn(tool_stack, [call, call, call], max_steps=2)
    await tool_stack.wait_status(chat_id, "waiting")
    messages = await tool_stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert len(tool_stack.fake.requests(name)) == 2
