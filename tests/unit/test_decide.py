"""The turn's pure decisions: what follows a step, and the backoff schedule."""

from datetime import timedelta

import pytest

from chatd.budgets import PendingBudget
from chatd.models import ModelError
from workflows.decide import (
    EXPIRED,
    Compact,
    Compacted,
    Failed,
    Finish,
    Generate,
    Interrupted,
    RunTools,
    Streamed,
    ToolsDone,
    ToolsOutcome,
    TurnProgress,
    continues_in_activity,
    ends_turn,
    misfit_error,
    next_move,
    step_finishes_turn,
)
from workflows.model_retries import backoff_delay, gave_up, should_retry
from workflows.payloads import (
    BeginTurnResult,
    StreamStepInput,
    StreamStepResult,
    ToolCallRef,
    TurnPlan,
)

THRESHOLD = 100
MISFIT = "celsius: 'cold' is not of type 'integer'"


def _turn(step: int = 0, *, compactions: int = 0, just_compacted: bool = False) -> TurnProgress:
    return TurnProgress(
        step=step,
        max_steps=25,
        compact_at_tokens=THRESHOLD,
        compactions=compactions,
        compacted_for=step if just_compacted else None,
    )


def _after_tools(
    outcome: ToolsOutcome, *, over: bool = False, compactions: int = 0, just_compacted: bool = False
) -> object:
    tokens = THRESHOLD if over else THRESHOLD - 1
    turn = _turn(compactions=compactions, just_compacted=just_compacted)
    return next_move(turn, ToolsDone(outcome, tokens))


def _streamed(tokens: int = 10, *, calls: int = 0, interrupted: bool = False) -> Streamed:
    return Streamed(
        StreamStepResult(
            message_id=1,
            input_tokens=tokens,
            interrupted=interrupted,
            tool_calls=[ToolCallRef(id=f"c{n}", name="t") for n in range(calls)],
        )
    )


def test_a_step_with_calls_runs_them_and_one_without_ends_the_turn() -> None:
    with_calls = _streamed(calls=2)
    assert next_move(_turn(), with_calls) == RunTools(with_calls.result)
    assert next_move(_turn(), _streamed()) == Finish()


def test_the_turn_goes_on_while_tool_calls_are_answered_and_ends_otherwise() -> None:
    assert _after_tools("continue") == Generate(1)
    assert _after_tools("stop") == Finish()
    assert _after_tools("expired") == Finish(EXPIRED)
    assert _after_tools("interrupted") == Finish()


def test_the_step_limit_ends_the_turn() -> None:
    last = TurnProgress(step=24, max_steps=25, compact_at_tokens=0)
    assert next_move(last, ToolsDone("continue", 10)) == Finish()


def test_over_the_threshold_the_context_is_compacted_and_the_turn_goes_on() -> None:
    assert _after_tools("continue", over=True) == Compact(then=Generate(1))
    # On the model's final step too: the summary asks it to continue the work.
    assert next_move(_turn(), _streamed(THRESHOLD)) == Compact(then=Generate(1))


def test_early_exits_compact_before_ending() -> None:
    assert _after_tools("stop", over=True) == Compact(then=Finish())
    assert _after_tools("expired", over=True) == Compact(then=Finish(EXPIRED))


def test_still_over_right_after_a_compaction_is_context_exceeded() -> None:
    move = _after_tools("continue", over=True, compactions=1, just_compacted=True)
    assert isinstance(move, Finish) and move.error is not None
    assert move.error.kind == "context_exceeded"
    assert _after_tools("continue", compactions=1, just_compacted=True) == Generate(1)


def test_a_compaction_leads_to_its_move_unless_the_summary_is_still_too_long() -> None:
    compact = Compact(then=Generate(3))
    assert next_move(_turn(2), Compacted(compact, THRESHOLD - 1)) == Generate(3)
    still = next_move(_turn(2), Compacted(compact, THRESHOLD))
    assert isinstance(still, Finish) and still.error is not None
    assert still.error.kind == "context_exceeded"


def test_at_most_three_compactions_per_turn() -> None:
    assert _after_tools("continue", over=True, compactions=2) == Compact(then=Generate(1))
    assert _after_tools("continue", over=True, compactions=3) == Generate(1)
    assert next_move(_turn(compactions=3), _streamed(THRESHOLD)) == Finish()


def test_an_interrupt_ends_the_turn_without_compacting() -> None:
    assert _after_tools("interrupted", over=True) == Finish()
    assert next_move(_turn(), Interrupted()) == Finish()
    assert next_move(_turn(), _streamed(THRESHOLD, calls=1, interrupted=True)) == Finish()


def test_a_failed_step_ends_the_turn_with_its_error() -> None:
    error = ModelError(message="bad key", kind="auth")
    assert next_move(_turn(), Failed(error)) == Finish(error)


def test_a_provider_overflow_gets_one_compaction_and_the_same_step_again() -> None:
    error = ModelError(message="prompt is too long", kind="context_exceeded")
    assert next_move(_turn(4), Failed(error)) == Compact(then=Generate(4), for_overflow=True)
    once = _turn(4)
    once.overflow_compacted = True
    assert next_move(once, Failed(error)) == Finish(error)


