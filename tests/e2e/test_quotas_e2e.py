"""Quotas: each refusal is a 429 with `Retry-After` and its code, and refuses only what is
over the limit (another owner, a queued message, an open slot go through)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import websockets
from harness import Stack

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall, FakeUsage
from chatd.store.keys import hash_key
from chatd.store.quotas import LimitOverrides, QuotaStore

TERMINAL = ("response.completed", "response.failed", "response.incomplete", "error")
ASKS = FakeResponse(parts=[FakeToolCall(name="ask_user", arguments={"question": "?"})])
"""A model step that calls `ask_user`: the chat waits in `requires_action`, its turn running."""
ASK_USER = {
    "name": "ask_user",
    "description": "Ask the user a question and wait for the answer.",
    "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}},
}


def _refused(response: httpx.Response, code: str) -> dict[str, Any]:
    assert response.status_code == 429, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    assert int(response.headers["Retry-After"]) >= 1
    return error


async def _limit(stack: Stack, owner: str, **overrides: Any) -> None:
    """Set before the owner's first request: the gateway has no cached limits yet."""
    await QuotaStore(stack.pool).set_limits(owner, LimitOverrides(**overrides))


async def test_a_key_over_its_request_rate_gets_429_and_other_keys_do_not(stack: Stack) -> None:
    await _limit(stack, "alice", requests_per_s=0.01, request_burst=3)
    answers = [(await stack.http.get("/chats")).status_code for _ in range(4)]
    assert answers == [200, 200, 200, 429]
    refused = await stack.http.get("/chats")
    error = _refused(refused, "rate_limited")
    assert int(refused.headers["Retry-After"]) == error["detail"]["retry_after_s"] == 100
    assert (await stack.other_owner.get("/chats")).status_code == 200
    root = stack.base_url.removesuffix("/api/v1")
    health = await stack.http.get(f"{root}/healthz")  # takes no key: the gate ignores it
    assert health.status_code == 200, health.text


async def test_the_owner_s_running_turns_are_limited_but_a_queued_send_is_not(
    stack: Stack,
) -> None:
    await _limit(stack, "alice", running_turns=1)
    model = stack.scripted_model(ASKS, FakeResponse(parts=[FakeText(text="done")]))
    busy = await stack.create_chat(model=model, dynamic_tools=[ASK_USER])
    await stack.send(busy["id"], "ask me")
    await stack.wait_status(busy["id"], "requires_action")

    idle = await stack.create_chat(model=model)
    error = _refused(
        await stack.http.post(f"/chats/{idle['id']}/messages", json={"content": "hi"}),
        "too_many_turns",
    )
    assert error["detail"]["running_turns"] == 1 and error["detail"]["limit"] == 1
    assert (await stack.http.get(f"/chats/{idle['id']}")).json()["queued_messages"] == []
    before = len((await stack.http.get("/chats")).json()["chats"])
    created = await stack.http.post("/chats", json={"model": model, "message": {"content": "x"}})
    _refused(created, "too_many_turns")
    after = len((await stack.http.get("/chats")).json()["chats"])
    assert after == before, "a refused create with a first message leaves no chat behind"

    queued = await stack.send(busy["id"], "and this, after")
    assert queued["queued"] is True, "waits behind the running turn: not a new one"
    other = await stack.other_owner.post("/chats", json={"model": {"provider": "demo"}})
    assert other.status_code == 201


async def test_a_new_response_over_the_running_turns_leaves_no_chat(stack: Stack) -> None:
    """A `/v1` response that starts a chat is admitted beside the chat's insert: refused, it
    is a 429 in OpenAI's envelope and the insert is rolled back with the rest."""
    await _limit(stack, "alice", running_turns=1)
    model = stack.scripted_model(ASKS)
    busy = await stack.create_chat(model=model, dynamic_tools=[ASK_USER])
    await stack.send(busy["id"], "ask me")
    await stack.wait_status(busy["id"], "requires_action")
    before = (await stack.http.get("/chats")).json()["chats"]
    root = stack.base_url.removesuffix("/api/v1")
    for stream in (False, True):
        body = {"model": "demo/demo", "input": "hi", "stream": stream}
        error = _refused(await stack.http.post(f"{root}/v1/responses", json=body), "too_many_turns")
        assert error["type"] == "rate_limit_error", error
    assert (await stack.http.get("/chats")).json()["chats"] == before


async def test_a_retried_create_is_answered_even_when_its_own_turn_fills_the_limit(
    stack: Stack,
) -> None:
    await _limit(stack, "alice", running_turns=1)
    model = stack.scripted_model(ASKS)
    body = {
        "model": model,
        "dynamic_tools": [ASK_USER],
        "message": {"content": "ask me"},
    }
    headers = {"Idempotency-Key": "create-at-the-limit"}
    first = await stack.http.post("/chats", json=body, headers=headers)
    assert first.status_code == 201, first.text
    await stack.wait_status(first.json()["id"], "requires_action")
    again = await stack.http.post("/chats", json=body, headers=headers)
    assert again.status_code == 201, again.text
    assert again.json()["id"] == first.json()["id"]
    _refused(await stack.http.post("/chats", json=body), "too_many_turns")


