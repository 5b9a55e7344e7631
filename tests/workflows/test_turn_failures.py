"""A turn always ends: whatever an activity does, the run completes with the turn finished."""

from __future__ import annotations

from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from turn_fakes import Block, Turn, calls_step, model_error, text_step

from workflows.chat_turn import ChatTurn
from workflows.payloads import (
    FinishTurnInput,
    RecordToolResultsInput,
    StreamStepInput,
    StreamStepResult,
    ToolCallRef,
)


async def _ended(turn: Turn) -> FinishTurnInput:
    """The turn's one finish; the run completed (never Failed) and says so in its state."""
    (finish,) = turn.fakes.finishes()
    described = await turn.handle().describe()
    assert described.status == WorkflowExecutionStatus.COMPLETED
    assert (await turn.handle().query(ChatTurn.state)).status == finish.status
    return finish


async def test_a_compaction_that_fails_ends_the_turn_with_its_error(turn: Turn) -> None:
    turn.fakes.plan = {"compact_at_tokens": 100}
    turn.fakes.stream_script = [StreamStepResult(message_id=1, input_tokens=150)]
    turn.fakes.compact_script = [model_error("invalid_request", retryable=False)]
    await turn.run()
    finish = await _ended(turn)
    assert finish.status == "error" and finish.error is not None
    assert finish.error.kind == "invalid_request"
    assert len(turn.fakes.calls["compact_context"]) == 1  # not retried: it can't succeed


async def test_a_compaction_that_keeps_raising_gives_up_as_internal(turn: Turn) -> None:
    """An activity's own bug surfaces, after its attempts, as a non-retryable error."""
    turn.fakes.plan = {"compact_at_tokens": 100}
    turn.fakes.stream_script = [StreamStepResult(message_id=1, input_tokens=150)]
    turn.fakes.compact_script = [ApplicationError("KeyError: 'x'", non_retryable=True)]
    await turn.run()
    finish = await _ended(turn)
    assert finish.error is not None and finish.error.kind == "internal"
    assert "KeyError" in finish.error.message


async def test_an_interrupt_cancels_a_running_compaction(turn: Turn) -> None:
    turn.fakes.plan = {"compact_at_tokens": 100}
    turn.fakes.stream_script = [StreamStepResult(message_id=1, input_tokens=150)]
    turn.fakes.compact_script = [Block()]
    await turn.send("turn-1")
    await turn.fakes.reached("compact_context")
    await turn.interrupt()
    await turn.finished()
    finish = await _ended(turn)
    assert (finish.status, finish.error) == ("waiting", None)
    assert len(turn.fakes.of("stream_model_step", StreamStepInput)) == 1  # no step after it


async def test_a_tool_activity_that_gives_up_is_an_error_result_and_the_turn_goes_on(
    turn: Turn,
) -> None:
    call = ToolCallRef(id="call-1", name="read_file")
    turn.fakes.stream_script = [calls_step(call), text_step()]
    turn.fakes.tool_script = {"call-1": ApplicationError("disk on fire", non_retryable=True)}
    await turn.run()
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert recorded.errors["call-1"].startswith("read_file could not be run:")
    assert "disk on fire" in recorded.errors["call-1"]
    assert len(turn.fakes.of("stream_model_step", StreamStepInput)) == 2
    assert (await _ended(turn)).status == "waiting"


async def test_a_model_step_that_fails_unclassified_ends_the_turn_as_internal(
    turn: Turn,
) -> None:
    turn.fakes.stream_script = [ApplicationError("boom", type="TypeError", non_retryable=True)]
    await turn.run()
    finish = await _ended(turn)
    assert finish.status == "error" and finish.error is not None
    assert finish.error.kind == "internal" and "boom" in finish.error.message


async def test_a_failing_local_activity_still_ends_the_turn(turn: Turn) -> None:
    """The workflow's catch-all: an error escaping a phase still reaches the one finish."""
    call = ToolCallRef(id="call-1", name="current_time")
    turn.fakes.stream_script = [calls_step(call), text_step()]

    async def broken(_: object) -> None:
        raise ApplicationError("record failed", non_retryable=True)

    turn.fakes.on_record_tool_results = broken
    await turn.run()
    finish = await _ended(turn)
    assert finish.status == "error" and finish.error is not None
    assert finish.error.kind == "internal" and "record failed" in finish.error.message


async def test_a_dependency_down_past_the_deadline_ends_the_turn_unavailable(
    turn: Turn,
) -> None:
    """Retryable errors stop at the turn's retry deadline, before their attempts run out."""
    turn.retry_deadline_s = 3
    turn.fakes.stream_script = [
        model_error("overloaded", message="connection refused") for _ in range(10)
    ]
    await turn.run()
    finish = await _ended(turn)
    assert finish.error is not None and finish.error.kind == "unavailable"
    assert "connection refused" in finish.error.message
    attempts = len(turn.fakes.of("stream_model_step", StreamStepInput))
    assert attempts == 2  # at 0 and 1 s: a third, after 2 s of backoff, would start at 3 s
