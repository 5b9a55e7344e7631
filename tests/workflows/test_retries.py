"""Model errors: the workflow retries on durable timers (1 s, 2 s, 4 s ... or Retry-After)."""

from __future__ import annotations

import itertools
from datetime import timedelta

from temporalio.exceptions import ApplicationError
from turn_fakes import Block, Turn, model_error, text_step

from workflows.chat_turn import ChatTurn
from workflows.decide import STEPS_PER_RUN
from workflows.model_retries import DEFAULT_MAX_MODEL_ATTEMPTS
from workflows.payloads import (
    FinishTurnInput,
    PublishRetryInput,
    StreamStepInput,
)


def _retries(turn: Turn) -> list[tuple[int, int]]:
    return [(r.attempt, r.delay_ms) for r in turn.fakes.of("publish_retry", PublishRetryInput)]


def _finish(turn: Turn) -> FinishTurnInput:
    (finish,) = turn.fakes.finishes()
    return finish


async def test_a_text_turn_begins_streams_one_step_and_finishes_waiting(turn: Turn) -> None:
    await turn.run("turn-1")
    assert turn.fakes.begun() == ["turn-1"]
    (step,) = turn.fakes.of("stream_model_step", StreamStepInput)
    assert step.run_id, "the run beginning the turn names itself (a message sent twice)"
    assert step.model_copy(update={"run_id": None}) == StreamStepInput(
        chat_id=turn.chat_id,
        turn_id="turn-1",
        step=0,
        attempt=1,
        begin=True,
        may_finish=True,
        opens_response=True,
        steps_before=STEPS_PER_RUN,
    )
    assert _finish(turn) == FinishTurnInput(
        chat_id=turn.chat_id, turn_id="turn-1", status="waiting", error=None
    )
    # The one step began and finished the turn: no local activity on its critical path.
    assert turn.fakes.calls["begin_turn"] == [] and turn.fakes.calls["finish_turn"] == []
    assert turn.fakes.calls["publish_retry"] == []
    state = await turn.handle().query(ChatTurn.state)
    assert (state.status, state.turn_id, state.retry) == ("waiting", "turn-1", None)


async def test_retryable_errors_back_off_exponentially_then_the_step_succeeds(turn: Turn) -> None:
    turn.fakes.stream_script = [model_error(message=f"overloaded #{n}") for n in range(4)]
    await turn.run()
    assert _retries(turn) == [(1, 1000), (2, 2000), (3, 4000), (4, 8000)]
    streams = turn.fakes.of("stream_model_step", StreamStepInput)
    assert [(s.step, s.attempt) for s in streams] == [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5)]
    published = turn.fakes.of("publish_retry", PublishRetryInput)
    assert [p.error.message for p in published] == [f"overloaded #{n}" for n in range(4)]
    for retry in published:
        assert retry.error.kind == "overloaded" and retry.error.retryable
    assert _finish(turn).status == "waiting" and _finish(turn).error is None


async def test_a_retry_after_larger_than_the_exponential_delay_wins(turn: Turn) -> None:
    turn.fakes.stream_script = [
        model_error("rate_limit", retry_after_ms=7_500),
        model_error(),
        model_error(),
        model_error("rate_limit", retry_after_ms=100),  # smaller than 8 s: ignored
    ]
    await turn.run()
    assert _retries(turn) == [(1, 7500), (2, 2000), (3, 4000), (4, 8000)]
    first = turn.fakes.of("publish_retry", PublishRetryInput)[0]
    assert first.error.retry_after_ms == 7_500


async def test_the_turn_fails_with_the_last_error_after_the_maximum_attempts(turn: Turn) -> None:
    turn.fakes.stream_script = [
        model_error(message=f"overloaded #{n}") for n in range(1, DEFAULT_MAX_MODEL_ATTEMPTS + 1)
    ]
    await turn.run()
    assert DEFAULT_MAX_MODEL_ATTEMPTS == 25
    expected = [1000, 2000, 4000, 8000, 16000, 32000] + [60000] * 18
    assert _retries(turn) == list(enumerate(expected, start=1))
    streams = turn.fakes.of("stream_model_step", StreamStepInput)
    assert [s.attempt for s in streams] == list(range(1, 26))
    finish = _finish(turn)
    assert finish.status == "error"
    assert finish.error == model_error(message="overloaded #25")
    state = await turn.handle().query(ChatTurn.state)
    assert (state.status, state.retry) == ("error", None)


