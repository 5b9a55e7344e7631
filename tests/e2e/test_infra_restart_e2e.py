"""Restarting PostgreSQL or the Temporal server mid-turn: the turn completes, nothing is lost.

Each test runs its own server (restarting the session ones would disturb other tests):
a PostgreSQL cluster in `tmp_path` (fsync off), or a Temporal dev server persisted to a db
file. The worker and the gateway run in this process and must reconnect by themselves; the
SSE client reconnects with `Last-Event-ID` like a browser's EventSource does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import SseEvent, Stack, running_stack
from support.chaos_tools import TOOLS as CHAOS_TOOLS
from support.names import model_name
from support.postgres import THROWAWAY_PG_SETTINGS
from temporalio.client import WorkflowExecutionStatus

from activities.compaction import TITLE_INSTRUCTIONS
from chatd.devstack.postgres import PostgresProcess
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.script import (
    DeltaRecord,
    FakeRequest,
    FakeResponse,
    FakeText,
    FakeToolCall,
)
from chatd.fake_provider.server import FakeProviderServer
from chatd.sse import parse_sse
from chatd.store.events import NOTIFY_CHANNEL
from chatd.tools.base import ToolRegistry
from chatd.tools.defaults import default_registry

LONG_TEXT = " ".join(f"word{i}" for i in range(60))
SLOW_STREAM = FakeResponse(parts=[FakeText(text=LONG_TEXT, chunk_size=6)], delta_delay_s=0.1)
"""About 70 deltas over ~7 s: long enough to restart a server in the middle."""
FAST_STREAM = FakeResponse(parts=[FakeText(text=LONG_TEXT, chunk_size=60)])
OUTAGE_S = 2.0


class StepScript:
    """A fake-model responder keyed by step: the first attempt of a step gets `first[step]`,
    a retried attempt `retry[step]` (so retries never eat another step's response).

    Title requests (if a worker generates titles) get a title, not a scripted step.
    """

    def __init__(self, first: list[FakeResponse], retry: list[FakeResponse]) -> None:
        self.first = first
        self.retry = retry
        self.attempts: Counter[int] = Counter()
        self._lock = threading.Lock()

    def __call__(self, request: FakeRequest) -> FakeResponse:
        """The response for one request (called on the fake provider's thread)."""
        if TITLE_INSTRUCTIONS in json.dumps(request.body.get("system", "")):
            return FakeResponse.of_text("A title")
        messages = request.body.get("messages", [])
        step = sum(1 for m in messages if m.get("role") == "assistant")
        with self._lock:
            self.attempts[step] += 1
            attempt = self.attempts[step]
        return self.first[step] if attempt == 1 else self.retry[step]


@dataclass
class ResumingSse:
    """An SSE client that reconnects with `Last-Event-ID` whenever its stream breaks."""

    http: httpx.AsyncClient
    chat_id: str
    last_id: int = 0
    events: list[SseEvent] = field(default_factory=list)
    connections: int = 0
    """Streams that were opened (200 OK)."""
    refused: int = 0
    """Connection attempts that failed or got an error status (the gateway's database down)."""
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def until(self, done: Callable[[SseEvent], bool], within_s: float) -> list[SseEvent]:
        """Read (reconnecting as needed) until `done(event)`; the events read by this call."""
        start = len(self.events)
        async with asyncio.timeout(within_s):
            while True:
                try:
                    async with contextlib.aclosing(self._stream()) as stream:
                        async for event in stream:
                            self.events.append(event)
                            self._arrived.set()
                            if event.id is not None:
                                self.last_id = event.id
                            if done(event):
                                return self.events[start:]
                except httpx.HTTPError:
                    self.refused += 1
                await asyncio.sleep(0.2)

    async def seen(self, match: Callable[[SseEvent], bool], within_s: float) -> None:
        """Wait until a reader (see `until`, run as a task) has received a matching event."""
        async with asyncio.timeout(within_s):
            while not any(match(e) for e in self.events):
                self._arrived.clear()
                await self._arrived.wait()

    async def _stream(self) -> AsyncGenerator[SseEvent, None]:
        headers = {"Last-Event-ID": str(self.last_id)}
        path = f"/chats/{self.chat_id}/stream"
        async with self.http.stream("GET", path, headers=headers, timeout=None) as response:
            if response.status_code != 200:
                self.refused += 1
                return
            self.connections += 1
            async for event in parse_sse(response.aiter_lines()):
                yield event


def _registry() -> ToolRegistry:
    registry = default_registry()
    for tool in CHAOS_TOOLS:
        registry.register(tool)
    return registry


def _is_status(status: str) -> Callable[[SseEvent], bool]:
    return lambda e: e.event == "status" and e.data["status"] == status


def _statuses(events: list[SseEvent]) -> list[str]:
    return [e.data["status"] for e in events if e.event == "status"]


def _text(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


def _after_last_reset(events: list[SseEvent]) -> str:
    """The assistant text a client shows: what streamed since the last `reset`."""
    kinds = [e.event for e in events]
    start = len(kinds) - kinds[::-1].index("reset") if "reset" in kinds else 0
    return "".join(
        e.data["part"].get("text", "")
        for e in events[start:]
        if e.event == "message_part" and e.data["role"] == "assistant"
    )


def _assert_each_event_once(events: list[SseEvent]) -> None:
    """A chat's events are numbered 1, 2, ...: a client that read from the start across
    reconnects must have ids 1..n (sorted and unique alone would not see a lost event)."""
    ids = [e.id for e in events]
    assert ids == list(range(1, len(events) + 1)), "reconnects lost or repeated no event"


def _first_attempt_deltas(fake: FakeProviderServer, model: str) -> list[DeltaRecord]:
    """The deltas streamed before the model's second request: a retry's never count."""
    requests = fake.requests(model)
    retried_ns = requests[1].received_ns if len(requests) > 1 else time.time_ns()
    return [d for d in fake.deltas(model) if d.emitted_ns < retried_ns]


async def _start_turn(stack: Stack, script: StepScript) -> tuple[str, str]:
    """A chat on a fresh fake model running `script`, with its first message sent."""
    name = model_name()
    stack.fake.script(name, script)
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "work")
    return str(chat["id"]), name


# --- PostgreSQL ------------------------------------------------------------------------------


@dataclass
class PgCluster:
    """A stack on its own PostgreSQL server, which the test may restart."""

    stack: Stack
    postgres: PostgresProcess
    tmp: Path

    async def outage(self, seconds: float = OUTAGE_S) -> None:
        """Stop PostgreSQL (fast shutdown), stay down for `seconds`, start it again."""
        await asyncio.to_thread(self.postgres.stop)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(self.postgres.start)

    async def listening_backends(self) -> int:
        """Database sessions LISTENing on the event channel (the gateway's hub)."""
        count = await self.stack.pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE $1",
            f"%LISTEN%{NOTIFY_CHANNEL}%",
        )
        return int(count)


@pytest.fixture
async def pg_cluster(
    temporal_server: TemporalDevServer, fake_provider: FakeProviderServer, tmp_path: Path
) -> AsyncIterator[PgCluster]:
    """A private PostgreSQL (restartable), the session Temporal server, worker and gateway."""
    postgres = PostgresProcess(tmp_path / "pg", settings=THROWAWAY_PG_SETTINGS)
    await asyncio.to_thread(postgres.start)
    try:
        database_url = await asyncio.to_thread(postgres.create_database, "chatd")
        async with running_stack(
            database_url=database_url,
            temporal_address=temporal_server.address,
            fake=fake_provider,
            workspace=tmp_path / "workspaces",
            registry=_registry(),
        ) as stack:
            yield PgCluster(stack, postgres, tmp_path)
    finally:
        await asyncio.to_thread(postgres.stop)


async def test_postgres_restarted_mid_stream(pg_cluster: PgCluster) -> None:
    stack = pg_cluster.stack
    script = StepScript(first=[SLOW_STREAM, FAST_STREAM], retry=[FAST_STREAM, FAST_STREAM])
    chat_id, _ = await _start_turn(stack, script)
    sse = ResumingSse(stack.http, chat_id)
    reading = asyncio.create_task(sse.until(_is_status("waiting"), within_s=120))
    await sse.seen(lambda e: e.event == "message_part", within_s=60)

    await pg_cluster.outage()  # the same SSE client reads on across the outage
    await reading

    events = sse.events
    assert _statuses(events) == ["running", "waiting"], "the outage never failed the turn"
    assert "reset" in [e.event for e in events], "the broken attempt was retried"
    assert _after_last_reset(events) == LONG_TEXT, "the client ends up showing the answer once"
    _assert_each_event_once(events)
    messages = await stack.messages(chat_id)
    assert [(m["role"], _text(m)) for m in messages] == [("user", "work"), ("assistant", LONG_TEXT)]

    # The gateway's LISTEN connection came back, and the chat goes on as if nothing happened.
    assert await pg_cluster.listening_backends() >= 1
    await stack.send(chat_id, "again")
    tail = await sse.until(_is_status("waiting"), within_s=60)
    assert _after_last_reset(tail) == LONG_TEXT
    _assert_each_event_once(sse.events)
    messages = await stack.messages(chat_id)
    assert [(m["role"], _text(m)) for m in messages] == [
        ("user", "work"),
        ("assistant", LONG_TEXT),
        ("user", "again"),
        ("assistant", LONG_TEXT),
    ]


async def test_postgres_restarted_while_a_tool_runs(pg_cluster: PgCluster) -> None:
    stack = pg_cluster.stack
    marker = pg_cluster.tmp / "tool.started"
    call = FakeToolCall(name="slow_idempotent", arguments={"marker": str(marker), "seconds": 1.5})
    done = FakeResponse(parts=[FakeText(text="all done")])
    script = StepScript(
        first=[FakeResponse(parts=[call]), done], retry=[FakeResponse(parts=[call]), done]
    )
    chat_id, _ = await _start_turn(stack, script)
    sse = ResumingSse(stack.http, chat_id)
    reading = asyncio.create_task(sse.until(_is_status("waiting"), within_s=120))
    for _ in range(600):
        if marker.exists():
            break
        await asyncio.sleep(0.05)
    assert marker.exists(), "the tool never started"

    await pg_cluster.outage()
    await reading

    assert _statuses(sse.events) == ["running", "waiting"]
    _assert_each_event_once(sse.events)
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert [p["name"] for p in messages[1]["parts"] if p["type"] == "tool_call"] == [
        "slow_idempotent"
    ]
    assert [(p["type"], p["output"]) for p in messages[2]["parts"]] == [
        ("tool_result", "slow work done")
    ]
    assert _text(messages[3]) == "all done"
    tool_parts = [e for e in sse.events if e.event == "message_part" and e.data["role"] == "tool"]
    assert len(tool_parts) == 1, "the client saw the tool result once"


# --- Temporal --------------------------------------------------------------------------------


@pytest.fixture
async def own_temporal(
    database_url: str, fake_provider: FakeProviderServer, tmp_path: Path
) -> AsyncIterator[tuple[TemporalDevServer, Stack]]:
    """A Temporal dev server of the test's own (persisted to a db file) and a stack on it."""
    temporal = TemporalDevServer(tmp_path / "temporal", headless=True)
    await asyncio.to_thread(temporal.start)
    try:
        # A fresh server takes seconds over the first workflow task of a chat (about 3 s on
        # an idle machine, 6 s on a loaded one), so the first send outlasts the stack's
        # usual 5 s client timeout; it is answered, queued or begun, as any send is.
        async with running_stack(
            database_url=database_url,
            temporal_address=temporal.address,
            fake=fake_provider,
            workspace=tmp_path / "workspaces",
            http_timeout_s=30.0,
        ) as stack:
            yield temporal, stack
    finally:
        await asyncio.to_thread(temporal.cleanup)


async def test_temporal_restarted_mid_stream(
    own_temporal: tuple[TemporalDevServer, Stack],
) -> None:
    temporal, stack = own_temporal
    script = StepScript(first=[SLOW_STREAM], retry=[FAST_STREAM])
    chat_id, model = await _start_turn(stack, script)
    handle = stack.temporal.get_workflow_handle(f"chat-{chat_id}")
    run_id = (await handle.describe()).run_id
    sse = ResumingSse(stack.http, chat_id)
    reading = asyncio.create_task(sse.until(_is_status("waiting"), within_s=120))
    await sse.seen(lambda e: e.event == "message_part", within_s=60)

    stopping_ns = time.time_ns()
    await asyncio.to_thread(temporal.stop)  # SIGTERM
    await asyncio.sleep(OUTAGE_S)
    await asyncio.to_thread(temporal.start)  # same port, same db file
    await reading

    first_attempt = _first_attempt_deltas(stack.fake, model)
    assert first_attempt[-1].emitted_ns > stopping_ns, "the server went down mid-stream"

    assert _statuses(sse.events) == ["running", "waiting"]
    assert _after_last_reset(sse.events) == LONG_TEXT
    _assert_each_event_once(sse.events)
    messages = await stack.messages(chat_id)
    assert [(m["role"], _text(m)) for m in messages] == [
        ("user", "work"),
        ("assistant", LONG_TEXT),
    ]
    await asyncio.wait_for(handle.result(), 30)  # the run closes just after `waiting`
    description = await handle.describe()
    assert description.run_id == run_id, "the run survived the restart (db file)"
    assert description.status == WorkflowExecutionStatus.COMPLETED


VERY_LONG_TEXT = " ".join(f"word{i}" for i in range(200))
VERY_SLOW_STREAM = FakeResponse(
    parts=[FakeText(text=VERY_LONG_TEXT, chunk_size=6)], delta_delay_s=0.1
)
"""About 220 deltas over ~22 s: still streaming when a long outage ends."""


@pytest.mark.slow
async def test_temporal_outage_longer_than_the_heartbeat_timeout_keeps_the_whole_answer(
    own_temporal: tuple[TemporalDevServer, Stack],
) -> None:
    temporal, stack = own_temporal
    script = StepScript(first=[VERY_SLOW_STREAM], retry=[VERY_SLOW_STREAM])
    chat_id, _ = await _start_turn(stack, script)
    sse = ResumingSse(stack.http, chat_id)
    reading = asyncio.create_task(sse.until(_is_status("waiting"), within_s=180))
    await sse.seen(lambda e: e.event == "message_part", within_s=60)

    await asyncio.to_thread(temporal.stop)
    await asyncio.sleep(7.0)  # longer than the model step's 5 s heartbeat timeout
    await asyncio.to_thread(temporal.start)
    await reading

    messages = await stack.messages(chat_id)
    assert [(m["role"], _text(m)) for m in messages] == [
        ("user", "work"),
        ("assistant", VERY_LONG_TEXT),
    ]
    assert _after_last_reset(sse.events) == VERY_LONG_TEXT


async def test_a_response_created_while_temporal_is_down_is_queued_and_runs_once_it_is_back(
    own_temporal: tuple[TemporalDevServer, Stack],
) -> None:
    """Postgres holds the response and its message: the create answers `queued` (no 503 for
    an SDK to retry into a second response), and the turn runs when Temporal returns."""
    temporal, stack = own_temporal
    name = model_name()
    stack.fake.script(name, [FakeResponse(parts=[FakeText(text="back again")])])
    count = "SELECT count(*) FROM chats WHERE owner = 'alice'"
    chats_before = await stack.pool.fetchval(count)
    await asyncio.to_thread(temporal.stop)
    root = stack.base_url.removesuffix("/api/v1")
    body = {"model": f"anthropic/{name}", "input": "hi", "background": True}
    created = await stack.http.post(f"{root}/v1/responses", json=body, timeout=60)
    assert created.status_code == 200, created.text
    response = created.json()
    assert response["status"] == "queued"
    await asyncio.to_thread(temporal.start)

    async def completed() -> dict[str, Any]:
        while True:
            current = (await stack.http.get(f"{root}/v1/responses/{response['id']}")).json()
            if current["status"] not in ("queued", "in_progress"):
                return dict(current)
            await asyncio.sleep(0.2)

    final = await asyncio.wait_for(completed(), 90)
    assert final["status"] == "completed", final
    assert [part["text"] for part in final["output"][0]["content"]] == ["back again"]
    assert len(stack.fake.requests(name)) == 1
    assert await stack.pool.fetchval(count) == chats_before + 1, "one chat, one response"
    messages = await stack.messages(final["conversation"]["id"])
    assert [m["role"] for m in messages] == ["user", "assistant"]
