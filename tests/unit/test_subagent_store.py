"""Subagents in the store: a child chat sits one level below its parent (same owner), its
parent lists it and counts its usage, and every change of its status or title reaches the
parent's stream as a `subagent` event in the same transaction (migration 016's trigger)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest
from support.spend import unpriced_attempt

from api.schemas import ChatOut
from chatd.models import ModelConfig
from chatd.parts import TextPart, Usage
from chatd.store.chat_reads import ChatReads
from chatd.store.chats import ChatStore
from chatd.store.events import NOTIFY_CHANNEL, EventLog
from chatd.store.keys import KeyStore, hash_key
from chatd.store.transcript import NewMessage, TranscriptStore
from chatd.store.turns import TurnStore


async def _turn(pool: asyncpg.Pool, chat_id: uuid.UUID, usage: Usage) -> str:
    """Run a one-step turn on the chat through the real writes: begin it, then save its last
    step, which finishes it and recounts the chat's usage."""
    queued, _ = await TranscriptStore(pool).enqueue(chat_id, [TextPart(text="go")], None)
    turn_id = str(queued.id)
    turns = TurnStore(pool)
    assert await turns.begin(chat_id, turn_id)
    step = NewMessage("0:assistant", "assistant", [TextPart(text="done")], usage)
    assert await turns.save_last_step(
        chat_id, turn_id, step, unpriced_attempt(chat_id, turn_id, step)
    )
    return turn_id


async def _subagent_events(pool: asyncpg.Pool, chat_id: uuid.UUID) -> list[dict[str, Any]]:
    return [
        e.data for e in (await EventLog(pool).read_page(chat_id, 0)).events if e.event == "subagent"
    ]


async def test_a_child_is_one_level_below_its_parent(pool: asyncpg.Pool) -> None:
    chats = ChatStore(pool)
    fallback = [ModelConfig(provider="openai", name="gpt-4o", temperature=0.5)]
    root = await chats.create(owner="o", model=ModelConfig(), subagents=True)
    child = await chats.create(
        owner="o", model=ModelConfig(), parent_chat_id=root.id, fallback_models=fallback
    )
    grandchild = await chats.create(owner="o", model=ModelConfig(), parent_chat_id=child.id)

    assert (root.parent_chat_id, root.depth, root.subagents, root.fallback_models) == (
        None,
        0,
        True,
        [],
    )
    assert (child.parent_chat_id, child.depth, child.subagents) == (root.id, 1, False)
    assert (grandchild.parent_chat_id, grandchild.depth) == (child.id, 2)
    assert await chats.get(child.id, "o") == child
    assert child.fallback_models == fallback


async def test_a_parent_must_be_the_owners_chat(pool: asyncpg.Pool) -> None:
    chats = ChatStore(pool)
    theirs = await chats.create(owner="them", model=ModelConfig())
    for parent in (theirs.id, uuid.uuid4()):
        chat_id = uuid.uuid4()
        with pytest.raises(LookupError):
            await chats.create(
                owner="o", model=ModelConfig(), parent_chat_id=parent, chat_id=chat_id
            )
        assert await chats.get(chat_id) is None
    assert await _subagent_events(pool, theirs.id) == []


async def test_a_retried_spawn_makes_one_child_and_one_event(pool: asyncpg.Pool) -> None:
    chats = ChatStore(pool)
    root = await chats.create(owner="o", model=ModelConfig())
    chat_id = uuid.uuid4()
    first = await chats.create(
        owner="o", model=ModelConfig(), title="task", parent_chat_id=root.id, chat_id=chat_id
    )
    again = await chats.create(
        owner="o", model=ModelConfig(), title="task", parent_chat_id=root.id, chat_id=chat_id
    )

    assert again == first
    assert [c.id for c in await chats.children(root.id, "o")] == [chat_id]
    assert await _subagent_events(pool, root.id) == [
        {"chat_id": str(chat_id), "status": "waiting", "title": "task"}
    ]


async def test_children_are_listed_in_spawn_order_and_lists_show_roots(
    pool: asyncpg.Pool,
) -> None:
    chats = ChatStore(pool)
    root = await chats.create(owner="o", model=ModelConfig())
    first = await chats.create(owner="o", model=ModelConfig(), parent_chat_id=root.id)
    second = await chats.create(owner="o", model=ModelConfig(), parent_chat_id=root.id)
    grandchild = await chats.create(owner="o", model=ModelConfig(), parent_chat_id=first.id)
    await TranscriptStore(pool).enqueue(second.id, [TextPart(text="waits")], None)

    children = await chats.children(root.id, "o")

    assert [c.id for c in children] == [first.id, second.id]
    assert [c.parent_chat_id for c in children] == [root.id, root.id]
    assert [c.queued_count for c in children] == [0, 1]
    assert [c.id for c in await chats.children(first.id, "o")] == [grandchild.id]
    assert await chats.children(root.id, "them") == []


