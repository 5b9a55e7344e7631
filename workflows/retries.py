"""How the turn's activities retry, and how their failures read when retries stop.

Deterministic workflow code, shared by the generate, tool and compaction phases.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from chatd.models import ModelError
from workflows.constants import MODEL_ERROR_TYPE

__all__ = ["activity_error", "retries_within", "retry_policy"]


def retry_policy(*, non_retryable: list[str] | None = None) -> RetryPolicy:
    """Activity retries for what the activity could not classify: a dead worker, a database
    blip. Unbounded in count; bounded in time by the turn's deadline (schedule-to-close),
    and activities give up on their own bugs after a few attempts (`activities.failures`)."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=10),
        non_retryable_error_types=non_retryable or [],
    )


def retries_within(deadline: timedelta) -> RetryPolicy:
    """`retry_policy`'s backoff, with as many attempts as fit in `deadline`: for local
    activities, which kept retrying past a schedule-to-close in our tests."""
    policy = retry_policy()
    waited, wait, attempts = timedelta(0), policy.initial_interval, 1
    while waited + wait < deadline:
        waited += wait
        attempts += 1
        wait = min(wait * 2, policy.maximum_interval or wait)
    return RetryPolicy(
        initial_interval=policy.initial_interval,
        maximum_interval=policy.maximum_interval,
        maximum_attempts=attempts,
    )


def activity_error(err: ActivityError, what: str) -> ModelError:
    """The classified error an activity raised, or one that says why it gave up.

    Out of time (the turn's deadline) is `unavailable`; anything else unclassified reached
    us through our own code, so it is `internal`, with no stack trace for the client.
    """
    cause = err.cause
    if isinstance(cause, CancelledError):
        return ModelError(message=f"{what} was cancelled", kind="generic", retryable=True)
    if (
        isinstance(cause, ApplicationError)
        and cause.type == MODEL_ERROR_TYPE
        and cause.details
        and err.retry_state != RetryState.TIMEOUT
    ):
        return ModelError.model_validate(cause.details[0])
    if err.retry_state == RetryState.TIMEOUT or isinstance(cause, ActivityTimeoutError):
        last = cause.cause if isinstance(cause, ActivityTimeoutError) else cause
        reason = f": {last}" if last is not None else f" ({cause})"
        return ModelError(
            message=f"{what} still failed at the turn's retry deadline{reason}"[:1000],
            kind="unavailable",
        )
    return ModelError(message=f"{what} failed: {cause or err}"[:1000], kind="internal")
