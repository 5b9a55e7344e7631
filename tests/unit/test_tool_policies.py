"""Tool policies of a step (workflows.decide) and the requires_action handshake (controls)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from temporalio.exceptions import ApplicationError

from workflows.controls import (
    INVALID_TOOL_APPROVALS,
    INVALID_TOOL_RESULTS,
    NOT_AWAITING_TOOL_APPROVALS,
    NOT_AWAITING_TOOL_RESULTS,
    TurnControls,
)
from workflows.payloads import (
    SubmittedToolResult,
    SubmitToolApprovalsInput,
    SubmitToolResultsInput,
    ToolApproval,
    ToolCallRef,
)
from workflows.tool_batch import (
    INTERRUPTED_RESULT,
    ToolPlan,
    exclusive_violation,
    expired_result,
    stops_turn,
)

CLOCK = ToolCallRef(id="c1", name="current_time")
READ = ToolCallRef(id="c2", name="read_file")
EXECUTE = ToolCallRef(id="c3", name="execute", exclusive=True)
DEPLOY = ToolCallRef(id="c4", name="deploy", exclusive=True)
HANDOFF = ToolCallRef(id="c5", name="handoff", stop_after=True)
ASK = ToolCallRef(id="c6", name="ask_user", kind="dynamic")
PICK = ToolCallRef(id="c7", name="pick_file", kind="dynamic")
MYSTERY = ToolCallRef(id="c8", name="no_such_tool", kind="unknown")
WRITE = ToolCallRef(id="c10", name="write_file", policy="ask")
BANNED = ToolCallRef(id="c11", name="execute", policy="deny")
NOTE = ToolCallRef(id="c12", name="notes__write", kind="mcp", policy="ask")
EXPIRES = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)


def _alone(name: str) -> str:
    return (
        f"{name} must be called alone, without other tools in the same batch. "
        f"Retry with only the {name} call."
    )


def _skipped(first: str) -> str:
    return (
        f"this tool was skipped because {first} must run alone in its batch. "
        f"Retry your tool calls without {first}, or call {first} separately first."
    )


# exclusive_violation


@pytest.mark.parametrize(
    "calls",
    [[], [CLOCK], [CLOCK, READ], [EXECUTE], [DEPLOY], [ASK, CLOCK]],
    ids=["empty", "one", "no-exclusive", "exclusive-alone", "other-exclusive-alone", "mixed"],
)
def test_no_violation_without_an_exclusive_tool_in_company(calls: list[ToolCallRef]) -> None:
    assert exclusive_violation(calls) == {}


def test_an_exclusive_tool_with_others_fails_every_call_of_the_batch() -> None:
    assert exclusive_violation([CLOCK, EXECUTE, READ]) == {
        "c1": _skipped("execute"),
        "c3": _alone("execute"),
        "c2": _skipped("execute"),
    }


def test_the_exact_messages_the_model_sees() -> None:
    errors = exclusive_violation([EXECUTE, CLOCK])
    assert errors["c3"] == (
        "execute must be called alone, without other tools in the same batch. "
        "Retry with only the execute call."
    )
    assert errors["c1"] == (
        "this tool was skipped because execute must run alone in its batch. "
        "Retry your tool calls without execute, or call execute separately first."
    )


def test_with_two_exclusive_tools_each_is_told_to_run_alone_and_others_name_the_first() -> None:
    assert exclusive_violation([CLOCK, DEPLOY, EXECUTE]) == {
        "c1": _skipped("deploy"),
        "c4": _alone("deploy"),
        "c3": _alone("execute"),
    }


def test_two_calls_of_the_same_exclusive_tool_are_a_violation() -> None:
    again = EXECUTE.model_copy(update={"id": "c9"})
    assert exclusive_violation([EXECUTE, again]) == {
        "c3": _alone("execute"),
        "c9": _alone("execute"),
    }


def test_dynamic_and_unknown_calls_in_an_exclusive_batch_are_skipped_too() -> None:
    assert exclusive_violation([ASK, EXECUTE, MYSTERY]) == {
        "c6": _skipped("execute"),
        "c3": _alone("execute"),
        "c8": _skipped("execute"),
    }


# ToolPlan


def test_a_plan_sorts_calls_by_policy_keeping_call_order_within_each() -> None:
    plan = ToolPlan([ASK, WRITE, CLOCK, BANNED, MYSTERY, NOTE, PICK])
    assert plan.run_now == [CLOCK, MYSTERY], "unknown tools go to the worker (Tool not found)"
    assert plan.denied == [BANNED]
    assert plan.immediate == [CLOCK, BANNED, MYSTERY], "answered before any wait"
    assert plan.asked == [WRITE, NOTE]
    assert plan.client == [ASK, PICK], "the policy does not apply to client tools"
    assert plan.waiting == [ASK, WRITE, NOTE, PICK], "one wait, in call order"


@pytest.mark.parametrize(
    "calls", [[], [CLOCK], [ASK], [WRITE], [BANNED]], ids=["empty", "auto", "client", "ask", "deny"]
)
def test_each_call_lands_in_exactly_one_list(calls: list[ToolCallRef]) -> None:
    plan = ToolPlan(calls)
    lists = [plan.run_now, plan.denied, plan.asked, plan.client]
    assert sorted(c.id for part in lists for c in part) == sorted(c.id for c in calls)


# stops_turn


def test_a_successful_stop_after_call_stops_the_turn() -> None:
    assert stops_turn([CLOCK, HANDOFF], failed=set())
    assert stops_turn([CLOCK, HANDOFF], failed={"c1"}), "another call's failure doesn't matter"


def test_a_failed_stop_after_call_does_not_stop_the_turn() -> None:
    assert not stops_turn([CLOCK, HANDOFF], failed={"c5"})


def test_without_a_stop_after_call_the_turn_goes_on() -> None:
    assert not stops_turn([CLOCK, READ], failed=set())
    assert not stops_turn([], failed=set())


def test_any_successful_stop_after_call_is_enough() -> None:
    other = ToolCallRef(id="c9", name="finish", stop_after=True)
    assert stops_turn([HANDOFF, other], failed={"c5"})
    assert not stops_turn([HANDOFF, other], failed={"c5", "c9"})


# expired_result


def test_the_expiry_result_names_the_deadline_to_the_second() -> None:
    assert expired_result(EXPIRES) == (
        "this tool call was not answered before the wait expired at 2026-01-02T03:04:05+00:00"
    )


def test_the_interrupted_result_text() -> None:
    assert INTERRUPTED_RESULT == "tool call was interrupted before it produced a result"


# TurnControls.validate_submission


def _submission(*ids: str) -> SubmitToolResultsInput:
    return SubmitToolResultsInput(
        results=[SubmittedToolResult(tool_call_id=i, output="ok") for i in ids]
    )


def _waiting(*calls: ToolCallRef) -> TurnControls:
    controls = TurnControls()
    asked = [c for c in calls if c.kind != "dynamic"]
    controls.await_answers(asked, [c for c in calls if c.kind == "dynamic"], EXPIRES)
    return controls


def _refusal(controls: TurnControls, submission: SubmitToolResultsInput) -> ApplicationError:
    with pytest.raises(ApplicationError) as refused:
        controls.validate_results(submission)
    return refused.value


@pytest.mark.parametrize("ids", [("c6", "c7"), ("c7", "c6")], ids=["in-order", "any-order"])
def test_a_submission_answering_exactly_the_pending_calls_is_valid(ids: tuple[str, ...]) -> None:
    _waiting(ASK, PICK).validate_results(_submission(*ids))


@pytest.mark.parametrize(
    "ids",
    [(), ("c6",), ("c6", "c7", "c1"), ("c6", "c6", "c7"), ("c6", "c6"), ("c1", "c2")],
    ids=["none", "missing", "extra", "duplicate", "duplicate-instead-of-missing", "unknown"],
)
def test_missing_extra_or_duplicate_ids_are_invalid(ids: tuple[str, ...]) -> None:
    refusal = _refusal(_waiting(ASK, PICK), _submission(*ids))
    assert refusal.type == INVALID_TOOL_RESULTS
    assert refusal.details == ({"expected": ["c6", "c7"], "received": list(ids)},)
    assert refusal.message == (
        "tool results must answer each pending call exactly once: "
        f"expected ['c6', 'c7'], received {list(ids)}"
    )


def test_a_submission_when_nothing_waits_is_not_awaited() -> None:
    refusal = _refusal(TurnControls(), _submission())
    assert refusal.type == NOT_AWAITING_TOOL_RESULTS
    assert refusal.message == "the chat is not waiting for tool results"


def test_results_are_not_awaited_when_only_approvals_wait() -> None:
    assert _refusal(_waiting(WRITE), _submission("c10")).type == NOT_AWAITING_TOOL_RESULTS


def test_after_a_submission_was_accepted_the_next_is_not_awaited() -> None:
    controls = _waiting(ASK)
    controls.validate_results(_submission("c6"))
    controls.client.accepted = True  # what the update handler does first
    assert _refusal(controls, _submission("c6")).type == NOT_AWAITING_TOOL_RESULTS


# TurnControls.validate_approvals


def _approvals(*decisions: dict[str, object]) -> SubmitToolApprovalsInput:
    return SubmitToolApprovalsInput(decisions=[ToolApproval.model_validate(d) for d in decisions])


def _approval_refusal(
    controls: TurnControls, submission: SubmitToolApprovalsInput
) -> ApplicationError:
    with pytest.raises(ApplicationError) as refused:
        controls.validate_approvals(submission)
    return refused.value


def test_approvals_answering_each_asked_call_once_are_valid() -> None:
    controls = _waiting(WRITE, NOTE, ASK)
    controls.validate_approvals(
        _approvals(
            {"tool_call_id": "c12", "decision": "deny", "message": "no"},
            {"tool_call_id": "c10", "decision": "approve", "arguments": {"path": "a"}},
        )
    )


@pytest.mark.parametrize(
    "decisions",
    [
        [{"tool_call_id": "c10", "decision": "approve"}],
        [
            {"tool_call_id": "c10", "decision": "approve"},
            {"tool_call_id": "c12", "decision": "deny"},
            {"tool_call_id": "c6", "decision": "deny"},
        ],
        [
            {"tool_call_id": "c10", "decision": "deny", "remember": True},
            {"tool_call_id": "c12", "decision": "deny"},
        ],
        [
            {"tool_call_id": "c10", "decision": "approve", "message": "fine"},
            {"tool_call_id": "c12", "decision": "deny"},
        ],
    ],
    ids=["missing", "a-client-call", "remember-a-denial", "message-on-approval"],
)
def test_malformed_approvals_are_invalid(decisions: list[dict[str, object]]) -> None:
    refusal = _approval_refusal(_waiting(WRITE, NOTE, ASK), _approvals(*decisions))
    assert refusal.type == INVALID_TOOL_APPROVALS


def test_approvals_are_not_awaited_when_only_client_calls_wait() -> None:
    refusal = _approval_refusal(
        _waiting(ASK), _approvals({"tool_call_id": "c6", "decision": "approve"})
    )
    assert refusal.type == NOT_AWAITING_TOOL_APPROVALS


def test_after_the_wait_ended_submissions_are_not_awaited() -> None:
    controls = _waiting(ASK)
    controls.stop_awaiting()
    assert (controls.pending, controls.expires_at) == ([], None)
    assert _refusal(controls, _submission("c6")).type == NOT_AWAITING_TOOL_RESULTS


def test_not_awaiting_wins_over_invalid_ids() -> None:
    assert _refusal(TurnControls(), _submission("zz")).type == NOT_AWAITING_TOOL_RESULTS


def test_a_new_wait_resets_the_handshake() -> None:
    controls = _waiting(ASK, WRITE)
    controls.client.accepted = controls.client.staged = True
    controls.approvals.accepted = controls.approvals.staged = True
    controls.stop_awaiting()
    controls.await_answers([], [PICK], EXPIRES)
    assert (controls.client.accepted, controls.client.staged) == (False, False)
    assert controls.pending == [PICK] and not controls.approvals.calls
    assert controls.expires_at == EXPIRES
    controls.validate_results(_submission("c7"))
    assert _refusal(controls, _submission("c6")).type == INVALID_TOOL_RESULTS
