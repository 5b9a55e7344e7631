"""The rig of `chaos.py`: two `chatd worker` processes behind an in-process gateway, and the
loop that SIGKILLs them.

`chaos_rig()` brings up the throwaway services (`_stack.services()`), a migrated database,
an API key, the gateway (in this process) and two worker processes on their own task queue;
`killing()` SIGKILLs one of the workers every few seconds, and starts it again at once,
until its block exits. Both the plain run and `--faults` run on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import _stack
import httpx
from _stack import WorkerProcess, say

from api.app import GatewayConfig, create_app
from chatd.devstack.ports import free_port
from chatd.fake_provider.server import FakeProviderServer
from chatd.serving import EmbeddedServer
from chatd.settings import TemporalSettings
from chatd.store.db import connect_pool, migrate
from chatd.store.keys import KeyStore

__all__ = ["Kill", "Rig", "chaos_rig", "killing", "polling"]


@dataclass
class Rig:
    """What a chaos run drives: the fake provider, the workers and the gateway's address."""

    fake: FakeProviderServer
    workers: list[WorkerProcess]
    base_url: str
    key: str
    temporal_address: str

    def http(self, concurrency: int) -> httpx.AsyncClient:
        """An HTTP client of the gateway, authenticated, sized for `concurrency` turns."""
        return httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=60,
            limits=httpx.Limits(max_connections=4 * concurrency + 10),
        )


@contextlib.asynccontextmanager
async def chaos_rig(worker_env: Mapping[str, str] | None = None) -> AsyncIterator[Rig]:
    """Services, gateway and two polling workers (with `worker_env` added to their
    environment); everything is stopped when the block exits."""
    logs = Path(tempfile.mkdtemp(prefix="chatd-chaos-logs-"))
    async with _stack.services() as svc:
        await migrate(svc.database_url)
        task_queue = f"chaos-{uuid.uuid4().hex[:8]}"
        pool = await connect_pool(svc.database_url)
        key = await KeyStore(pool).create("chaos")
        await _stack.bench_limits(pool)
        await pool.close()
        settings = TemporalSettings(address=svc.temporal.address, task_queue=task_queue)
        port = free_port()
        gateway = EmbeddedServer(
            create_app(GatewayConfig(database_url=svc.database_url, temporal=settings)),
            "127.0.0.1",
            port,
        )
        workers = [
            WorkerProcess(
                database_url=svc.database_url,
                temporal_address=svc.temporal.address,
                task_queue=task_queue,
                fake=svc.fake,
                workspace=logs / "workspaces",
                log=logs / f"worker-{i}.log",
                tools=None,
                titles=True,  # as in production; the scripts answer title requests
                env=worker_env,
            )
            for i in range(2)
        ]
        say(f"worker logs in {logs}")
        await gateway.start()
        try:
            for worker in workers:
                worker.start()
            for worker in workers:
                await polling(worker, 0)
            say("2 workers polling")
            base_url = f"http://127.0.0.1:{port}/api/v1"
            yield Rig(svc.fake, workers, base_url, key, svc.temporal.address)
        finally:
            for worker in workers:
                await asyncio.to_thread(worker.stop)
            await gateway.stop()


@dataclass
class Kill:
    """A SIGKILL sent to worker `worker` at `at` (perf_counter)."""

    at: float
    worker: int
    wall: float = 0.0
    """`at` as `time.time()`, to compare with Temporal's records."""
    restarted_in: float = 0.0
    """Kill -> the new process polls (seconds)."""


async def polling(worker: WorkerProcess, previous: int, within_s: float = 60.0) -> int:
    """Wait until the worker's log has more "polling" lines than `previous`; their count."""
    async with asyncio.timeout(within_s):
        while True:
            count = worker.log.read_text(errors="replace").count("worker polling task queue")
            if count > previous:
                return count
            if not worker.running:
                raise RuntimeError(f"worker exited during startup; see {worker.log}")
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def killing(
    workers: list[WorkerProcess], rng: random.Random, every: tuple[float, float]
) -> AsyncIterator[list[Kill]]:
    """SIGKILL a random worker every `every` seconds (and restart it) for the block; yields
    the kills so far. On exit the kill in progress completes: both workers poll again."""
    kills: list[Kill] = []
    stop = asyncio.Event()
    loop = asyncio.create_task(_kill_loop(workers, stop, rng, every, kills))
    try:
        yield kills
    finally:
        stop.set()
        await loop


async def _kill_loop(
    workers: list[WorkerProcess],
    stop: asyncio.Event,
    rng: random.Random,
    every: tuple[float, float],
    kills: list[Kill],
) -> None:
    polls = [await polling(w, 0) for w in workers]
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), rng.uniform(*every))
            return
        except TimeoutError:
            pass
        victim = rng.randrange(len(workers))
        kill = Kill(at=time.perf_counter(), worker=victim, wall=time.time())
        workers[victim].signal(signal.SIGKILL)
        kills.append(kill)
        await asyncio.to_thread(workers[victim].wait, 10.0)
        workers[victim].start()
        polls[victim] = await polling(workers[victim], polls[victim])
        kill.restarted_in = time.perf_counter() - kill.at
        say(f"kill #{len(kills)}: worker {victim} (back in {kill.restarted_in:.1f}s)")
