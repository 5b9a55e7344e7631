"""A streaming step's heartbeats: a dead worker's step resumes elsewhere after a heartbeat
timeout, and a live worker's step outlasts many heartbeat timeouts without a false reset."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from harness import Cluster, SseEvent, Stack
from support.names import model_name
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent

from chatd.fake_provider.script import FakeResponse, FakeText

TEXT = " ".join(f"word{i}" for i in range(60))


async def _start(stack: Stack, responses: list[FakeResponse]) -> str:
    name = model_name()
    stack.fake.script(name, responses)
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "work")
    return str(chat["id"])


def _text(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


async def _model_step_attempts(stack: Stack, chat_id: str) -> list[HistoryEvent]:
    """The ActivityTaskStarted events of the turn's model steps, in order (one per step),
    once the run has ended: `waiting` is published by the last step, before Temporal records
    that step's start (with its completion)."""
    handle = stack.temporal.get_workflow_handle(f"chat-{chat_id}")
    await asyncio.wait_for(handle.result(), 60)
    history = await handle.fetch_history()
    model_steps = {
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "stream_model_step"
    }
    return [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in model_steps
    ]


def _is_delta(event: SseEvent) -> bool:
    return event.event == "message_part"


async def test_a_killed_workers_step_resumes_after_a_heartbeat_timeout(cluster: Cluster) -> None:
    stack = cluster.stack
    first = await cluster.polling_worker()
    chat_id = await _start(
        stack,
        [
            FakeResponse(parts=[FakeText(text=TEXT, chunk_size=6)], delta_delay_s=0.1),
            FakeResponse(parts=[FakeText(text=TEXT, chunk_size=60)]),
        ],
    )
    seen = await stack.events_until(chat_id, _is_delta, within_s=60)
    cluster.start_worker()
    await asyncio.to_thread(first.signal, signal.SIGKILL)
    events = await stack.wait_status(chat_id, "waiting", after=seen[-1].id or 0, within_s=60)

    kinds = [e.event for e in events]
    assert kinds.count("reset") == 1, "the retried attempt announced itself once"
    resumed = events[kinds.index("reset") :]
    assert "".join(e.data["part"]["text"] for e in resumed if _is_delta(e)) == TEXT
    messages = await stack.messages(chat_id)
    assert [(m["role"], _text(m)) for m in messages] == [("user", "work"), ("assistant", TEXT)]
    # A retried activity's history holds the start of its last attempt only, with the failure
    # that ended the one before.
    (started,) = await _model_step_attempts(stack, chat_id)
    attempt = started.activity_task_started_event_attributes
    assert attempt.attempt == 2
    cause = attempt.last_failure.timeout_failure_info.timeout_type
    assert cause == TimeoutType.TIMEOUT_TYPE_HEARTBEAT, "the dead worker's silence, no other cause"


async def test_a_step_streaming_for_several_heartbeat_timeouts_is_never_reset(
    stack: Stack,
) -> None:
    """Liveness beats keep a live worker's long step its own: one attempt, no reset. The
    stream lasts ~7 s, over two of the step's heartbeat timeouts."""
    chat_id = await _start(
        stack, [FakeResponse(parts=[FakeText(text=TEXT, chunk_size=6)], delta_delay_s=0.1)]
    )
    events = await stack.wait_status(chat_id, "waiting", within_s=60)

    assert "reset" not in [e.event for e in events]
    assert "".join(e.data["part"]["text"] for e in events if _is_delta(e)) == TEXT
    attempts = await _model_step_attempts(stack, chat_id)
    assert [e.activity_task_started_event_attributes.attempt for e in attempts] == [1]