def test_a_provider_overflow_ends_the_turn_when_compaction_is_off() -> None:
    """Open Responses' `truncation: "disabled"`: the request fails instead of losing context."""
    error = ModelError(message="prompt is too long", kind="context_exceeded")
    off = _turn(4)
    off.compacts_on_overflow = False
    assert next_move(off, Failed(error)) == Finish(error)


@pytest.mark.parametrize(
    ("attempt", "seconds"), [(1, 1), (2, 2), (3, 4), (6, 32), (7, 60), (30, 60)]
)
def test_backoff_doubles_from_one_second_and_caps_at_sixty(attempt: int, seconds: int) -> None:
    assert backoff_delay(attempt) == timedelta(seconds=seconds)


def test_a_larger_retry_after_wins_and_a_smaller_one_does_not() -> None:
    assert backoff_delay(1, retry_after_ms=7_500) == timedelta(milliseconds=7_500)
    assert backoff_delay(4, retry_after_ms=100) == timedelta(seconds=8)


def test_only_retryable_errors_are_retried_and_only_up_to_the_limit() -> None:
    retryable = ModelError(message="overloaded", kind="overloaded", retryable=True)
    fatal = ModelError(message="bad key", kind="auth", retryable=False)
    assert should_retry(retryable, attempt=1, max_attempts=25)
    assert not should_retry(retryable, attempt=25, max_attempts=25)
    assert not should_retry(fatal, attempt=1, max_attempts=25)


def test_a_dependency_failing_past_the_deadline_is_unavailable() -> None:
    down = ModelError(message="connection refused", kind="overloaded", retryable=True)
    deadline = timedelta(minutes=30)
    assert should_retry(down, 3, 25, timedelta(minutes=29), deadline)
    # The next attempt, 4 s of backoff away, would start past the deadline: give up now.
    assert not should_retry(down, 3, 25, timedelta(minutes=29, seconds=57), deadline)
    ended = gave_up(down, 3, timedelta(minutes=31), deadline)
    assert ended.kind == "unavailable" and "connection refused" in ended.message
    assert ended.detail["last_error"]["kind"] == "overloaded"
    # Out of attempts in time, or not retryable: the error as classified.
    assert gave_up(down, 25, timedelta(minutes=20), deadline) == down


def test_the_context_limit_comes_from_config_then_provider_then_table_then_fallback() -> None:
    from chatd.context import DEFAULT_CONTEXT_LIMIT, context_limit
    from chatd.models import ModelConfig

    assert context_limit(ModelConfig(name="gpt-4o", context_limit=5000), reported=9000) == 5000
    assert context_limit(ModelConfig(name="my-local-model"), reported=9000) == 9000
    assert context_limit(ModelConfig(name="claude-sonnet-4-5")) == 200_000
    assert context_limit(ModelConfig(name="gpt-4o-mini")) == 128_000
    assert context_limit(ModelConfig(name="unheard-of")) == DEFAULT_CONTEXT_LIMIT


@pytest.mark.parametrize("tokens", [0, 99, 100, 101])
@pytest.mark.parametrize("threshold", [0, 100])
@pytest.mark.parametrize("calls", [0, 1])
@pytest.mark.parametrize("interrupted", [False, True])
def test_a_step_finishes_its_turn_only_where_the_workflow_would_end_it(
    tokens: int, threshold: int, calls: int, interrupted: bool
) -> None:
    """The step activity finishes the turn itself only when the workflow would just end it."""
    ends = ends_turn(
        tool_calls=calls, interrupted=interrupted, input_tokens=tokens, compact_at_tokens=threshold
    )
    assert ends == (calls == 0 and not interrupted and not (threshold and tokens >= threshold))
    if ends:
        for compacted_for in (None, 0):
            for count in range(4):
                turn = TurnProgress(0, 25, threshold, count, compacted_for)
                assert next_move(turn, _streamed(tokens)) == Finish()


def test_a_step_finishes_its_turn_only_if_allowed_and_under_its_plans_threshold() -> None:
    step = StreamStepResult(message_id=1, input_tokens=150)
    given = StreamStepInput(
        chat_id="c", turn_id="t", step=1, may_finish=True, compact_at_tokens=100
    )
    assert not step_finishes_turn(given, None, step)  # over the given threshold: compact first
    assert not step_finishes_turn(given.model_copy(update={"may_finish": False}), None, step)
    began = BeginTurnResult(started=True, plan=TurnPlan(turn_id="t", compact_at_tokens=200))
    first = given.model_copy(update={"step": 0, "begin": True, "compact_at_tokens": 0})
    assert step_finishes_turn(first, began, step)  # the plan it began with decides
    assert not step_finishes_turn(first, began, step.model_copy(update={"interrupted": True}))


def _misfit(*, note_saved: bool, tokens: int = 10) -> Streamed:
    """A final answer that missed the chat's output format."""
    return Streamed(
        StreamStepResult(
            message_id=1, input_tokens=tokens, format_error=MISFIT, format_note_saved=note_saved
        )
    )


