"""Approval waits: asked calls wait for a person, share one wait with client tools, expire."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from turn_fakes import Turn, calls_step, text_step

from workflows.chat_turn import ChatTurn
from workflows.controls import (
    INVALID_TOOL_APPROVALS,
    NOT_AWAITING_TOOL_APPROVALS,
    NOT_AWAITING_TOOL_RESULTS,
)
from workflows.payloads import (
    ExecuteToolInput,
    RecordToolResultsInput,
    SetStatusInput,
    StageToolDecisionsInput,
    SubmittedToolResult,
    SubmitToolApprovalsInput,
    SubmitToolResultsInput,
    ToolApproval,
    ToolCallRef,
)
from workflows.tool_batch import INTERRUPTED_RESULT, POLICY_DENIED, denied_by_person, expired_result

WRITE = ToolCallRef(id="call-write", name="write_file", policy="ask")
RUN = ToolCallRef(id="call-run", name="execute", policy="ask")
CLOCK = ToolCallRef(id="call-clock", name="current_time")
BANNED = ToolCallRef(id="call-banned", name="execute", policy="deny")
PICK = ToolCallRef(id="call-pick", name="pick_file", kind="dynamic")


async def _waiting(turn: Turn, *calls: ToolCallRef, timeout_s: int = 600) -> SetStatusInput:
    turn.fakes.plan = {"action_timeout_s": timeout_s}
    turn.fakes.stream_script = [calls_step(*calls), text_step()]
    await turn.send("turn-1")
    await turn.history_has("timer_started")
    (status,) = turn.fakes.of("set_status", SetStatusInput)
    return status


async def _decide(turn: Turn, *decisions: ToolApproval, decided_by: str = "ops") -> None:
    _accepted = await turn.handle().execute_update(
        ChatTurn.submit_tool_approvals,
        SubmitToolApprovalsInput(decisions=list(decisions), decided_by=decided_by),
    )


async def _refusal(turn: Turn, *decisions: ToolApproval) -> ApplicationError:
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await _decide(turn, *decisions)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


def _approve(call: ToolCallRef, **fields: object) -> ToolApproval:
    return ToolApproval.model_validate({"tool_call_id": call.id, "decision": "approve", **fields})


def _deny(call: ToolCallRef, **fields: object) -> ToolApproval:
    return ToolApproval.model_validate({"tool_call_id": call.id, "decision": "deny", **fields})


def _recorded(turn: Turn) -> list[RecordToolResultsInput]:
    return turn.fakes.of("record_tool_results", RecordToolResultsInput)


def _executed(turn: Turn) -> list[str]:
    return [i.call.id for i in turn.fakes.of("execute_tool_call", ExecuteToolInput)]


async def test_auto_calls_run_first_then_the_asked_calls_wait_for_a_person(turn: Turn) -> None:
    status = await _waiting(turn, CLOCK, WRITE, BANNED)
    assert (status.status, status.pending) == ("requires_action", [WRITE])
    assert _executed(turn) == ["call-clock"], "nothing asked or denied runs before a decision"
    (first,) = _recorded(turn)
    assert (first.part, first.calls) == ("tools", [CLOCK, BANNED])
    assert first.errors == {"call-banned": POLICY_DENIED}
    state = await turn.handle().query(ChatTurn.state)
    assert (state.status, state.pending_tool_calls) == ("requires_action", [WRITE])


async def test_an_approved_call_runs_after_the_approval_and_a_denied_one_never(
    turn: Turn,
) -> None:
    await _waiting(turn, WRITE, RUN)
    await _decide(turn, _deny(RUN, message="not on prod"), _approve(WRITE))
    await turn.finished()

    (staged,) = turn.fakes.of("stage_tool_decisions", StageToolDecisionsInput)
    assert staged.calls == [WRITE, RUN] and staged.approvals.decided_by == "ops"
    assert _executed(turn) == ["call-write"]
    (approved,) = _recorded(turn)
    assert (approved.part, approved.calls) == ("approved", [WRITE, RUN])
    assert approved.errors == {"call-run": denied_by_person("not on prod")}
    statuses = [s.status for s in turn.fakes.of("set_status", SetStatusInput)]
    assert statuses == ["requires_action", "running"]
    assert len(turn.fakes.calls["stream_model_step"]) == 2, "the model sees the results"


@pytest.mark.parametrize(
    "decisions",
    [
        [],
        [{"tool_call_id": "call-write", "decision": "approve"}],
        [{"tool_call_id": "call-write", "decision": "approve"}] * 2
        + [{"tool_call_id": "call-run", "decision": "deny"}],
        [
            {"tool_call_id": "call-write", "decision": "deny", "arguments": {"path": "x"}},
            {"tool_call_id": "call-run", "decision": "approve"},
        ],
        [
            {"tool_call_id": "call-write", "decision": "approve", "message": "ok"},
            {"tool_call_id": "call-run", "decision": "approve"},
        ],
    ],
    ids=["none", "missing", "duplicate", "deny-with-arguments", "approve-with-message"],
)
async def test_decisions_that_dont_answer_each_asked_call_once_are_refused(
    turn: Turn, decisions: list[dict[str, object]]
) -> None:
    await _waiting(turn, WRITE, RUN)
    cause = await _refusal(turn, *[ToolApproval.model_validate(d) for d in decisions])
    assert cause.type == INVALID_TOOL_APPROVALS
    assert turn.fakes.calls["stage_tool_decisions"] == [], "a refused update has no effect"
    await _decide(turn, _approve(WRITE), _approve(RUN))  # the wait is still open
    await turn.finished()
    assert sorted(_executed(turn)) == ["call-run", "call-write"]


async def test_the_first_accepted_decision_wins(turn: Turn) -> None:
    await _waiting(turn, WRITE)
    await _decide(turn, _deny(WRITE))
    cause = await _refusal(turn, _approve(WRITE))
    assert cause.type == NOT_AWAITING_TOOL_APPROVALS
    await turn.finished()
    assert _executed(turn) == []


async def test_arguments_the_tools_schema_refuses_leave_the_wait_open(turn: Turn) -> None:
    await _waiting(turn, WRITE)
    turn.fakes.refuse_decisions = ["arguments for call-write don't fit: path is required"]
    cause = await _refusal(turn, _approve(WRITE, arguments={"wrong": 1}))
    assert cause.type == INVALID_TOOL_APPROVALS
    assert "path is required" in cause.message
    await _decide(turn, _approve(WRITE, arguments={"path": "notes.md"}))
    await turn.finished()
    assert _executed(turn) == ["call-write"]


async def test_one_wait_holds_approvals_and_client_calls_each_answered_by_its_own_update(
    turn: Turn,
) -> None:
    status = await _waiting(turn, PICK, WRITE)
    assert status.pending == [PICK, WRITE], "both kinds, in call order"
    with pytest.raises(WorkflowUpdateFailedError):  # results don't answer approvals
        await turn.handle().execute_update(
            ChatTurn.submit_tool_results,
            SubmitToolResultsInput(
                results=[SubmittedToolResult(tool_call_id="call-write", output="x")]
            ),
        )
    await _decide(turn, _approve(WRITE))
    assert _executed(turn) == [], "an approved call waits until the client answered too"
    assert (await turn.handle().query(ChatTurn.state)).status == "requires_action"

    _results = await turn.handle().execute_update(
        ChatTurn.submit_tool_results,
        SubmitToolResultsInput(results=[SubmittedToolResult(tool_call_id="call-pick")]),
    )
    await turn.finished()
    assert _executed(turn) == ["call-write"]
    assert [(r.part, r.calls) for r in _recorded(turn)] == [
        ("client-tools", [PICK]),
        ("approved", [WRITE]),
    ]


async def test_client_results_are_refused_when_only_approvals_wait(turn: Turn) -> None:
    await _waiting(turn, WRITE)
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await turn.handle().execute_update(
            ChatTurn.submit_tool_results,
            SubmitToolResultsInput(results=[SubmittedToolResult(tool_call_id="call-write")]),
        )
    assert isinstance(failed.value.cause, ApplicationError)
    assert failed.value.cause.type == NOT_AWAITING_TOOL_RESULTS


async def test_an_unanswered_approval_expires_and_nothing_runs(turn: Turn) -> None:
    status = await _waiting(turn, WRITE, PICK, timeout_s=120)
    await _decide(turn, _approve(WRITE))  # approved, but the client never answers
    await turn.finished()
    assert status.expires_at is not None
    expired = expired_result(status.expires_at)
    assert _executed(turn) == []
    by_part = {r.part: r for r in _recorded(turn)}
    assert by_part["approved"].errors == {"call-write": expired}
    assert by_part["client-tools"].errors == {"call-pick": expired}
    (finish,) = turn.fakes.finishes()
    assert finish.status == "error" and finish.error is not None
    assert finish.error.kind == "timeout"


async def test_an_interrupt_during_the_wait_answers_every_pending_call(turn: Turn) -> None:
    await _waiting(turn, WRITE, RUN)
    await turn.interrupt()
    await turn.finished()
    (recorded,) = _recorded(turn)
    assert recorded.part == "approved"
    assert recorded.errors == {"call-write": INTERRUPTED_RESULT, "call-run": INTERRUPTED_RESULT}
    assert _executed(turn) == []
    (finish,) = turn.fakes.finishes()
    assert (finish.status, finish.error) == ("waiting", None)
