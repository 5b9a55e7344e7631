"""Shared plumbing for benchmarks: a throwaway chatd stack, an SSE listener, and statistics.

`services()` starts PostgreSQL (data dir in a temp dir, fsync off), the Temporal dev server
(headless, in-memory, chatd's dynamic config) and the fake provider; `running_stack()` adds
a migrated database, a worker built by `workers.worker.build_worker`, the gateway and an
authenticated HTTP client, all in this process (like tests/e2e/harness.py). Everything is
torn down, and the temp dir removed, when the context managers exit.

Benchmarks import it as `import _stack` (running `python bench/<name>.py` puts bench/ on
sys.path).
"""

from __future__ import annotations

from temporalio import activity, workflow

# The floor workflow below lives in this module, so the workflow sandbox re-imports it for
# every run: everything else is passed through from the host (as workflows/chat_turn.py does).
with workflow.unsafe.imports_passed_through():
    import asyncio
    import contextlib
    import json
    import math
    import shutil
    import statistics
    import tempfile
    import time
    import uuid
    from collections.abc import AsyncIterator, Callable, Mapping, Sequence
    from dataclasses import dataclass, field
    from datetime import timedelta
    from pathlib import Path
    from typing import Any

    import asyncpg
    import httpx
    from temporalio.client import Client
    from temporalio.worker import Worker

    from api.app import GatewayConfig, create_app
    from chatd.devstack.ports import free_port
    from chatd.devstack.postgres import PostgresProcess
    from chatd.devstack.temporal import DEFAULT_DYNAMIC_CONFIG, TemporalDevServer
    from chatd.fake_provider.server import FakeProviderServer
    from chatd.providers import close_clients
    from chatd.serving import EmbeddedServer
    from chatd.settings import ProviderSettings, TemporalSettings
    from chatd.store.db import connect_pool, migrate
    from chatd.store.keys import KeyStore
    from chatd.tools.defaults import default_registry
    from workers.client import connect_temporal
    from workers.worker import WorkerConfig, build_worker

__all__ = [
    "BENCH_PG_SETTINGS",
    "BenchStack",
    "NoopFloor",
    "Services",
    "SseEvent",
    "SseListener",
    "fake_provider_settings",
    "floor_worker",
    "noop_activity",
    "percentile",
    "running_stack",
    "say",
    "services",
    "summary",
]

