"""Shared plumbing for benchmarks: a throwaway chatd stack, an SSE listener, and statistics.

`services()` starts PostgreSQL (data dir in a temp dir, fsync off), the Temporal dev server
(headless, in-memory, chatd's dynamic config) and the fake provider (`durable=True`: both
servers persisted as `chatd dev` runs them, in the temp dir); `running_stack()` adds
a migrated database, a worker built by `workers.worker.build_worker`, the gateway and an
authenticated HTTP client, all in this process: the tests' stack (tests/support/stack.py).
Everything is torn down, and the temp dir removed, when the context managers exit.

For benchmarks with separate processes: `ChildProcess` / `gateway_process()` (`chatd api`),
`WorkerProcess` (`chatd worker`, tests/support/worker_process.py), `serve_fake_provider()`
(the fake provider in a child process), `ProcessMeter` (CPU and peak RSS per process,
psutil) and `RawSseClient` (a lean SSE client for hundreds of streams).

Benchmarks import it as `import _stack` (running `python bench/<name>.py` puts bench/ on
sys.path); it puts tests/ on sys.path for the helpers shared with the tests (`support`).
"""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import gc
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil  # type: ignore[import-untyped]
import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp
from temporalio.client import Client
from temporalio.worker import Worker

from chatd.devstack.ports import (
    pdeathsig_preexec,
    register_child,
    unregister_child,
)
from chatd.devstack.postgres import PostgresProcess
from chatd.devstack.temporal import DEFAULT_DYNAMIC_CONFIG, TemporalDevServer
from chatd.fake_provider.script import FakeRequest, FakeResponse, ScriptBook
from chatd.fake_provider.server import KEEP_ALIVE_S, FakeProviderServer
from chatd.fake_provider.server import create_app as create_fake_app
from chatd.providers import close_clients
from chatd.sse import parse_sse, parse_sse_frame
from chatd.store.quotas import DEFAULTS_OWNER, LimitOverrides, QuotaStore

# The helpers shared with the tests live in tests/support (imported there as `support`).
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from support.postgres import THROWAWAY_PG_SETTINGS
from support.stack import Stack
from support.stack import running_stack as shared_running_stack
from support.worker_process import WorkerProcess

__all__ = [
    "BenchStack",
    "ChildProcess",
    "EmittedDeltas",
    "ProcessMeter",
    "RawSseClient",
    "Services",
    "SseEvent",
    "SseListener",
    "WorkerProcess",
    "bench_limits",
    "pause_gc",
    "percentile",
    "raw_post",
    "running_stack",
    "say",
    "serve_fake_app",
    "serve_fake_provider",
    "services",
    "stored_delta_times",
    "summary",
]

_T0 = time.monotonic()


def say(message: str) -> None:
    """A progress line, stamped with seconds since the script started."""
    print(f"[{time.monotonic() - _T0:6.1f}s] {message}", flush=True)


# --- processes -------------------------------------------------------------------------------


def compile_workflow_modules() -> None:
    """Write the bytecode of the workflow packages, as `pip install` does for an installed copy.

    The workflow sandbox re-imports a workflow's module for every run; in a source checkout
    run with PYTHONDONTWRITEBYTECODE (as here) that is a compile of `chat_turn.py` per turn
    (~2-4 ms), which no deployed worker pays.
    """
    repo = Path(__file__).resolve().parents[1]
    for package in ("workflows", "bench"):
        compileall.compile_dir(repo / package, quiet=1)


@dataclass
class Services:
    """The external processes of a stack (and the in-process fake provider)."""

    postgres: PostgresProcess
    temporal: TemporalDevServer
    fake: FakeProviderServer
    database_url: str


