"""What the turn's signal and update handlers change, shared with the phases of the turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError
from temporalio.workflow import ActivityHandle

from workflows.constants import CHAT_STATUS
from workflows.payloads import SubmitToolResultsInput, ToolCallRef

__all__ = ["INVALID_TOOL_RESULTS", "NOT_AWAITING_TOOL_RESULTS", "TurnControls"]

T = TypeVar("T")

NOT_AWAITING_TOOL_RESULTS = "NotAwaitingToolResults"
"""Update rejection type: the chat is not in requires_action (HTTP 409)."""
INVALID_TOOL_RESULTS = "InvalidToolResults"
"""Update rejection type: missing, unknown or duplicate tool call ids (HTTP 400)."""


@dataclass
class TurnControls:
    """Status, interrupt requests and the requires_action handshake of one run."""

    status: str = "running"
    interrupted: bool = False
    pending: list[ToolCallRef] = field(default_factory=list)
    """Dynamic calls waiting for client results (empty unless requires_action)."""
    expires_at: datetime | None = None
    accepted: bool = False
    """A submission was accepted for the current wait (the first one wins)."""
    staged: bool = False
    """The accepted results are persisted."""

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

    def await_results(self, calls: list[ToolCallRef], expires_at: datetime) -> None:
        """Enter requires_action for these calls."""
        self.pending = list(calls)
        self.expires_at = expires_at
        self.accepted = self.staged = False

    def stop_awaiting(self) -> None:
        """Leave requires_action; later submissions are rejected."""
        self.pending = []
        self.expires_at = None

    def validate_submission(self, submission: SubmitToolResultsInput) -> None:
        """Reject a submission unless it answers exactly the pending calls, first."""
        if not self.pending or self.accepted:
            raise ApplicationError(
                "the chat is not waiting for tool results", type=NOT_AWAITING_TOOL_RESULTS
            )
        expected = [c.id for c in self.pending]
        received = [r.tool_call_id for r in submission.results]
        if sorted(expected) != sorted(received):
            raise ApplicationError(
                f"tool results must answer each pending call exactly once: "
                f"expected {expected}, received {received}",
                {"expected": expected, "received": received},
                type=INVALID_TOOL_RESULTS,
            )
