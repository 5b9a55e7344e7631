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
from chatd.store.recent_events import RecentEvents

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
    more: bool
    """Whether events the read left out (over its limits) follow."""


@dataclass
class _Read:
    batch: asyncio.Future[Batch] | None = None
    sent: int | None = None
    """When its query went out (a `mark`); None before."""


class SharedReads:
    """Reads in flight, by (chat, cursor). A stream joins one whose query was not yet sent
    when the stream cleared its wake-up flag: the query then sees at least what one of the
    stream's own would have."""

    def __init__(self, events: EventLog, recent: RecentEvents | None = None) -> None:
        """`recent`: the events notified lately, answered from without a query when they
        are all the stream lacks."""
        self._events = events
        self._recent = recent
        self._ticks = itertools.count()
        self._reads: dict[tuple[uuid.UUID, int], _Read] = {}

    def mark(self) -> int:
        """Now, for `after`: take it just before clearing the stream's wake-up flag."""
        return next(self._ticks)

    async def after(self, chat_id: uuid.UUID, cursor: int, since: int) -> Batch:
        """The events after `cursor`, from a read whose query is sent after `since` (`mark`).

        Raises what the read raises (`CursorExpired` among them). A stream cancelled while it
        waits leaves the read to the others.
        """
        key = (chat_id, cursor)
        read = self._reads.get(key)
        if read is None or (read.sent is not None and read.sent < since):
            read = _Read()
            batch = asyncio.ensure_future(self._read(read, chat_id, cursor))
            read.batch = batch
            self._reads[key] = read
            batch.add_done_callback(lambda _: self._forget(key, read))
        assert read.batch is not None
        return await asyncio.shield(read.batch)

    async def _read(self, read: _Read, chat_id: uuid.UUID, cursor: int) -> Batch:
        read.sent = self.mark()
        notified = self._recent.after(chat_id, cursor) if self._recent is not None else None
        page = notified if notified is not None else await self._events.read_page(chat_id, cursor)
        if not page.events:
            return Batch("", cursor, more=False)
        return Batch("".join(_frame(e) for e in page.events), page.events[-1].seq, page.more)

    def _forget(self, key: tuple[uuid.UUID, int], read: _Read) -> None:
        if self._reads.get(key) is read:
            del self._reads[key]
        if read.batch is not None and not read.batch.cancelled():
            read.batch.exception()  # retrieved: every waiter may have gone
