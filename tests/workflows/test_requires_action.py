"""Client-executed (dynamic) tools: requires_action, validated submissions, expiry, interrupt."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from turn_fakes import Block, Turn, calls_step, text_step

from workflows.chat_turn import ChatTurn
from workflows.controls import INVALID_TOOL_RESULTS, NOT_AWAITING_TOOL_RESULTS
from workflows.payloads import (
    ExecuteToolInput,
    FinishTurnInput,
    RecordToolResultsInput,
    SetStatusInput,
    StageToolResultsInput,
    StreamStepInput,
    SubmittedToolResult,
    SubmitToolResultsInput,
    ToolCallRef,
)
from workflows.tool_batch import INTERRUPTED_RESULT, expired_result

ASK = ToolCallRef(id="call-ask", name="ask_user", kind="dynamic")
PICK = ToolCallRef(id="call-pick", name="pick_file", kind="dynamic")
CLOCK = ToolCallRef(id="call-clock", name="current_time")


async def _requires_action(turn: Turn, *calls: ToolCallRef, timeout_s: int = 600) -> None:
    turn.fakes.plan = {"action_timeout_s": timeout_s}
    turn.fakes.stream_script = [calls_step(*calls), text_step()]
    await turn.send("turn-1")
    await turn.history_has("timer_started")  # status set; waiting for the client or expiry


async def _submit(turn: Turn, *ids: str) -> None:
    results = [SubmittedToolResult(tool_call_id=i, output=f"answer {i}") for i in ids]
    # The SDK types an async handler's result as a coroutine; the value is unused.
    _accepted = await turn.handle().execute_update(
        ChatTurn.submit_tool_results, SubmitToolResultsInput(results=results)
    )


async def _rejection(turn: Turn, *ids: str) -> ApplicationError:
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await _submit(turn, *ids)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


def _finish(turn: Turn) -> FinishTurnInput:
    (finish,) = turn.fakes.finishes()
    return finish


async def test_a_dynamic_call_enters_requires_action_and_waits(turn: Turn) -> None:
    await _requires_action(turn, ASK)
    (status,) = turn.fakes.of("set_status", SetStatusInput)
    assert (status.status, status.step, status.pending) == ("requires_action", 0, [ASK])
    assert status.turn_id == "turn-1" and status.expires_at is not None
    state = await turn.handle().query(ChatTurn.state)
    assert state.status == "requires_action"
    assert state.pending_tool_calls == [ASK]
    assert turn.fakes.calls["execute_tool_call"] == [], "the worker never runs a dynamic call"
    assert turn.fakes.finishes() == []


@pytest.mark.parametrize(
    "ids",
    [(), ("call-ask",), ("call-ask", "call-pick", "call-other"), ("call-ask", "call-ask")],
    ids=["none", "missing", "unknown", "duplicate"],
)
async def test_submissions_that_dont_answer_exactly_the_pending_calls_are_rejected(
    turn: Turn, ids: tuple[str, ...]
) -> None:
    await _requires_action(turn, ASK, PICK)
    cause = await _rejection(turn, *ids)
    assert cause.type == INVALID_TOOL_RESULTS
    assert cause.details[0] == {"expected": ["call-ask", "call-pick"], "received": list(ids)}
    assert turn.fakes.calls["stage_tool_results"] == [], "a rejected update has no effect"
    assert (await turn.handle().query(ChatTurn.state)).status == "requires_action"


async def test_the_right_results_are_staged_recorded_and_the_turn_goes_on(turn: Turn) -> None:
    await _requires_action(turn, ASK, PICK)
    await _submit(turn, "call-pick", "call-ask")  # any order

    cause = await _rejection(turn, "call-ask", "call-pick")
    assert cause.type == NOT_AWAITING_TOOL_RESULTS, "the first submission wins"

    await turn.finished()
    (staged,) = turn.fakes.of("stage_tool_results", StageToolResultsInput)
    assert [r.tool_call_id for r in staged.results] == ["call-pick", "call-ask"]
    assert staged.calls == [ASK, PICK]
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert (recorded.calls, recorded.errors, recorded.part) == ([ASK, PICK], {}, "client-tools")
    statuses = turn.fakes.of("set_status", SetStatusInput)
    assert [(s.status, s.pending) for s in statuses] == [
        ("requires_action", [ASK, PICK]),
        ("running", []),
    ]
    streams = turn.fakes.of("stream_model_step", StreamStepInput)
    assert [s.step for s in streams] == [0, 1], "the model sees the results in step 1"
    assert [s.opens_response for s in streams] == [True, True], "the client's answers open one"
    assert _finish(turn).status == "waiting" and _finish(turn).error is None


async def test_results_while_the_turn_runs_without_waiting_are_refused(turn: Turn) -> None:
    streaming = Block()
    turn.fakes.stream_script = [streaming]
    await turn.send("turn-1")
    await turn.fakes.reached("stream_model_step")
    cause = await _rejection(turn, "call-ask")
    assert cause.type == NOT_AWAITING_TOOL_RESULTS
    streaming.release.set()
    await turn.finished()
    assert turn.fakes.calls["stage_tool_results"] == []


async def test_an_unanswered_wait_expires_after_the_action_timeout(turn: Turn) -> None:
    await _requires_action(turn, ASK, PICK, timeout_s=600)
    (status,) = turn.fakes.of("set_status", SetStatusInput)
    await turn.finished()  # ten minutes pass at once

    assert status.expires_at is not None
    expired = expired_result(status.expires_at)
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert recorded.part == "client-tools" and recorded.calls == [ASK, PICK]
    assert recorded.errors == {"call-ask": expired, "call-pick": expired}
    finish = _finish(turn)
    assert finish.status == "error"
    assert finish.error is not None and finish.error.kind == "timeout"
    assert len(turn.fakes.calls["stream_model_step"]) == 1, "no step after the expiry"
    assert turn.fakes.calls["stage_tool_results"] == []


async def test_the_wait_lasts_the_chats_action_timeout(turn: Turn) -> None:
    await _requires_action(turn, ASK, timeout_s=90)
    (status,) = turn.fakes.of("set_status", SetStatusInput)
    await turn.finished()
    assert status.expires_at is not None
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert recorded.errors == {"call-ask": expired_result(status.expires_at)}
    history = await turn.handle().fetch_history()
    timers = [
        e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        for e in history.events
        if e.HasField("timer_started_event_attributes")
    ]
    assert timers == [timedelta(seconds=90)]


async def test_an_interrupt_during_the_wait_answers_the_calls_and_the_chat_waits(
    turn: Turn,
) -> None:
    await _requires_action(turn, ASK)
    await turn.interrupt()
    await turn.finished()
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert recorded.part == "client-tools"
    assert recorded.errors == {"call-ask": INTERRUPTED_RESULT}
    assert _finish(turn) == FinishTurnInput(
        chat_id=turn.chat_id, turn_id="turn-1", status="waiting", error=None
    )
    assert len(turn.fakes.calls["stream_model_step"]) == 1


async def test_built_in_calls_run_and_are_recorded_before_the_client_is_asked(
    turn: Turn,
) -> None:
    await _requires_action(turn, CLOCK, ASK)
    (executed,) = turn.fakes.of("execute_tool_call", ExecuteToolInput)
    assert executed.call == CLOCK and executed.step == 0
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert (recorded.calls, recorded.errors, recorded.part) == ([CLOCK], {}, "tools")
    (status,) = turn.fakes.of("set_status", SetStatusInput)
    assert status.pending == [ASK], "only the dynamic call is the client's"

    await _submit(turn, "call-ask")
    await turn.finished()
    parts = [r.part for r in turn.fakes.of("record_tool_results", RecordToolResultsInput)]
    assert parts == ["tools", "client-tools"]


async def test_only_a_step_after_the_clients_input_opens_a_response(turn: Turn) -> None:
    """A forced tool choice binds such steps only (`chatd.tool_use`): not the one after a
    tool the worker ran, which would let a forced model loop on its tools."""
    turn.fakes.stream_script = [calls_step(CLOCK), calls_step(ASK), text_step()]
    await turn.send("turn-1")
    await turn.history_has("timer_started")
    await _submit(turn, "call-ask")
    await turn.finished()
    streams = turn.fakes.of("stream_model_step", StreamStepInput)
    assert [(s.step, s.opens_response) for s in streams] == [(0, True), (1, False), (2, True)]
