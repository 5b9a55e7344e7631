"""How a turn retries a failed model step: capped exponential backoff, and when to stop.

Pure, like `workflows.decide`: the workflow sleeps the delay on a durable timer.
"""

from __future__ import annotations

from datetime import timedelta

from chatd.models import ModelError

__all__ = ["BACKOFF_CAP", "DEFAULT_MAX_MODEL_ATTEMPTS", "backoff_delay", "gave_up", "should_retry"]

BACKOFF_CAP = timedelta(seconds=60)
DEFAULT_MAX_MODEL_ATTEMPTS = 25


def backoff_delay(attempt: int, retry_after_ms: int | None = None) -> timedelta:
    """1 s, 2 s, 4 s ... capped at 60 s; a larger provider retry-after wins."""
    exponential = timedelta(seconds=2 ** min(attempt - 1, 16))
    delay = min(exponential, BACKOFF_CAP)
    if retry_after_ms is not None:
        delay = max(delay, timedelta(milliseconds=retry_after_ms))
    return delay


def should_retry(
    error: ModelError,
    attempt: int,
    max_attempts: int,
    failing_for: timedelta = timedelta(0),
    deadline: timedelta | None = None,
) -> bool:
    """Retry retryable errors until `max_attempts` attempts were made, or until the next
    attempt (after its backoff) would start past the `deadline` for a dependency that has
    been failing for `failing_for`."""
    next_attempt_at = failing_for + backoff_delay(attempt, error.retry_after_ms)
    in_time = deadline is None or next_attempt_at < deadline
    return error.retryable and attempt < max_attempts and in_time


def gave_up(
    error: ModelError, attempt: int, failing_for: timedelta, deadline: timedelta
) -> ModelError:
    """The turn's error when retries stop: out of time (the next attempt would start past
    the deadline) is `unavailable`, naming the last error; otherwise the error as
    classified."""
    if not error.retryable or should_retry(error, attempt, attempt + 1, failing_for, deadline):
        return error
    minutes = int(failing_for.total_seconds() // 60)
    return ModelError(
        message=f"still failing after {minutes} min of retries: {error.message}",
        kind="unavailable",
        provider=error.provider,
        status_code=error.status_code,
        detail={"last_error": error.model_dump(mode="json", exclude={"detail"})},
    )