async def test_a_non_retryable_error_finishes_the_turn_at_once(turn: Turn) -> None:
    auth = model_error("auth", retryable=False, message="invalid x-api-key")
    turn.fakes.stream_script = [auth]
    await turn.run()
    assert turn.fakes.calls["publish_retry"] == []
    assert len(turn.fakes.calls["stream_model_step"]) == 1
    assert _finish(turn) == FinishTurnInput(
        chat_id=turn.chat_id, turn_id="turn-1", status="error", error=auth
    )


async def test_an_unclassified_activity_failure_is_retried_by_temporal_not_the_workflow(
    turn: Turn,
) -> None:
    turn.fakes.stream_script = [RuntimeError("database blip"), ApplicationError("again")]
    await turn.run()
    assert turn.fakes.calls["publish_retry"] == []
    streams = turn.fakes.of("stream_model_step", StreamStepInput)
    assert [s.attempt for s in streams] == [1, 1, 1], "one workflow-level attempt"
    assert turn.fakes.stream_attempts == [1, 2, 3], "three activity-level attempts"
    assert _finish(turn).status == "waiting"


async def test_the_state_query_shows_the_backoff_in_progress(turn: Turn) -> None:
    error = model_error("rate_limit", retry_after_ms=90_000)
    turn.fakes.stream_script = [error, text_step()]
    await turn.send("turn-1")
    await turn.fakes.reached("publish_retry")
    (published,) = turn.fakes.of("publish_retry", PublishRetryInput)
    assert published.delay_ms == 90_000
    state = await turn.handle().query(ChatTurn.state)
    assert state.status == "running" and state.step == 0
    assert state.retry is not None
    assert state.retry.attempt == 1
    assert state.retry.error == error
    assert state.retry.next_attempt_at == published.retrying_at
    assert len(turn.fakes.calls["stream_model_step"]) == 1, "still backing off"

    await turn.finished()  # time skips past the 90 s timer
    assert len(turn.fakes.calls["stream_model_step"]) == 2
    assert (await turn.handle().query(ChatTurn.state)).retry is None


async def test_an_interrupt_cuts_the_backoff_short_and_leaves_the_chat_waiting(
    turn: Turn,
) -> None:
    turn.fakes.stream_script = [model_error(retry_after_ms=600_000)]
    await turn.send("turn-1")
    await turn.fakes.reached("publish_retry")
    await turn.interrupt()
    await turn.finished()
    assert len(turn.fakes.calls["stream_model_step"]) == 1, "no attempt after the interrupt"
    assert _finish(turn).status == "waiting" and _finish(turn).error is None
    assert (await turn.handle().query(ChatTurn.state)).status == "waiting"


async def test_after_an_interrupted_backoff_the_state_shows_no_retry(turn: Turn) -> None:
    turn.fakes.stream_script = [model_error(retry_after_ms=600_000)]
    await turn.send("turn-1")
    await turn.fakes.reached("publish_retry")
    await turn.interrupt()
    await turn.finished()
    state = await turn.handle().query(ChatTurn.state)
    assert state.status == "waiting"
    assert state.retry is None


async def test_an_interrupt_mid_stream_keeps_the_partial_step_and_ends_the_turn(
    turn: Turn,
) -> None:
    turn.fakes.stream_script = [Block()]
    await turn.send("turn-1")
    await turn.fakes.reached("stream_model_step")
    await turn.interrupt()
    await turn.finished()
    assert len(turn.fakes.calls["stream_model_step"]) == 1
    assert turn.fakes.calls["record_tool_results"] == []
    assert _finish(turn).status == "waiting"


async def test_the_backoff_timer_is_durable_workflow_time(turn: Turn) -> None:
    """Ten minutes of backoff pass instantly on the time-skipping server."""
    turn.retry_deadline_s = 3600
    turn.fakes.stream_script = [model_error(retry_after_ms=600_000)] * 3
    await turn.run()
    assert _retries(turn) == [(1, 600_000), (2, 600_000), (3, 600_000)]
    published = turn.fakes.of("publish_retry", PublishRetryInput)
    gaps = [b.retrying_at - a.retrying_at for a, b in itertools.pairwise(published)]
    assert all(gap >= timedelta(minutes=10) for gap in gaps)
