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
    """Heartbeat in the background for the duration of the block."""

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY_S)

    beater = asyncio.create_task(beat())
    try:
        yield
    finally:
        beater.cancel()
