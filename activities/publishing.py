"""Publishing stream deltas: one writer per worker process, batching across chats.

Deltas are written as they arrive; while one write is in flight, the deltas of every chat
on this worker gather and go in the next write (one statement, one round trip). An idle
database sees each delta at once; a busy one gets fewer, larger writes, however many chats
stream at the same time.
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from typing import Any

from chatd.store.events import EventLog

__all__ = ["DeltaPublisher", "EventBatcher"]


class EventBatcher:
    """The worker's single event writer (create it inside the event loop that uses it)."""

    def __init__(self, events: EventLog) -> None:
        self._events = events
        self._pending: list[tuple[uuid.UUID, str, dict[str, Any]]] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._failed: dict[uuid.UUID, Exception] = {}
        """Chats whose events were lost in a failed write: their step must start over."""
        self._latest: weakref.WeakValueDictionary[uuid.UUID, DeltaPublisher] = (
            weakref.WeakValueDictionary()
        )
        """Each chat's newest step publisher on this worker (gone with its step)."""

    def claim(self, chat_id: uuid.UUID, publisher: DeltaPublisher) -> None:
        """Make `publisher` the chat's only one: an older attempt this worker still runs
        (abandoned, its cancellation not yet delivered) publishes nothing after the new
        attempt's `reset`."""
        self._latest[chat_id] = publisher

    def is_latest(self, chat_id: uuid.UUID, publisher: DeltaPublisher) -> bool:
        return self._latest.get(chat_id) is publisher

    def raise_if_lost(self, chat_id: uuid.UUID) -> None:
        """Raise the write error that lost some of this chat's events, once."""
        error = self._failed.pop(chat_id, None)
        if error is not None:
            raise error

    def forget_losses(self, chat_id: uuid.UUID) -> None:
        """Start a chat's new step with a clean slate."""
        self._failed.pop(chat_id, None)

    def add(self, chat_id: uuid.UUID, event: str, data: dict[str, Any]) -> None:
        """Queue an event; a write starts now unless one is running."""
        self._pending.append((chat_id, event, data))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())

    async def written(self) -> None:
        """Wait until everything added so far is stored (raise if its write failed)."""
        if not self._pending and (self._writer is None or self._writer.done()):
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        await asyncio.shield(waiter)

    async def _write(self) -> None:
        while self._pending or self._waiters:
            batch, self._pending = self._pending, []
            waiters, self._waiters = self._waiters, []
            try:
                await self._events.publish_many(batch)
            except Exception as err:  # every chat and waiter of this batch learns it was lost
                for chat_id, _, _ in batch:
                    self._failed[chat_id] = err
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(err)
                continue
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)


class DeltaPublisher:
    """One model step's view of the batcher: its chat's events, in order."""

    def __init__(self, batcher: EventBatcher, chat_id: uuid.UUID) -> None:
        self._batcher = batcher
        self._chat_id = chat_id
        batcher.forget_losses(chat_id)  # a loss in an earlier step is that step's concern
        batcher.claim(chat_id, self)

    def add(self, event: str, data: dict[str, Any]) -> None:
        """Queue an event of this chat; raise if earlier ones were lost (clients would miss
        them, so the attempt fails and is retried from a `reset`). A publisher a newer
        attempt on this worker has replaced publishes nothing."""
        if not self._batcher.is_latest(self._chat_id, self):
            return
        self._batcher.raise_if_lost(self._chat_id)
        self._batcher.add(self._chat_id, event, data)

    async def drain(self) -> None:
        """Wait until this step's events so far are stored (raise if any were lost)."""
        await self._batcher.written()
        self._batcher.raise_if_lost(self._chat_id)
