"""A turn's timeline from its Temporal history and the client's timestamps, and the waits
of its workflow tasks (`turn_overhead.py`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

__all__ = ["timeline", "wft_waits"]


def _event_ns(event: HistoryEvent) -> int:
    return int(event.event_time.ToNanoseconds())


def timeline(history: WorkflowHistory, turn: dict[str, Any]) -> list[tuple[str, float]]:
    """Key points of a turn in ms after the POST: history events, then the SSE client's."""
    t0_ns = turn["t0_ns"]
    seen: dict[str, int] = defaultdict(int)
    points: list[tuple[str, float]] = [
        ("POST answered (202)", turn["ack"]),
        ("provider got the request", turn["provider_request"]),
        ("provider emitted 1st delta", turn["first_emitted"]),
    ]
    for event in history.events:
        name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()
        if "marker" in name or "upsert" in name or "update" in name:
            continue
        seen[name] += 1
        points.append((f"{name} #{seen[name]}", (_event_ns(event) - t0_ns) / 1e6))
    points.append(("SSE client got 1st message_part", turn["first"]))
    points.append(("SSE client got status waiting", turn["waiting"]))
    return sorted(points, key=lambda p: p[1])


def wft_waits(history: WorkflowHistory) -> list[float]:
    """Workflow task scheduled -> started, ms, for each workflow task of a run."""
    waits: list[float] = []
    scheduled: int | None = None
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            scheduled = _event_ns(event)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and scheduled:
            waits.append((_event_ns(event) - scheduled) / 1e6)
    return waits
