"""The end-to-end tests' view of the in-process stack (tests/support/stack.py, shared with
the benchmarks): real Temporal, Postgres, worker and gateway."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

# pytest puts tests/ on the path; a script importing this module (tests/replay's recorder)
# may put only tests/e2e there.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from support.stack import SseEvent, Stack, running_stack, sse_events
from support.worker_process import WorkerProcess

__all__ = ["Cluster", "SseEvent", "Stack", "StackFactory", "running_stack", "sse_events"]

StackFactory = Callable[..., AbstractAsyncContextManager[Stack]]
"""`make_stack(**options)` (a fixture): a stack with `running_stack` options."""


@dataclass
class Cluster:
    """A gateway in this process and worker processes started on demand (to kill them):
    the `cluster` fixture."""

    stack: Stack
    start_worker: Callable[[], WorkerProcess]
    """Start a worker process and return at once: a stand-by, before killing another."""
    tmp: Path

    async def polling_worker(self) -> WorkerProcess:
        """Start a worker process and return once it takes tasks: the first worker of a
        test whose waits time the turn."""
        return await self.start_worker().polling()
