"""Temporal history bytes per model step of one more turn in a chat seeded with N messages
(`turn_overhead.py`'s check that history does not grow with the transcript)."""

from __future__ import annotations

import uuid

from _stack import BenchStack
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.client import WorkflowHistory

from chatd.parts import Role, TextPart
from chatd.store.transcript import TranscriptStore
from workflows.constants import workflow_id

__all__ = ["HistorySize", "event_kinds", "history_per_step", "payload_bytes"]

FILLER = "Seeded transcript text, long enough to notice if it ever lands in history. " * 6


async def seed_transcript(stack: BenchStack, chat_id: str, messages: int) -> None:
    """Write `messages` alternating user/assistant rows straight into Postgres."""
    transcript = TranscriptStore(stack.pool)
    for i in range(messages):
        role: Role = "user" if i % 2 == 0 else "assistant"
        await transcript.save(
            uuid.UUID(chat_id),
            turn_id=f"seed-{i // 2}",
            step_key=role,
            role=role,
            parts=[TextPart(text=f"{i}: {FILLER}")],
        )


_WORKFLOW_TASK_EVENTS = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
    }
)


def payload_bytes(history: WorkflowHistory) -> int:
    """The protobuf bytes of a run's events, less its workflow tasks' own: a loaded machine
    times a workflow task out and runs it again, which adds such events to one run and not
    the next. What would grow with the transcript is in the rest (inputs, results)."""
    return History(events=_kept(history)).ByteSize()


def event_kinds(history: WorkflowHistory) -> tuple[int, ...]:
    """The types of the events `payload_bytes` counts, in order: runs that took the same
    path have the same kinds (a send whose worker is behind starts its turn with a signal,
    not an update: two events fewer, one more)."""
    return tuple(e.event_type for e in _kept(history))


def _kept(history: WorkflowHistory) -> list[HistoryEvent]:
    return [e for e in history.events if e.event_type not in _WORKFLOW_TASK_EVENTS]


def model_steps(history: WorkflowHistory) -> int:
    """How many model-step activities the run scheduled."""
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "stream_model_step"
    )


HistorySize = dict[str, float]


async def history_per_step(
    stack: BenchStack, model: str, messages: int
) -> tuple[HistorySize, tuple[int, ...]]:
    """Seed a chat with `messages` messages, run one more turn, size that run's history; and
    its `event_kinds`, the path it took.

    The chat has a title: a title activity would end before or after the run closes, and
    its events would be in one history and not the other.
    """
    chat_id = await stack.create_chat(model={"provider": "anthropic", "name": model}, title="bench")
    await seed_transcript(stack, chat_id, messages)
    async with stack.listen(chat_id) as sse:
        await stack.send(chat_id, "And one more question.")
        await sse.until(lambda e: e.event == "status" and e.data.get("status") == "waiting")
    handle = stack.temporal.get_workflow_handle(workflow_id(chat_id))
    await handle.result()
    history = await handle.fetch_history()
    steps = max(1, model_steps(history))
    proto = payload_bytes(history)
    size = {
        "events": len(history.events),
        "steps": steps,
        "proto_per_step": proto / steps,
        "json_per_step": len(history.to_json()) / steps,
    }
    return size, event_kinds(history)
