"""Publishing stream deltas: one writer per worker process, batching across chats.

A step's first delta is written at once; the deltas after it gather for a frame
(`FRAME_S`), and then every chat's deltas of that frame go in one write (one statement, one
round trip, one notification per chat). Within a frame, a chat's consecutive fragments of
one part merge into one event: a stream of small deltas costs a row, a notification and an
SSE frame per frame, not per token. While a write is in flight the next one gathers, so a
busy database gets fewer, larger writes however many chats stream at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
import weakref
from typing import Any

from chatd.store.events import EventLog

__all__ = ["FRAME_S", "DeltaPublisher", "EventBatcher"]

FRAME_S = 0.025
"""How long deltas gather before they are written. Well under what a reader notices, and
longer than a fast model's gap between tokens, so its tokens merge."""

_MERGED_FIELDS = {"text": ("text", "reasoning"), "args_delta": ("tool_call",)}
"""The part fields that grow by concatenation, and the part types whose fragments carry them."""

Event = tuple[uuid.UUID, str, dict[str, Any]]


def _merged(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any] | None:
    """Two consecutive `message_part` events of a chat as one, if both are bare fragments of
    the same part (its index and type, and one growing field); otherwise None."""
    if earlier.keys() != {"role", "part"} or later.keys() != earlier.keys():
        return None
    if earlier["role"] != later["role"]:
        return None
    first, second = earlier["part"], later["part"]
    if first.keys() != second.keys() or len(first) != 3:
        return None
    if first["index"] != second["index"] or first["type"] != second["type"]:
        return None
    for field, types in _MERGED_FIELDS.items():
        if field in first and first["type"] in types:
            part = {**first, field: first[field] + second[field]}
            return {"role": earlier["role"], "part": part}
    return None


class EventBatcher:
    """The worker's single event writer (create it inside the event loop that uses it)."""

    def __init__(self, events: EventLog, frame_s: float = FRAME_S) -> None:
        self._events = events
        self._frame_s = frame_s
        self._pending: list[Event] = []
        self._last_pending: dict[uuid.UUID, int] = {}
        """Each chat's newest pending event: its index in `_pending`."""
        self._frame_opened = 0.0
        """When the first of the pending events came (loop time)."""
        self._now = asyncio.Event()
        """Set when the pending events must not wait for the frame's end."""
        self._waiters: list[asyncio.Future[None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._writing: asyncio.Future[None] | None = None
        """Resolved when the write in flight ends (None: none is)."""
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

    def add(self, chat_id: uuid.UUID, event: str, data: dict[str, Any], *, now: bool) -> None:
        """Queue an event: merged into the chat's pending fragment of the same part if it
        can be, written at once if `now`, else when the frame ends."""
        if not self._pending:
            self._frame_opened = asyncio.get_running_loop().time()
        last = self._last_pending.get(chat_id)
        if not now and last is not None and event == "message_part" == self._pending[last][1]:
            merged = _merged(self._pending[last][2], data)
            if merged is not None:
                self._pending[last] = (chat_id, event, merged)
                return
        if now:  # goes as it is: nothing merges into it
            self._last_pending.pop(chat_id, None)
            self._now.set()
        else:
            self._last_pending[chat_id] = len(self._pending)
        self._pending.append((chat_id, event, data))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())

    async def written(self) -> None:
        """Wait until everything added so far is stored (raise if its write failed)."""
        if not self._pending and (self._writer is None or self._writer.done()):
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._now.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        await asyncio.shield(waiter)

    async def take(self, chat_id: uuid.UUID) -> list[tuple[str, dict[str, Any]]]:
        """The chat's events not written yet, no longer the batcher's to write: the caller's
        own statement writes them, after the write in flight (which may hold the chat's
        earlier events) is stored. Raise if it lost any of the chat's events."""
        mine: list[tuple[str, dict[str, Any]]] = []
        kept: list[Event] = []
        moved: dict[int, int] = {}
        for index, (chat, event, data) in enumerate(self._pending):
            if chat == chat_id:
                mine.append((event, data))
            else:
                moved[index] = len(kept)
                kept.append((chat, event, data))
        self._pending = kept
        self._last_pending = {
            chat: moved[index] for chat, index in self._last_pending.items() if chat != chat_id
        }
        if self._writing is not None:
            await asyncio.shield(self._writing)
        self.raise_if_lost(chat_id)
        return mine

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending or self._waiters:
            frame_left = self._frame_opened + self._frame_s - loop.time()
            if frame_left > 0 and not self._now.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._now.wait(), frame_left)
            self._now.clear()
            batch, self._pending = self._pending, []
            self._last_pending.clear()
            waiters, self._waiters = self._waiters, []
            self._writing = writing = loop.create_future()
            try:
                await self._events.publish_many(batch)
            except Exception as err:  # every chat and waiter of this batch learns it was lost
                for chat_id, _, _ in batch:
                    self._failed[chat_id] = err
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(err)
                continue
            finally:
                writing.set_result(None)
                self._writing = None
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)


class DeltaPublisher:
    """One model step's view of the batcher: its chat's events, in order."""

    def __init__(self, batcher: EventBatcher, chat_id: uuid.UUID) -> None:
        self._batcher = batcher
        self._chat_id = chat_id
        self._streaming = False
        """Whether a delta of this step went out: the first is not held for the frame."""
        batcher.forget_losses(chat_id)  # a loss in an earlier step is that step's concern
        batcher.claim(chat_id, self)

    def add(self, event: str, data: dict[str, Any]) -> None:
        """Queue an event of this chat; raise if earlier ones were lost (clients would miss
        them, so the attempt fails and is retried from a `reset`). A publisher a newer
        attempt on this worker has replaced publishes nothing."""
        if not self._batcher.is_latest(self._chat_id, self):
            return
        self._batcher.raise_if_lost(self._chat_id)
        delta = event == "message_part"
        self._batcher.add(self._chat_id, event, data, now=not (delta and self._streaming))
        self._streaming = self._streaming or delta

    async def unwritten(self) -> list[tuple[str, dict[str, Any]]]:
        """This step's events not written yet, for the caller's statement to write before its
        own: the batcher writes them no more (`EventBatcher.take`)."""
        return await self._batcher.take(self._chat_id)

    async def drain(self) -> None:
        """Wait until this step's events so far are stored (raise if any were lost)."""
        await self._batcher.written()
        self._batcher.raise_if_lost(self._chat_id)
