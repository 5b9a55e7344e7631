"""Heartbeating while an activity waits on something slow.

Heartbeats let Temporal notice a dead worker (heartbeat timeout) and carry cancellation
(interrupts) to the activity; the SDK throttles what is actually sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

__all__ = ["HEARTBEAT_EVERY_S", "heartbeating"]

HEARTBEAT_EVERY_S = 0.5


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat in the background for the duration of the block.

    The first beat comes after one interval, not at once: an activity shorter than that sends
    none (an RPC the server would serve at a turn's busiest moment: ~1.4 ms per one-step turn
    in bench/turn_overhead.py), and an interrupt still arrives within one interval, as it did
    when the first beat (sent before the interrupt) was immediate.
    """

    async def beat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY_S)
            activity.heartbeat()

    beater = asyncio.create_task(beat())
    try:
        yield
    finally:
        beater.cancel()
