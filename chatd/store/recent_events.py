"""A gateway's copy of the events its streamed chats were notified of, so that a stream
woken by a notification takes the new events from it instead of reading them back.

`chatd_append_events` (migration 030) puts a write's events on its notification when they
fit. Notifications come in commit order, and a chat's sequence numbers are taken in that
order, so a chat's notified events are contiguous unless one did not fit (or the listener
reconnected): the copy then starts again after the gap, and a cursor before it is read from
the log as before.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections import deque
from datetime import datetime

from chatd.store.events import ChatEvent, EventPage

__all__ = ["KEPT_PER_CHAT", "RecentEvents"]

KEPT_PER_CHAT = 32
"""Events kept per chat: a woken stream lacks only those since its last read, a handful, and
a gateway keeps this many for every chat it streams. A stream further behind reads from the
log. (Each notification is under 8 kB: together, within a read's limits.)"""


class RecentEvents:
    """Per watched chat, its latest notified events, contiguous."""

    def __init__(self) -> None:
        self._chats: dict[uuid.UUID, deque[ChatEvent]] = {}
        self._last: dict[uuid.UUID, int] = {}
        """The last notified seq of each chat, events kept or not."""

    def add(self, chat_id: uuid.UUID, notified: str) -> None:
        """Take in one notification's payload after its chat id: `<last seq>[:<events>]`."""
        last_text, _, body = notified.partition(":")
        last = int(last_text)
        kept = self._chats.setdefault(chat_id, deque(maxlen=KEPT_PER_CHAT))
        if not body:  # too large to carry its events: a gap
            kept.clear()
            self._last[chat_id] = last
            return
        first, at, names, payloads = json.loads(body)
        if first != self._last.get(chat_id, first - 1) + 1:
            kept.clear()  # a gap before these
        created_at = datetime.fromisoformat(at)
        kept.extend(
            ChatEvent.model_construct(seq=first + i, event=name, data=data, created_at=created_at)
            for i, (name, data) in enumerate(zip(names, payloads, strict=True))
        )
        self._last[chat_id] = last

    def after(self, chat_id: uuid.UUID, cursor: int) -> EventPage[ChatEvent] | None:
        """The events after `cursor`, if the copy holds every one of them up to the last
        notified; None if it can't tell (read them from the log)."""
        kept = self._chats.get(chat_id)
        if not kept or cursor < kept[0].seq - 1 or cursor > kept[-1].seq:
            return None
        # Contiguous: the event after the cursor is at its distance from the first kept.
        return EventPage(list(itertools.islice(kept, cursor - kept[0].seq + 1, None)), more=False)

    def shows_begun(self, chat_id: uuid.UUID, turn_id: str) -> bool:
        """Whether a kept event of the chat is its status in turn `turn_id`: the turn has
        begun (False says nothing: the event may not have fit its notification)."""
        return any(
            event.event == "status" and event.data.get("turn_id") == turn_id
            for event in self._chats.get(chat_id, ())
        )

    def forget(self, chat_id: uuid.UUID) -> None:
        """Drop a chat no stream watches any longer."""
        self._chats.pop(chat_id, None)
        self._last.pop(chat_id, None)

    def clear(self) -> None:
        """Drop everything: notifications were lost (the listener reconnected)."""
        self._chats.clear()
        self._last.clear()
