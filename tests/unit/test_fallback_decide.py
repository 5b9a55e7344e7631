"""When a failing step moves to the chat's next model: the pure fallback decision."""

from typing import Any

import pytest

from chatd.models import ModelError
from workflows.fallback import (
    FALLBACK_AFTER_FAILURES,
    fallback_model,
    model_label,
    model_not_found,
    model_seems_down,
)
from workflows.payloads import PlannedModel, TurnPlan

PLAN = TurnPlan(
    turn_id="t",
    model_label="anthropic/claude",
    context_limit=200_000,
    fallbacks=[
        PlannedModel(label="openai/gpt", context_limit=400_000),
        PlannedModel(label="openai/small", context_limit=100_000),
    ],
)


def _error(kind: str, *, retryable: bool = True, **fields: Any) -> ModelError:
    return ModelError.model_validate(
        {"message": kind, "kind": kind, "retryable": retryable, **fields}
    )


DOWN = [
    _error("overloaded", status_code=529),
    _error("rate_limit", status_code=429),
    _error("timeout"),
    _error("startup_timeout"),
    _error("generic", detail={"type": "connection_error"}),
    _error("generic", detail={"type": "incomplete_stream"}),
    _error("generic", status_code=502),
]


@pytest.mark.parametrize("error", DOWN, ids=lambda e: f"{e.kind}-{e.status_code}-{e.detail}")
def test_a_model_that_stays_down_is_left_on_the_third_failure(error: ModelError) -> None:
    assert model_seems_down(error)
    assert FALLBACK_AFTER_FAILURES == 3
    assert fallback_model(error, 1, 0, PLAN) is None
    assert fallback_model(error, 2, 0, PLAN) is None
    assert fallback_model(error, 3, 0, PLAN) == 1
    assert fallback_model(error, 3, 1, PLAN) == 2


@pytest.mark.parametrize(
    "error",
    [
        _error("generic", status_code=409),
        _error("generic", detail={"type": "SomethingElse"}),
        _error("overloaded", retryable=False),
    ],
)
def test_other_failures_never_count_toward_a_fallback(error: ModelError) -> None:
    assert not model_seems_down(error)
    assert fallback_model(error, 10, 0, PLAN) is None


def test_the_last_model_has_nowhere_to_go() -> None:
    overloaded = _error("overloaded")
    assert fallback_model(overloaded, 3, 2, PLAN) is None
    no_fallbacks = PLAN.model_copy(update={"fallbacks": []})
    assert fallback_model(overloaded, 3, 0, no_fallbacks) is None
    assert (
        fallback_model(_error("config", retryable=False, status_code=404), 1, 0, no_fallbacks)
        is None
    )


@pytest.mark.parametrize(
    "error",
    [
        _error("config", retryable=False, status_code=404),
        _error("config", retryable=False, detail={"type": "not_found_error"}),
        _error("config", retryable=False, detail={"code": "model_not_found"}),
    ],
)
def test_a_model_the_provider_does_not_know_is_left_at_once(error: ModelError) -> None:
    assert model_not_found(error)
    assert fallback_model(error, 0, 0, PLAN) == 1


@pytest.mark.parametrize(
    "error",
    [
        _error("auth", retryable=False, status_code=401),
        _error("config", retryable=False, status_code=402),
        _error("invalid_request", retryable=False, status_code=400),
        _error("internal", retryable=False),
    ],
)
def test_errors_any_model_would_get_stay_final(error: ModelError) -> None:
    assert not model_not_found(error)
    assert fallback_model(error, 0, 0, PLAN) is None


def test_a_prompt_too_long_moves_only_to_a_larger_window() -> None:
    too_long = _error("context_exceeded", retryable=False, status_code=400)
    assert fallback_model(too_long, 0, 0, PLAN) == 1, "400k > 200k"
    assert fallback_model(too_long, 0, 1, PLAN) is None, "100k < 400k: compact instead"
    same = PLAN.model_copy(
        update={"fallbacks": [PlannedModel(label="openai/gpt", context_limit=200_000)]}
    )
    assert fallback_model(too_long, 0, 0, same) is None


def test_model_labels_by_index() -> None:
    assert [model_label(PLAN, i) for i in range(3)] == [
        "anthropic/claude",
        "openai/gpt",
        "openai/small",
    ]
