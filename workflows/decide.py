"""Pure decisions of a turn: what follows a step, and how long to back off.

No I/O and no Temporal imports, so it is unit-tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from chatd.models import ModelError
from workflows.payloads import BeginTurnResult, StreamStepInput, StreamStepResult, ToolCallRef

__all__ = [
    "BACKOFF_CAP",
    "DEFAULT_MAX_MODEL_ATTEMPTS",
    "INTERRUPTED_RESULT",
    "MAX_COMPACTIONS_PER_TURN",
    "STEPS_PER_RUN",
    "Compactions",
    "NextMove",
    "StepOutcome",
    "after_step",
    "backoff_delay",
    "ends_turn",
    "exclusive_violation",
    "expired_result",
    "over_threshold",
    "should_retry",
    "split_calls",
    "step_finishes_turn",
    "stops_turn",
]

BACKOFF_CAP = timedelta(seconds=60)
DEFAULT_MAX_MODEL_ATTEMPTS = 25


MAX_COMPACTIONS_PER_TURN = 3
STEPS_PER_RUN = 100
"""A long turn continues as a new run after this many steps (or when Temporal suggests)."""


@dataclass
class Compactions:
    """Compaction bookkeeping of one turn (defined here, not in the workflow's module: the
    sandbox runs that module anew for every run, and a dataclass takes a while to make)."""

    count: int = 0
    just_compacted: bool = False
    for_overflow: bool = False
    """A provider context_exceeded error already got its compaction."""


StepOutcome = Literal["finished", "continue", "stop", "interrupted", "expired"]
"""How a step's tool phase ended: no calls, calls answered, stop-after, interrupt, expiry."""
NextMove = Literal["next", "end", "compact_then_next", "compact_then_end", "context_exceeded"]


def after_step(
    outcome: StepOutcome, *, over_threshold: bool, just_compacted: bool, compactions: int
) -> NextMove:
    """What follows a step whose tool phase is done.

    Over the compaction threshold the context is compacted, even on the model's final step
    (the summary then asks it to continue) and on early exits (so they can't grow the
    context without bound); still over right after a compaction means it can't fit.
    """
    if outcome == "interrupted":
        return "end"
    if over_threshold and just_compacted:
        return "context_exceeded"
    if over_threshold and compactions < MAX_COMPACTIONS_PER_TURN:
        return "compact_then_end" if outcome in ("stop", "expired") else "compact_then_next"
    return "next" if outcome == "continue" else "end"


def over_threshold(input_tokens: int, compact_at_tokens: int) -> bool:
    """Whether a step's prompt reached the compaction threshold (0: never compact)."""
    return input_tokens >= compact_at_tokens > 0


def ends_turn(
    *, tool_calls: int, interrupted: bool, input_tokens: int, compact_at_tokens: int
) -> bool:
    """Whether a step ends its turn with nothing left to do: no calls, no compaction.

    The model-step activity asks this to finish the turn itself (one local activity fewer);
    `after_step` says "end" for every such step, so the two cannot disagree.
    """
    return (
        tool_calls == 0 and not interrupted and not over_threshold(input_tokens, compact_at_tokens)
    )


def step_finishes_turn(
    input: StreamStepInput, began: BeginTurnResult | None, result: StreamStepResult
) -> bool:
    """Whether the model-step activity finishes its turn itself: it may (`may_finish`) and
    the step ends the turn, under the threshold of the plan it began the turn with (if so),
    else of the one it was given."""
    plan = began.plan if began else None
    return input.may_finish and ends_turn(
        tool_calls=len(result.tool_calls),
        interrupted=result.interrupted,
        input_tokens=result.input_tokens,
        compact_at_tokens=plan.compact_at_tokens if plan else input.compact_at_tokens,
    )


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
