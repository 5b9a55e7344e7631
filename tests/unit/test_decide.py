"""The turn's pure decisions: what follows a step, and the backoff schedule."""

from datetime import timedelta

import pytest

from chatd.models import ModelError
from workflows.decide import after_step, backoff_delay, should_retry


def test_a_step_without_tool_calls_finishes_the_turn() -> None:
    decision = after_step(has_tool_calls=False, step=0, max_steps=25)
    assert (decision.run_tools, decision.then) == (False, "finish")


def test_tool_calls_run_and_the_model_is_called_again() -> None:
    decision = after_step(has_tool_calls=True, step=3, max_steps=25)
    assert (decision.run_tools, decision.then) == (True, "generate")


def test_the_last_allowed_step_still_answers_its_tool_calls_then_finishes() -> None:
    decision = after_step(has_tool_calls=True, step=24, max_steps=25)
    assert (decision.run_tools, decision.then) == (True, "finish")


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
