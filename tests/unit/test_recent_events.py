"""Streams take the events their notification carried instead of reading them back, and
read the log whenever the notified copy can't say it has every event after the cursor."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from test_stream_reads import CountedEventLog

from api.sending import until_begun
from api.stream_reads import SharedReads
from chatd.models import ModelConfig
from chatd.parts import TextPart
from chatd.store.chats import ChatStore
from chatd.store.events import NOTIFY_CHANNEL, READ_BATCH_BYTES, READ_BATCH_EVENTS, EventLog
from chatd.store.listen_hub import ListenHub
from chatd.store.recent_events import KEPT_PER_CHAT, RecentEvents
from chatd.store.transcript import TranscriptStore
from chatd.store.turns import TurnStore


@pytest.fixture
async def hub(pool: asyncpg.Pool, database_url: str) -> AsyncIterator[ListenHub]:
    """The gateway's listener, keeping what it is notified of (`pool` migrated the
    database)."""
    listening = ListenHub(
        database_url, NOTIFY_CHANNEL, wake_all_on_reconnect=True, recent=RecentEvents()
    )
    await listening.start()
    yield listening
    await listening.stop()


async def _published(
    pool: asyncpg.Pool,
    wake: asyncio.Event,
    chat_id: uuid.UUID,
    events: list[tuple[str, dict[str, Any]]],
) -> None:
    """Publish `events` as the worker does (one statement for the batch) and wait until the
    notification woke the stream."""
    wake.clear()
    await EventLog(pool).publish_many([(chat_id, name, data) for name, data in events])
    await asyncio.wait_for(wake.wait(), 10)


async def test_a_woken_stream_takes_the_notified_events_without_a_read(
    pool: asyncpg.Pool, hub: ListenHub
) -> None:
    chat_id = (await ChatStore(pool).create(owner="o", model=ModelConfig())).id
    await EventLog(pool).publish(chat_id, [("status", {"status": "running"})])
    log = CountedEventLog(pool)
    reads = SharedReads(log, hub.recent)
    with hub.subscribe(chat_id) as wake:
        first = await reads.after(chat_id, 0, reads.mark())
        assert (first.cursor, log.reads) == (1, 1), "before any notification: from the log"
        deltas = [("message_part", {"part": {"type": "text", "text": f"d{i} é"}}) for i in range(5)]
        await _published(pool, wake, chat_id, deltas)
        notified = await reads.after(chat_id, first.cursor, reads.mark())
        assert log.reads == 1, "the notification carried the events"
        assert notified.cursor == 6
        assert notified.frames == (await SharedReads(EventLog(pool)).after(chat_id, 1, 0)).frames
        await _published(pool, wake, chat_id, [("status", {"status": "waiting"})])
        # Two streams, one behind the other: both answered from the copy.
        behind, level = await asyncio.gather(
            reads.after(chat_id, first.cursor, reads.mark()), reads.after(chat_id, 6, reads.mark())
        )
        assert log.reads == 1
        assert (behind.cursor, level.cursor) == (7, 7)
        assert level.frames == 'id: 7\nevent: status\ndata: {"status": "waiting"}\n\n'
        assert behind.frames.endswith(level.frames) and behind.frames.count("id: ") == 6


async def test_events_too_large_for_their_notification_are_read_from_the_log(
    pool: asyncpg.Pool, hub: ListenHub
) -> None:
    chat_id = (await ChatStore(pool).create(owner="o", model=ModelConfig())).id
    log = CountedEventLog(pool)
    reads = SharedReads(log, hub.recent)
    with hub.subscribe(chat_id) as wake:
        await _published(pool, wake, chat_id, [("n", {"n": 1})])
        large = [("message_part", {"part": {"type": "text", "text": "x" * 9000}})]
        await _published(pool, wake, chat_id, large)
        await _published(pool, wake, chat_id, [("n", {"n": 3})])
        batch = await reads.after(chat_id, 0, reads.mark())
        assert (batch.cursor, log.reads) == (3, 1), "the gap before event 3: from the log"
        assert batch.frames.count("id: ") == 3 and "x" * 9000 in batch.frames
        after_gap = await reads.after(chat_id, 2, reads.mark())
        assert (after_gap.cursor, log.reads) == (3, 1), "after the gap: from the copy"


async def test_a_chat_no_stream_watches_is_not_kept(pool: asyncpg.Pool, hub: ListenHub) -> None:
    chat_id = (await ChatStore(pool).create(owner="o", model=ModelConfig())).id
    assert hub.recent is not None
    with hub.subscribe(chat_id) as wake:
        await _published(pool, wake, chat_id, [("n", {"n": 1})])
        assert hub.recent.after(chat_id, 0) is not None
    assert hub.recent.after(chat_id, 0) is None


def _notified(first: int, count: int, *, body: bool = True) -> str:
    """A payload after its chat id, as `chatd_append_events` writes it."""
    last = first + count - 1
    if not body:
        return str(last)
    names = ", ".join('"n"' for _ in range(count))
    data = ", ".join(f'{{"n": {first + i}}}' for i in range(count))
    return f'{last}:[{first}, "2026-12-06T23:59:59.5+00:00", [{names}], [{data}]]'


def test_the_copy_answers_only_what_it_holds_without_a_gap() -> None:
    recent, chat = RecentEvents(), uuid.uuid4()
    recent.add(chat, _notified(5, 3))
    assert recent.after(chat, 3) is None, "event 4 came before the copy began"
    page = recent.after(chat, 4)
    assert page is not None and [e.seq for e in page.events] == [5, 6, 7]
    assert [e.data for e in page.events] == [{"n": 5}, {"n": 6}, {"n": 7}]
    done = recent.after(chat, 7)
    assert done is not None and done.events == [], "nothing after the last notified"
    assert recent.after(chat, 8) is None, "a cursor ahead of the copy: the log knows"
    recent.add(chat, _notified(8, 1, body=False))
    recent.add(chat, _notified(9, 2))
    assert recent.after(chat, 7) is None, "event 8 was not carried"
    after = recent.after(chat, 8)
    assert after is not None and [e.seq for e in after.events] == [9, 10]
    recent.add(chat, _notified(12, 1))
    assert recent.after(chat, 10) is None, "event 11's notification never came"
    recent.add(chat, _notified(13, KEPT_PER_CHAT))
    assert recent.after(chat, 11) is None, "the oldest kept events make room"
    kept = recent.after(chat, 12)
    assert kept is not None and len(kept.events) == KEPT_PER_CHAT
    recent.clear()
    assert recent.after(chat, 12 + KEPT_PER_CHAT) is None


def test_what_a_chat_keeps_fits_in_one_read() -> None:
    """Each notification is under 8,000 bytes."""
    assert KEPT_PER_CHAT <= READ_BATCH_EVENTS
    assert KEPT_PER_CHAT * 8000 <= READ_BATCH_BYTES


class _CountedTranscript(TranscriptStore):
    """Counts the reads of whether a message was promoted."""

    promoted_reads = 0

    async def is_promoted(self, queued_id: uuid.UUID) -> bool:
        self.promoted_reads += 1
        return await super().is_promoted(queued_id)


async def _reads_until_begun(
    pool: asyncpg.Pool, hub: ListenHub, chat_id: uuid.UUID, text: str
) -> tuple[int, bool, bool]:
    """Wait, as a send does, for the turn of a message of `text` to begin, while it begins:
    the reads of the message the wait made, and whether the gateway's copy then shows that
    turn begun, and another."""
    transcript = _CountedTranscript(pool)
    queued, _ = await transcript.enqueue(chat_id, [TextPart(text=text)], None)
    assert hub.recent is not None
    with hub.subscribe(chat_id) as wake:
        waiting = asyncio.create_task(
            until_begun(transcript, TurnStore(pool), chat_id, queued.id, wake, hub.recent)
        )
        assert await TurnStore(pool).begin(chat_id, str(queued.id))
        await asyncio.wait_for(waiting, 10)
        shown = hub.recent.shows_begun(chat_id, str(queued.id))
        other = hub.recent.shows_begun(chat_id, str(uuid.uuid4()))
    return transcript.promoted_reads, shown, other


async def test_a_send_sees_its_turn_begun_on_the_begins_notification(
    pool: asyncpg.Pool, hub: ListenHub
) -> None:
    """The gateway waits for the turn a send started to begin; the begin's `status` event,
    carried by its notification, says so without reading the message back."""
    chat_id = (await ChatStore(pool).create(owner="o", model=ModelConfig())).id
    reads, shown, other = await _reads_until_begun(pool, hub, chat_id, "hi")
    assert (reads, shown) == (0, True)
    assert not other, "another turn's is not shown begun"


async def test_a_begin_whose_events_did_not_fit_is_read_back(
    pool: asyncpg.Pool, hub: ListenHub
) -> None:
    """A message too large for the begin's notification: the wait reads whether it began."""
    chat_id = (await ChatStore(pool).create(owner="o", model=ModelConfig())).id
    reads, shown, _ = await _reads_until_begun(pool, hub, chat_id, "x" * 10_000)
    assert (reads, shown) == (1, False)
