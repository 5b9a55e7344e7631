"""Model fallback: a step that keeps failing moves to the chat's next model, durably, and the
turn stays on it (across continue-as-new too)."""

from __future__ import annotations

import json
from typing import Any

from turn_fakes import Turn, calls_step, model_error, text_step

from workflows.decide import STEPS_PER_RUN
from workflows.model_retries import DEFAULT_MAX_MODEL_ATTEMPTS
from workflows.payloads import CompactInput, PublishRetryInput, StreamStepInput, ToolCallRef

GPT = {"label": "openai/gpt", "context_limit": 400_000}
SMALL = {"label": "openai/small", "context_limit": 100_000}
FALLBACKS: dict[str, Any] = {"context_limit": 200_000, "fallbacks": [GPT, SMALL]}


def _streams(turn: Turn) -> list[tuple[int, int, int]]:
    """(step, attempt, model index) of each model step."""
    inputs = turn.fakes.of("stream_model_step", StreamStepInput)
    return [(s.step, s.attempt, s.model_index) for s in inputs]


def _retries(turn: Turn) -> list[tuple[int, int, str | None, str]]:
    """(attempt, delay, model of the next attempt, error kind) of each retry event."""
    published = turn.fakes.of("publish_retry", PublishRetryInput)
    return [(r.attempt, r.delay_ms, r.model, r.error.kind) for r in published]


async def _step_summaries(turn: Turn) -> list[str]:
    history = await turn.handle().fetch_history()
    summaries = [
        json.loads(event.user_metadata.summary.data)
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
        and event.user_metadata.HasField("summary")
    ]
    return [s for s in summaries if " step " in s]


async def test_three_overloaded_attempts_move_the_step_to_the_next_model(turn: Turn) -> None:
    turn.fakes.plan = FALLBACKS
    turn.fakes.stream_script = [model_error() for _ in range(3)]
    await turn.run()
    assert _retries(turn) == [
        (1, 1000, None, "overloaded"),  # the chat's own model: no model named
        (2, 2000, None, "overloaded"),
        (3, 1000, "openai/gpt", "overloaded"),
    ]
    assert _streams(turn) == [(0, 1, 0), (0, 2, 0), (0, 3, 0), (0, 4, 1)]
    assert await _step_summaries(turn) == [
        "model step 0",  # before the plan: the ChatModel search attribute (unset here)
        "fake/model step 0",
        "fake/model step 0",
        "openai/gpt step 0",
    ]
    (finish,) = turn.fakes.finishes()
    assert (finish.status, finish.error) == ("waiting", None)


async def test_the_turn_stays_on_the_fallback_and_its_attempts_start_anew(turn: Turn) -> None:
    call = ToolCallRef(id="call-1", name="current_time")
    turn.fakes.plan = FALLBACKS
    turn.fakes.stream_script = [
        calls_step(call),
        *[model_error() for _ in range(3)],
        model_error("rate_limit", retry_after_ms=5_000),  # on the fallback: its own backoff
        text_step(),
    ]
    await turn.run()
    assert _streams(turn) == [(0, 1, 0), (1, 1, 0), (1, 2, 0), (1, 3, 0), (1, 4, 1), (1, 5, 1)]
    assert _retries(turn)[2:] == [
        (3, 1000, "openai/gpt", "overloaded"),
        (4, 5000, "openai/gpt", "rate_limit"),
    ]


async def test_a_model_the_provider_does_not_know_is_left_at_once(turn: Turn) -> None:
    turn.fakes.plan = FALLBACKS
    not_found = model_error("config", retryable=False).model_copy(update={"status_code": 404})
    turn.fakes.stream_script = [not_found]
    await turn.run()
    assert _retries(turn) == [(1, 1000, "openai/gpt", "config")]
    assert _streams(turn) == [(0, 1, 0), (0, 2, 1)]
    assert turn.fakes.finishes()[0].error is None


async def test_the_last_model_retries_as_a_chat_without_fallbacks_does(turn: Turn) -> None:
    turn.fakes.plan = {**FALLBACKS, "fallbacks": [GPT]}
    errors = 3 + DEFAULT_MAX_MODEL_ATTEMPTS
    turn.fakes.stream_script = [model_error(message=f"#{n}") for n in range(errors)]
    await turn.run()
    streams = _streams(turn)
    assert [index for _, _, index in streams] == [0] * 3 + [1] * DEFAULT_MAX_MODEL_ATTEMPTS
    (finish,) = turn.fakes.finishes()
    assert finish.error is not None and finish.error.message == f"#{errors - 1}"


async def test_the_model_index_survives_continue_as_new(turn: Turn) -> None:
    turn.fakes.plan = {**FALLBACKS, "max_steps": STEPS_PER_RUN + 5}
    tool_steps = [
        calls_step(ToolCallRef(id=f"call-{n}", name="current_time")) for n in range(STEPS_PER_RUN)
    ]
    turn.fakes.stream_script = [*[model_error() for _ in range(3)], *tool_steps, text_step()]
    await turn.run()
    steps = turn.fakes.of("stream_model_step", StreamStepInput)
    assert [s.step for s in steps[3:]] == list(range(STEPS_PER_RUN + 1))
    assert {s.model_index for s in steps[3:]} == {1}, "the new run streams from the fallback"
    assert await _step_summaries(turn) == ["openai/gpt step 100"], "the last run's one step"


async def test_a_prompt_too_long_moves_to_a_larger_window_instead_of_compacting(
    turn: Turn,
) -> None:
    turn.fakes.plan = FALLBACKS
    too_long = model_error("context_exceeded", retryable=False)
    turn.fakes.stream_script = [too_long, too_long]  # 200k, then 400k: the third is 100k
    await turn.run()
    assert _retries(turn) == [(1, 1000, "openai/gpt", "context_exceeded")]
    assert _streams(turn) == [(0, 1, 0), (0, 2, 1), (0, 1, 1)]
    (compacted,) = turn.fakes.of("compact_context", CompactInput)
    assert compacted.model_index == 1, "the fallback the turn is on writes the summary"
