"""Whether this gateway's workers keep up with its sends, and the hand-overs it makes in the
background when they don't.

Under a burst, every send's update waits behind the others' workflow tasks. Once one has
waited out the send's wait, or `WAITING_AT_ONCE` are waiting, the gateway is behind: the
sends that follow are answered as soon as their message is stored, and their
signal-with-start goes in the background, a bounded number at a time. The message is durable
in Postgres before the answer. If this gateway dies before its signal lands, the chat's next
hand-over, through any gateway, sends it first (`api.sending`); with no next send, the
workers' reconciler hands it over after its grace period (`chatd.reconciler`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator

from chatd.store.transcript import TranscriptStore
from chatd.telemetry import METRICS

__all__ = ["BEHIND_FOR_S", "WAITING_AT_ONCE", "HandOvers"]

log = logging.getLogger("chatd.api.hand_overs")

BEHIND_FOR_S = 2.0
"""After a hand-over timed out, how long sends are answered without waiting for one."""
WAITING_AT_ONCE = 20
"""Sends waiting for a worker at once: the next one doesn't wait (the first wave of a burst
would otherwise all wait out the send's wait before any of them learned it is a burst)."""
IN_FLIGHT = 50
"""Background hand-overs sent at once: a burst's signals queue here, not all at Temporal."""
ATTEMPTS = 5
"""Tries of one background hand-over (1, 2, 4, 8 s apart) before the reconciler's turn."""
MARK_EVERY_S = 0.1
"""How long the background hand-overs' marks gather before one write records them all (a
burst's hand-overs would otherwise hold the sends' connections with a write each)."""


class HandOvers:
    """The gateway's view of its workers' pace, and its hand-overs in the background."""

    def __init__(self) -> None:
        self._behind_until = 0.0
        self._waiting = 0
        self._pending: set[asyncio.Task[None]] = set()
        self._in_flight = asyncio.Semaphore(IN_FLIGHT)
        self._unmarked: list[uuid.UUID] = []
        self._marking: asyncio.Task[None] | None = None

    @property
    def behind(self) -> bool:
        return (
            self._waiting >= WAITING_AT_ONCE
            or asyncio.get_running_loop().time() < self._behind_until
        )

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Count a send waiting for a worker to take its message, for the block."""
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1

    def fell_behind(self) -> None:
        self._behind_until = asyncio.get_running_loop().time() + BEHIND_FOR_S

    def in_background(self, message_id: str, hand_over: Callable[[], Awaitable[None]]) -> None:
        """Run `hand_over` (idempotent) until it succeeds or its attempts are spent."""
        task = asyncio.create_task(self._hand_over(message_id, hand_over))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def mark_soon(self, transcript: TranscriptStore, queued_ids: list[uuid.UUID]) -> None:
        """Record these messages handed over in the next batch of marks. A mark lost with
        the gateway only hands a message over again, which its turn takes once."""
        self._unmarked += queued_ids
        if self._marking is None or self._marking.done():
            self._marking = asyncio.create_task(self._mark(transcript))
            self._pending.add(self._marking)
            self._marking.add_done_callback(self._pending.discard)

    async def _mark(self, transcript: TranscriptStore) -> None:
        await asyncio.sleep(MARK_EVERY_S)
        batch, self._unmarked = self._unmarked, []
        try:
            await transcript.handed_over(batch)
        except Exception as err:  # the reconciler or a later send hands them over again
            log.warning("%d hand-overs not recorded: %r", len(batch), err)

    async def drain(self, within_s: float) -> None:
        """Wait (up to `within_s`) for the background hand-overs, for a gateway's shutdown."""
        if self._pending:
            await asyncio.wait(self._pending, timeout=within_s)

    async def _hand_over(self, message_id: str, hand_over: Callable[[], Awaitable[None]]) -> None:
        for attempt in range(ATTEMPTS):
            if attempt:
                await asyncio.sleep(2 ** (attempt - 1))
            try:
                async with self._in_flight:
                    await hand_over()
            except Exception as err:
                log.warning("message %s: hand-over attempt %d failed: %r", message_id, attempt, err)
            else:
                METRICS.sends_queued.add(1)
                return
        log.error("message %s: not handed over; the reconciler will hand it over", message_id)
