"""One Postgres LISTEN connection per gateway, fanning notifications out to SSE clients."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from chatd.store.events import NOTIFY_CHANNEL

__all__ = ["EventHub"]

log = logging.getLogger("chatd.api.hub")
_RECONNECT_DELAY_S = 1.0


class EventHub:
    """Wakes the subscribers of a chat when its event log grows."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: asyncpg.Connection | None = None
        self._subscribers: dict[uuid.UUID, set[asyncio.Event]] = {}
        self._supervisor: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()

    async def start(self) -> None:
        """Connect and LISTEN; reconnect in the background if the connection drops."""
        await self._connect()
        self._supervisor = asyncio.create_task(self._supervise())

    async def stop(self) -> None:
        """Stop listening."""
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        if self._conn is not None:
            await self._conn.close()

    @contextlib.contextmanager
    def subscribe(self, chat_id: uuid.UUID) -> Iterator[asyncio.Event]:
        """An event set whenever the chat has new events (or the listener reconnected)."""
        wake = asyncio.Event()
        self._subscribers.setdefault(chat_id, set()).add(wake)
        try:
            yield wake
        finally:
            waiters = self._subscribers.get(chat_id)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._subscribers[chat_id]

    @property
    def subscriber_count(self) -> int:
        """How many SSE clients are listening."""
        return sum(len(s) for s in self._subscribers.values())

    async def _connect(self) -> None:
        conn = await asyncpg.connect(self._dsn)
        await conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
        conn.add_termination_listener(lambda _: self._lost.set())
        self._conn = conn

    def _on_notify(
        self,
        _conn: asyncpg.Connection[Any] | PoolConnectionProxy[Any],
        _pid: int,
        _channel: str,
        payload: object,
    ) -> None:
        chat_id = uuid.UUID(str(payload).split(":", 1)[0])
        for wake in self._subscribers.get(chat_id, ()):
            wake.set()

    async def _supervise(self) -> None:
        while True:
            await self._lost.wait()
            log.warning("event listener connection lost; reconnecting")
            while True:
                try:
                    await self._connect()
                    break
                except (OSError, asyncpg.PostgresError):
                    await asyncio.sleep(_RECONNECT_DELAY_S)
            self._lost.clear()
            # Notifications sent while we were away are lost: everyone re-reads the log.
            for waiters in self._subscribers.values():
                for wake in waiters:
                    wake.set()
