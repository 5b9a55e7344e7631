"""Serving an ASGI app inside an already-running event loop (dev stack, tests, benchmarks)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

__all__ = ["EmbeddedServer"]


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to its host process."""

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        super().__init__(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        self._task: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Don't take over SIGINT/SIGTERM: the host decides when to stop."""
        yield

    async def start(self) -> None:
        """Serve in a background task; return once it accepts connections."""
        self._task = asyncio.create_task(self.serve())
        # uvicorn exposes readiness only as a flag.
        while not self.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("server exited before it started")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        """Stop accepting, finish open requests, and wait for the task."""
        self.should_exit = True
        if self._task is not None:
            await self._task
