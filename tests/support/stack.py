"""A chatd stack in one process, for end-to-end tests and benchmarks.

`running_stack()` migrates a database, starts a worker (as `workers.worker.build_worker`
makes it) and the gateway, and yields HTTP clients for two owners; the caller runs Postgres,
the Temporal server and the fake provider. Everything is torn down when it exits.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
from temporalio.client import Client
from temporalio.worker import Worker

from activities.model_step import StreamTimeouts
from api.app import GatewayConfig, create_app
from chatd.devstack.ports import bound_socket
from chatd.fake_provider.script import FakeRequest, FakeResponse
from chatd.fake_provider.server import FakeProviderServer
from chatd.mcp.config import McpConfig, server_names
from chatd.prices import Prices
from chatd.serving import EmbeddedServer
from chatd.settings import TemporalSettings
from chatd.sse import Event, parse_sse
from chatd.store.db import connect_pool, migrate
from chatd.store.keys import KeyStore
from chatd.store.listen_hub import ListenHub
from chatd.temporal_client import connect_temporal
from chatd.tls import client_context
from chatd.tools.base import ToolRegistry
from chatd.tools.defaults import default_registry
from support.names import model_name
from workers.worker import WorkerConfig, build_worker, listen_for_interrupts

__all__ = ["SseEvent", "Stack", "running_stack", "sse_events"]

SseEvent = Event
"""One event of a chat's stream, as the one SSE parser (`chatd.client.http`) reads it."""


@dataclass
class Stack:
    """A running stack and an HTTP client for each of two owners."""

    http: httpx.AsyncClient
    other_owner: httpx.AsyncClient
    fake: FakeProviderServer
    pool: asyncpg.Pool
    temporal: Client
    task_queue: str
    base_url: str
    key: str
    worker: Worker | None

    def late_worker(self, workspace: Path) -> Worker:
        """A worker for this stack's task queue, for a test that starts one only later
        (`async with stack.late_worker(...)`); titles off, the stack's default."""
        config = WorkerConfig(
            task_queue=self.task_queue,
            providers=self.fake.provider_settings(),
            registry=default_registry(),
            workspace_root=workspace,
            generate_titles=False,
        )
        return build_worker(self.temporal, self.pool, config)

    def responses_client(self) -> openai.AsyncOpenAI:
        """The `openai` SDK on this stack's Open Responses (`/v1`), no retries."""
        root = self.base_url.removesuffix("/api/v1")
        return openai.AsyncOpenAI(
            base_url=f"{root}/v1",
            api_key=self.key,
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(verify=client_context()),
        )

    def scripted_model(self, *responses: FakeResponse) -> dict[str, str]:
        """The model config of a fake model of the caller's own, answering `responses` in
        turn."""
        name = model_name()
        self.fake.script(name, list(responses))
        return {"provider": "anthropic", "name": name}

    def stepped_model(self, *responses: FakeResponse) -> dict[str, str]:
        """Like `scripted_model`, for one conversation: a request holding N assistant
        messages gets `responses[N]`, so an attempt retried on a busy machine (its step
        abandoned and run again) gets the same answer, where a list would move on."""

        def respond(request: FakeRequest) -> FakeResponse:
            messages = request.body.get("messages", [])
            steps = sum(1 for m in messages if m.get("role") == "assistant")
            return responses[min(steps, len(responses) - 1)]

        name = model_name()
        self.fake.script(name, respond)
        return {"provider": "anthropic", "name": name}

    async def create_chat(self, **body: Any) -> dict[str, Any]:
        """POST /chats and return the chat."""
        response = await self.http.post("/chats", json=body)
        assert response.status_code == 201, response.text
        chat: dict[str, Any] = response.json()
        return chat

    async def send(self, chat_id: str, content: str, **extra: Any) -> dict[str, Any]:
        """POST a message and return the answer."""
        response = await self.http.post(
            f"/chats/{chat_id}/messages", json={"content": content, **extra}
        )
        assert response.status_code == 202, response.text
        result: dict[str, Any] = response.json()
        return result

    async def messages(self, chat_id: str) -> list[dict[str, Any]]:
        """The whole transcript, page by page."""
        messages: list[dict[str, Any]] = []
        after: int | None = 0
        while after is not None:
            response = await self.http.get(
                f"/chats/{chat_id}/messages", params={"after_id": after, "limit": 500}
            )
            assert response.status_code == 200, response.text
            page = response.json()
            messages += page["messages"]
            after = page["next_after_id"]
        return messages

    async def events_until(
        self, chat_id: str, done: Any, *, after: int = 0, within_s: float = 30.0
    ) -> list[SseEvent]:
        """Stream the chat's events from `after` until `done(event)` is true."""
        events: list[SseEvent] = []

        async def read() -> None:
            async for event in sse_events(self.http, chat_id, after=after):
                events.append(event)
                if done(event):
                    return

        await asyncio.wait_for(read(), within_s)
        return events

    async def wait_status(
        self, chat_id: str, status: str, *, after: int = 0, within_s: float = 30.0
    ) -> list[SseEvent]:
        """Events until the chat reports `status` (from event id `after`)."""
        return await self.events_until(
            chat_id,
            lambda e: e.event == "status" and e.data["status"] == status,
            after=after,
            within_s=within_s,
        )


