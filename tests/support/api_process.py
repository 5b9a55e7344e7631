"""`chatd api` as a process of its own (forked, `support/forked.py`), for tests that stop or
kill a gateway."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx

from chatd.devstack.temporal import TemporalDevServer
from chatd.settings import DEFAULT_TASK_QUEUE
from support.forked import ForkedChatd

__all__ = ["chatd_api", "until_ready"]


def chatd_api(
    database_url: str,
    temporal: TemporalDevServer,
    port: int,
    log: Path,
    task_queue: str = DEFAULT_TASK_QUEUE,
) -> ForkedChatd:
    """Start `chatd api` on `port`, handing turns to `task_queue`; its output in `log`."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "TEMPORAL_ADDRESS": temporal.address,
        "CHATD_TASK_QUEUE": task_queue,
    }
    log.write_bytes(b"")
    return ForkedChatd(["api", "--port", str(port)], env, log)


async def until_ready(base: str, process: ForkedChatd, log: Path) -> None:
    """Return once the gateway at `base` answers `/readyz`; fail if it exits or takes 60 s."""
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(base_url=base) as http:
        while True:
            assert process.poll() is None, "chatd api exited: see its log, " + str(log)
            try:
                if (await http.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "chatd api not ready: see its log, " + str(log)
            await asyncio.sleep(0.1)
