"""A chat's approval policy and MCP servers are stored with it, and `PATCH /chats/{id}`'s
store call changes only what it is given, publishing the change as a `chat` event."""

from __future__ import annotations

import asyncpg

from chatd.models import ModelConfig
from chatd.store.chats import ChatStore
from chatd.store.events import EventLog


async def test_a_chat_keeps_its_policy_and_servers(pool: asyncpg.Pool) -> None:
    chats = ChatStore(pool)
    plain = await chats.create(owner="o", model=ModelConfig())
    assert (plain.tool_policy, plain.mcp_servers) == ({}, [])
    made = await chats.create(
        owner="o",
        model=ModelConfig(),
        tool_policy={"github__*": "ask", "execute": "deny"},
        mcp_servers=["github", "fs"],
    )
    stored = await chats.get(made.id, "o")
    assert stored is not None and stored == made
    assert stored.tool_policy == {"github__*": "ask", "execute": "deny"}
    assert stored.mcp_servers == ["github", "fs"]


async def test_a_title_set_by_the_user_changes_only_the_title(pool: asyncpg.Pool) -> None:
    chats, log = ChatStore(pool), EventLog(pool)
    chat = await chats.create(owner="o", model=ModelConfig(), tool_policy={"execute": "deny"})
    assert await chats.set_generated_title(chat.id, "generated")

    updated = await chats.update_settings(chat.id, "o", title="mine")

    assert updated is not None and updated == await chats.get(chat.id)
    assert (updated.title, updated.title_source) == ("mine", "user")
    assert updated.tool_policy == {"execute": "deny"}
    assert updated.updated_at > chat.updated_at
    events = (await log.read_page(chat.id, 0)).events
    assert [(e.event, e.data) for e in events][-1] == ("chat", {"title": "mine"})
    assert not await chats.set_generated_title(chat.id, "generated again")


async def test_a_policy_set_replaces_the_policy_and_keeps_the_title(pool: asyncpg.Pool) -> None:
    chats, log = ChatStore(pool), EventLog(pool)
    chat = await chats.create(
        owner="o", model=ModelConfig(), title="kept", tool_policy={"execute": "deny"}
    )

    updated = await chats.update_settings(chat.id, "o", tool_policy={"read_*": "auto"})

    assert updated is not None and updated == await chats.get(chat.id)
    assert (updated.title, updated.title_source) == ("kept", "user")
    assert updated.tool_policy == {"read_*": "auto"}
    cleared = await chats.update_settings(chat.id, "o", tool_policy={})
    assert cleared is not None and cleared.tool_policy == {}
    assert [(e.event, e.data) for e in (await log.read_page(chat.id, 0)).events] == [
        ("chat", {"tool_policy": {"read_*": "auto"}}),
        ("chat", {"tool_policy": {}}),
    ]


async def test_another_owners_chat_or_no_change_publishes_nothing(pool: asyncpg.Pool) -> None:
    chats, log = ChatStore(pool), EventLog(pool)
    chat = await chats.create(owner="o", model=ModelConfig())

    assert await chats.update_settings(chat.id, "intruder", title="x") is None
    assert await chats.update_settings(chat.id, "intruder") is None
    assert await chats.update_settings(chat.id, "o") == chat

    assert await chats.get(chat.id) == chat
    assert (await log.read_page(chat.id, 0)).events == []
