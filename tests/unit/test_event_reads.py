"""Reading a chat's events for the stream: batches bounded in events and in bytes."""

from __future__ import annotations

import json
import os
import uuid

import asyncpg

from chatd.models import ModelConfig
from chatd.store.chats import ChatStore
from chatd.store.events import EventLog


def _payload(size: int) -> dict[str, str]:
    """Data whose JSON is about `size` bytes (random, so no compression hides it)."""
    return {"blob": os.urandom(size // 2).hex()}


async def test_a_batch_stops_at_the_byte_budget_but_always_holds_one_event(
    pool: asyncpg.Pool,
) -> None:
    chat_id = (await ChatStore(pool).create(owner="o", model=ModelConfig())).id
    log = EventLog(pool)
    await log.publish(chat_id, [("big", _payload(300_000)) for _ in range(5)])
    await log.publish(chat_id, [("small", {"n": n}) for n in range(3)])

    batch = (await log.read_page(chat_id, 0, max_bytes=1_000_000)).events
    assert [e.seq for e in batch] == [1, 2, 3]
    assert sum(len(json.dumps(e.data)) for e in batch) <= 1_000_000
    assert [e.seq for e in (await log.read_page(chat_id, 0, max_bytes=10)).events] == [1]
    assert [e.seq for e in (await log.read_page(chat_id, 5, max_bytes=10)).events] == [6]
    assert [e.seq for e in (await log.read_page(chat_id, 5)).events] == [6, 7, 8]
    assert [e.seq for e in (await log.read_page(chat_id, 0, limit=2)).events] == [1, 2]
    assert (await log.read_page(chat_id, 8)).events == []
    assert (await log.read_page(uuid.uuid4(), 0)).events == []


async def test_a_page_says_whether_events_it_left_out_follow(pool: asyncpg.Pool) -> None:
    """A stream reads on at once only after a page its limits cut short; otherwise it waits
    for a notification (each read that finds nothing is a wasted round trip)."""
    chat_id = (await ChatStore(pool).create(owner="o", model=ModelConfig())).id
    log = EventLog(pool)
    await log.publish(chat_id, [("big", _payload(300_000)) for _ in range(2)])
    await log.publish(chat_id, [("small", {"n": n}) for n in range(3)])

    pages = {
        "cut by bytes": await log.read_page(chat_id, 0, max_bytes=400_000),
        "cut by count": await log.read_page(chat_id, 2, limit=2),
        "count reached, nothing after": await log.read_page(chat_id, 3, limit=2),
        "all of it": await log.read_page(chat_id, 0),
        "nothing": await log.read_page(chat_id, 5),
    }
    assert {name: ([e.seq for e in p.events], p.more) for name, p in pages.items()} == {
        "cut by bytes": ([1], True),
        "cut by count": ([3, 4], True),
        "count reached, nothing after": ([4, 5], False),
        "all of it": ([1, 2, 3, 4, 5], False),
        "nothing": ([], False),
    }
