"""`chatd dev` as a user starts it, in a child process, for benchmarks that measure from outside.

A fresh data dir and free ports each time, a fixed API key, and the worker's `anthropic`
provider pointed (ANTHROPIC_BASE_URL) at a fake provider the bench runs in a child process
of its own, answering at once (the demo model streams its deltas 15 ms apart). `chatd dev`
keeps its state as it always does: Temporal in a SQLite file, PostgreSQL with fsync on. It is
stopped as Ctrl-C stops it (SIGINT); whatever it started and left running is killed by pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil  # type: ignore[import-untyped]
from _stack import ChildProcess, compile_workflow_modules, say

from chatd.devstack.ports import free_port, log_tail

__all__ = ["FAKE_MODEL", "ChatdDev", "chatd_dev"]

FAKE_MODEL = {"provider": "anthropic", "name": "bench-fake"}
"""The model config of the bench's chats: the `anthropic` provider, which `chatd dev`'s worker
sends to ANTHROPIC_BASE_URL, the fake provider."""
_FAKE_API_KEY = "bench-fake-provider"
_READY_WITHIN_S = 180.0
_STOP_WITHIN_S = 60.0


@dataclass
class ChatdDev:
    """Where a running `chatd dev` (and its fake provider) can be reached."""

    api_url: str
    """The native API, `http://127.0.0.1:PORT/api/v1`."""
    api_key: str
    temporal_address: str
    fake_url: str
    data_dir: Path
    pid: int
    postgres_dsn: str
    """The dev stack's PostgreSQL, for benches that read its statistics."""


def _distinct_free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@contextlib.asynccontextmanager
async def chatd_dev(fake_command: Sequence[str]) -> AsyncIterator[ChatdDev]:
    """Start the fake provider (`fake_command` + its port) and `chatd dev`, each a child
    process; wait until the gateway answers `/healthz` (it starts after the worker polls);
    stop both on the way out and remove the temp dir."""
    compile_workflow_modules()  # an installed chatd has its bytecode (see `_stack`)
    root = Path(tempfile.mkdtemp(prefix="chatd-bench-dev-"))
    data_dir = root / "data"
    api, temporal, ui, postgres, demo, fake_port = _distinct_free_ports(6)
    api_key = f"chatd_bench_{uuid.uuid4().hex}"
    fake_url = f"http://127.0.0.1:{fake_port}"
    fake = ChildProcess([*fake_command, str(fake_port)], log=root / "fake.log")
    dev = ChildProcess(
        [sys.executable, "-m", "chatd.cli", "dev", "--data-dir", str(data_dir),
         "--api-port", str(api), "--temporal-port", str(temporal),
         "--temporal-ui-port", str(ui), "--postgres-port", str(postgres),
         "--demo-port", str(demo), "--api-key", api_key],
        env={"ANTHROPIC_API_KEY": _FAKE_API_KEY, "ANTHROPIC_BASE_URL": fake_url},
        log=root / "chatd-dev.log",
    )  # fmt: skip
    try:
        fake.start()
        await fake.wait_http(f"{fake_url}/health")
        say(f"starting chatd dev (data dir {data_dir}, gateway :{api}, temporal :{temporal})")
        dev.start()
        try:
            await dev.wait_http(f"http://127.0.0.1:{api}/healthz", within_s=_READY_WITHIN_S)
        except (RuntimeError, TimeoutError):
            print(log_tail(dev.log), file=sys.stderr)
            raise
        assert dev.process is not None
        say(f"chatd dev up (pid {dev.process.pid})")
        yield ChatdDev(
            api_url=f"http://127.0.0.1:{api}/api/v1",
            api_key=api_key,
            temporal_address=f"127.0.0.1:{temporal}",
            fake_url=fake_url,
            data_dir=data_dir,
            pid=dev.process.pid,
            postgres_dsn=f"postgresql://postgres@127.0.0.1:{postgres}/postgres",
        )
    finally:
        await asyncio.to_thread(_interrupt, dev)
        await asyncio.to_thread(fake.stop)
        shutil.rmtree(root, ignore_errors=True)


def _interrupt(dev: ChildProcess) -> None:
    """Stop `chatd dev` with SIGINT (Ctrl-C); SIGKILL it if it hangs; then kill by pid any
    process it started that is still running (PostgreSQL, Temporal: each in its own session)."""
    proc = dev.process
    if proc is None:
        return
    try:
        started = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        started = []
    if proc.poll() is None:
        say("stopping chatd dev (SIGINT)")
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(_STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            say(f"chatd dev still running after {_STOP_WITHIN_S:.0f} s: SIGKILL")
            proc.kill()
            proc.wait()
    dev.stop()  # forgets it (it has exited)
    _, alive = psutil.wait_procs(started, timeout=15)
    for leftover in alive:
        say(f"killing pid {leftover.pid} left running by chatd dev")
        with contextlib.suppress(psutil.Error):
            leftover.kill()
    psutil.wait_procs(alive, timeout=5)
    if proc.returncode not in (0, -signal.SIGINT):
        say(f"chatd dev exited with {proc.returncode}; log tail:\n{log_tail(dev.log)}")
