"""Pure decisions of a turn: what follows a step, and how long to back off.

No I/O and no Temporal imports, so it is unit-tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from chatd.models import ModelError

__all__ = [
    "BACKOFF_CAP",
    "DEFAULT_MAX_MODEL_ATTEMPTS",
    "AfterStep",
    "after_step",
    "backoff_delay",
    "should_retry",
]

BACKOFF_CAP = timedelta(seconds=60)
DEFAULT_MAX_MODEL_ATTEMPTS = 25


@dataclass(frozen=True)
class AfterStep:
    """What the turn does once a model step is persisted."""

    run_tools: bool
    then: Literal["generate", "finish"]


def after_step(*, has_tool_calls: bool, step: int, max_steps: int) -> AfterStep:
    """Tools run whenever the model called them (so every call gets a result);
    the turn generates again unless the model stopped or `max_steps` is reached."""
    if not has_tool_calls:
        return AfterStep(run_tools=False, then="finish")
    if step + 1 >= max_steps:
        return AfterStep(run_tools=True, then="finish")
    return AfterStep(run_tools=True, then="generate")


def backoff_delay(attempt: int, retry_after_ms: int | None = None) -> timedelta:
    """1 s, 2 s, 4 s ... capped at 60 s; a larger provider retry-after wins."""
    exponential = timedelta(seconds=2 ** min(attempt - 1, 16))
    delay = min(exponential, BACKOFF_CAP)
    if retry_after_ms is not None:
        delay = max(delay, timedelta(milliseconds=retry_after_ms))
    return delay


def should_retry(error: ModelError, attempt: int, max_attempts: int) -> bool:
    """Retry retryable errors until `max_attempts` attempts have been made."""
    return error.retryable and attempt < max_attempts
