"""The turn's moves: what follows a step, a tool phase or a compaction (`next_move`).

Pure: no I/O and no Temporal imports, so it is unit-tested without a server. How long to
back off is `workflows.model_retries`; how a step's calls are batched, `workflows.tool_batch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from chatd.models import ModelError
from workflows.payloads import (
    BeginTurnResult,
    StreamStepInput,
    StreamStepResult,
)
from workflows.tool_batch import exclusive_violation

__all__ = [
    "EXPIRED",
    "MAX_COMPACTIONS_PER_TURN",
    "STEPS_PER_RUN",
    "Compact",
    "Compacted",
    "Failed",
    "Finish",
    "Generate",
    "Interrupted",
    "Move",
    "Outcome",
    "OverBudget",
    "RunTools",
    "StepOutcome",
    "Streamed",
    "ToolsDone",
    "ToolsOutcome",
    "TurnProgress",
    "continues_in_activity",
    "ends_turn",
    "misfit_error",
    "next_move",
    "over_threshold",
    "step_finishes_turn",
    "too_long",
]

MAX_COMPACTIONS_PER_TURN = 3
STEPS_PER_RUN = 100
"""A long turn continues as a new run after this many steps (or when Temporal suggests)."""

EXPIRED = ModelError(
    message="no tool results were submitted before the wait expired", kind="timeout"
)

# Moves and outcomes are defined here, not in the workflow's module: the sandbox runs that
# module anew for every run, and making a dataclass takes a while.


@dataclass
class TurnProgress:
    """Where a turn stands: its step, its limits and its compactions (the workflow's own)."""

    step: int
    max_steps: int
    compact_at_tokens: int
    compactions: int = 0
    compacted_for: int | None = None
    """The step that followed the last compaction: still over the threshold after it means
    the context can't fit."""
    overflow_compacted: bool = False
    """A provider context_exceeded error already got its compaction."""
    compacts_on_overflow: bool = True
    """False: a provider's context_exceeded ends the turn (`TurnPlan.compacts_on_overflow`)."""


@dataclass(frozen=True)
class Generate:
    """Stream model step `step`."""

    step: int


@dataclass(frozen=True)
class RunTools:
    """Run the tool calls of a streamed step."""

    result: StreamStepResult


@dataclass(frozen=True)
class Compact:
    """Summarise the context, then make the move `then`."""

    then: Generate | Finish
    for_overflow: bool = False


@dataclass(frozen=True)
class Finish:
    """End the turn: `waiting`, or `error` with `error`."""

    error: ModelError | None = None


Move = Generate | RunTools | Compact | Finish


@dataclass(frozen=True)
class Streamed:
    """The step was generated and persisted."""

    result: StreamStepResult


@dataclass(frozen=True)
class Failed:
    """The step failed for good (not retryable, or out of attempts or time)."""

    error: ModelError


@dataclass(frozen=True)
class Interrupted:
    """An interrupt stopped the step; whatever it produced is persisted."""


@dataclass(frozen=True)
class OverBudget:
    """A budget couldn't pay for the step, and no one raised it: the turn ends, its work
    so far kept."""


StepOutcome = Streamed | Failed | Interrupted | OverBudget
"""How a model step (with its workflow-timer retries) ended."""

ToolsOutcome = Literal["continue", "stop", "interrupted", "expired"]
"""How a step's tool phase ended: calls answered, stop-after, interrupt, expiry."""


@dataclass(frozen=True)
class ToolsDone:
    """The tool phase of a step ended; `input_tokens` is that step's prompt."""

    outcome: ToolsOutcome
    input_tokens: int


@dataclass(frozen=True)
class Compacted:
    """A compaction for `move` succeeded: the prompt is now about `estimated_tokens`."""

    move: Compact
    estimated_tokens: int


Outcome = StepOutcome | ToolsDone | Compacted


def next_move(turn: TurnProgress, last: Outcome) -> Move:
    """What the turn does after `last`: the whole turn's control flow, in one place."""
    match last:
        case Interrupted() | OverBudget():
            return Finish()
        case Failed(error=error):
            if error.kind == "context_exceeded" and _may_compact(turn, overflow=True):
                return Compact(then=Generate(turn.step), for_overflow=True)  # the step again
            return Finish(error)
        case Streamed(result=result):
            return _after_step(result, turn)
        case ToolsDone(outcome=outcome, input_tokens=tokens):
            return _after_tools(outcome, tokens, turn)
        case Compacted(move=move, estimated_tokens=tokens):
            if over_threshold(tokens, turn.compact_at_tokens):
                return Finish(too_long(tokens, turn.compact_at_tokens))
            return move.then


def _after_step(result: StreamStepResult, turn: TurnProgress) -> Move:
    """After a streamed step: its tools, or the end of the turn. A final answer out of the
    output format gets one corrective step (the note asking for it was saved with the
    step), then fails the turn."""
    if result.interrupted:
        return Finish()
    if result.format_error is not None:
        if result.format_note_saved and turn.step + 1 < turn.max_steps:
            return Generate(turn.step + 1)
        return Finish(misfit_error(result.format_error))
    if result.tool_calls:
        return RunTools(result)
    return _after_tools("finished", result.input_tokens, turn)


def _after_tools(
    outcome: ToolsOutcome | Literal["finished"], input_tokens: int, turn: TurnProgress
) -> Move:
    """After a step whose tool phase is done (`finished`: it made no calls).

    Over the compaction threshold the context is compacted, even on the model's final step
    (the summary then asks it to continue) and on early exits (so they can't grow the
    context without bound); still over right after a compaction means it can't fit.
    """
    if outcome == "interrupted":
        return Finish()
    over = over_threshold(input_tokens, turn.compact_at_tokens)
    if over and turn.compacted_for == turn.step:
        return Finish(too_long(input_tokens, turn.compact_at_tokens))
    end = Finish(EXPIRED if outcome == "expired" else None)
    follow: Generate | Finish = (
        Generate(turn.step + 1) if turn.step + 1 < turn.max_steps else Finish()
    )
    if over and _may_compact(turn, overflow=False):
        return Compact(then=end if outcome in ("stop", "expired") else follow)
    return follow if outcome == "continue" else end


def _may_compact(turn: TurnProgress, *, overflow: bool) -> bool:
    """At most three compactions a turn, and one for a provider's context_exceeded (none
    if the chat's compaction is off)."""
    if overflow and (turn.overflow_compacted or not turn.compacts_on_overflow):
        return False
    return turn.compactions < MAX_COMPACTIONS_PER_TURN


def too_long(tokens: int, compact_at_tokens: int) -> ModelError:
    """The turn's error when even a compacted context is over the threshold."""
    return ModelError(
        message=(
            f"the context is still {tokens} tokens after compaction, over the "
            f"{compact_at_tokens}-token threshold"
        ),
        kind="context_exceeded",
        detail={"tokens": tokens, "threshold": compact_at_tokens},
    )


def misfit_error(problem: str) -> ModelError:
    """The turn's error when the final answer still does not fit its output format."""
    return ModelError(
        message=f"the model's answer does not match the response's output format: {problem}",
        kind="output_format",
        detail={"problem": problem},
    )


def over_threshold(input_tokens: int, compact_at_tokens: int) -> bool:
    """Whether a step's prompt reached the compaction threshold (0: never compact)."""
    return input_tokens >= compact_at_tokens > 0


def ends_turn(
    *, tool_calls: int, interrupted: bool, input_tokens: int, compact_at_tokens: int
) -> bool:
    """Whether a step ends its turn with nothing left to do: no calls, no compaction.

    `next_move` answers `Finish()` for every such step, so the model-step activity, which
    asks this to finish the turn itself (one local activity fewer), can't disagree with it.
    """
    return (
        tool_calls == 0 and not interrupted and not over_threshold(input_tokens, compact_at_tokens)
    )


def step_finishes_turn(
    input: StreamStepInput, began: BeginTurnResult | None, result: StreamStepResult
) -> bool:
    """Whether the model-step activity finishes its turn itself: the workflow allowed it
    (`may_finish`) and the step ends the turn, under the threshold of the plan it began the
    turn with (if so), else of the one it was given."""
    plan = began.plan if began else None
    return (
        input.may_finish
        and result.format_error is None
        and ends_turn(
            tool_calls=len(result.tool_calls),
            interrupted=result.interrupted,
            input_tokens=result.input_tokens,
            compact_at_tokens=plan.compact_at_tokens if plan else input.compact_at_tokens,
        )
    )


def continues_in_activity(
    result: StreamStepResult, *, step: int, steps_before: int, compact_at_tokens: int
) -> bool:
    """Whether the model-step activity runs step `step`'s calls itself and streams the next
    step: every call is a quick built-in (`Tool.inline`) the policy lets run, so nothing
    waits, asks a person, stops the turn or must run alone; and after them `next_move` would
    answer `Generate(step + 1)`, which must come before `steps_before` (the turn's step limit,
    or where a long turn continues as a new run). The turn then costs the server one
    activity for such a run of steps, not one per step and one per call.
    """
    calls = result.tool_calls
    return (
        bool(calls)
        and result.message_id is not None
        and not result.interrupted
        and result.format_error is None
        and result.pending_budget is None
        and all(
            c.inline and c.kind == "builtin" and c.policy == "auto" and not c.stop_after
            for c in calls
        )
        and not exclusive_violation(calls)
        and step + 1 < steps_before
        and not over_threshold(result.input_tokens, compact_at_tokens)
    )
