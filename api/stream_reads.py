"""Reads of a chat's events shared by the streams that watch it: one query and one rendering
per wake-up, however many clients stream the chat from the same cursor.

Every stream of a chat wakes on each of its notifications; without sharing, a chat watched
by a hundred clients costs a hundred identical queries per event.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from dataclasses import dataclass

from chatd.store.events import ChatEvent, EventLog

__all__ = ["Batch", "SharedReads"]


def _frame(event: ChatEvent) -> str:
    """One event as an SSE frame."""
    return f"id: {event.seq}\nevent: {event.event}\ndata: {json.dumps(event.data)}\n\n"


@dataclass(frozen=True)
class Batch:
    """Events after a cursor, as the frames to send, and the cursor after them."""

    frames: str
    """Empty when no event followed the cursor."""
    cursor: int


@dataclass
class _Read:
    started: int
    batch: asyncio.Future[Batch]


class SharedReads:
    """Reads in flight, by (chat, cursor): a stream joins one that started after it was woken,
    so it sees at least what a read of its own would have."""

    def __init__(self, events: EventLog) -> None:
        self._events = events
        self._ticks = itertools.count()
        self._reads: dict[tuple[uuid.UUID, int], _Read] = {}

    def mark(self) -> int:
        """Now, for `after`: take it just before clearing the stream's wake-up flag."""
        return next(self._ticks)

    async def after(self, chat_id: uuid.UUID, cursor: int, since: int) -> Batch:
        """The events after `cursor`, from a read that started after `since` (`mark`).

        Raises what the read raises (`CursorExpired` among them). A stream cancelled while it
        waits leaves the read to the others.
        """
        key = (chat_id, cursor)
        read = self._reads.get(key)
        if read is None or read.started < since:
            read = _Read(next(self._ticks), asyncio.ensure_future(self._read(chat_id, cursor)))
            self._reads[key] = read
            read.batch.add_done_callback(lambda _: self._forget(key, read))
        return await asyncio.shield(read.batch)

    async def _read(self, chat_id: uuid.UUID, cursor: int) -> Batch:
        events = await self._events.read_after(chat_id, cursor)
        if not events:
            return Batch("", cursor)
        return Batch("".join(_frame(e) for e in events), events[-1].seq)

    def _forget(self, key: tuple[uuid.UUID, int], read: _Read) -> None:
        if self._reads.get(key) is read:
            del self._reads[key]
        if not read.batch.cancelled():
            read.batch.exception()  # retrieved: every waiter may have gone
