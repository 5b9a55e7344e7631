"""Bounded pages: a page of chats or messages ends at its row limit or its byte budget,
whichever comes first, and says whether more follows; chats are listed as summaries."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from harness import Stack

from chatd.parts import TextPart
from chatd.store.pages import DEFAULT_PAGE_BYTES
from chatd.store.transcript import TranscriptStore

KIB = 1024


async def _store_texts(stack: Stack, chat_id: str, sizes: list[int]) -> list[int]:
    """Store user messages of these many characters straight into the transcript; their ids."""
    transcript = TranscriptStore(stack.pool)
    stored = [
        await transcript.save(
            uuid.UUID(chat_id),
            turn_id="t",
            step_key=f"{i}:user",
            role="user",
            parts=[TextPart(text="x" * size)],
        )
        for i, size in enumerate(sizes)
    ]
    return [m.id for m in stored]


async def _message_page(stack: Stack, chat_id: str, **params: Any) -> dict[str, Any]:
    response = await stack.http.get(f"/chats/{chat_id}/messages", params=params)
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


async def _chat_page(stack: Stack, **params: Any) -> dict[str, Any]:
    response = await stack.http.get("/chats", params=params)
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


async def test_a_transcript_page_ends_at_its_byte_budget(stack: Stack) -> None:
    chat = await stack.create_chat()
    third = DEFAULT_PAGE_BYTES // 3
    ids = await _store_texts(stack, chat["id"], [third, third, third, 2 * DEFAULT_PAGE_BYTES, 10])

    pages: list[list[int]] = []
    after: int | None = 0
    while after is not None:
        page = await _message_page(stack, chat["id"], after_id=after, limit=500)
        pages.append([m["id"] for m in page["messages"]])
        after = page["next_after_id"]
        assert page["has_more"] is (after is not None)
        assert after is None or after == pages[-1][-1]

    # Two thirds of the budget fit and a third third doesn't; a message over the whole budget
    # comes alone, and still pages.
    assert pages == [ids[0:2], ids[2:3], ids[3:4], ids[4:5]]


async def test_the_cursor_is_set_only_when_more_follows(stack: Stack) -> None:
    chat = await stack.create_chat(title="chat 0")
    ids = await _store_texts(stack, chat["id"], [10, 10, 10])
    full = await _message_page(stack, chat["id"], limit=3)
    assert [m["id"] for m in full["messages"]] == ids
    assert (full["has_more"], full["next_after_id"]) == (False, None)
    part = await _message_page(stack, chat["id"], limit=2)
    assert (part["has_more"], part["next_after_id"]) == (True, ids[1])

    for i in (1, 2):
        await stack.create_chat(title=f"chat {i}")
    chats = await _chat_page(stack, limit=3)
    assert len(chats["chats"]) == 3
    assert (chats["has_more"], chats["next_before"]) == (False, None)
    first = await _chat_page(stack, limit=2)
    assert first["has_more"] is True
    rest = await _chat_page(stack, limit=2, before=first["next_before"])
    assert [c["title"] for c in first["chats"] + rest["chats"]] == ["chat 2", "chat 1", "chat 0"]
    assert (rest["has_more"], rest["next_before"]) == (False, None)


async def test_a_chat_page_ends_at_its_byte_budget(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = [await stack.create_chat(title=f"chat {i}") for i in range(3)]
    monkeypatch.setenv("CHATD_PAGE_BYTES", "1")  # every chat is over it: one per page

    pages: list[list[str]] = []
    before: str | None = None
    while True:
        page = await _chat_page(stack, limit=200, **({"before": before} if before else {}))
        pages.append([c["id"] for c in page["chats"]])
        before = page["next_before"]
        assert page["has_more"] is (before is not None)
        if before is None:
            break
    assert pages == [[c["id"]] for c in reversed(created)]


async def test_chats_are_listed_as_summaries_with_their_queue_length(stack: Stack) -> None:
    tools = [{"name": f"tool_{i}", "input_schema": {"type": "object"}} for i in range(3)]
    chat = await stack.create_chat(system_prompt="p" * 10_000, dynamic_tools=tools)
    quiet = await stack.create_chat()
    transcript = TranscriptStore(stack.pool)
    for text in ("one", "two"):  # waiting behind a turn, as a send while one runs leaves them
        await transcript.enqueue(uuid.UUID(chat["id"]), [TextPart(text=text)], None)

    listed = {c["id"]: c for c in (await _chat_page(stack))["chats"]}
    summary = listed[chat["id"]]
    for absent in ("system_prompt", "dynamic_tools", "queued_messages", "pending_tool_calls"):
        assert absent not in summary
    assert summary["queued_count"] == 2
    assert listed[quiet["id"]]["queued_count"] == 0
    assert {"title", "model", "status", "last_error", "usage", "created_at", "updated_at"} <= set(
        summary
    )

    whole = (await stack.http.get(f"/chats/{chat['id']}")).json()
    assert whole["system_prompt"] == "p" * 10_000
    assert len(whole["dynamic_tools"]) == 3
    assert [q["parts"][0]["text"] for q in whole["queued_messages"]] == ["one", "two"]
