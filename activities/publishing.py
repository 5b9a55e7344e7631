"""Coalescing publisher for stream deltas.

Deltas are appended to the chat's event log as they arrive; while one write is in
flight the next deltas gather, so a busy database gets fewer, larger writes and an
idle one sees each delta at once.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from chatd.store.events import EventLog

__all__ = ["DeltaPublisher"]


class DeltaPublisher:
    """Publishes events for one chat in order, batching while a write is in flight."""

    def __init__(self, events: EventLog, chat_id: uuid.UUID) -> None:
        self._events = events
        self._chat_id = chat_id
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self._writer: asyncio.Task[None] | None = None

    def add(self, event: str, data: dict[str, Any]) -> None:
        """Queue an event; a write starts now unless one is running."""
        self._pending.append((event, data))
        if self._writer is None or self._writer.done():
            if self._writer is not None:
                self._writer.result()  # surface a failed write
            self._writer = asyncio.create_task(self._write())

    async def drain(self) -> None:
        """Wait until everything added so far is stored."""
        # A writer drains `_pending` before it ends, and `add` starts a new one after
        # that, so waiting for whichever writer is current until it is done suffices.
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)
        if self._writer is not None:
            self._writer.result()

    async def _write(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            await self._events.publish(self._chat_id, batch)
