"""Server-sent event frames shared by the wire encoders, and provider-style id helpers."""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from chatd.fake_provider.script import FakeError

__all__ = ["EventKind", "SseEvent", "WireEncoder", "chunks", "new_id"]

EventKind = Literal["head", "block", "delta", "final"]
"""`delta` frames count for the fault/timing knobs; faults may also fire before `final` frames."""

_BASE62 = string.ascii_letters + string.digits


@dataclass(frozen=True)
class SseEvent:
    """One SSE frame; `text` is set for visible text deltas (recorded with a timestamp)."""

    data: dict[str, Any] | str
    event: str | None = None
    kind: EventKind = "block"
    text: str | None = None

    def encode(self) -> bytes:
        """The frame as bytes on the wire."""
        data = self.data if isinstance(self.data, str) else _dumps(self.data)
        head = f"event: {self.event}\n" if self.event else ""
        return f"{head}data: {data}\n\n".encode()


class WireEncoder(Protocol):
    """Turns one scripted response into a provider's SSE frames."""

    def events(self) -> Iterator[SseEvent]:
        """All frames of a successful stream, in order."""
        ...

    def error_events(self, error: FakeError) -> list[SseEvent]:
        """The frames a mid-stream failure sends before the stream ends."""
        ...


def new_id(prefix: str, length: int = 24, alphabet: str = _BASE62) -> str:
    """A random id in a provider's style, e.g. `new_id("toolu_01")`."""
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


def chunks(text: str, size: int) -> list[str]:
    """`text` cut into pieces of at most `size` characters (at least one piece)."""
    if not text:
        return [""]
    return [text[i : i + size] for i in range(0, len(text), size)]


def _dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
