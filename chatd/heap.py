"""Keep the cyclic garbage collector's full passes short in the long-running processes.

A full (generation 2) collection walks every tracked object. In a worker most of them are
the modules, classes and functions imported at startup (temporalio, pydantic, the provider
SDKs, OpenTelemetry), which live as long as the process: walking them made each full pass
200-300 ms at 500 concurrent chats, and those pauses were the p99 of delta latency
(`bench/concurrency.py`). Frozen objects are left out of every collection.
"""

from __future__ import annotations

import gc
import logging

__all__ = ["YOUNG_THRESHOLD", "freeze_startup_objects"]

YOUNG_THRESHOLD = 7_000
"""Allocations between two young collections (CPython's default is 700)."""

log = logging.getLogger("chatd.heap")


def freeze_startup_objects() -> None:
    """Collect once, then move every surviving object out of the collector's reach.

    Call it once, when the imports are done (lazily imported SDKs included:
    `chatd.providers.import_sdks`) and before serving: what is frozen is never collected, so
    only a process's long-lived objects belong there.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    log.info("froze %d startup objects out of the garbage collector", gc.get_freeze_count())
