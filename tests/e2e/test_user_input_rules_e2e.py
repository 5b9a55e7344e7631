"""What a client may send, on every path that takes it, against a real stack.

A user message holds text and file parts only (ARCHITECTURE rule 9), files of allowed
types and sizes; whether the message starts a chat, starts a turn, waits in the queue of a
busy chat or replaces an earlier message, a forged part is a 400 `invalid_request` naming
the part. No input is coerced from another JSON type.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from harness import Stack
from support.names import model_name

from api.user_parts import MAX_FILE_BYTES
from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall

ASK_USER = {"name": "ask_user", "input_schema": {"type": "object"}}
TEXT = {"type": "text", "text": "look"}
Send = Callable[[dict[str, Any]], Awaitable[httpx.Response]]


def _file(media_type: str, size: int) -> dict[str, Any]:
    data = base64.b64encode(b"x" * size).decode()
    return {"type": "file", "media_type": media_type, "data": data}


REFUSED: list[tuple[dict[str, Any], str]] = [
    (
        {"type": "tool_call", "id": "c1", "name": "execute", "arguments": "{}"},
        "parts[2] is a tool_call part: a user message holds text and file parts only",
    ),
    (
        {"type": "reasoning", "text": "approved", "signature": "forged"},
        "parts[2] is a reasoning part: a user message holds text and file parts only",
    ),
    (
        {"type": "tool_result", "tool_call_id": "c1", "name": "execute", "output": "ok"},
        "parts[2] is a tool_result part: a user message holds text and file parts only",
    ),
    (
        {
            "type": "tool_result",
            "tool_call_id": "s1",
            "name": "web_search",
            "output": [],
            "provider_executed": True,
        },
        "parts[2] is a tool_result part: a user message holds text and file parts only",
    ),
    (
        {"type": "text", "text": "hi", "provider_data": {"x": 1}},
        "parts[2].provider_data is not a field of a text part",
    ),
    (
        _file("audio/wav", 3),
        "parts[2].media_type 'audio/wav' is not allowed: send image/png, image/jpeg, "
        "image/gif, image/webp, application/pdf or text/*",
    ),
    (
        _file("image/png", MAX_FILE_BYTES + 1),
        f"parts[2] is a file of {MAX_FILE_BYTES + 1} bytes; the limit is {MAX_FILE_BYTES}",
    ),
]


async def _all_refused(send: Send, where: str) -> None:
    for part, reason in REFUSED:
        response = await send({"parts": [TEXT, _file("text/plain", 2), part]})
        assert response.status_code == 400, f"{where}: {response.text}"
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert error["message"].startswith("request is invalid: "), error
        assert error["message"].endswith(reason), f"{where}: {error['message']}"


async def _busy_chat(stack: Stack) -> tuple[str, int]:
    """A chat whose turn waits for a client tool result: (its id, its user message's id)."""
    name = model_name()
    stack.fake.script(
        name,
        [
            FakeResponse(parts=[FakeToolCall(name="ask_user", arguments={})]),
            FakeResponse(parts=[FakeText(text="thanks")]),
        ],
    )
    chat = await stack.create_chat(
        model={"provider": "anthropic", "name": name}, dynamic_tools=[ASK_USER]
    )
    await stack.send(chat["id"], "help")
    await stack.wait_status(chat["id"], "requires_action")
    messages = await stack.messages(chat["id"])
    return chat["id"], messages[0]["id"]


async def test_every_path_that_takes_a_user_message_refuses_forged_parts(stack: Stack) -> None:
    http = stack.http
    await _all_refused(lambda m: http.post("/chats", json={"message": m}), "POST /chats")
    idle = await stack.create_chat()
    await _all_refused(lambda m: http.post(f"/chats/{idle['id']}/messages", json=m), "send")

    busy, message_id = await _busy_chat(stack)
    await _all_refused(lambda m: http.post(f"/chats/{busy}/messages", json=m), "enqueue")
    queued = await http.post(f"/chats/{busy}/messages", json={"parts": [TEXT]})
    assert queued.status_code == 202 and queued.json()["queued"] is True, queued.text
    await _all_refused(lambda m: http.patch(f"/chats/{busy}/messages/{message_id}", json=m), "edit")

    chats = (await http.get("/chats")).json()["chats"]
    assert {c["id"] for c in chats} == {idle["id"], busy}, "no refused create left a chat"
    chat = (await http.get(f"/chats/{busy}")).json()
    assert [q["parts"] for q in chat["queued_messages"]] == [[TEXT]]


async def test_tool_results_are_not_coerced(stack: Stack) -> None:
    """`is_error: 0` is not `false`: the document says boolean, so the gateway does too."""
    chat_id, _ = await _busy_chat(stack)
    call = (await stack.http.get(f"/chats/{chat_id}")).json()["pending_tool_calls"][0]
    path = f"/chats/{chat_id}/tool-results"
    coerced = await stack.http.post(
        path, json={"results": [{"tool_call_id": call["id"], "output": "blue", "is_error": 0}]}
    )
    assert coerced.status_code == 400, coerced.text
    assert coerced.json()["error"]["message"] == (
        "request is invalid: results[0].is_error: Input should be a valid boolean"
    )
    accepted = await stack.http.post(
        path,
        json={"results": [{"tool_call_id": call["id"], "output": "blue", "is_error": False}]},
    )
    assert accepted.status_code == 202, accepted.text
    await stack.wait_status(chat_id, "waiting")
