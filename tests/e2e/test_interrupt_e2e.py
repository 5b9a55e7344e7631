"""Interrupting a turn at each phase keeps what was produced and leaves a valid transcript."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from harness import SseEvent, Stack, StackFactory, sse_events
from support.names import model_name
from temporalio import activity

import activities.model_step
from activities.attempt_spend import AttemptSpend
from chatd.fake_provider.script import (
    FakeError,
    FakeReasoning,
    FakeResponse,
    FakeText,
    FakeToolCall,
)

INTERRUPTED = "tool call was interrupted before it produced a result"


async def _start(stack: Stack, first: FakeResponse) -> tuple[str, str]:
    name = model_name()
    stack.fake.script(name, [first, FakeResponse(parts=[FakeText(text="after")])])
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "start")
    return chat["id"], name


Interrupt = Callable[[Stack, str], Awaitable[None]]
"""How a test interrupts a chat's turn."""


async def _by_http(stack: Stack, chat_id: str) -> None:
    response = await stack.http.post(f"/chats/{chat_id}/interrupt")
    assert response.status_code == 202, response.text


async def _by_temporal_signal(stack: Stack, chat_id: str) -> None:
    await stack.temporal.get_workflow_handle(f"chat-{chat_id}").signal("interrupt")


async def _interrupt_when(
    stack: Stack, chat_id: str, seen: Any, interrupt: Interrupt = _by_http
) -> list[SseEvent]:
    """Interrupt once `seen(event)` is true, then collect events until the chat waits."""
    events: list[SseEvent] = []
    async for event in sse_events(stack.http, chat_id):
        events.append(event)
        if seen(event):
            break
    await interrupt(stack, chat_id)
    events += await stack.wait_status(chat_id, "waiting", after=events[-1].id or 0)
    return events


async def _continue_after(stack: Stack, chat_id: str, name: str) -> None:
    """The next message runs on the interrupted transcript, which the fake validates."""
    await stack.send(chat_id, "continue")
    await stack.events_until(
        chat_id,
        lambda e: (
            e.event == "message"
            and e.data["role"] == "assistant"
            and e.data["parts"] == [{"type": "text", "text": "after"}]
        ),
    )
    await stack.wait_status(chat_id, "waiting")
    assert len(stack.fake.requests(name)) == 2


# Long enough (~10 s of deltas) that the interrupt lands mid-stream on a loaded machine.
_LONG_TEXT = " ".join(f"word{i}" for i in range(60))
_PADDED = {"pad": "x" * 300}


def _is_text_delta(event: SseEvent) -> bool:
    return event.event == "message_part" and event.data["part"]["type"] == "text"


async def _interrupt_mid_text(stack: Stack, interrupt: Interrupt = _by_http) -> None:
    """Interrupt after the first text delta: the partial reasoning and text are kept."""
    chat_id, name = await _start(
        stack,
        FakeResponse(
            parts=[
                FakeReasoning(text="thinking hard", signature="sig"),
                FakeText(text=_LONG_TEXT, chunk_size=4),
            ],
            delta_delay_s=0.15,
        ),
    )
    events = await _interrupt_when(stack, chat_id, _is_text_delta, interrupt)
    assert events[-1].event == "status" and events[-1].data["status"] == "waiting"
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    parts = messages[1]["parts"]
    assert parts[0]["type"] == "reasoning" and parts[0]["text"] == "thinking hard"
    text = parts[1]["text"]
    assert text and _LONG_TEXT.startswith(text)
    assert text != _LONG_TEXT, "the stream was cut short"
    await _continue_after(stack, chat_id, name)


async def test_interrupt_mid_text_keeps_the_partial_text_and_reasoning(stack: Stack) -> None:
    await _interrupt_mid_text(stack)


async def test_an_unannounced_interrupt_reaches_the_stream_with_a_heartbeat(
    make_stack: StackFactory,
) -> None:
    """The worker doesn't listen for announcements: the workflow's cancellation, carried by
    the answer to a heartbeat, stops the stream (the path a CLI-sent signal takes too)."""
    async with make_stack(announced_interrupts=False) as stack:
        await _interrupt_mid_text(stack)


