"""`chatd worker` as a child process, for tests and benchmarks that kill workers.

Not shipped: it runs the worker from this source checkout (forked, `support/forked.py`), with
the chaos tools of `tests/support/chaos_tools.py` loaded.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from chatd.fake_provider.server import FakeProviderServer
from support.forked import ROOT, ForkedChatd

__all__ = ["CHAOS_TOOLS", "WorkerProcess"]

POLLING = b"worker polling task queue"
"""What the worker logs once it is assembled and takes tasks (workers/worker.py)."""
CHAOS_TOOLS = "tests.support.chaos_tools:TOOLS"
"""The slow marker tools of the chaos tests (needs a source checkout)."""


class WorkerProcess:
    """One `chatd worker` process on a task queue, pointed at the fake provider.

    The child dies with the test process (support/forked.py), so a crashed test or benchmark
    leaves no worker polling behind.
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
        self.process: ForkedChatd | None = None

    @property
    def pid(self) -> int | None:
        """PID of the running worker, if any."""
        proc = self.process
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        """Whether the worker process is alive."""
        return self.pid is not None

    def start(self) -> WorkerProcess:
        """Start polling (a new process; the previous one, if any, must have exited)."""
        if self.running:
            raise RuntimeError("this worker process is already running")
        self.process = ForkedChatd(["worker"], self.env, self.log)
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
        assert self.process is not None
        self.process.send_signal(sig)

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL the worker (a crash) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        self.wait(timeout)

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit; its exit code."""
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self) -> None:
        """Stop it (gracefully, then by force) if it still runs."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