async def test_key_reads_list_roots_and_count_the_childrens_usage(pool: asyncpg.Pool) -> None:
    chats, reads = ChatStore(pool), ChatReads(pool)
    key = hash_key(await KeyStore(pool).create("o"))
    root = await chats.create(owner="o", model=ModelConfig())
    child = await chats.create(owner="o", model=ModelConfig(), parent_chat_id=root.id)
    grandchild = await chats.create(owner="o", model=ModelConfig(), parent_chat_id=child.id)
    await _turn(pool, root.id, Usage(input_tokens=1000, output_tokens=100))
    await _turn(pool, child.id, Usage(input_tokens=10, output_tokens=1))
    await _turn(pool, grandchild.id, Usage(input_tokens=5, cache_read_tokens=2))

    _, view = await reads.chat_with_queue(root.id, key, ChatOut)
    _, leaf = await reads.chat_with_queue(grandchild.id, key, ChatOut)

    assert view is not None and leaf is not None
    assert view.usage.input_tokens == 1000
    assert view.usage.children == Usage(input_tokens=15, output_tokens=1, cache_read_tokens=2)
    assert leaf.usage.children is None
    assert await chats.children_usage(root.id) == view.usage.children
    assert await chats.children_usage(grandchild.id) is None
    _, roots = await reads.summaries(key, limit=10, before=None, max_bytes=1 << 20)
    _, every = await reads.summaries(
        key, limit=10, before=None, max_bytes=1 << 20, include_children=True
    )
    assert [c.id for c in roots.rows] == [root.id]
    assert {c.id for c in every.rows} == {root.id, child.id, grandchild.id}


async def test_a_childs_status_and_title_reach_its_parents_stream(
    pool: asyncpg.Pool, database_url: str
) -> None:
    chats = ChatStore(pool)
    root = await chats.create(owner="o", model=ModelConfig())
    notified: list[str] = []
    newest = asyncio.Event()

    def heard(*args: object) -> None:
        notified.append(str(args[-1]))
        newest.set()

    listener = await asyncpg.connect(database_url)
    await listener.add_listener(NOTIFY_CHANNEL, heard)
    try:
        child = await chats.create(owner="o", model=ModelConfig(), parent_chat_id=root.id)
        await _turn(pool, child.id, Usage())  # running, then waiting
        await chats.set_generated_title(child.id, "named")
        await chats.update_settings(child.id, "o", tool_policy={"x": "deny"})  # neither
        await chats.update_settings(child.id, "o", title="renamed")
        last_seq = await EventLog(pool).last_seq(root.id)
        while not any(p.startswith(f"{root.id}:{last_seq}:") for p in notified):
            newest.clear()
            await asyncio.wait_for(newest.wait(), 10)
    finally:
        await listener.close()

    events = (await EventLog(pool).read_page(root.id, 0)).events
    assert [e.seq for e in events] == list(range(1, last_seq + 1))
    assert [e.event for e in events] == ["subagent"] * 5
    assert [e.data for e in events] == [
        {"chat_id": str(child.id), "status": status, "title": title}
        for status, title in [
            ("waiting", None),
            ("running", None),
            ("waiting", None),
            ("waiting", "named"),
            ("waiting", "renamed"),
        ]
    ]
    assert await _subagent_events(pool, child.id) == []  # a root's changes go nowhere


async def test_a_subagent_event_is_published_only_if_the_change_commits(
    pool: asyncpg.Pool,
) -> None:
    chats, log = ChatStore(pool), EventLog(pool)
    root = await chats.create(owner="o", model=ModelConfig())
    child = await chats.create(owner="o", model=ModelConfig(), parent_chat_id=root.id)
    before = await log.last_seq(root.id)

    with pytest.raises(RuntimeError):
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("UPDATE chats SET status = 'error' WHERE id = $1", child.id)
            raise RuntimeError("the writer fails after the change")

    assert await log.last_seq(root.id) == before == 1


def _ordered_ids() -> tuple[uuid.UUID, uuid.UUID]:
    """Two chat ids, the first lower: a batch in id order locks the first's row first."""
    low, high = bytearray(uuid.uuid4().bytes), bytearray(uuid.uuid4().bytes)
    low[0], high[0] = 0x00, 0xFF
    return uuid.UUID(bytes=bytes(low)), uuid.UUID(bytes=bytes(high))


async def _until_waiting_on_locks(pool: asyncpg.Pool, count: int) -> None:
    """Until `count` backends of this database wait for a lock (Postgres has no event)."""
    for _ in range(1000):
        waiting = await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        if waiting >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{count} writers never waited for a lock")


async def test_a_delta_batch_and_a_childs_status_change_never_deadlock(
    pool: asyncpg.Pool,
) -> None:
    """A worker's batch of deltas for a parent and its child, and the child's status write
    (which appends to the parent through the trigger), lock the same two rows: in one order.
    The batch is made to wait for the parent's row first, so both lock while the other may."""
    chats = ChatStore(pool)
    parent_id, child_id = _ordered_ids()
    await chats.create(owner="o", model=ModelConfig(), chat_id=parent_id)
    await chats.create(owner="o", model=ModelConfig(), parent_chat_id=parent_id, chat_id=child_id)
    holder = await pool.acquire()
    try:
        hold = holder.transaction()
        await hold.start()
        await holder.execute("SELECT 1 FROM chats WHERE id = $1 FOR UPDATE", parent_id)
        batch = asyncio.create_task(
            EventLog(pool).publish_many([(parent_id, "delta", {}), (child_id, "delta", {})])
        )
        await _until_waiting_on_locks(pool, 1)
        status = asyncio.create_task(TurnStore(pool).set_status(child_id, "t", "requires_action"))
        await _until_waiting_on_locks(pool, 2)
        await hold.commit()
    finally:
        await pool.release(holder)
    results = await asyncio.gather(batch, status, return_exceptions=True)

    for result in results:
        if isinstance(result, BaseException):
            raise result
    assert [e.data["status"] for e in (await EventLog(pool).read_page(parent_id, 0)).events
            if e.event == "subagent"] == ["waiting", "requires_action"]  # fmt: skip