async def test_an_announced_interrupt_stops_the_stream_without_waiting_for_a_heartbeat(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no heartbeat for a minute, the workflow's cancellation can't reach the step in
    time: only the gateway's announcement (Postgres NOTIFY) can cut the stream short."""
    monkeypatch.setattr(activities.model_step, "LIVENESS_EVERY_S", 60.0)
    await _interrupt_mid_text(stack)


async def test_the_cancellation_after_an_announced_interrupt_keeps_the_partial_step(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The announcement stops the stream first; the workflow's cancellation reaches the
    step (with a heartbeat's answer) while it records the partial step's spend. That write,
    and the step's, still finish: the cancellation must not drop the partial text."""
    record = AttemptSpend.stopped

    async def stopped_once_cancelled(self: AttemptSpend, accumulator: Any) -> None:
        for _ in range(200):  # the cancellation comes with the next beat, a second apart
            if activity.is_cancelled():
                break
            await asyncio.sleep(0.05)
        assert activity.is_cancelled(), "the workflow's cancellation never reached the step"
        await record(self, accumulator)

    monkeypatch.setattr(AttemptSpend, "stopped", stopped_once_cancelled)
    await _interrupt_mid_text(stack)


async def test_interrupt_mid_tool_arguments_keeps_the_call_with_an_interrupted_result(
    stack: Stack,
) -> None:
    chat_id, name = await _start(
        stack,
        FakeResponse(
            parts=[
                FakeText(text="calling"),
                FakeToolCall(name="current_time", arguments=_PADDED, chunk_size=3),
            ],
            delta_delay_s=0.1,
        ),
    )
    events = await _interrupt_when(
        stack,
        chat_id,
        lambda e: e.event == "message_part" and e.data["part"].get("args_delta"),
    )
    assert any(e.event == "status" and e.data["status"] == "waiting" for e in events)
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    call = next(p for p in messages[1]["parts"] if p["type"] == "tool_call")
    arguments = json.dumps(_PADDED)
    assert call["arguments"] and arguments.startswith(call["arguments"])
    assert call["arguments"] != arguments, "the stream was cut short"
    assert messages[2]["parts"][0] == {
        **messages[2]["parts"][0],
        "tool_call_id": call["id"],
        "is_error": True,
        "output": INTERRUPTED,
    }
    await _continue_after(stack, chat_id, name)


async def test_interrupt_during_a_slow_first_byte(stack: Stack) -> None:
    chat_id, name = await _start(
        stack, FakeResponse(parts=[FakeText(text="late")], first_byte_delay_s=30)
    )
    await _interrupt_when(
        stack, chat_id, lambda e: e.event == "status" and e.data["status"] == "running"
    )
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user"], "nothing was produced, nothing is kept"
    await _continue_after(stack, chat_id, name)


async def test_interrupt_during_a_retry_backoff_cancels_the_timer(stack: Stack) -> None:
    chat_id, name = await _start(
        stack, FakeResponse(error=FakeError.rate_limited(retry_after_s=60))
    )
    events = await _interrupt_when(stack, chat_id, lambda e: e.event == "retry")
    retry = next(e for e in events if e.event == "retry")
    assert retry.data["delay_ms"] >= 60_000 and retry.data["error"]["kind"] == "rate_limit"
    detail = (await stack.http.get(f"/chats/{chat_id}")).json()
    assert detail["status"] == "waiting" and detail["last_error"] is None
    await _continue_after(stack, chat_id, name)


async def test_the_interrupt_signal_from_the_temporal_client_works_too(stack: Stack) -> None:
    """`temporal workflow signal --name interrupt` cuts a long stream short like the API."""
    await _interrupt_mid_text(stack, _by_temporal_signal)


@pytest.mark.parametrize("interrupt", [_by_http, _by_temporal_signal])
async def test_interrupt_in_a_step_its_activity_went_on_to_keeps_the_steps_before(
    stack: Stack, interrupt: Interrupt
) -> None:
    """A quick call's step is followed in the same activity: an interrupt of that next step
    (announced, or only the workflow's cancellation) keeps the first step and its result, and
    the partial text."""
    name = model_name()
    long_text = FakeResponse(parts=[FakeText(text=_LONG_TEXT, chunk_size=4)], delta_delay_s=0.15)
    after = FakeResponse(parts=[FakeText(text="after")])
    stack.fake.script(name, [FakeResponse.of_tool_call("current_time"), long_text, after])
    chat_id = (await stack.create_chat(model={"provider": "anthropic", "name": name}))["id"]
    await stack.send(chat_id, "start")
    events = await _interrupt_when(stack, chat_id, _is_text_delta, interrupt)
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert not messages[2]["parts"][0]["is_error"], "the quick call ran before the interrupt"
    text = messages[3]["parts"][0]["text"]
    assert text and _LONG_TEXT.startswith(text) and text != _LONG_TEXT
    history = await stack.temporal.get_workflow_handle(f"chat-{chat_id}").fetch_history()
    steps = [
        e
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "stream_model_step"
    ]
    assert len(steps) == 1, "the step after the quick call streamed in the same activity"
    await stack.send(chat_id, "continue")
    await stack.wait_status(chat_id, "waiting", after=events[-1].id or 0)
    assert len(stack.fake.requests(name)) == 3
    assert (await stack.messages(chat_id))[-1]["parts"] == [{"type": "text", "text": "after"}]
