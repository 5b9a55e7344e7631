"""The stream route: a cursor no event can have is a 400 before streaming; a revoked key's
open streams end."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from harness import Stack

from chatd.store.keys import KeyStore, hash_key


async def _last_event_id(stack: Stack, chat_id: str) -> int:
    return int(await stack.pool.fetchval("SELECT last_event_seq FROM chats WHERE id = $1", chat_id))


@pytest.mark.parametrize("past_the_end", [1, 1000])
async def test_a_cursor_past_the_chat_s_last_event_is_a_400(
    stack: Stack, past_the_end: int
) -> None:
    chat = await stack.create_chat(model={"provider": "demo", "name": "demo"})
    last = await _last_event_id(stack, chat["id"])
    for request in (
        {"params": {"after": last + past_the_end}},
        {"headers": {"Last-Event-ID": str(last + past_the_end)}},
    ):
        response = await stack.http.get(f"/chats/{chat['id']}/stream", **request)  # type: ignore[arg-type]
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_cursor"
        assert error["detail"] == {"last_event_id": last}


async def test_a_cursor_above_int64_is_a_400_before_streaming(stack: Stack) -> None:
    chat = await stack.create_chat(model={"provider": "demo", "name": "demo"})
    path = f"/chats/{chat['id']}/stream"
    by_header = await stack.http.get(path, headers={"Last-Event-ID": str(2**63)})
    assert by_header.status_code == 400 and by_header.json()["error"]["code"] == "invalid_cursor"
    by_query = await stack.http.get(path, params={"after": 2**63})
    assert by_query.status_code == 400, by_query.text


async def test_a_revoked_key_s_open_stream_ends(stack: Stack) -> None:
    key = await KeyStore(stack.pool).create("alice", "to revoke")
    async with httpx.AsyncClient(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=None
    ) as http:
        chat = await http.post("/chats", json={"model": {"provider": "demo", "name": "demo"}})
        chat_id = chat.json()["id"]
        async with http.stream("GET", f"/chats/{chat_id}/stream") as response:
            assert response.status_code == 200
            lines = response.aiter_lines()
            assert await anext(lines) == "retry: 2000"
            await stack.pool.execute(
                "UPDATE api_keys SET revoked_at = now() WHERE key_hash = $1", hash_key(key)
            )
            async with asyncio.timeout(30):
                async for _ in lines:
                    pass  # until the gateway ends the stream
        again = await http.get(f"/chats/{chat_id}/stream")
        assert again.status_code == 401
