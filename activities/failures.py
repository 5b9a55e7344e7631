"""How an activity reports what went wrong, so that every retry is bounded.

Temporal retries whatever an activity raises until its retry policy says stop; ours are
bounded in time by the turn's deadline, but a deterministic bug would still burn that
whole deadline. So an activity classifies before it raises:

- the database is unreachable: retryable (`STORE_UNAVAILABLE`), until it is back or the
  turn's deadline passes;
- a classified `ApplicationError` (a provider error, a not-found chat): as raised;
- anything else is our own bug: retried a couple of times (it may be a race), then a
  non-retryable `ModelError` of kind `internal` that the workflow turns into the turn's
  `last_error`, without a stack trace.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from chatd.models import ModelError
from workflows.constants import MODEL_ERROR_TYPE

__all__ = [
    "INTERNAL_ERROR_ATTEMPTS",
    "STEP_ABANDONED",
    "STORE_UNAVAILABLE",
    "classified_failures",
    "model_failure",
]

log = logging.getLogger("chatd.activities")

STORE_UNAVAILABLE = "StoreUnavailable"
"""ApplicationError type: Postgres could not be reached; the attempt is retried."""
STEP_ABANDONED = "StepAbandoned"
"""ApplicationError type: a step attempt cancelled by a worker shutdown or by the server
giving up on it (not by an interrupt); the attempt is retried."""
INTERNAL_ERROR_ATTEMPTS = 3
"""Attempts an unexpected exception gets before the activity gives up for good."""

_STORE_DOWN = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.TooManyConnectionsError,
    ConnectionError,
    TimeoutError,
    socket.gaierror,
)
"""What a lost, refused, restarting or saturated database raises through asyncpg."""


def model_failure(error: ModelError, *, non_retryable: bool = True) -> ApplicationError:
    """A classified error for the workflow to act on: details[0] is the `ModelError`.

    Non-retryable by default (the workflow retries model steps on its own timers); an
    activity whose retries Temporal runs passes `non_retryable=not error.retryable`.

    A classified error is expected (a 529, a 429, a timeout), not a bug: it is BENIGN, so
    the worker logs it at DEBUG instead of a WARNING with a traceback per attempt; the
    workflow logs one line for it (`workflows.generation`). An `internal` error is a bug,
    whose traceback was logged where it was caught.
    """
    expected = error.kind != "internal"
    return ApplicationError(
        error.message,
        error.model_dump(mode="json"),
        type=MODEL_ERROR_TYPE,
        non_retryable=non_retryable,
        category=ApplicationErrorCategory.BENIGN
        if expected
        else ApplicationErrorCategory.UNSPECIFIED,
    )


@asynccontextmanager
async def classified_failures(what: str) -> AsyncIterator[None]:
    """Raise only classified errors out of the body: see the module's docstring."""
    try:
        yield
    except (ApplicationError, asyncio.CancelledError):
        raise
    except _STORE_DOWN as err:
        log.warning("%s: the database is unreachable: %r", what, err)
        raise ApplicationError(
            f"the database is unreachable: {type(err).__name__}", type=STORE_UNAVAILABLE
        ) from err
    except Exception as err:
        attempt = activity.info().attempt
        log.exception("%s failed on attempt %d", what, attempt)
        message = f"{what} failed: internal error ({type(err).__name__})"
        if attempt < INTERNAL_ERROR_ATTEMPTS:
            raise ApplicationError(message, type=type(err).__name__) from err
        raise model_failure(ModelError(message=message, kind="internal")) from err
