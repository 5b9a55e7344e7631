"""Pure decisions of a turn: what follows a step, and how long to back off.

No I/O and no Temporal imports, so it is unit-tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from chatd.models import ModelError
from workflows.payloads import ToolCallRef

__all__ = [
    "BACKOFF_CAP",
    "DEFAULT_MAX_MODEL_ATTEMPTS",
    "INTERRUPTED_RESULT",
    "AfterStep",
    "after_step",
    "backoff_delay",
    "exclusive_violation",
    "expired_result",
    "should_retry",
    "split_calls",
    "stops_turn",
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


INTERRUPTED_RESULT = "tool call was interrupted before it produced a result"


def exclusive_violation(calls: list[ToolCallRef]) -> dict[str, str]:
    """Policy errors by call id when an exclusive tool shares its batch; empty if none.

    Nothing of such a batch runs: the model is told to retry the calls separately.
    """
    exclusive = [c for c in calls if c.exclusive]
    if not exclusive or len(calls) == 1:
        return {}
    first = exclusive[0].name
    errors: dict[str, str] = {}
    for call in calls:
        if call.exclusive:
            errors[call.id] = (
                f"{call.name} must be called alone, without other tools in the same batch. "
                f"Retry with only the {call.name} call."
            )
        else:
            errors[call.id] = (
                f"this tool was skipped because {first} must run alone in its batch. "
                f"Retry your tool calls without {first}, or call {first} separately first."
            )
    return errors


def split_calls(calls: list[ToolCallRef]) -> tuple[list[ToolCallRef], list[ToolCallRef]]:
    """(worker-executed, client-executed) calls, each in call order.

    Unknown tools go to the worker, which answers them with a "Tool not found" error.
    """
    return [c for c in calls if c.kind != "dynamic"], [c for c in calls if c.kind == "dynamic"]


def stops_turn(calls: list[ToolCallRef], failed: set[str]) -> bool:
    """A stop-after tool that succeeded ends the turn."""
    return any(c.stop_after and c.id not in failed for c in calls)


def expired_result(expires_at: datetime) -> str:
    """The error result of a dynamic call nobody answered in time."""
    return (
        f"no result was submitted for this tool call before the wait expired at "
        f"{expires_at.isoformat(timespec='seconds')}"
    )
