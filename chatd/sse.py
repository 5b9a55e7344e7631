"""Server-sent events read line by line: the chat stream's clients and the provider streams.

`_event` decodes each frame's data as JSON, once; callers get dicts, no model per event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Event", "parse_sse", "parse_sse_frame"]


@dataclass(frozen=True)
class Event:
    """One server-sent event: its id (when numeric), its name and its data as JSON."""

    id: int | None
    event: str
    data: dict[str, Any]


async def parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[Event]:
    """Events of an SSE body given line by line (comments and `retry:` are skipped)."""
    frame: list[str] = []
    async for line in lines:
        if line:
            frame.append(line)
            continue
        event = parse_sse_frame(frame)
        if event is not None:
            yield event
        frame = []


def parse_sse_frame(lines: Iterable[str]) -> Event | None:
    """The event of one SSE frame, given its lines; None for a frame of comments or `retry:`."""
    fields: dict[str, str] = {}
    for line in lines:
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data" and "data" in fields:
            value = fields["data"] + "\n" + value
        fields[name] = value
    return _event(fields) if "event" in fields or "data" in fields else None


def _event(frame: dict[str, str]) -> Event:
    raw = frame.get("id", "")
    data = json.loads(frame["data"]) if frame.get("data") else {}
    return Event(
        id=int(raw) if raw.isdigit() else None,
        event=frame.get("event", "message"),
        data=data if isinstance(data, dict) else {"value": data},
    )
