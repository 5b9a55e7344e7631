"""Chat reads answer pre-serialized JSON from one query: the bytes must be those the
gateway answered when it returned models for FastAPI to validate and serialize, for a chat
that carries everything a chat can (queue, last error, pending tool calls, usage)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from fastapi import FastAPI
from harness import Stack

from api.schemas import ChatList, ChatOut, ChatSummary
from chatd.store.chats import ChatStore
from chatd.store.transcript import TranscriptStore

ODD_JSON: dict[str, Any] = {
    "tiny": 1e-07,
    "huge": 1e300,
    "whole": 1.0,
    "negative_zero": -0.0,
    "big_int": 12345678901234567890123,
    "text": 'é ✓ \u2028 \x01 "quoted" 🙂',
    "nested": [None, True, {"": []}],
}
"""Values whose JSON spelling differs between serializers (exponents, escapes, big ints)."""


async def _loaded_chat(stack: Stack) -> str:
    """A chat in `requires_action` with a last error, pending tool calls, usage, a model with
    call options and three queued messages (one file part; one promoted, so not shown)."""
    chat = await stack.create_chat(
        title="loaded ✓",
        system_prompt="be brief",
        model={"provider": "anthropic", "name": "claude-sonnet-4-5", "temperature": 0.3},
        dynamic_tools=[{"name": "lookup", "input_schema": {"type": "object", "x": ODD_JSON}}],
    )
    chat_id = uuid.UUID(chat["id"])
    await stack.pool.execute(
        """UPDATE chats SET status = 'requires_action',
               action_expires_at = '2026-11-26 10:00:00.000001+00',
               last_error = $2, pending_tool_calls = $3, usage = $4 WHERE id = $1""",
        chat_id,
        {"message": "overloaded ✗", "kind": "overloaded", "retryable": True,
         "status_code": 529, "retry_after_ms": 1500, "detail": ODD_JSON},
        [{"id": "call_1", "name": "lookup", "arguments": '{"q": 1}', "extra": ODD_JSON}],
        {"input_tokens": 1234, "output_tokens": 56, "reasoning_tokens": 7},
    )  # fmt: skip
    queued = [
        ([{"type": "text", "text": "first é"}], "2026-11-26 09:00:00+00", None),
        ([{"type": "file", "media_type": "image/png", "data": "iVBO", "name": "a.png"},
          {"type": "text", "text": "second"}], "2026-11-26 09:00:00.5+00", None),
        ([{"type": "text", "text": "taken"}], "2026-11-26 08:00:00+00", "2026-11-26 08:01:00+00"),
        ([{"type": "text", "text": "third"}], "2026-11-26 09:30:00.123456+00", None),
    ]  # fmt: skip
    for parts, created_at, promoted_at in queued:
        await stack.pool.execute(
            "INSERT INTO queued_messages (id, chat_id, parts, created_at, promoted_at)"
            " VALUES ($1, $2, $3, $4::text::timestamptz, $5::text::timestamptz)",
            uuid.uuid4(), chat_id, parts, created_at, promoted_at,
        )  # fmt: skip
    return str(chat_id)


def _app_as_before(stack: Stack) -> FastAPI:
    """The chat reads as the gateway answered them before: models returned to FastAPI with
    `response_model` set, the chat and its queue read apart and the view built by `ChatOut.of`
    (a list's summaries from the same records, so the reference doesn't share its query)."""
    app = FastAPI()
    chats, transcript = ChatStore(stack.pool), TranscriptStore(stack.pool)

    async def view(chat_id: uuid.UUID) -> ChatOut:
        chat = await chats.get(chat_id)
        assert chat is not None
        return ChatOut.of(chat, await transcript.queued(chat_id))

    @app.get("/chats/{chat_id}", response_model=ChatOut)
    async def get_chat(chat_id: uuid.UUID) -> ChatOut:
        return await view(chat_id)

    @app.get("/chats", response_model=ChatList)
    async def list_chats(ids: str) -> ChatList:
        views = [await view(uuid.UUID(chat_id)) for chat_id in ids.split(",")]
        summaries = [
            ChatSummary.model_validate({**v.model_dump(), "queued_count": len(v.queued_messages)})
            for v in views
        ]
        return ChatList(chats=summaries, has_more=False, next_before=None)

    return app


async def _before(stack: Stack, path: str) -> bytes:
    transport = httpx.ASGITransport(app=_app_as_before(stack))
    async with httpx.AsyncClient(transport=transport, base_url="http://before") as client:
        response = await client.get(path)
    assert response.status_code == 200, response.text
    return response.content


async def test_a_chat_reads_as_the_same_bytes_as_before(stack: Stack) -> None:
    loaded, plain = await _loaded_chat(stack), (await stack.create_chat())["id"]

    answers = {chat_id: await stack.http.get(f"/chats/{chat_id}") for chat_id in (loaded, plain)}

    for chat_id, response in answers.items():
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/json"
        assert response.content == await _before(stack, f"/chats/{chat_id}")
    queue = answers[loaded].json()["queued_messages"]
    assert [q["parts"][-1]["text"] for q in queue] == ["first é", "second", "third"]


async def test_a_list_of_chats_reads_as_the_same_bytes_as_before(stack: Stack) -> None:
    loaded, plain = await _loaded_chat(stack), (await stack.create_chat())["id"]

    response = await stack.http.get("/chats")

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.content == await _before(stack, f"/chats?ids={plain},{loaded}")


async def test_an_owner_without_chats_lists_an_empty_page(stack: Stack) -> None:
    await stack.create_chat()

    response = await stack.other_owner.get("/chats")

    assert response.status_code == 200, response.text
    assert response.content == b'{"chats":[],"has_more":false,"next_before":null}'
