"""The turn's pure decisions: what follows a step, and the backoff schedule."""

from datetime import timedelta

import pytest

from chatd.models import ModelError
from workflows.decide import (
    StepOutcome,
    after_step,
    backoff_delay,
    ends_turn,
    over_threshold,
    should_retry,
    step_finishes_turn,
)
from workflows.payloads import BeginTurnResult, StreamStepInput, StreamStepResult, TurnPlan


def _next(outcome: StepOutcome, *, over: bool = False, just: bool = False, count: int = 0) -> str:
    return after_step(outcome, over_threshold=over, just_compacted=just, compactions=count)


def test_the_turn_goes_on_while_tool_calls_are_answered_and_ends_otherwise() -> None:
    assert _next("continue") == "next"
    assert _next("finished") == "end"
    assert _next("stop") == "end"
    assert _next("expired") == "end"
    assert _next("interrupted") == "end"


def test_over_the_threshold_the_context_is_compacted_and_the_turn_goes_on() -> None:
    assert _next("continue", over=True) == "compact_then_next"
    # On the model's final step too: the summary asks it to continue the work.
    assert _next("finished", over=True) == "compact_then_next"


def test_early_exits_compact_before_ending() -> None:
    assert _next("stop", over=True) == "compact_then_end"
    assert _next("expired", over=True) == "compact_then_end"


def test_still_over_right_after_a_compaction_is_context_exceeded() -> None:
    assert _next("continue", over=True, just=True, count=1) == "context_exceeded"
    assert _next("continue", over=False, just=True, count=1) == "next"


def test_at_most_three_compactions_per_turn() -> None:
    assert _next("continue", over=True, count=2) == "compact_then_next"
    assert _next("continue", over=True, count=3) == "next"
    assert _next("finished", over=True, count=3) == "end"


def test_an_interrupt_ends_the_turn_without_compacting() -> None:
    assert _next("interrupted", over=True) == "end"


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
        over = over_threshold(tokens, threshold)
        for just in (False, True):
            for count in range(4):
                assert _next("finished", over=over, just=just, count=count) == "end"


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