@contextlib.asynccontextmanager
async def services(
    *,
    dynamic_config: Mapping[str, object] | None = None,
    durable: bool = False,
    sqlite_pragmas: Mapping[str, str] | None = None,
) -> AsyncIterator[Services]:
    """PostgreSQL in a temp dir, a headless in-memory Temporal dev server and the fake provider.

    `dynamic_config` entries are merged over chatd's `DEFAULT_DYNAMIC_CONFIG`. `durable`
    runs both servers as `chatd dev` does: Temporal persisted to a file in the temp dir (its
    SQLite settings included, unless `sqlite_pragmas` replaces them), PostgreSQL with its
    default durability (fsync on).
    """
    compile_workflow_modules()
    root = Path(tempfile.mkdtemp(prefix="chatd-bench-"))
    postgres = PostgresProcess(
        root / "postgres", settings=None if durable else THROWAWAY_PG_SETTINGS
    )
    temporal = TemporalDevServer(
        root / "temporal" if durable else None,
        headless=True,
        dynamic_config={**DEFAULT_DYNAMIC_CONFIG, **(dynamic_config or {})},
        sqlite_pragmas=sqlite_pragmas,
        metrics_port=0,
    )
    fake = FakeProviderServer(demo_model=None)
    try:
        say(f"starting PostgreSQL (data dir {root / 'postgres'}, "
            f"{'fsync on' if durable else 'fsync off'})")  # fmt: skip
        await asyncio.to_thread(postgres.start)
        say(f"starting Temporal dev server ({temporal.db_path or 'in memory'})")
        await asyncio.to_thread(temporal.start)
        fake.start()
        await asyncio.to_thread(postgres.create_database, "bench")
        # Over the unix socket, as `chatd dev`'s own worker and gateway reach its Postgres.
        database_url = postgres.socket_dsn_for("bench")
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

BENCH_LIMITS = LimitOverrides(
    requests_per_s=1_000_000,
    request_burst=1_000_000,
    running_turns=1_000_000,
    queued_messages=1_000_000,
    streams=1_000_000,
    streams_per_chat=1_000_000,
)
"""The defaults of a bench's database: far above any load a bench makes, so a bench measures
the stack and never a quota (a bench about quotas sets its owners' own rows)."""


async def bench_limits(pool: asyncpg.Pool) -> None:
    """Set `BENCH_LIMITS` as the defaults, before the gateway's first request."""
    await QuotaStore(pool).set_limits(DEFAULTS_OWNER, BENCH_LIMITS)


@dataclass
class BenchStack:
    """The tests' in-process stack (`support.stack.Stack`) on `services`, for benchmarks."""

    services: Services
    stack: Stack

    @property
    def pool(self) -> asyncpg.Pool:
        """The stack's database pool."""
        return self.stack.pool

    @property
    def temporal(self) -> Client:
        """The stack's Temporal client."""
        return self.stack.temporal

    @property
    def worker(self) -> Worker:
        """The in-process worker."""
        assert self.stack.worker is not None
        return self.stack.worker

    @property
    def http(self) -> httpx.AsyncClient:
        """An HTTP client of the gateway with the benchmark's API key."""
        return self.stack.http

    async def create_chat(self, **body: Any) -> str:
        """POST /chats; returns the chat id."""
        return str((await self.stack.create_chat(**body))["id"])

    async def send(self, chat_id: str, content: str) -> dict[str, Any]:
        """POST a message; returns the 202 body."""
        return await self.stack.send(chat_id, content)

    def listen(self, chat_id: str) -> SseListener:
        """An SSE listener on the chat (use as `async with`)."""
        return SseListener(self.http, chat_id)


@contextlib.asynccontextmanager
async def running_stack(
    svc: Services,
    *,
    worker_overrides: Mapping[str, Any] | None = None,
    announced_interrupts: bool = True,
) -> AsyncIterator[BenchStack]:
    """`support.stack.running_stack` on `svc`, set up as deployed (titles on); tear down after.

    `worker_overrides` replace Worker constructor options (for experiments);
    `announced_interrupts=False` leaves interrupts to the heartbeat (the worker doesn't listen).
    """
    task_queue = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        async with shared_running_stack(
            database_url=svc.database_url,
            temporal_address=svc.temporal.address,
            fake=svc.fake,
            workspace=Path(tempfile.gettempdir()) / f"chatd-bench-ws-{task_queue}",
            generate_titles=True,
            task_queue=task_queue,
            announced_interrupts=announced_interrupts,
            worker_overrides=worker_overrides,
            http_timeout_s=60,
        ) as stack:
            await bench_limits(stack.pool)
            yield BenchStack(svc, stack)
    finally:
        await close_clients()


# --- SSE -------------------------------------------------------------------------------------


@dataclass
class SseEvent:
    """A chat event (as `chatd.sse.parse_sse` reads it) and when it arrived
    (`time.perf_counter()` / `time.time_ns()`)."""

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
            async for event in parse_sse(self._lines(response)):
                stamped = SseEvent(
                    event.id, event.event, event.data, time.perf_counter(), time.time_ns()
                )
                self.events.put_nowait(stamped)

    async def _lines(self, response: httpx.Response) -> AsyncIterator[str]:
        async for line in response.aiter_lines():
            if line.startswith("retry:"):
                self._ready.set()  # the server's generator runs: we are subscribed
            yield line


