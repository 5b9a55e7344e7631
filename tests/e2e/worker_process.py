"""`chatd worker` as a child process, for tests that kill workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from chatd.fake_provider.server import FakeProviderServer

__all__ = ["WorkerProcess"]

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """One worker process on the test's task queue, pointed at the fake provider."""

    def __init__(
        self,
        *,
        database_url: str,
        temporal_address: str,
        task_queue: str,
        fake: FakeProviderServer,
        workspace: Path,
        log: Path,
    ) -> None:
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "TEMPORAL_ADDRESS": temporal_address,
            "CHATD_TASK_QUEUE": task_queue,
            "ANTHROPIC_API_KEY": "test-anthropic-key",
            "ANTHROPIC_BASE_URL": fake.base_url,
            "CHATD_WORKSPACE_ROOT": str(workspace),
            "CHATD_TOOLS": "tests.support.chaos_tools:TOOLS",
            "PYTHONPATH": str(ROOT),
        }
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        """Start polling."""
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "chatd.cli", "worker"],
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return self

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` (SIGTERM: graceful shutdown; SIGKILL: a crash)."""
        assert self.process is not None
        self.process.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit; its exit code."""
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self) -> None:
        """Stop it if it still runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
