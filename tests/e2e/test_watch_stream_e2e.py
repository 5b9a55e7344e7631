"""The owner's watch stream, `GET /api/v1/stream`: every chat's `status`, `chat`, `error` and
`subagent` events on one stream in the owner's order, each naming its chat; resumed with
`Last-Event-ID` exactly once, on another gateway too; never another owner's; ended when the
key is revoked; one of the key's streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from harness import SseEvent, Stack, sse_events

from api.app import GatewayConfig, create_app
from api.shutdown import end_streams
from chatd.devstack.ports import free_port
from chatd.devstack.temporal import TemporalDevServer
from chatd.serving import EmbeddedServer
from chatd.settings import TemporalSettings
from chatd.sse import parse_sse
from chatd.store.keys import KeyStore, hash_key
from chatd.store.quotas import LimitOverrides, QuotaStore

DEMO = {"provider": "demo", "name": "demo"}
WATCHED = {"status", "chat", "error", "subagent"}


async def watch(
    http: httpx.AsyncClient, *, after: int | None = 0, headers: dict[str, str] | None = None
) -> AsyncIterator[SseEvent]:
    """The owner's watch stream, parsed (from `after`, or the cursor in `headers`)."""
    params = {"after": after} if after is not None and headers is None else None
    async with http.stream("GET", "/stream", params=params, headers=headers, timeout=None) as r:
        assert r.status_code == 200, await r.aread()
        async for event in parse_sse(r.aiter_lines()):
            yield event


async def _owner_log(stack: Stack, owner: str) -> list[tuple[int, str, str]]:
    rows = await stack.pool.fetch(
        "SELECT seq, chat_id, event FROM owner_events WHERE owner = $1 ORDER BY seq", owner
    )
    return [(r["seq"], str(r["chat_id"]), r["event"]) for r in rows]


async def _last_event_id(stack: Stack, chat_id: str) -> int:
    return int(await stack.pool.fetchval("SELECT last_event_seq FROM chats WHERE id = $1", chat_id))


async def _until_waiting(http: httpx.AsyncClient, chat_id: str, after: int) -> None:
    """Until the chat's stream, after event `after`, says it waits (its turn ended)."""
    async with asyncio.timeout(60):
        async for event in sse_events(http, chat_id, after=after):
            if event.event == "status" and event.data["status"] == "waiting":
                return


async def _turn(stack: Stack, http: httpx.AsyncClient, chat_id: str, content: str) -> None:
    """Send a message and wait for its turn to end."""
    after = await _last_event_id(stack, chat_id)
    sent = await http.post(f"/chats/{chat_id}/messages", json={"content": content})
    assert sent.status_code == 202, sent.text
    await _until_waiting(http, chat_id, after)


async def _read_through(http: httpx.AsyncClient, last: int, **cursor: Any) -> list[SseEvent]:
    """Watch events from the cursor through event `last`."""
    events: list[SseEvent] = []
    async with asyncio.timeout(60):
        async for event in watch(http, **cursor):
            events.append(event)
            if event.id == last:
                return events
    raise AssertionError(f"the watch stream ended early: {events}")