# --- statistics ------------------------------------------------------------------------------


class EmittedDeltas:
    """The fake's emitted deltas (text -> emission time, ns), each unique, and which of
    them a received delta holds: the worker merges a chat's deltas of one frame into one
    event, so a client's delta can be several of the fake's."""

    def __init__(self, emitted: Mapping[str, int]) -> None:
        self.at = emitted
        self._lengths = sorted({len(text) for text in emitted}, reverse=True)

    def within(self, text: str) -> list[str]:
        """The emitted deltas `text` is made of, in order; empty if it is not made of them."""
        found: list[str] = []
        start = 0
        while start < len(text):
            piece = next(
                (
                    text[start : start + n]
                    for n in self._lengths
                    if text[start : start + n] in self.at
                ),
                None,
            )
            if piece is None:
                return []
            found.append(piece)
            start += len(piece)
        return found


async def stored_delta_times(
    db: asyncpg.Pool | asyncpg.Connection, emitted: Mapping[str, int]
) -> dict[str, int]:
    """Emitted delta text -> `created_at` (ns) of the event row that holds it: when its
    publishing transaction began."""
    if not emitted:
        return {}
    since_us = min(emitted.values()) // 1000
    rows = await db.fetch(
        "SELECT data->'part'->>'text' AS text,"
        " (extract(epoch FROM created_at) * 1e6)::bigint AS us"
        " FROM chat_events WHERE event = 'message_part'"
        " AND data->'part'->>'text' IS NOT NULL"
        " AND created_at >= to_timestamp($1::float8 / 1e6)",
        since_us - 1000,
    )
    deltas = EmittedDeltas(emitted)
    return {piece: int(r["us"]) * 1000 for r in rows for piece in deltas.within(r["text"])}


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


# --- child processes (gateway, worker, fake provider) and what they cost ---------------------


class ChildProcess:
    """A benchmark's child process (gateway, fake provider...), logging to a file.

    It dies with its parent (PDEATHSIG and an atexit kill), like `WorkerProcess`.
    """

    def __init__(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, log: Path
    ) -> None:
        self.argv = list(argv)
        self.env = {**os.environ, **(env or {})}
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """PID of the running process, if any."""
        proc = self.process
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> ChildProcess:
        """Start the process (from the repo root, bench/ and the root on PYTHONPATH)."""
        root = Path(__file__).resolve().parents[1]
        env = {**self.env, "PYTHONPATH": os.pathsep.join([str(root), str(root / "bench")])}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                env=env,
                cwd=root,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=pdeathsig_preexec(signal.SIGKILL),
            )
        register_child(self.process)
        return self

    async def wait_http(self, url: str, within_s: float = 60.0) -> None:
        """Wait until `GET url` answers 200 (raise if the process exits first)."""
        async with httpx.AsyncClient(timeout=2) as http, asyncio.timeout(within_s):
            while True:
                if self.pid is None:
                    raise RuntimeError(f"{self.argv} exited; see {self.log}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(url)).status_code == 200:
                        return
                await asyncio.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        unregister_child(proc)


def gateway_process(
    *, database_url: str, temporal_address: str, task_queue: str, port: int, log: Path
) -> ChildProcess:
    """`chatd api` on 127.0.0.1:`port` (start it, then `wait_http(.../healthz)`)."""
    return ChildProcess(
        [sys.executable, "-m", "chatd.cli", "api", "--host", "127.0.0.1", "--port", str(port)],
        env={
            "DATABASE_URL": database_url,
            "TEMPORAL_ADDRESS": temporal_address,
            "CHATD_TASK_QUEUE": task_queue,
        },
        log=log,
    )


class _AnyModelBook(ScriptBook):
    """A script book answering every model with one responder."""

    def __init__(self, responder: Callable[[FakeRequest], FakeResponse]) -> None:
        super().__init__()
        self._responder = responder

    def knows(self, model: str) -> bool:
        """Every model is served."""
        return True

    def next_response(self, request: FakeRequest) -> FakeResponse:
        return self._responder(request)

    def record_request(self, request: FakeRequest) -> None:
        """Not logged: the log would only grow."""


def serve_fake_provider(responder: Callable[[FakeRequest], FakeResponse], port: int) -> None:
    """Serve the fake provider in the foreground (in a child process), every model scripted
    by `responder`.

    `GET /bench/deltas` returns, and forgets, the text deltas streamed so far, as
    `[[model, text, emitted_ns], ...]` (emitted_ns is `time.time_ns()` when it was written).
    Requests are not logged (they would only grow).
    """
    book = _AnyModelBook(responder)
    app = create_fake_app(book)

    async def deltas(_request: Request) -> JSONResponse:
        with book._lock:
            logged, book._deltas = book._deltas, {}
        rows = [[m, d.text, d.emitted_ns] for m, records in logged.items() for d in records]
        pause_gc()  # a level starts or has ended: no collection inside the next
        return JSONResponse(rows)

    app.add_route("/bench/deltas", deltas, methods=["GET"])
    serve_fake_app(app, port)


def pause_gc() -> None:
    """Collect now, then make no automatic collection until the next call (`gc.disable`).

    A bench's clients and its fake provider are instruments. A full collection over their
    imports and the last level's records stops a process for 100-170 ms, and one inside a
    timed level was counted as the servers' delta latency; it comes a fixed allocation
    count after the last, so it fell in the same phase of every run. Frozen heaps
    (`gc.freeze`) were not enough: with nothing left to compare against, every tenth
    middle collection became a full one over the level's objects, and the sends' p50 rose
    by ~90 ms. Call it where a level starts: the cycles a level leaves wait for the next."""
    gc.collect()
    gc.disable()


def serve_fake_app(app: ASGIApp, port: int) -> None:
    """Serve a fake provider's app on 127.0.0.1:`port` in the foreground, quietly, keeping
    idle connections as the providers' APIs do."""
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=KEEP_ALIVE_S,
    )


