"""`chatd worker` as a child process, for tests and benchmarks that kill workers.

Not shipped: it runs the worker from this source checkout (cwd and `sys.path` at its root),
with the chaos tools of `tests/support/chaos_tools.py` loaded.

Each worker is forked from a fork server (`multiprocessing`'s forkserver) that imported the
worker's modules once: a fresh interpreter spends ~4 s of CPU importing them (the anthropic
SDK's 3,000 modules take 2), and a suite starts dozens of workers. A forked worker is still
a process of its own, SIGKILLed and restarted like any other.
"""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from chatd.devstack.ports import die_with_parent
from chatd.fake_provider.server import FakeProviderServer

__all__ = ["CHAOS_TOOLS", "WorkerProcess"]

ROOT = Path(__file__).resolve().parents[2]
"""The source checkout: the child runs there, with it on `sys.path` so `tests.support` imports."""
POLLING = b"worker polling task queue"
"""What the worker logs once it is assembled and takes tasks (workers/worker.py)."""
CHAOS_TOOLS = "tests.support.chaos_tools:TOOLS"
"""The slow marker tools of the chaos tests (needs a source checkout)."""

_forks = multiprocessing.get_context("forkserver")
_forks.set_forkserver_preload(["chatd.cli", "workers.worker", "chatd.providers.anthropic"])
_started: list[multiprocessing.process.BaseProcess] = []


def _serve(env: Mapping[str, str], log: str) -> None:
    """Be `python -m chatd.cli worker` run with `env` and its output in `log`, in a process
    forked from the fork server (whose death kills it)."""
    die_with_parent(signal.SIGKILL)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    from chatd.cli import main

    main(["worker"])


@atexit.register
def _kill_started() -> None:
    """SIGKILL the workers a test left running as this interpreter exits (multiprocessing
    would send them SIGTERM and wait for their graceful shutdowns)."""
    for process in _started:
        if process.exitcode is None:
            process.kill()


class WorkerProcess:
    """One `chatd worker` process on a task queue, pointed at the fake provider.

    The child dies with its parent (PDEATHSIG, plus an atexit kill), so a crashed test or
    benchmark leaves no worker polling behind.
    """

    def __init__(
        self,
        *,
        database_url: str,
        temporal_address: str,
        task_queue: str,
        fake: FakeProviderServer,
        workspace: Path,
        log: Path,
        tools: str | None = CHAOS_TOOLS,
        titles: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`titles` off by default: a title request would eat a model's scripted response."""
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "TEMPORAL_ADDRESS": temporal_address,
            "CHATD_TASK_QUEUE": task_queue,
            "ANTHROPIC_API_KEY": "test-anthropic-key",
            "ANTHROPIC_BASE_URL": fake.base_url,
            "CHATD_WORKSPACE_ROOT": str(workspace),
            "PYTHONPATH": str(ROOT),
            # Scripted fake models answer in order: a title request would take an answer.
            "CHATD_GENERATE_TITLES": "1" if titles else "0",
            **({"CHATD_TOOLS": tools} if tools else {}),
            **(env or {}),
        }
        self.log = log
        self.process: multiprocessing.process.BaseProcess | None = None

    @property
    def pid(self) -> int | None:
        """PID of the running worker, if any."""
        proc = self.process
        return proc.pid if proc is not None and proc.exitcode is None else None

    @property
    def running(self) -> bool:
        """Whether the worker process is alive."""
        return self.pid is not None

    def start(self) -> WorkerProcess:
        """Start polling (a new process; the previous one, if any, must have exited)."""
        if self.running:
            raise RuntimeError("this worker process is already running")
        self.log.touch()  # there as soon as start() returns, as a Popen's output file is
        self.process = _forks.Process(target=_serve, args=(self.env, str(self.log)), daemon=True)
        self.process.start()
        _started.append(self.process)
        return self

    async def polling(self, within_s: float = 120.0) -> WorkerProcess:
        """Wait until the worker takes tasks.

        A worker's startup (connections, the workflow sandbox) is CPU bound and takes a
        second or more on a loaded machine: a test that times the first turn waits for this
        first, so its own bounds measure the turn and not the worker's start.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while POLLING not in self.log.read_bytes():
            if not self.running:
                raise RuntimeError(f"the worker exited before polling:\n{self._log_tail()}")
            if loop.time() > deadline:
                raise TimeoutError(f"no worker polling after {within_s} s:\n{self._log_tail()}")
            await asyncio.sleep(0.1)
        return self

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` (SIGTERM: graceful shutdown; SIGKILL: a crash)."""
        assert self.process is not None and self.process.pid is not None
        os.kill(self.process.pid, sig)

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL the worker (a crash) and reap it."""
        if self.process is not None and self.process.exitcode is None:
            self.process.kill()
        self.wait(timeout)

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit; its exit code (-N for signal N)."""
        assert self.process is not None
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(["chatd", "worker"], timeout)
        return self.process.exitcode

    def stop(self) -> None:
        """Stop it (gracefully, then by force) if it still runs."""
        if self.process is None or self.process.exitcode is not None:
            return
        self.signal(signal.SIGTERM)
        try:
            self.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()
