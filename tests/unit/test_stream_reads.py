"""Streams of one chat share their reads: one query per wake-up, and never a read that began
before a stream was woken."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from api.stream_reads import Batch, SharedReads
from chatd.models import ModelConfig
from chatd.store.chats import ChatStore
from chatd.store.events import ChatEvent, CursorExpired, EventLog, EventPage


class CountedEventLog(EventLog):
    """The real event log, counting its reads; `hold` keeps them from starting."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool)
        self.reads = 0
        self.hold = asyncio.Event()
        self.hold.set()

    async def read_page(
        self, chat_id: uuid.UUID, seq: int, limit: int = 500, max_bytes: int = 1 << 20
    ) -> EventPage[ChatEvent]:
        self.reads += 1
        await self.hold.wait()
        return await super().read_page(chat_id, seq, limit, max_bytes)


async def _chat(pool: asyncpg.Pool, events: int) -> uuid.UUID:
    chat_id = (await ChatStore(pool).create(owner="o", model=ModelConfig())).id
    await EventLog(pool).publish(chat_id, [("n", {"n": n}) for n in range(events)])
    return chat_id


async def test_streams_woken_together_share_one_read(pool: asyncpg.Pool) -> None:
    chat_id = await _chat(pool, 3)
    log = CountedEventLog(pool)
    reads = SharedReads(log)

    async def woken() -> Batch:
        """What a stream does on waking: mark, clear its flag, read."""
        return await reads.after(chat_id, 0, reads.mark())

    batches = await asyncio.gather(*(woken() for _ in range(50)))
    assert log.reads == 1
    assert {b.cursor for b in batches} == {3}
    assert len({b.frames for b in batches}) == 1
    assert batches[0].frames.count("event: n\n") == 3


async def test_a_stream_woken_after_a_read_began_reads_again(pool: asyncpg.Pool) -> None:
    """The read in flight may have missed what woke the later stream."""
    chat_id = await _chat(pool, 1)
    log = CountedEventLog(pool)
    reads = SharedReads(log)
    log.hold.clear()
    early = asyncio.create_task(reads.after(chat_id, 0, reads.mark()))
    await asyncio.sleep(0)
    await EventLog(pool).publish(chat_id, [("n", {"n": 1})])
    late = asyncio.create_task(reads.after(chat_id, 0, reads.mark()))
    await asyncio.sleep(0)
    log.hold.set()
    assert (await late).cursor == 2
    assert (await early).cursor in (1, 2)
    assert log.reads == 2


async def test_a_cancelled_stream_leaves_the_read_to_the_others(pool: asyncpg.Pool) -> None:
    chat_id = await _chat(pool, 2)
    log = CountedEventLog(pool)
    reads = SharedReads(log)
    log.hold.clear()
    since = reads.mark()
    gone = asyncio.create_task(reads.after(chat_id, 0, since))
    staying = asyncio.create_task(reads.after(chat_id, 0, since))
    await asyncio.sleep(0)
    gone.cancel()
    log.hold.set()
    assert (await staying).cursor == 2 and log.reads == 1


async def test_an_expired_cursor_reaches_every_stream_of_the_read(pool: asyncpg.Pool) -> None:
    chat_id = await _chat(pool, 3)
    await pool.execute(
        "INSERT INTO chat_events_pruned (chat_id, through_seq) VALUES ($1, 2)", chat_id
    )
    reads = SharedReads(CountedEventLog(pool))
    since = reads.mark()
    outcomes = await asyncio.gather(
        *(reads.after(chat_id, 1, since) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(o, CursorExpired) for o in outcomes)
