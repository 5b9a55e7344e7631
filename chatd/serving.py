"""Serving an ASGI app with uvicorn: the gateway's own server (`chatd api`) and one run
inside an already-running event loop (dev stack, tests, benchmarks)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator

import uvicorn
from starlette.types import ASGIApp

__all__ = ["GRACEFUL_SHUTDOWN_S", "EmbeddedServer", "Server"]

GRACEFUL_SHUTDOWN_S = 10
"""How long a stopping server lets open requests finish before it cancels them. A backstop:
streams end at once (`on_shutdown`), and other requests are bounded well below this."""


class Server(uvicorn.Server):
    """A uvicorn server that calls `on_shutdown` as its shutdown begins.

    uvicorn waits for every open response before it stops, and a response that never ends
    (an SSE stream) would hold it forever: `on_shutdown` is where the app ends those.
    """

    def __init__(
        self,
        app: ASGIApp,
        host: str,
        port: int,
        on_shutdown: Callable[[], None] | None = None,
    ) -> None:
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
        super().__init__(config)
        self._on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """End what would never end by itself, then shut down as uvicorn does."""
        if self._on_shutdown is not None:
            self._on_shutdown()
        await super().shutdown(sockets)


class EmbeddedServer(Server):
    """A server that leaves signal handling to its host process."""

    def __init__(
        self,
        app: ASGIApp,
        host: str,
        port: int,
        on_shutdown: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(app, host, port, on_shutdown)
        self._task: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Don't take over SIGINT/SIGTERM: the host decides when to stop."""
        yield

    async def start(self, sock: socket.socket | None = None) -> None:
        """Serve in a background task (on `sock`, bound already, if given); return once it
        accepts connections."""
        self._task = asyncio.create_task(self.serve([sock] if sock is not None else None))
        # uvicorn exposes readiness only as a flag.
        while not self.started:
            if self._task.done():
                try:
                    self._task.result()
                except SystemExit as exit:
                    # uvicorn exits when it can't bind or its lifespan fails: an error for
                    # the host process to handle, not the end of it.
                    raise RuntimeError(f"the server could not start (exit {exit.code})") from None
                raise RuntimeError("server exited before it started")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        """Stop accepting, end what `on_shutdown` ends, finish open requests, and wait for
        the task."""
        self.should_exit = True
        if self._task is not None:
            await self._task