async def test_a_busy_chat_s_queue_is_limited_and_a_retried_send_still_answered(
    stack: Stack,
) -> None:
    """Each queued send is work for the chat's workflow: a flood of sends to one busy chat is
    refused once its queue is full, while the retry of a stored send keeps its answer."""
    await _limit(stack, "alice", queued_messages=2)
    model = stack.scripted_model(ASKS)
    chat = await stack.create_chat(model=model, dynamic_tools=[ASK_USER])
    await stack.send(chat["id"], "ask me")
    await stack.wait_status(chat["id"], "requires_action")
    path = f"/chats/{chat['id']}/messages"
    first = await stack.http.post(path, json={"content": "1"}, headers={"Idempotency-Key": "q1"})
    assert first.json()["queued"] is True, first.text
    await stack.send(chat["id"], "2")
    error = _refused(await stack.http.post(path, json={"content": "3"}), "queue_full")
    assert error["detail"] == {"retry_after_s": 5, "queued_messages": 2, "limit": 2}
    again = await stack.http.post(path, json={"content": "1"}, headers={"Idempotency-Key": "q1"})
    assert again.json() == first.json()
    queued = (await stack.http.get(f"/chats/{chat['id']}")).json()["queued_messages"]
    assert [q["parts"][0]["text"] for q in queued] == ["1", "2"]


async def test_an_edit_that_would_start_a_turn_over_the_limit_is_refused_before_the_cut(
    stack: Stack,
) -> None:
    await _limit(stack, "alice", running_turns=1)
    model = stack.scripted_model(FakeResponse(parts=[FakeText(text="first")]), ASKS)
    chat = await stack.create_chat(model=model, dynamic_tools=[ASK_USER])
    await stack.send(chat["id"], "one")
    await stack.wait_status(chat["id"], "waiting")
    other = await stack.create_chat(model=model, dynamic_tools=[ASK_USER])
    await stack.send(other["id"], "two")
    await stack.wait_status(other["id"], "requires_action")

    before = await stack.messages(chat["id"])
    edit = await stack.http.patch(
        f"/chats/{chat['id']}/messages/{before[0]['id']}", json={"content": "uno"}
    )
    _refused(edit, "too_many_turns")
    assert await stack.messages(chat["id"]) == before, "nothing was cut"


async def test_a_day_s_token_budget_refuses_new_turns_until_the_day_ends(stack: Stack) -> None:
    await _limit(stack, "alice", output_tokens_per_day=5)
    model = stack.scripted_model(
        FakeResponse(parts=[FakeText(text="hello")], usage=FakeUsage(output_tokens=7))
    )
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "hi")
    await stack.wait_status(chat["id"], "waiting")

    refused = await stack.http.post(f"/chats/{chat['id']}/messages", json={"content": "more"})
    error = _refused(refused, "budget_exhausted")
    assert error["detail"] == {
        "retry_after_s": error["detail"]["retry_after_s"],
        "kind": "output",
        "used": 7,
        "budget": 5,
    }
    assert 1 <= error["detail"]["retry_after_s"] <= 24 * 3600
    usage = await QuotaStore(stack.pool).usage_today("alice")
    assert (usage.input_tokens, usage.output_tokens) == (10, 7)


async def test_a_step_written_twice_is_counted_once(stack: Stack) -> None:
    model = stack.scripted_model(
        FakeResponse(parts=[FakeText(text="hi")], usage=FakeUsage(output_tokens=3))
    )
    chat = await stack.create_chat(model=model)
    await stack.send(chat["id"], "hi")
    await stack.wait_status(chat["id"], "waiting")
    await stack.pool.execute(
        "INSERT INTO messages (chat_id, turn_id, step_key, role, parts, usage)"
        " SELECT chat_id, turn_id, step_key, role, parts, usage FROM messages"
        " WHERE chat_id = $1 AND usage IS NOT NULL ON CONFLICT DO NOTHING",
        chat["id"],
    )
    usage = await QuotaStore(stack.pool).usage_today("alice")
    assert usage.output_tokens == 3


async def _open_stream(http: httpx.AsyncClient, chat_id: str) -> httpx.Response:
    request = http.build_request("GET", f"/chats/{chat_id}/stream", timeout=None)
    return await http.send(request, stream=True)


async def test_a_key_s_streams_are_limited_and_a_closed_stream_frees_its_slot(
    stack: Stack,
) -> None:
    await _limit(stack, "alice", streams=1)
    chat = await stack.create_chat(model={"provider": "demo"})
    first = await _open_stream(stack.http, chat["id"])
    assert first.status_code == 200
    second = await _open_stream(stack.http, chat["id"])
    await second.aread()
    _refused(second, "too_many_streams")
    other = await stack.other_owner.post("/chats", json={"model": {"provider": "demo"}})
    bobs = await _open_stream(stack.other_owner, other.json()["id"])
    assert bobs.status_code == 200, "another key's slots are its own"
    await bobs.aclose()

    await first.aclose()
    async with asyncio.timeout(30):
        while True:
            again = await _open_stream(stack.http, chat["id"])
            if again.status_code == 200:
                await again.aclose()
                break
            await again.aread()
            _refused(again, "too_many_streams")
            await asyncio.sleep(0.1)


