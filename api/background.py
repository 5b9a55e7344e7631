"""Writes a request can't wait for (it may be ending by cancellation, where awaiting is not
possible): run in a task the gateway keeps a reference to, and logged if they fail, since
no one awaits them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import asyncpg

__all__ = ["in_background"]

log = logging.getLogger("chatd.api")

_RUNNING: set[asyncio.Task[None]] = set()
"""The tasks not done yet (the event loop holds only weak references to its tasks)."""


def in_background(work: Coroutine[Any, Any, object], what: str) -> None:
    """Run `work` without waiting for it; a database or network failure is logged."""
    task = asyncio.create_task(_logged(work, what))
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)


async def _logged(work: Coroutine[Any, Any, object], what: str) -> None:
    try:
        await work
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as err:
        log.warning("%s failed: %s", what, err)
