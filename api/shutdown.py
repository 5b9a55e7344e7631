"""The gateway's shutdown, as its SSE streams see it.

uvicorn stops by waiting for every open response to finish, and an SSE stream never
finishes by itself: one `curl -N` kept a stopping gateway alive for as long as it stayed
connected. So when the server begins to shut down, every stream ends at once; its client
reconnects with `Last-Event-ID` and resumes exactly once on another gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from fastapi import FastAPI

__all__ = ["GatewayShutdown", "end_streams"]


class GatewayShutdown:
    """Set once, when the gateway stops; wakes every stream watching it."""

    def __init__(self) -> None:
        self.started = False
        self._wakes: set[asyncio.Event] = set()

    @contextlib.contextmanager
    def watch(self, wake: asyncio.Event) -> Iterator[None]:
        """Set `wake` when the shutdown starts (at once, if it has) while the block runs."""
        self._wakes.add(wake)
        if self.started:
            wake.set()
        try:
            yield
        finally:
            self._wakes.discard(wake)

    def start(self) -> None:
        """The gateway is stopping: wake every stream so that it ends."""
        self.started = True
        for wake in self._wakes:
            wake.set()


def end_streams(app: FastAPI) -> None:
    """End the open streams of `app` (a gateway from `create_app`), for a server's shutdown."""
    state = getattr(app.state, "gateway", None)
    if state is not None:
        state.shutdown.start()