BENCH_PG_SETTINGS = {
    # Throwaway benchmark data only (same as the tests): never for `chatd dev` data.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}

_T0 = time.monotonic()


def say(message: str) -> None:
    """A progress line, stamped with seconds since the script started."""
    print(f"[{time.monotonic() - _T0:6.1f}s] {message}", flush=True)


# --- processes -------------------------------------------------------------------------------


@dataclass
class Services:
    """The external processes of a stack (and the in-process fake provider)."""

    postgres: PostgresProcess
    temporal: TemporalDevServer
    fake: FakeProviderServer
    database_url: str


@contextlib.asynccontextmanager
async def services(
    *, dynamic_config: Mapping[str, object] | None = None
) -> AsyncIterator[Services]:
    """PostgreSQL in a temp dir, a headless in-memory Temporal dev server and the fake provider.

    `dynamic_config` entries are merged over chatd's `DEFAULT_DYNAMIC_CONFIG`.
    """
    root = Path(tempfile.mkdtemp(prefix="chatd-bench-"))
    postgres = PostgresProcess(root / "postgres", settings=BENCH_PG_SETTINGS)
    temporal = TemporalDevServer(
        headless=True, dynamic_config={**DEFAULT_DYNAMIC_CONFIG, **(dynamic_config or {})}
    )
    fake = FakeProviderServer(demo_model=None)
    try:
        say(f"starting PostgreSQL (data dir {root / 'postgres'})")
        await asyncio.to_thread(postgres.start)
        say("starting Temporal dev server")
        await asyncio.to_thread(temporal.start)
        fake.start()
        database_url = await asyncio.to_thread(postgres.create_database, "bench")
        say(f"services up: postgres :{postgres.port}, temporal {temporal.address}, "
            f"fake provider {fake.base_url}")  # fmt: skip
        yield Services(postgres, temporal, fake, database_url)
    finally:
        say("tearing down")
        fake.stop()
        await asyncio.to_thread(temporal.cleanup)
        await asyncio.to_thread(postgres.stop)
        shutil.rmtree(root, ignore_errors=True)


# --- the chatd stack -------------------------------------------------------------------------


def fake_provider_settings(fake: FakeProviderServer) -> ProviderSettings:
    """Every provider pointed at the fake server."""
    return ProviderSettings(
        anthropic_api_key="bench-anthropic-key",
        anthropic_base_url=fake.base_url,
        openai_api_key="bench-openai-key",
        openai_base_url=fake.base_url + "/v1",
        demo_base_url=fake.base_url,
    )


@dataclass
class BenchStack:
    """A migrated database, a worker, the gateway, and an HTTP client for one owner."""

    services: Services
    pool: asyncpg.Pool
    temporal: Client
    worker: Worker
    task_queue: str
    base_url: str
    http: httpx.AsyncClient

    async def create_chat(self, **body: Any) -> str:
        """POST /chats; returns the chat id."""
        response = await self.http.post("/chats", json=body)
        response.raise_for_status()
        return str(response.json()["id"])

    async def send(self, chat_id: str, content: str) -> dict[str, Any]:
        """POST a message; returns the 202 body."""
        response = await self.http.post(f"/chats/{chat_id}/messages", json={"content": content})
        if response.status_code != 202:
            raise RuntimeError(f"send failed: {response.status_code} {response.text}")
        result: dict[str, Any] = response.json()
        return result

    def listen(self, chat_id: str) -> SseListener:
        """An SSE listener on the chat (use as `async with`)."""
        return SseListener(self.http, chat_id)


@contextlib.asynccontextmanager
async def running_stack(
    svc: Services, *, worker_overrides: Mapping[str, Any] | None = None
) -> AsyncIterator[BenchStack]:
    """Migrate, start a worker (as `build_worker` makes it) and the gateway; tear down after.

    `worker_overrides` replace Worker constructor options (for experiments).
    """
    await migrate(svc.database_url)
    task_queue = f"bench-{uuid.uuid4().hex[:8]}"
    settings = TemporalSettings(address=svc.temporal.address, task_queue=task_queue)
    pool = await connect_pool(svc.database_url)
    server: EmbeddedServer | None = None
    try:
        client = await connect_temporal(settings)
        key = await KeyStore(pool).create("bench")
        worker = _worker(client, pool, svc, task_queue, worker_overrides)
        port = free_port()
        server = EmbeddedServer(
            create_app(GatewayConfig(database_url=svc.database_url, temporal=settings)),
            "127.0.0.1",
            port,
        )
        base_url = f"http://127.0.0.1:{port}/api/v1"
        await server.start()
        async with (
            httpx.AsyncClient(
                base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60
            ) as http,
            worker,
        ):
            yield BenchStack(svc, pool, client, worker, task_queue, base_url, http)
    finally:
        if server is not None:
            await server.stop()
        await close_clients()
        await pool.close()


def _worker(
    client: Client,
    pool: asyncpg.Pool,
    svc: Services,
    task_queue: str,
    overrides: Mapping[str, Any] | None,
) -> Worker:
    """`build_worker`'s worker; with overrides, a copy of its settings with them applied."""
    config = WorkerConfig(
        task_queue=task_queue,
        providers=fake_provider_settings(svc.fake),
        registry=default_registry(),
        workspace_root=Path(tempfile.gettempdir()) / f"chatd-bench-ws-{task_queue}",
    )
    if not overrides:
        return build_worker(client, pool, config)
    # A worker registers its task queue when constructed: build the template on another one.
    config.task_queue = f"{task_queue}-template"
    template = build_worker(client, pool, config)
    return Worker(**{**template.config(), "task_queue": task_queue, **overrides})


# --- SSE -------------------------------------------------------------------------------------


@dataclass
class SseEvent:
    """One SSE frame and when it was parsed (`time.perf_counter()` / `time.time_ns()`)."""

    id: int | None
    event: str
    data: dict[str, Any]
    at: float
    at_ns: int


@dataclass
class SseListener:
    """A connected SSE client that timestamps every event as it arrives."""

    http: httpx.AsyncClient
    chat_id: str
    events: asyncio.Queue[SseEvent] = field(default_factory=asyncio.Queue)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> SseListener:
        self._task = asyncio.create_task(self._read())
        ready = asyncio.create_task(self._ready.wait())
        done, _ = await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if self._task in done:
            ready.cancel()
            self._task.result()
            raise RuntimeError("SSE stream ended before it started")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def until(self, done: Callable[[SseEvent], bool], within_s: float = 30.0) -> SseEvent:
        """Drop events until one satisfies `done`; return it."""
        async with asyncio.timeout(within_s):
            while True:
                event = await self.events.get()
                if done(event):
                    return event

    def drain(self) -> None:
        """Forget events received so far."""
        while not self.events.empty():
            self.events.get_nowait()

    async def _read(self) -> None:
        path = f"/chats/{self.chat_id}/stream"
        async with self.http.stream("GET", path, timeout=None) as response:
            response.raise_for_status()
            frame: dict[str, str] = {}
            async for line in response.aiter_lines():
                if line.startswith("retry:"):
                    self._ready.set()  # the server's generator runs: we are subscribed
                elif line == "":
                    if "event" in frame:
                        self.events.put_nowait(
                            SseEvent(
                                id=int(frame["id"]) if "id" in frame else None,
                                event=frame["event"],
                                data=json.loads(frame.get("data", "{}")),
                                at=time.perf_counter(),
                                at_ns=time.time_ns(),
                            )
                        )
                    frame = {}
                elif not line.startswith(":") and ":" in line:
                    name, _, value = line.partition(":")
                    frame[name] = value.lstrip(" ")


# --- a Temporal floor ------------------------------------------------------------------------


@activity.defn(name="bench_noop")
async def noop_activity() -> None:
    """Does nothing."""


@workflow.defn(name="BenchNoopFloor")
class NoopFloor:
    """The smallest workflow with one activity: the floor under any turn."""

    @workflow.run
    async def run(self) -> None:
        """Run one no-op activity."""
        await workflow.execute_activity(noop_activity, start_to_close_timeout=timedelta(seconds=30))


def floor_worker(template: Worker) -> Worker:
    """A worker for `NoopFloor` with `template`'s settings (client included), own task queue."""
    config: dict[str, Any] = {**template.config()}
    config.update(
        task_queue=f"{template.task_queue}-floor",
        workflows=[NoopFloor],
        activities=[noop_activity],
    )
    return Worker(**config)


# --- statistics ------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p99 of 50 samples is the largest)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: Sequence[float]) -> str:
    """`p50 … p99 … (min … max …, n=…)` in milliseconds."""
    if not values:
        return "no samples"
    return (
        f"p50 {statistics.median(values):7.1f} ms  p99 {percentile(values, 99):7.1f} ms  "
        f"(min {min(values):.1f}, max {max(values):.1f}, n={len(values)})"
    )
