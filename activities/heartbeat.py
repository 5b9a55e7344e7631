"""Heartbeating while an activity waits on something slow.

Heartbeats let Temporal notice a dead worker (heartbeat timeout) and carry cancellation
(interrupts) to the activity; the SDK throttles what is actually sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from temporalio import activity

__all__ = [
    "FIRST_BEAT_S",
    "HEARTBEAT_EVERY_S",
    "LIVENESS_EVERY_S",
    "first_liveness_beat",
    "heartbeating",
]

HEARTBEAT_EVERY_S = 0.5
"""For activities whose cancellation only a heartbeat's answer brings (tools, compaction)."""
LIVENESS_EVERY_S = 1.0
"""For the streaming step, whose interrupts the gateway announces: its beats only say it is
alive, the first a beat's length in. A quarter of its heartbeat timeout
(`workflows.generation`), so three beats in a row can be late before the server gives the
attempt up: a saturated machine (bench/concurrency.py at K=2000) delayed two in a row."""
FIRST_BEAT_S = 0.1


def first_liveness_beat(now: datetime | None = None) -> float:
    """When a streaming step's first beat is due, in seconds from now: a beat's length in,
    unless the attempt began late.

    The server starts the heartbeat timeout when it hands the task over; a busy worker may
    run it seconds later (a burst's tasks wait their turn on its event loop). Waiting a
    further beat could then let the timeout pass while the step is alive, and the retry would
    stream it all again. An attempt begun a beat or more late beats at once.
    """
    waited = (now or datetime.now(UTC)) - activity.info().started_time
    return 0.0 if waited.total_seconds() >= LIVENESS_EVERY_S else LIVENESS_EVERY_S


@contextlib.asynccontextmanager
async def heartbeating(
    every: float = HEARTBEAT_EVERY_S, *, first: float | None = None
) -> AsyncIterator[None]:
    """Heartbeat in the background, every `every` seconds, for the duration of the block.

    The first beat comes after `first` (default `FIRST_BEAT_S`), not at once: an activity
    over sooner (a fast model's one-step turn) sends none, an RPC the server would serve at
    the turn's busiest moment (~1.4 ms per one-step turn in bench/turn_overhead.py).
    `FIRST_BEAT_S` is soon enough that an attempt the server no longer knows (it answers a
    beat with not-found, seen under overload) stops before a real model's first token,
    instead of streaming deltas that are then reset.
    Beats are sent as they come when `every` is at least the worker's throttle
    (`workers.worker.HEARTBEAT_THROTTLE`); faster ones would only be merged by the SDK.
    """

    async def beat() -> None:
        await asyncio.sleep(FIRST_BEAT_S if first is None else first)
        while True:
            activity.heartbeat()
            await asyncio.sleep(every)

    if activity.info().is_local:  # nothing to beat to: its start-to-close timeout bounds it
        yield
        return
    beater = asyncio.create_task(beat())
    try:
        yield
    finally:
        beater.cancel()
