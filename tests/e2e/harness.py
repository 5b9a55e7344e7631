"""The end-to-end tests' view of the in-process stack (tests/support/stack.py, shared with
the benchmarks): real Temporal, Postgres, worker and gateway."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from support.stack import SseEvent, Stack, running_stack, sse_events

__all__ = ["SseEvent", "Stack", "StackFactory", "running_stack", "sse_events"]

StackFactory = Callable[..., AbstractAsyncContextManager[Stack]]
"""`make_stack(**options)` (a fixture): a stack with `running_stack` options."""
