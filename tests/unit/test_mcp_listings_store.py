"""A turn's MCP tool list (chatd.store.mcp_listings) is stored once, the first writer's kept,
and retention forgets it once the chat is out of that turn."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import asyncpg

from chatd.models import ModelConfig
from chatd.store.chats import ChatStore
from chatd.store.mcp_listings import McpListingStore
from chatd.store.retention import TURN_MCP_TOOLS, RetentionStore

GITHUB = [
    {"server": "github", "name": "list_issues", "input_schema": {"type": "object"}},
    {"server": "github", "name": "delete_repo", "annotations": {"destructiveHint": True}},
]


async def _chat(pool: asyncpg.Pool) -> uuid.UUID:
    return (await ChatStore(pool).create(owner="o", model=ModelConfig())).id


async def test_a_turns_tools_are_stored_once_and_the_first_list_wins(pool: asyncpg.Pool) -> None:
    chat_id = await _chat(pool)
    listings = McpListingStore(pool)
    assert await listings.get(chat_id, "t1") is None

    assert await listings.put(chat_id, "t1", GITHUB) == GITHUB
    assert await listings.put(chat_id, "t1", GITHUB[:1]) == GITHUB
    assert await listings.get(chat_id, "t1") == GITHUB
    assert await listings.put(chat_id, "t2", []) == []
    assert await listings.get(chat_id, "t2") == []
    assert await listings.get(await _chat(pool), "t1") is None


async def test_of_listings_written_at_once_every_writer_gets_the_stored_one(
    pool: asyncpg.Pool,
) -> None:
    chat_id = await _chat(pool)
    listings = McpListingStore(pool)
    lists = [[{"name": f"tool_{n}"}] for n in range(8)]

    got = await asyncio.gather(*(listings.put(chat_id, "t1", tools) for tools in lists))

    stored = await listings.get(chat_id, "t1")
    assert stored in lists and got == [stored] * len(lists)


async def test_retention_forgets_the_lists_of_turns_the_chat_is_no_longer_in(
    pool: asyncpg.Pool,
) -> None:
    listings, retention = McpListingStore(pool), RetentionStore(pool)
    ended, running, unknown_turn, fresh = [await _chat(pool) for _ in range(4)]
    for chat_id, turn_id in (
        (ended, "t1"),
        (running, "t1"),
        (running, "t2"),
        (unknown_turn, "t1"),
        (fresh, "t1"),
    ):
        await listings.put(chat_id, turn_id, GITHUB)
    await pool.execute("UPDATE chats SET status = 'running', turn_id = 't2' WHERE id = $1", running)
    await pool.execute("UPDATE chats SET status = 'requires_action' WHERE id = $1", unknown_turn)
    await pool.execute(
        "UPDATE turn_mcp_tools SET listed_at = listed_at - interval '2 days' WHERE chat_id <> $1",
        fresh,
    )

    assert await retention.count_finished(TURN_MCP_TOOLS, timedelta(hours=24)) == 2
    assert await retention.delete_finished(TURN_MCP_TOOLS, timedelta(hours=24), limit=1) == 1
    assert await retention.delete_finished(TURN_MCP_TOOLS, timedelta(hours=24), limit=10) == 1

    kept = await pool.fetch("SELECT chat_id, turn_id FROM turn_mcp_tools")
    assert {(r["chat_id"], r["turn_id"]) for r in kept} == {
        (running, "t2"),
        (unknown_turn, "t1"),
        (fresh, "t1"),
    }
