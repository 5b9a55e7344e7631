"""The end-to-end tests' view of the in-process stack (tests/support/stack.py, shared with
the benchmarks): real Temporal, Postgres, worker and gateway."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

# pytest puts tests/ on the path; a script importing this module (tests/replay's recorder)
# may put only tests/e2e there.
sys.path.append(str(Path(__file__).resolve().parents[1]))
from support.stack import SseEvent, Stack, running_stack, sse_events

__all__ = ["SseEvent", "Stack", "StackFactory", "running_stack", "sse_events"]

StackFactory = Callable[..., AbstractAsyncContextManager[Stack]]
"""`make_stack(**options)` (a fixture): a stack with `running_stack` options."""
