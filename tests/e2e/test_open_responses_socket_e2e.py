"""Open Responses over a WebSocket (`/v1/responses`) and `store: false`, driven by the
official `openai` SDK's `responses.connect()` and by a raw `websockets` client for what no
SDK sends (malformed frames, unknown types, oversized messages, bad keys)."""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import websockets
from harness import Cluster, Stack
from openai import AsyncOpenAI
from support.api_process import chatd_api, until_ready
from websockets.asyncio.client import ClientConnection

from api.open_responses import views
from api.open_responses.sockets import MAX_MESSAGE_BYTES
from chatd.devstack.ports import free_port
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.script import FakeResponse, FakeText
from chatd.settings import unstored_keep
from chatd.store.chats import ChatStore

TERMINAL = ("response.completed", "response.failed", "response.incomplete", "error")


def _root(stack: Stack) -> str:
    return stack.base_url.removesuffix("/api/v1")


def _client(base: str, key: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)


def _model(stack: Stack, *responses: FakeResponse) -> str:
    return f"anthropic/{stack.scripted_model(*responses)['name']}"


def _text(text: str, **extra: Any) -> FakeResponse:
    return FakeResponse(parts=[FakeText(text=text, chunk_size=4)], **extra)


async def _raw(base: str, key: str | None) -> ClientConnection:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = base.replace("http://", "ws://") + "/v1/responses"
    return await websockets.connect(url, additional_headers=headers, max_size=None)


async def _turn(socket: ClientConnection, request: dict[str, Any]) -> list[dict[str, Any]]:
    """Send one `response.create` and read its events up to and including the terminal."""
    await socket.send(json.dumps({"type": "response.create", **request}))
    return await _until_terminal(socket)


async def _until_terminal(socket: ClientConnection) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        frame = await asyncio.wait_for(socket.recv(), 60)
        assert isinstance(frame, str) and frame != "[DONE]", "one JSON event per text frame"
        events.append(json.loads(frame))
        if events[-1]["type"] in TERMINAL:
            return events


async def _chats_running(stack: Stack) -> int:
    count: int = await stack.pool.fetchval(
        "SELECT count(*) FROM chats WHERE status NOT IN ('waiting', 'error')"
    )
    return count