async def test_a_key_s_streams_on_one_chat_are_limited_apart_from_its_others(
    stack: Stack,
) -> None:
    """Every event of a chat is written to each of its streams: many streams of one chat
    multiply the gateway's work, so they have a limit of their own."""
    await _limit(stack, "alice", streams=10, streams_per_chat=2)
    busy = await stack.create_chat(model={"provider": "demo"})
    other = await stack.create_chat(model={"provider": "demo"})
    held = [await _open_stream(stack.http, busy["id"]) for _ in range(2)]
    assert [s.status_code for s in held] == [200, 200]
    third = await _open_stream(stack.http, busy["id"])
    await third.aread()
    error = _refused(third, "too_many_streams")
    assert error["detail"]["per_chat"] is True and error["detail"]["limit"] == 2
    elsewhere = await _open_stream(stack.http, other["id"])
    assert elsewhere.status_code == 200, "the key's other chats have their own"
    for stream in [*held, elsewhere]:
        await stream.aclose()


async def test_a_lapsed_lease_of_a_gone_gateway_frees_its_slot(stack: Stack) -> None:
    await _limit(stack, "alice", streams=1)
    await stack.pool.execute(
        "INSERT INTO stream_leases (id, key_hash, expires_at)"
        " VALUES (gen_random_uuid(), $1, now() - interval '1 second')",
        hash_key(stack.key),
    )
    chat = await stack.create_chat(model={"provider": "demo"})
    stream = await _open_stream(stack.http, chat["id"])
    assert stream.status_code == 200
    await stream.aclose()


async def test_a_websocket_holds_a_stream_slot_and_each_create_is_a_request(
    stack: Stack,
) -> None:
    """A socket counts as one of the key's streams for as long as it is open; each
    `response.create` on it counts against the key's request rate (the handshake too)."""
    await _limit(stack, "alice", streams=1, requests_per_s=0.01, request_burst=3)
    url = stack.base_url.removesuffix("/api/v1").replace("http://", "ws://") + "/v1/responses"
    headers = {"Authorization": stack.http.headers["authorization"]}
    create = json.dumps({"type": "response.create", "model": "demo/demo", "input": "hi"})
    async with websockets.connect(url, additional_headers=headers) as first:
        assert await _socket_turn(first, create) == "response.completed"  # its slot is taken
        async with websockets.connect(url, additional_headers=headers) as second:
            refusal = json.loads(await second.recv())
            assert refusal["status"] == 429 and refusal["error"]["code"] == "too_many_streams"
            with pytest.raises(websockets.ConnectionClosed):
                await second.recv()
        # Three requests so far (two handshakes and a create): the burst is spent.
        assert await _socket_turn(first, create) == "rate_limited"


async def _socket_turn(socket: websockets.ClientConnection, create: str) -> str:
    """Send a `response.create`; its terminal event's type, or its error's code."""
    await socket.send(create)
    while (event := json.loads(await socket.recv()))["type"] not in TERMINAL:
        pass
    return str(event["error"]["code"] if event["type"] == "error" else event["type"])


async def test_a_subagent_s_turn_counts_against_its_owner_s_running_turns(
    stack: Stack,
) -> None:
    """The parent's turn and one child fill a limit of two: the other spawns of the same
    step are error results the parent's model reads, and no child beyond the limit runs."""
    await _limit(stack, "alice", running_turns=2)
    slow = FakeResponse(parts=[FakeText(text="child done")], first_byte_delay_s=2)
    child = stack.scripted_model(slow, slow, slow)
    spawn = [
        FakeToolCall(name="spawn_agent", arguments={"prompt": f"task {n}", "model": child})
        for n in range(3)
    ]
    parent = stack.scripted_model(
        FakeResponse(parts=spawn),
        FakeResponse(parts=[FakeToolCall(name="wait_agent", arguments={"timeout_s": 60})]),
        FakeResponse(parts=[FakeText(text="done")]),
    )
    chat = await stack.create_chat(model=parent, subagents=True)
    await stack.send(chat["id"], "go")
    await stack.wait_status(chat["id"], "waiting", within_s=60)
    messages = await stack.messages(chat["id"])
    outputs = [
        p["output"]
        for m in messages
        for p in m["parts"]
        if p["type"] == "tool_result" and p["name"] == "spawn_agent"
    ]
    refused = [o for o in outputs if isinstance(o, str) and "their limit" in o]
    assert len(outputs) == 3 and len(refused) == 2, outputs
    children = (await stack.http.get(f"/chats/{chat['id']}/children")).json()["data"]
    assert len(children) == 1
