"""The owner's event log (migration 017): every `status`, `chat`, `error` and `subagent` event
of an owner's chats, numbered on the owner's own sequence as its transaction commits, each
naming its chat, with one notification per transaction on the owner's key."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from chatd.models import ModelConfig
from chatd.retention import Retention, RetentionSettings
from chatd.store.chats import ChatStore
from chatd.store.events import Conn, EventLog, append_events
from chatd.store.owner_events import (
    NOTIFY_CHANNEL,
    OwnerCursorExpired,
    OwnerEventLog,
    owner_key,
)
from chatd.store.turns import TurnStore


async def _chat(pool: asyncpg.Pool, owner: str = "o") -> uuid.UUID:
    return (await ChatStore(pool).create(owner=owner, model=ModelConfig())).id


async def test_watched_events_of_every_chat_get_the_owners_numbers(pool: asyncpg.Pool) -> None:
    first, second, stranger = await _chat(pool), await _chat(pool), await _chat(pool, "p")
    log = EventLog(pool)
    await log.publish(first, [("status", {"status": "running"}), ("message_part", {})])
    await log.publish_many(
        [(second, "chat", {"title": "t"}), (stranger, "status", {}), (second, "delta", {})]
    )
    await log.publish(first, [("retry", {}), ("error", {"kind": "auth"})])

    events = (await OwnerEventLog(pool).read_page("o", 0)).events
    assert [(e.seq, e.chat_id, e.event, e.data) for e in events] == [
        (1, first, "status", {"status": "running", "chat_id": str(first)}),
        (2, second, "chat", {"title": "t", "chat_id": str(second)}),
        (3, first, "error", {"kind": "auth", "chat_id": str(first)}),
    ]
    assert [e.event for e in (await OwnerEventLog(pool).read_page("o", 2)).events] == ["error"]
    assert [(e.seq, e.chat_id) for e in (await OwnerEventLog(pool).read_page("p", 0)).events] == [
        (1, stranger)
    ]
    assert await OwnerEventLog(pool).position("o") == (3, 0)
    assert await OwnerEventLog(pool).position("nobody") == (0, 0)


async def test_a_subagent_event_names_the_child_and_its_parent(pool: asyncpg.Pool) -> None:
    chats = ChatStore(pool)
    parent = await _chat(pool)
    child = await chats.create(owner="o", model=ModelConfig(), parent_chat_id=parent)
    await TurnStore(pool).set_status(child.id, "t", "requires_action")

    events = (await OwnerEventLog(pool).read_page("o", 0)).events
    assert [(e.chat_id, e.event, e.data.get("status")) for e in events] == [
        (parent, "subagent", "waiting"),  # the spawn
        (child.id, "status", "requires_action"),
        (parent, "subagent", "requires_action"),
    ]
    assert events[-1].data["chat_id"] == str(child.id)
    assert events[-1].data["parent_chat_id"] == str(parent)


async def test_numbers_are_taken_at_commit_and_only_by_commits(pool: asyncpg.Pool) -> None:
    chat_id = await _chat(pool)
    with pytest.raises(RuntimeError):
        async with pool.acquire() as conn, conn.transaction():
            await append_events(conn, chat_id, [("status", {"n": 0})])
            raise RuntimeError("the writer fails after publishing")
    async with pool.acquire() as slow:
        async with slow.transaction():
            await append_events(slow, chat_id, [("status", {"n": 1})])
            # Not committed: it holds no number yet, so a concurrent commit takes the first.
            other = await _chat(pool)
            fast = asyncio.create_task(EventLog(pool).publish(other, [("status", {"n": 2})]))
            fast_waited = await _waits_for_a_lock(pool, fast)
        await fast

    assert not fast_waited
    events = (await OwnerEventLog(pool).read_page("o", 0)).events
    assert [(e.seq, e.data["n"]) for e in events] == [(1, 2), (2, 1)]


async def test_concurrent_writers_leave_no_gap_and_keep_each_chats_order(
    pool: asyncpg.Pool,
) -> None:
    chats = [await _chat(pool) for _ in range(4)]

    async def publish(chat_id: uuid.UUID) -> None:
        for n in range(10):
            await EventLog(pool).publish(chat_id, [("status", {"n": n}), ("chat", {"n": n})])

    await asyncio.gather(*(publish(c) for c in chats))

    events = (await OwnerEventLog(pool).read_page("o", 0)).events
    assert [e.seq for e in events] == list(range(1, 81))
    for chat_id in chats:
        assert [e.data["n"] for e in events if e.chat_id == chat_id] == [
            n for n in range(10) for _ in range(2)
        ]


async def test_one_notification_per_transaction_on_the_owners_key(
    pool: asyncpg.Pool, database_url: str
) -> None:
    owner = "ówner/with:colons and ünicode"
    chat_id, other = await _chat(pool, owner), await _chat(pool, "p")
    heard: list[str] = []
    arrived = asyncio.Event()

    def listen(*args: object) -> None:
        heard.append(str(args[-1]))
        arrived.set()

    async def until_heard(count: int) -> None:
        while len(heard) < count:
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), 10)

    listener = await asyncpg.connect(database_url)
    await listener.add_listener(NOTIFY_CHANNEL, listen)
    try:
        await EventLog(pool).publish(chat_id, [("status", {}), ("message_part", {})])
        await EventLog(pool).publish(chat_id, [("message_part", {})])  # not watched
        await EventLog(pool).publish(chat_id, [("chat", {}), ("error", {}), ("status", {})])
        await until_heard(2)
        await EventLog(pool).publish(other, [("status", {})])  # after: the order is known
        await until_heard(3)
    finally:
        await listener.close()
    assert heard == [str(owner_key(owner))] * 2 + [str(owner_key("p"))]


async def test_a_cursor_below_the_pruned_mark_expires(pool: asyncpg.Pool) -> None:
    chat_id = await _chat(pool)
    await EventLog(pool).publish(chat_id, [("status", {})] * 3)
    await pool.execute("INSERT INTO owner_events_pruned (owner, through_seq) VALUES ('o', 2)")

    with pytest.raises(OwnerCursorExpired):
        await OwnerEventLog(pool).read_page("o", 1)
    assert [e.seq for e in (await OwnerEventLog(pool).read_page("o", 2)).events] == [3]
    assert await OwnerEventLog(pool).position("o") == (3, 2)


async def _age(pool: asyncpg.Pool, owner: str, seqs: list[int]) -> None:
    await pool.execute(
        "UPDATE owner_events SET created_at = now() - interval '2 days'"
        " WHERE owner = $1 AND seq = ANY($2)",
        owner,
        seqs,
    )


async def test_retention_prunes_each_owners_old_events_as_a_prefix(pool: asyncpg.Pool) -> None:
    mine, theirs = await _chat(pool), await _chat(pool, "p")
    for n in range(5):
        await EventLog(pool).publish(mine, [("status", {"n": n})])
    for n in range(2):
        await EventLog(pool).publish(theirs, [("status", {"n": n})])
    # 5 is as old as 1..3 (a clock stepped back), but 4 is newer: 5 stays with it.
    await _age(pool, "o", [1, 2, 3, 5])
    await _age(pool, "p", [1])
    retention = Retention(pool, RetentionSettings(batch=2), None)

    dry = await retention.run_round(dry_run=True)
    assert [p.count for p in dry.pruned if p.what == "owner_events"] == [4]
    assert await pool.fetchval("SELECT count(*) FROM owner_events") == 7
    done = await retention.run_round()
    assert [p.count for p in done.pruned if p.what == "owner_events"] == [4]

    log = OwnerEventLog(pool)
    assert await log.position("o") == (5, 3)
    assert await log.position("p") == (2, 1)
    with pytest.raises(OwnerCursorExpired):
        await log.read_page("o", 2)
    assert [e.seq for e in (await log.read_page("o", 3)).events] == [4, 5]
    assert [e.seq for e in (await log.read_page("p", 1)).events] == [2]
    again = await retention.run_round()
    assert [p.count for p in again.pruned if p.what == "owner_events"] == [0]


async def _waits_for_a_lock(pool: asyncpg.Pool, task: asyncio.Task[object]) -> bool:
    """Whether a backend of this database waits for a lock before `task` ends."""
    while not task.done():
        waiting = await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        if waiting:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_the_owners_row_is_locked_after_every_chat_row(pool: asyncpg.Pool) -> None:
    """One transaction publishes on a chat, then locks another; a second holds that other
    and publishes on it. If publishing took the owner's row at once, each would wait for the
    other's row (a deadlock). The row is taken at commit, after every chat row."""
    first, second = await _chat(pool), await _chat(pool)

    async def publish_then_lock(conn: Conn) -> None:
        async with conn.transaction():
            await append_events(conn, first, [("status", {"n": 1})])
            await conn.execute("SELECT 1 FROM chats WHERE id = $1 FOR UPDATE", second)

    async with pool.acquire() as one, pool.acquire() as two:
        async with two.transaction():
            await two.execute("SELECT 1 FROM chats WHERE id = $1 FOR UPDATE", second)
            locking = asyncio.create_task(publish_then_lock(one))
            assert await _waits_for_a_lock(pool, locking)
            await append_events(two, second, [("status", {"n": 2})])
        await locking

    events = (await OwnerEventLog(pool).read_page("o", 0)).events
    assert [(e.chat_id, e.data["n"]) for e in events] == [(second, 2), (first, 1)]