@dataclass
class _Usage:
    cpu_s: float = 0.0
    peak_rss: int = 0


class ProcessMeter:
    """CPU seconds and peak RSS of named process groups over a measured interval.

    A group is a root PID and (with `children=True`) its descendants, e.g. the postmaster
    and its backends. RSS of a group is the sum over its processes (shared memory, such as
    Postgres shared buffers, is counted once per process that touched it). Sampled every
    `every_s` seconds in the background between `start()` and `stop()`.
    """

    def __init__(self, every_s: float = 0.5) -> None:
        self._groups: dict[str, tuple[int, bool]] = {}
        self._every_s = every_s
        self._first: dict[str, dict[int, float]] = {}
        self._last: dict[str, dict[int, float]] = {}
        self._usage: dict[str, _Usage] = {}
        self._task: asyncio.Task[None] | None = None
        self._started = 0.0
        self.wall_s = 0.0
        self.system_cpu_pct = 0.0
        """Whole machine, 100% = every core busy."""

    def add(self, name: str, pid: int | None, *, children: bool = False) -> None:
        """Measure process `pid` (and its descendants) as `name`."""
        if pid is not None:
            self._groups[name] = (pid, children)

    @property
    def names(self) -> list[str]:
        """The groups, in the order they were added."""
        return list(self._groups)

    def _sample(self) -> dict[str, dict[int, float]]:
        cpu: dict[str, dict[int, float]] = {}
        for name, (pid, children) in self._groups.items():
            found: dict[int, float] = {}
            rss = 0
            try:
                root = psutil.Process(pid)
                procs = [root, *(root.children(recursive=True) if children else [])]
            except psutil.Error:
                procs = []
            for proc in procs:
                try:
                    with proc.oneshot():
                        times = proc.cpu_times()
                        found[proc.pid] = times.user + times.system
                        rss += proc.memory_info().rss
                except psutil.Error:
                    continue
            cpu[name] = found
            usage = self._usage.setdefault(name, _Usage())
            usage.peak_rss = max(usage.peak_rss, rss)
        return cpu

    def _fold(self, sample: dict[str, dict[int, float]]) -> None:
        for name, found in sample.items():
            self._last.setdefault(name, {}).update(found)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._every_s)
            self._fold(self._sample())

    def start(self) -> None:
        """Begin the interval."""
        self._usage = {}
        self._first = self._sample()
        self._last = {name: dict(found) for name, found in self._first.items()}
        psutil.cpu_percent(None)
        self._started = time.monotonic()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """End the interval."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fold(self._sample())
        self.wall_s = time.monotonic() - self._started
        self.system_cpu_pct = psutil.cpu_percent(None)
        for name, last in self._last.items():
            first = self._first.get(name, {})
            self._usage[name].cpu_s = sum(t - first.get(pid, 0.0) for pid, t in last.items())

    def cpu_pct(self, name: str) -> float:
        """CPU of the group over the interval, percent of one core."""
        usage = self._usage.get(name)
        return 100 * usage.cpu_s / self.wall_s if usage and self.wall_s else float("nan")

    def peak_rss_mb(self, name: str) -> float:
        """Largest RSS sum of the group seen during the interval, MiB."""
        usage = self._usage.get(name)
        return usage.peak_rss / 2**20 if usage else float("nan")


# --- a lean SSE client (many at once) --------------------------------------------------------


async def raw_post(
    host: str, port: int, path: str, body: Any, headers: Mapping[str, str]
) -> tuple[int, Any]:
    """POST `body` as JSON on a connection of its own (`Connection: close`); the status and
    the JSON answer. A bare asyncio client: httpx's connection pool, shared by a hundred
    requests at once, adds seconds of its own per request, which a benchmark would count as
    the server's (bench/README.md, "Overload")."""
    payload = json.dumps(body).encode()
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    reader, writer = await asyncio.open_connection(host, port)
    try:
        request = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n{head}\r\n"
        )
        writer.write(request.encode() + payload)
        answer = await reader.read()
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    _, _, content = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(content) if content else None


