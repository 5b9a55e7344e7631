"""What the turn's signal and update handlers change, shared with the phases of the turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError
from temporalio.workflow import ActivityHandle

from workflows.constants import CHAT_STATUS
from workflows.payloads import (
    BudgetDecisionInput,
    PendingBudget,
    SubmitToolApprovalsInput,
    SubmitToolResultsInput,
    ToolApproval,
    ToolCallRef,
)

__all__ = [
    "INVALID_BUDGET_DECISION",
    "INVALID_TOOL_APPROVALS",
    "INVALID_TOOL_RESULTS",
    "NOT_AWAITING_BUDGET",
    "NOT_AWAITING_TOOL_APPROVALS",
    "NOT_AWAITING_TOOL_RESULTS",
    "Answers",
    "BudgetWait",
    "TurnControls",
]

T = TypeVar("T")

NOT_AWAITING_TOOL_RESULTS = "NotAwaitingToolResults"
"""Update rejection type: no client tool call waits for a result (HTTP 409)."""
INVALID_TOOL_RESULTS = "InvalidToolResults"
"""Update rejection type: missing, unknown or duplicate tool call ids (HTTP 400)."""
NOT_AWAITING_TOOL_APPROVALS = "NotAwaitingToolApprovals"
"""Update rejection type: no call waits for approval (HTTP 409)."""
INVALID_TOOL_APPROVALS = "InvalidToolApprovals"
"""Update rejection type: missing, unknown or duplicate ids, or arguments that don't fit
(HTTP 400)."""


INVALID_BUDGET_DECISION = "InvalidBudgetDecision"
"""Update rejection type: neither or both of a raise and a stop (HTTP 400)."""
NOT_AWAITING_BUDGET = "NotAwaitingBudget"
"""Update rejection type: the turn is not paused on a budget, or its pause was decided
(HTTP 409)."""


@dataclass
class BudgetWait:
    """A turn paused on a budget, and the one decision accepted for it."""

    pending: PendingBudget | None = None
    decision: BudgetDecisionInput | None = None
    """Accepted (the first one wins)."""
    staged: bool = False
    """The accepted decision is persisted (and a raise applied)."""


@dataclass
class Answers:
    """One kind of call a requires_action wait holds (client tools, or approvals), and
    whether its one accepted submission arrived."""

    calls: list[ToolCallRef] = field(default_factory=list)
    accepted: bool = False
    """A submission was accepted for this wait (the first one wins)."""
    staged: bool = False
    """The accepted submission is persisted."""

    @property
    def answered(self) -> bool:
        """Nothing of this kind waits, or its submission is persisted."""
        return not self.calls or self.staged

    def check(self, ids: list[str], not_awaiting: str, invalid: str, what: str) -> None:
        """Reject a submission unless it answers exactly these calls, first."""
        if not self.calls or self.accepted:
            raise ApplicationError(f"the chat is not waiting for {what}", type=not_awaiting)
        expected = [c.id for c in self.calls]
        if sorted(expected) != sorted(ids):
            raise ApplicationError(
                f"{what} must answer each pending call exactly once: "
                f"expected {expected}, received {ids}",
                {"expected": expected, "received": ids},
                type=invalid,
            )


@dataclass
class TurnControls:
    """Status, interrupt requests and the requires_action handshake of one run."""

    status: str = "running"
    interrupted: bool = False
    client: Answers = field(default_factory=Answers)
    """Dynamic calls waiting for client results (empty unless requires_action)."""
    approvals: Answers = field(default_factory=Answers)
    """Calls waiting for a person's approval (empty unless requires_action)."""
    decisions: dict[str, ToolApproval] = field(default_factory=dict)
    """The accepted approval decisions, by call id."""
    expires_at: datetime | None = None
    children_finished: int = 0
    """How many `child_finished` signals arrived: a subagent wait wakes when it changes."""
    budget: BudgetWait = field(default_factory=BudgetWait)
    """The budget a paused turn waits on (empty unless paused)."""

    @property
    def pending(self) -> list[ToolCallRef]:
        """Every call the wait holds: approvals first, then client calls."""
        return self.approvals.calls + self.client.calls

    def set_status(self, status: str) -> None:
        """Record the status for the `state` query and the ChatStatus search attribute."""
        self.status = status
        workflow.upsert_search_attributes([CHAT_STATUS.value_set(status)])

    def show_status(self, status: str) -> None:
        """`set_status`, without an upsert if ChatStatus says so already (the start set it)."""
        if workflow.info().typed_search_attributes.get(CHAT_STATUS) == status:
            self.status = status
        else:
            self.set_status(status)

    async def unless_interrupted(self, handle: ActivityHandle[T]) -> T:
        """The activity's result; an interrupt cancels it first (a model step then returns
        its partial step, a compaction raises)."""
        await workflow.wait_condition(lambda: handle.done() or self.interrupted)
        if not handle.done():
            handle.cancel()
        return await handle

    def await_answers(
        self, approvals: list[ToolCallRef], client: list[ToolCallRef], expires_at: datetime
    ) -> None:
        """Enter requires_action for these calls."""
        self.approvals = Answers(list(approvals))
        self.client = Answers(list(client))
        self.decisions = {}
        self.expires_at = expires_at

    @property
    def answered(self) -> bool:
        """Every kind of call the wait holds has its answer persisted."""
        return self.approvals.answered and self.client.answered

    def stop_awaiting(self) -> None:
        """Leave requires_action; later submissions are rejected."""
        self.approvals = Answers()
        self.client = Answers()
        self.expires_at = None

    def validate_budget(self, decision: BudgetDecisionInput) -> None:
        """Reject a decision unless the turn is paused on a budget and none came first; a
        decision is a raise (`add_usd`) or a stop, not both."""
        if self.budget.pending is None or self.budget.decision is not None:
            raise ApplicationError("the turn is not paused on a budget", type=NOT_AWAITING_BUDGET)
        if decision.stop == (decision.add_usd is not None):
            raise ApplicationError(
                "a budget decision is `add_usd` or `decision: stop`, one of them",
                type=INVALID_BUDGET_DECISION,
            )

    def validate_results(self, submission: SubmitToolResultsInput) -> None:
        """Reject client results unless they answer exactly the pending client calls, first."""
        ids = submission.call_ids
        self.client.check(ids, NOT_AWAITING_TOOL_RESULTS, INVALID_TOOL_RESULTS, "tool results")

    def validate_approvals(self, submission: SubmitToolApprovalsInput) -> None:
        """Reject decisions unless they answer exactly the calls waiting for approval, first,
        and each is well formed (arguments and `remember` only with approve)."""
        ids = [d.tool_call_id for d in submission.decisions]
        self.approvals.check(
            ids, NOT_AWAITING_TOOL_APPROVALS, INVALID_TOOL_APPROVALS, "tool approvals"
        )
        for decision in submission.decisions:
            approving = decision.decision == "approve"
            if approving and decision.message is not None:
                wrong = "only a denial takes `message`"
            elif not approving and (decision.arguments is not None or decision.remember):
                wrong = "only an approval takes `arguments` or `remember`"
            else:
                continue
            raise ApplicationError(
                f"decision for {decision.tool_call_id}: {wrong}", type=INVALID_TOOL_APPROVALS
            )
