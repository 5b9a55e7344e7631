"""One Postgres LISTEN connection per process, fanning a channel's notifications out.

The gateway wakes SSE clients with it (`chatd_events`: a chat's event log grew); a worker
hears interrupt requests with it (`chatd_interrupts`: stop this turn's streaming step).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from chatd.store.recent_events import RecentEvents

__all__ = ["ListenHub"]

log = logging.getLogger("chatd.store.listen_hub")
_RECONNECT_DELAY_S = 1.0


class ListenHub:
    """Wakes the subscribers of a key (the UUID a notification's payload starts with)."""

    def __init__(
        self,
        dsn: str,
        channel: str,
        *,
        wake_all_on_reconnect: bool,
        recent: RecentEvents | None = None,
    ) -> None:
        """`wake_all_on_reconnect`: notifications sent while the connection was down are lost;
        wake everyone so they look again (right for "re-read the log", wrong for "stop").
        `recent` keeps the events notified for the keys subscribed to, taken in before their
        subscribers wake."""
        self.recent = recent
        self._dsn = dsn
        self._channel = channel
        self._wake_all_on_reconnect = wake_all_on_reconnect
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
    def subscribe(self, key: uuid.UUID) -> Iterator[asyncio.Event]:
        """An event set whenever a notification for `key` arrives (or, if so configured,
        the listener reconnected)."""
        wake = asyncio.Event()
        self._subscribers.setdefault(key, set()).add(wake)
        try:
            yield wake
        finally:
            waiters = self._subscribers.get(key)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._subscribers[key]
                    if self.recent is not None:
                        self.recent.forget(key)

    @property
    def subscriber_count(self) -> int:
        """How many subscriptions are open."""
        return sum(len(s) for s in self._subscribers.values())

    async def _connect(self) -> None:
        conn = await asyncpg.connect(self._dsn)
        # Watch for a loss before listening: one while LISTEN is being set up counts too.
        conn.add_termination_listener(lambda _: self._lost.set())
        await conn.add_listener(self._channel, self._on_notify)
        self._conn = conn

    def _on_notify(
        self,
        _conn: asyncpg.Connection[Any] | PoolConnectionProxy[Any],
        _pid: int,
        _channel: str,
        payload: object,
    ) -> None:
        head, _, rest = str(payload).partition(":")
        key = uuid.UUID(head)
        waiters = self._subscribers.get(key, ())
        if waiters and self.recent is not None:
            self.recent.add(key, rest)
        for wake in waiters:
            wake.set()

    async def _supervise(self) -> None:
        while True:
            await self._lost.wait()
            self._lost.clear()  # before reconnecting: a loss during the reconnect is seen
            log.warning("%s listener connection lost; reconnecting", self._channel)
            while True:
                try:
                    await self._connect()
                    break
                except (OSError, asyncpg.PostgresError):
                    await asyncio.sleep(_RECONNECT_DELAY_S)
            if self.recent is not None:
                self.recent.clear()
            if not self._wake_all_on_reconnect:
                continue
            for waiters in self._subscribers.values():
                for wake in waiters:
                    wake.set()