async def sse_events(
    http: httpx.AsyncClient, chat_id: str, *, after: int = 0, headers: dict[str, str] | None = None
) -> AsyncIterator[SseEvent]:
    """The chat's stream, parsed (from `after`, or from the cursor in `headers`)."""
    params = {"after": after} if headers is None else None
    async with http.stream(
        "GET", f"/chats/{chat_id}/stream", params=params, headers=headers, timeout=None
    ) as response:
        assert response.status_code == 200, await response.aread()
        async for event in parse_sse(response.aiter_lines()):
            yield event


@asynccontextmanager
async def running_stack(
    *,
    database_url: str,
    temporal_address: str,
    fake: FakeProviderServer,
    workspace: Path,
    registry: ToolRegistry | None = None,
    with_worker: bool = True,
    stream_timeouts: StreamTimeouts | None = None,
    generate_titles: bool = False,
    task_queue: str | None = None,
    announced_interrupts: bool = True,
    worker_overrides: Mapping[str, Any] | None = None,
    http_timeout_s: float = 5.0,
    mcp: McpConfig | None = None,
    prices: Prices | None = None,
) -> AsyncIterator[Stack]:
    """Migrate the database, start a worker and a gateway, and yield a client.

    `generate_titles` is off by default: a title request would take a scripted model's answer.
    `announced_interrupts=False`: the worker doesn't listen for the gateway's interrupt
    announcements, so interrupts reach a streaming step with its next heartbeat only.
    `worker_overrides` replace `temporalio.worker.Worker` options (for experiments).
    `mcp`: the MCP servers of the worker and the names the gateway accepts (None: both read
    `CHATD_MCP_CONFIG`, as in production).
    `prices`: the worker's and the gateway's price table (None: `CHATD_PRICES`, as in
    production).
    """
    await migrate(database_url)
    task_queue = task_queue or f"test-{uuid.uuid4().hex[:12]}"
    settings = TemporalSettings(address=temporal_address, task_queue=task_queue)
    config = WorkerConfig(
        task_queue=task_queue,
        providers=fake.provider_settings(),
        registry=registry or default_registry(),
        workspace_root=workspace,
        stream_timeouts=stream_timeouts or StreamTimeouts(),
        generate_titles=generate_titles,
    )
    if mcp is not None:
        config.mcp = mcp
    if prices is not None:
        config.prices = prices
    async with AsyncExitStack() as resources:
        watch = TeardownWatch()
        resources.callback(watch.stop)  # the last to run
        pool = await connect_pool(database_url)
        resources.push_async_callback(pool.close)
        client = await connect_temporal(settings)
        keys = KeyStore(pool)
        key, other_key = await keys.create("alice"), await keys.create("bob")
        worker: Worker | None = None
        if with_worker:
            interrupts = (
                await resources.enter_async_context(listen_for_interrupts(database_url))
                if announced_interrupts
                else None
            )
            worker = _worker(client, pool, config, interrupts, worker_overrides)
        gateway = GatewayConfig(
            database_url=database_url, temporal=settings, generate_titles=generate_titles
        )
        if mcp is not None:
            gateway.mcp_servers = server_names(mcp)
        if prices is not None:
            gateway.prices = prices
        base_url = await _serve(resources, gateway)
        http = await resources.enter_async_context(_owner(base_url, key, http_timeout_s))
        other = await resources.enter_async_context(_owner(base_url, other_key, http_timeout_s))
        if worker is not None:
            await resources.enter_async_context(worker)
        resources.callback(watch.start)  # the first to run
        yield Stack(http, other, fake, pool, client, task_queue, base_url, key, worker)


class TeardownWatch:
    """Prints every asyncio task's stack when a stack's teardown (the worker's shutdown, the
    gateway's stop, the pool's close) is still running after `REPORT_AFTER_S`: one hung in
    CI until pytest's timeout, which shows the threads' stacks and not the tasks'."""

    REPORT_AFTER_S = 60.0

    def __init__(self) -> None:
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.REPORT_AFTER_S, self._report)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _report(self) -> None:
        after = f"{self.REPORT_AFTER_S:.0f} s"
        print(f"the stack's teardown is still running after {after}; its tasks:", file=sys.stderr)
        for task in asyncio.all_tasks():
            print(f"--- {task.get_name()}: {task.get_coro()!r}", file=sys.stderr)
            task.print_stack(file=sys.stderr)


async def _serve(resources: AsyncExitStack, config: GatewayConfig) -> str:
    """Start the gateway on a free port until `resources` close; its base URL."""
    sock = bound_socket()  # held until the server listens: no other process takes the port
    port = sock.getsockname()[1]
    server = EmbeddedServer(create_app(config), "127.0.0.1", port)
    await server.start(sock)
    resources.push_async_callback(server.stop)
    return f"http://127.0.0.1:{port}/api/v1"


def _owner(base_url: str, key: str, timeout_s: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {key}"},
        timeout=timeout_s,
        verify=client_context(),
    )


def _worker(
    client: Client,
    pool: asyncpg.Pool,
    config: WorkerConfig,
    interrupts: ListenHub | None,
    overrides: Mapping[str, Any] | None,
) -> Worker:
    """`build_worker`'s worker; with overrides, a copy of its options with them applied."""
    if not overrides:
        return build_worker(client, pool, config, interrupts=interrupts)
    # A worker registers its task queue when constructed: build the template on another one.
    task_queue, config.task_queue = config.task_queue, f"{config.task_queue}-template"
    template = build_worker(client, pool, config, interrupts=interrupts)
    return Worker(**{**template.config(), "task_queue": task_queue, **overrides})
