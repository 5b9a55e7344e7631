"""`chatd api` stopping with streams open: they end at once and the gateway exits; their
clients resume exactly where they were on another gateway (`Last-Event-ID`)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
from harness import SseEvent, Stack, sse_events
from support.api_process import chatd_api, until_ready
from support.forked import ForkedChatd

from chatd.devstack.ports import free_port
from chatd.devstack.temporal import TemporalDevServer


async def _read_until_stopped(
    http: httpx.AsyncClient, chat_id: str, gateway: ForkedChatd
) -> list[SseEvent]:
    """The chat's events from the start; SIGTERM to `gateway` once the turn's are all read,
    then on until the stream ends."""
    seen: list[SseEvent] = []
    async for event in sse_events(http, chat_id, after=0):
        seen.append(event)
        if event.event == "status" and event.data["status"] == "waiting":
            gateway.send_signal(signal.SIGTERM)
    return seen


async def _resumed(stack: Stack, chat_id: str, last_event_id: int) -> list[SseEvent]:
    """Events after `last_event_id` on the stack's gateway, until the chat waits again."""
    events: list[SseEvent] = []
    cursor = {"Last-Event-ID": str(last_event_id)}
    async for event in sse_events(stack.http, chat_id, headers=cursor):
        events.append(event)
        if event.event == "status" and event.data["status"] == "waiting":
            return events
    raise AssertionError(f"the resumed stream ended early: {events}")


async def test_sigterm_ends_open_streams_and_the_gateway_exits(
    stack: Stack, database_url: str, temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    chat = await stack.create_chat(message={"content": "hello"})
    port, log = free_port(), tmp_path / "api.log"
    gateway = chatd_api(database_url, temporal_server, port, log)
    try:
        await until_ready(f"http://127.0.0.1:{port}", gateway, log)
        headers = {"Authorization": f"Bearer {stack.key}"}
        base = f"http://127.0.0.1:{port}/api/v1"
        async with httpx.AsyncClient(base_url=base, headers=headers) as http:
            # Bounded so that a stream left open fails the test instead of hanging it.
            seen = await asyncio.wait_for(_read_until_stopped(http, chat["id"], gateway), 60)
        # uvicorn raises the signal again once it has shut down: the exit is "by SIGTERM".
        assert await asyncio.to_thread(gateway.wait, 10) == -signal.SIGTERM
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
    assert "Traceback" not in log.read_text()
    last = seen[-1].id
    assert last is not None
    await stack.send(chat["id"], "and again")
    resumed = await asyncio.wait_for(_resumed(stack, chat["id"], last), 60)
    assert [e.id for e in seen + resumed] == list(range(1, len(seen) + len(resumed) + 1))