def test_a_misfit_with_its_note_saved_gets_one_corrective_step() -> None:
    assert next_move(_turn(3), _misfit(note_saved=True)) == Generate(4)
    # Even over the threshold: the correction comes first, the compaction after its step.
    assert next_move(_turn(3), _misfit(note_saved=True, tokens=THRESHOLD)) == Generate(4)


def test_a_misfit_without_a_note_or_at_the_step_limit_fails_the_turn() -> None:
    last = TurnProgress(step=24, max_steps=25, compact_at_tokens=THRESHOLD)
    for turn, misfit in ((_turn(3), _misfit(note_saved=False)), (last, _misfit(note_saved=True))):
        move = next_move(turn, misfit)
        assert move == Finish(misfit_error(MISFIT))
        assert isinstance(move, Finish) and move.error is not None
        assert move.error.kind == "output_format" and MISFIT in move.error.message
        assert move.error.detail == {"problem": MISFIT}


def test_an_interrupted_step_ends_the_turn_whatever_its_format() -> None:
    interrupted = _misfit(note_saved=True).result.model_copy(update={"interrupted": True})
    assert next_move(_turn(3), Streamed(interrupted)) == Finish()


def test_a_step_whose_answer_misses_the_format_never_finishes_its_turn() -> None:
    given = StreamStepInput(chat_id="c", turn_id="t", step=1, may_finish=True)
    fits = StreamStepResult(message_id=1, input_tokens=10)
    assert step_finishes_turn(given, None, fits)
    for note_saved in (True, False):
        missed = fits.model_copy(update={"format_error": MISFIT, "format_note_saved": note_saved})
        assert not step_finishes_turn(given, None, missed)


QUICK = ToolCallRef(id="q", name="current_time", inline=True)


@pytest.mark.parametrize("tokens", [0, 99, 100])
@pytest.mark.parametrize("threshold", [0, 100])
@pytest.mark.parametrize("step", [0, 3, 4])
@pytest.mark.parametrize("compacted_for", [None, 0, 3, 4])
def test_an_activity_goes_on_only_where_the_workflow_would_generate_the_next_step(
    tokens: int, threshold: int, step: int, compacted_for: int | None
) -> None:
    """After a step whose calls are all quick, the activity streams the next step itself
    exactly when the workflow would run those calls and then generate that step."""
    result = StreamStepResult(message_id=1, tool_calls=[QUICK, QUICK], input_tokens=tokens)
    turn = TurnProgress(step, 5, threshold, compacted_for=compacted_for)
    workflow_goes_on = next_move(turn, Streamed(result)) == RunTools(result) and next_move(
        turn, ToolsDone("continue", tokens)
    ) == Generate(step + 1)
    goes_on = continues_in_activity(result, step=step, steps_before=5, compact_at_tokens=threshold)
    assert goes_on == workflow_goes_on
    # Where a long turn continues as a new run, the workflow takes the next step.
    assert not continues_in_activity(
        result, step=step, steps_before=step + 1, compact_at_tokens=threshold
    )


@pytest.mark.parametrize(
    "other",
    [
        ToolCallRef(id="s", name="slow"),
        ToolCallRef(id="d", name="ask_user", kind="dynamic"),
        ToolCallRef(id="w", name="wait_agent", kind="wait", inline=True),
        ToolCallRef(id="m", name="mcp_tool", kind="mcp", inline=True),
        QUICK.model_copy(update={"id": "a", "policy": "ask"}),
        QUICK.model_copy(update={"id": "n", "policy": "deny"}),
        QUICK.model_copy(update={"id": "f", "stop_after": True}),
        QUICK.model_copy(update={"id": "x", "exclusive": True}),
    ],
)
def test_a_call_that_is_not_quick_leaves_the_tool_phase_to_the_workflow(
    other: ToolCallRef,
) -> None:
    """A call that runs long, waits, asks, is refused, stops the turn or must run alone is
    the workflow's to handle, and so are the quick calls beside it."""
    result = StreamStepResult(message_id=1, tool_calls=[QUICK, other])
    assert not continues_in_activity(result, step=0, steps_before=5, compact_at_tokens=0)
    alone = StreamStepResult(message_id=1, tool_calls=[QUICK])
    assert continues_in_activity(alone, step=0, steps_before=5, compact_at_tokens=0)


def test_a_step_that_was_interrupted_paused_or_missed_its_format_does_not_go_on() -> None:
    result = StreamStepResult(message_id=1, tool_calls=[QUICK])
    pending = PendingBudget(
        budget="turn", limit_usd=1.0, spent_usd=1.0, next_step_usd=0.1, holder="t"
    )
    for stopped in (
        result.model_copy(update={"interrupted": True}),
        result.model_copy(update={"format_error": MISFIT}),
        StreamStepResult(message_id=None, tool_calls=[QUICK], pending_budget=pending),
        result.model_copy(update={"message_id": None}),
        result.model_copy(update={"tool_calls": []}),
    ):
        assert not continues_in_activity(stopped, step=0, steps_before=5, compact_at_tokens=0)
