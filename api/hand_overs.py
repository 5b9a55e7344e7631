"""Whether this gateway's workers keep up with its sends.

Under a burst, every send's update waits behind the others' workflow tasks. Once one has
waited out the send's wait, or `WAITING_AT_ONCE` are waiting, the gateway is behind: the
sends that follow hand their message over with a signal-with-start at once, durable once
Temporal has it, instead of each adding an update the busy workers would still have to run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

__all__ = ["BEHIND_FOR_S", "WAITING_AT_ONCE", "HandOvers"]

BEHIND_FOR_S = 2.0
"""After a hand-over timed out, how long sends don't wait for a worker to take theirs."""
WAITING_AT_ONCE = 20
"""Sends waiting for a worker at once: the next one doesn't wait (the first wave of a burst
would otherwise all wait out the send's wait before any of them learned it is a burst)."""


class HandOvers:
    """The gateway's view of its workers' pace."""

    def __init__(self) -> None:
        self._behind_until = 0.0
        self._waiting = 0

    @property
    def behind(self) -> bool:
        return (
            self._waiting >= WAITING_AT_ONCE
            or asyncio.get_running_loop().time() < self._behind_until
        )

    def fell_behind(self) -> None:
        self._behind_until = asyncio.get_running_loop().time() + BEHIND_FOR_S

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Count a send waiting for a worker to take its message, for the block."""
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1