async def test_ten_responses_one_after_another_on_one_socket_continue_one_chat(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each response's events, its terminal one too, come as their notifications arrive: the
    stream's fallback look for a missed one (15 s) is put out of reach."""
    monkeypatch.setattr(views, "WAKE_AT_LEAST_S", 3600.0)
    model = _model(stack, *[_text(f"answer {i}") for i in range(10)])
    async with _client(_root(stack), stack.key) as client, client.responses.connect() as conn:
        previous: str | None = None
        ids = []
        for i in range(10):
            extra = {"previous_response_id": previous} if previous else {}
            await conn.response.create(model=model, input=f"question {i}", store=False, **extra)
            events = []
            async with asyncio.timeout(60):
                async for event in conn:
                    events.append(event)
                    if event.type in TERMINAL:
                        break
            assert [e.sequence_number for e in events] == list(range(len(events)))
            final = events[-1]
            assert final.type == "response.completed", final
            assert final.response.output_text == f"answer {i}"
            previous = final.response.id
            ids.append(previous)
        # store: false: not readable by id, not even while the socket that made it is open
        for response_id in ids:
            assert (
                await stack.http.get(f"{_root(stack)}/v1/responses/{response_id}")
            ).status_code == 404
    sent = stack.fake.requests(model.split("/", 1)[1])[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant"] * 9 + ["user"], "one chat"


async def test_two_sockets_in_parallel_each_get_their_own_responses(stack: Stack) -> None:
    models = [_model(stack, _text(f"from socket {n}", delta_delay_s=0.02)) for n in range(2)]

    async def one(n: int) -> list[dict[str, Any]]:
        socket = await _raw(_root(stack), stack.key)
        async with socket:
            return await _turn(socket, {"model": models[n], "input": "hi"})

    first, second = await asyncio.gather(one(0), one(1))
    for n, events in enumerate((first, second)):
        assert events[-1]["type"] == "response.completed"
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert text == f"from socket {n}"


async def test_a_warm_up_answers_at_once_and_the_next_request_continues_it(
    stack: Stack,
) -> None:
    """Codex's first message on a socket: `generate: false` with the conversation so far.
    It is answered at once, completed and empty, with no model call; the request that
    continues it by id is one turn whose model sees the warm-up's input, then its own."""
    name = stack.stepped_model(_text("after the warm-up"))["name"]
    socket = await _raw(_root(stack), stack.key)
    async with socket:
        warm = await _turn(
            socket,
            {
                "model": f"anthropic/{name}",
                "input": [{"role": "developer", "content": "Be terse."},
                          {"role": "user", "content": "the repository is empty"}],
                "store": False,
                "generate": False,
            },
        )  # fmt: skip
        assert [e["type"] for e in warm] == ["response.created", "response.completed"]
        done = warm[-1]["response"]
        assert (done["status"], done["output"]) == ("completed", [])
        assert stack.fake.requests(name) == [], "no model call"
        events = await _turn(
            socket,
            {
                "model": f"anthropic/{name}",
                "input": [{"role": "user", "content": "say hello"}],
                "previous_response_id": done["id"],
                "store": False,
            },
        )
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert final["output"][-1]["content"][0]["text"] == "after the warm-up"
    [request] = stack.fake.requests(name)
    said = [b["text"] for m in request.body["messages"] for b in m["content"]]
    assert said == ["the repository is empty", "say hello"]
    assert request.body["system"][0]["text"] == "Be terse."


async def test_a_store_false_chat_is_hidden_then_deleted_when_its_socket_closes(
    stack: Stack,
) -> None:
    model = _model(stack, _text("kept only here"))
    socket = await _raw(_root(stack), stack.key)
    async with socket:
        events = await _turn(socket, {"model": model, "input": "hi", "store": False})
    final = events[-1]["response"]
    chat_id = final["conversation"]["id"]
    assert (await stack.http.get(f"/chats/{chat_id}")).status_code == 404
    listed = (await stack.http.get("/chats", params={"limit": 100})).json()["chats"]
    assert chat_id not in {c["id"] for c in listed}
    watched = "SELECT count(*) FROM owner_events WHERE chat_id = $1::uuid"
    assert await stack.pool.fetchval(watched, chat_id) == 0, "nor is it on the watch stream"
    # The socket closed: kept a while for a resent conversation, then the reconciler's pass
    # deletes the settled chat, rows and all.
    left = await stack.pool.fetchval(
        "SELECT discard_at - now() FROM chats WHERE id = $1::uuid", chat_id
    )
    assert unstored_keep() - timedelta(minutes=1) < left <= unstored_keep()
    await stack.pool.execute("UPDATE chats SET discard_at = now() WHERE id = $1::uuid", chat_id)
    for _ in range(50):
        if chat_id in map(str, await ChatStore(stack.pool).delete_discarded(100)):
            break
        await asyncio.sleep(0.1)
    assert (
        await stack.pool.fetchval("SELECT count(*) FROM messages WHERE chat_id = $1::uuid", chat_id)
        == 0
    )
    assert (
        await stack.pool.fetchval(
            "SELECT count(*) FROM responses WHERE chat_id = $1::uuid", chat_id
        )
        == 0
    )


async def test_bad_frames_get_an_error_event_and_start_nothing(stack: Stack) -> None:
    running_before = await _chats_running(stack)
    socket = await _raw(_root(stack), stack.key)
    async with socket:
        create = {"type": "response.create"}
        for frame, code in [
            ("not json", "invalid_json"),
            ("[1, 2]", "unknown_message_type"),
            (json.dumps({"type": "response.cancel"}), "unknown_message_type"),
            (json.dumps({**create, "input": "hi"}), "invalid_request"),
            (json.dumps({**create, "model": "x", "input": "hi"}), "model_not_found"),
            (json.dumps({**create, "model": "demo/demo", "input": "hi", "background": True}),
             "invalid_request"),
        ]:  # fmt: skip
            await socket.send(frame)
            (event,) = await _until_terminal(socket)
            assert event["type"] == "error" and event["error"]["code"] == code, event
            assert 400 <= event["status"] < 500
        # The socket still serves a good request after all of them.
        events = await _turn(socket, {"model": _model(stack, _text("fine")), "input": "hi"})
        assert events[-1]["type"] == "response.completed"
        await socket.send("x" * (MAX_MESSAGE_BYTES + 1))
        (event,) = await _until_terminal(socket)
        assert event["error"]["code"] == "request_too_large"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await socket.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    assert await _chats_running(stack) == running_before


@pytest.mark.parametrize("key", [None, "not-a-key-of-anyone-0123"])
async def test_a_socket_without_a_valid_key_is_told_and_closed(
    stack: Stack, key: str | None
) -> None:
    socket = await _raw(_root(stack), key)
    async with socket:
        event = json.loads(await asyncio.wait_for(socket.recv(), 10))
        assert event["type"] == "error" and event["status"] == 401
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await socket.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_a_socket_closed_mid_response_stops_nothing(stack: Stack) -> None:
    long_text = " ".join(f"w{i}" for i in range(40))
    model = _model(
        stack, FakeResponse(parts=[FakeText(text=long_text, chunk_size=5)], delta_delay_s=0.05)
    )
    socket = await _raw(_root(stack), stack.key)
    async with socket:
        await socket.send(json.dumps({"type": "response.create", "model": model, "input": "go"}))
        first = json.loads(await socket.recv())
    response_id = first["response"]["id"]
    async with _client(_root(stack), stack.key) as client:
        for _ in range(100):
            response = await client.responses.retrieve(response_id)
            if response.status == "completed":
                break
            await asyncio.sleep(0.1)
        assert response.status == "completed" and response.output_text == long_text


async def test_a_worker_killed_mid_response_still_brings_the_terminal_event(
    cluster: Cluster,
) -> None:
    stack = cluster.stack
    long_text = " ".join(f"word{i}" for i in range(40))
    # Each attempt of the step (the one killed, one abandoned on a busy machine, the last)
    # streams the same answer.
    slow = FakeResponse(parts=[FakeText(text=long_text, chunk_size=6)], delta_delay_s=0.1)
    model = f"anthropic/{stack.stepped_model(slow)['name']}"
    first = await cluster.polling_worker()
    socket = await _raw(_root(stack), stack.key)
    async with socket:
        await socket.send(json.dumps({"type": "response.create", "model": model, "input": "w"}))
        events: list[dict[str, Any]] = []
        while sum(e["type"] == "response.output_text.delta" for e in events) < 3:
            events.append(json.loads(await asyncio.wait_for(socket.recv(), 30)))
        cluster.start_worker()
        await asyncio.to_thread(first.signal, signal.SIGKILL)
        events += await _until_terminal(socket)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]
    assert final["type"] == "response.completed"
    texts = [i["content"][0]["text"] for i in final["response"]["output"]]
    assert texts == [long_text]


@pytest.mark.slow
async def test_after_a_gateway_restart_clients_reconnect_and_continue_stored_responses(
    stack: Stack, database_url: str, temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """Sockets are open on a gateway that stops (SIGTERM): each gets close code 1012 (or its
    response's end first); on a new gateway, the clients continue their stored responses."""
    model = f"anthropic/{stack.stepped_model(_text('first'), _text('again'))['name']}"
    port, log = free_port(), tmp_path / "api.log"
    base = f"http://127.0.0.1:{port}"
    gateway = chatd_api(database_url, temporal_server, port, log, stack.task_queue)
    try:
        await until_ready(base, gateway, log)
        sockets = [await _raw(base, stack.key) for _ in range(2)]
        ids = []
        for socket in sockets:
            events = await _turn(socket, {"model": model, "input": "first"})
            assert events[-1]["type"] == "response.completed"
            ids.append(events[-1]["response"]["id"])
        gateway.send_signal(signal.SIGTERM)
        for socket in sockets:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(socket.recv(), 30)
            assert closed.value.rcvd is None or closed.value.rcvd.code in (1001, 1012)
        await asyncio.to_thread(gateway.wait, 30)
        gateway = chatd_api(database_url, temporal_server, port, log, stack.task_queue)
        await until_ready(base, gateway, log)
        for response_id in ids:
            socket = await _raw(base, stack.key)
            async with socket:
                request = {"model": model, "input": "again", "previous_response_id": response_id}
                events = await _turn(socket, request)
            assert events[-1]["type"] == "response.completed", events[-1]
    finally:
        if gateway.poll() is None:
            gateway.kill()
        gateway.wait()