class RawSseClient(asyncio.Protocol):
    """One SSE connection on a bare asyncio protocol: cheap enough for hundreds at once.

    It stamps each `message_part` frame with `time.time_ns()` when the bytes that complete it
    arrive and keeps the raw frame (parse later with `parts()`); it watches `status` frames
    for `waiting`/`error`, which end the turn (`finished`). Chunked transfer encoding only
    (what uvicorn sends for a streaming response).
    """

    def __init__(self, host: str, path: str, api_key: str) -> None:
        self._request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {api_key}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()
        self._buffer = bytearray()
        self._body = bytearray()
        self._headers_done = False
        self._transport: asyncio.Transport | None = None
        self.frames: list[tuple[int, bytes]] = []
        """(time.time_ns(), raw frame) of every message_part."""
        self.status: str | None = None
        """The final status (`waiting` or `error`), once seen."""
        self.finished_ns = 0
        self.error: str | None = None
        self.ready = asyncio.Event()
        """Set when the server's first frame arrived: the stream is subscribed."""
        self.finished = asyncio.Event()

    @classmethod
    async def connect(cls, host: str, port: int, path: str, api_key: str) -> RawSseClient:
        """Open the connection and send the request (await `ready` before relying on it)."""
        loop = asyncio.get_running_loop()
        _, client = await loop.create_connection(
            lambda: cls(f"{host}:{port}", path, api_key), host, port
        )
        return client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        now = time.time_ns()
        self._buffer += data
        if not self._headers_done:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buffer[:end])
            del self._buffer[: end + 4]
            self._headers_done = True
            if not head.startswith(b"HTTP/1.1 200"):
                status_line = head.split(b"\r\n", 1)[0].decode()
                self._fail(f"stream answered {status_line}")
                return
        self._dechunk()
        body = self._body
        while (end := body.find(b"\n\n")) >= 0:
            frame = bytes(body[:end])
            del body[: end + 2]
            self._frame(frame, now)

    def _dechunk(self) -> None:
        buffer = self._buffer
        while (eol := buffer.find(b"\r\n")) >= 0:
            size = int(buffer[:eol].split(b";", 1)[0], 16)
            end = eol + 2 + size + 2
            if len(buffer) < end:
                return
            self._body += buffer[eol + 2 : eol + 2 + size]
            del buffer[:end]
            if size == 0:
                self._fail("the stream ended")
                return

    def _frame(self, frame: bytes, now: int) -> None:
        if frame.startswith(b"retry:"):
            self.ready.set()
        elif b"event: message_part" in frame:
            self.frames.append((now, frame))
        elif b"event: status" in frame:
            status = _data(frame).get("status")
            if status in ("waiting", "error"):
                self.status = status
                self.finished_ns = now
                self.finished.set()

    def _fail(self, error: str) -> None:
        if self.status is None and self.error is None:
            self.error = error
        self.ready.set()
        self.finished.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"connection lost: {exc}")

    def close(self) -> None:
        """Close the connection."""
        if self._transport is not None:
            self._transport.close()

    def parts(self) -> list[tuple[int, dict[str, Any]]]:
        """(receive time ns, event data) of every message_part received."""
        return [(ns, _data(frame)) for ns, frame in self.frames]


def _data(frame: bytes) -> dict[str, Any]:
    """The data of one of `RawSseClient`'s raw frames, read by the one SSE parser."""
    event = parse_sse_frame(frame.decode().split("\n"))
    return event.data if event is not None else {}