async def _chat_stream_watched(stack: Stack, chat_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The chat's own watched events, as its stream has them."""
    last = await _last_event_id(stack, chat_id)
    events = await stack.events_until(chat_id, lambda e: e.id == last)
    return [(e.event, e.data) for e in events if e.event in WATCHED]


async def test_every_chats_events_arrive_on_one_stream_in_order_naming_their_chat(
    stack: Stack,
) -> None:
    first, second = await stack.create_chat(model=DEMO), await stack.create_chat(model=DEMO)
    bobs = (await stack.other_owner.post("/chats", json={"model": DEMO})).json()
    await asyncio.gather(
        _turn(stack, stack.http, first["id"], "hello"),
        _turn(stack, stack.http, second["id"], "hi"),
        _turn(stack, stack.other_owner, bobs["id"], "hey"),
    )
    await stack.http.patch(f"/chats/{first['id']}", json={"title": "named"})
    log = await _owner_log(stack, "alice")

    events = await _read_through(stack.http, log[-1][0])

    assert [(e.id, e.data["chat_id"], e.event) for e in events] == log
    assert {chat for _, chat, _ in log} == {first["id"], second["id"]}
    for chat in (first, second):
        own = [(e.event, e.data) for e in events if e.data["chat_id"] == chat["id"]]
        assert own == [
            (event, {**data, "chat_id": chat["id"]})
            for event, data in await _chat_stream_watched(stack, chat["id"])
        ]
    assert ("chat", {"title": "named", "chat_id": first["id"]}) in [
        (e.event, e.data) for e in events
    ]
    bob_log = await _owner_log(stack, "bob")
    bob_events = await _read_through(stack.other_owner, bob_log[-1][0])
    assert {e.data["chat_id"] for e in bob_events} == {bobs["id"]}


@asynccontextmanager
async def _another_gateway(
    stack: Stack, database_url: str, temporal: TemporalDevServer
) -> AsyncIterator[EmbeddedServer]:
    """A second gateway on the stack's database and Temporal (`.stop()` ends its streams)."""
    settings = TemporalSettings(address=temporal.address, task_queue=stack.task_queue)
    app = create_app(GatewayConfig(database_url=database_url, temporal=settings))
    server = EmbeddedServer(app, "127.0.0.1", free_port(), lambda: end_streams(app))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_a_resumed_stream_gets_every_event_once_across_a_gateway_restart(
    stack: Stack, database_url: str, temporal_server: TemporalDevServer
) -> None:
    chats = [await stack.create_chat(model=DEMO) for _ in range(2)]
    headers = {"Authorization": f"Bearer {stack.key}"}
    seen: list[SseEvent] = []
    midway = asyncio.Event()

    async def talk() -> None:
        for n in range(3):
            await asyncio.gather(*(_turn(stack, stack.http, c["id"], f"say {n}") for c in chats))

    async def read(http: httpx.AsyncClient) -> None:
        async for event in watch(http):
            seen.append(event)
            if sum(e.event == "status" for e in seen) == 4:
                midway.set()

    talking = asyncio.create_task(talk())
    async with _another_gateway(stack, database_url, temporal_server) as gateway:
        base = f"http://127.0.0.1:{gateway.config.port}/api/v1"
        async with httpx.AsyncClient(base_url=base, headers=headers) as http:
            reading = asyncio.create_task(read(http))
            async with asyncio.timeout(60):
                await midway.wait()
                await gateway.stop()  # mid-conversation, the stream open
                await reading  # the stream ended with the gateway
    await talking
    log = await _owner_log(stack, "alice")
    assert seen[-1].id is not None and seen[-1].id < log[-1][0]

    resumed = await _read_through(
        stack.http, log[-1][0], headers={"Last-Event-ID": str(seen[-1].id)}
    )

    assert [(e.id, e.data["chat_id"], e.event) for e in seen + resumed] == log
    again = await _read_through(stack.http, log[-1][0], after=log[-3][0])
    assert [e.id for e in again] == [log[-2][0], log[-1][0]]


async def test_cursors_past_the_end_pruned_or_malformed_are_refused(stack: Stack) -> None:
    chat = await stack.create_chat(model=DEMO)
    for content in ("hello", "again"):
        await _turn(stack, stack.http, chat["id"], content)
    last = (await _owner_log(stack, "alice"))[-1][0]
    assert last >= 4

    for request in ({"params": {"after": last + 1}}, {"headers": {"Last-Event-ID": str(last + 1)}}):
        past = await stack.http.get("/stream", **request)
        assert past.status_code == 400, past.text
        assert past.json()["error"] == {
            "code": "invalid_cursor",
            "message": f"event {last + 1} does not exist: the owner's last event is {last}",
            "detail": {"last_event_id": last},
        }
    malformed = await stack.http.get("/stream", headers={"Last-Event-ID": "x"})
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "invalid_cursor"
    await stack.pool.execute(
        "INSERT INTO owner_events_pruned (owner, through_seq) VALUES ('alice', 2)"
    )
    expired = await stack.http.get("/stream", params={"after": 1})
    assert expired.status_code == 410 and expired.json()["error"]["code"] == "cursor_expired"
    kept = await _read_through(stack.http, last, after=2)
    assert [e.id for e in kept] == list(range(3, last + 1))


async def test_a_revoked_keys_watch_stream_ends(stack: Stack) -> None:
    key = await KeyStore(stack.pool).create("alice", "to revoke")
    async with httpx.AsyncClient(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=None
    ) as http:
        async with http.stream("GET", "/stream") as response:
            assert response.status_code == 200
            lines = response.aiter_lines()
            assert await anext(lines) == "retry: 2000"
            await stack.pool.execute(
                "UPDATE api_keys SET revoked_at = now() WHERE key_hash = $1", hash_key(key)
            )
            async with asyncio.timeout(30):
                async for _ in lines:
                    pass  # until the gateway ends the stream
        again = await http.get("/stream")
        assert again.status_code == 401


async def test_a_watch_stream_is_one_of_the_keys_streams(stack: Stack) -> None:
    await QuotaStore(stack.pool).set_limits("alice", LimitOverrides(streams=1))
    chat = await stack.create_chat(model=DEMO)
    watching = await stack.http.send(
        stack.http.build_request("GET", "/stream", timeout=None), stream=True
    )
    assert watching.status_code == 200
    for path in ("/stream", f"/chats/{chat['id']}/stream"):
        refused = await stack.http.get(path)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "too_many_streams"
    await watching.aclose()
    async with asyncio.timeout(30):
        while True:  # the slot is freed as the closed stream ends on the gateway
            again = await stack.http.send(
                stack.http.build_request("GET", "/stream", timeout=None), stream=True
            )
            await again.aclose()
            if again.status_code == 200:
                return
            assert again.status_code == 429
            await asyncio.sleep(0.1)
