"""How the turn's activities retry, and how their failures read when retries stop.

Deterministic workflow code, shared by the generate, tool and compaction phases.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from chatd.models import ModelError
from workflows.constants import MODEL_ERROR_TYPE

__all__ = ["activity_error", "retry_policy"]


def retry_policy(*, non_retryable: list[str] | None = None) -> RetryPolicy:
    """Activity retries for what the activity could not classify: a dead worker, a database
    blip. Unbounded in count; bounded in time by the turn's deadline (schedule-to-close),
    and activities give up on their own bugs after a few attempts (`activities.failures`)."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=10),
        non_retryable_error_types=non_retryable or [],
    )


def activity_error(err: ActivityError, what: str) -> ModelError:
    """The classified error an activity raised, or one that says why it gave up.

    Out of time (the turn's deadline) is `unavailable`; anything else unclassified reached
    us through our own code, so it is `internal`, with no stack trace for the client.
    """
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.type == MODEL_ERROR_TYPE and cause.details:
        return ModelError.model_validate(cause.details[0])
    if isinstance(cause, CancelledError):
        return ModelError(message=f"{what} was cancelled", kind="generic", retryable=True)
    if isinstance(cause, ActivityTimeoutError):
        return ModelError(
            message=f"{what} did not complete in time ({cause.type.name.lower()} timeout)"
            if cause.type is not None
            else f"{what} did not complete in time",
            kind="unavailable",
        )
    return ModelError(message=f"{what} failed: {cause or err}", kind="internal")
