"""A step's tool calls as a batch: which run, wait or are refused, and the result texts the
model reads for those that never ran.

Pure, like `workflows.decide`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from workflows.payloads import ToolCallRef

__all__ = [
    "INTERRUPTED_RESULT",
    "POLICY_DENIED",
    "ToolPlan",
    "denied_by_person",
    "exclusive_violation",
    "expired_result",
    "stops_turn",
]

INTERRUPTED_RESULT = "tool call was interrupted before it produced a result"


def exclusive_violation(calls: list[ToolCallRef]) -> dict[str, str]:
    """Policy errors by call id when an exclusive tool shares its batch; empty if none.

    Nothing of such a batch runs: the model is told to retry the calls separately.
    """
    exclusive = [c for c in calls if c.exclusive]
    if not exclusive or len(calls) == 1:
        return {}
    first = exclusive[0].name
    errors: dict[str, str] = {}
    for call in calls:
        if call.exclusive:
            errors[call.id] = (
                f"{call.name} must be called alone, without other tools in the same batch. "
                f"Retry with only the {call.name} call."
            )
        else:
            errors[call.id] = (
                f"this tool was skipped because {first} must run alone in its batch. "
                f"Retry your tool calls without {first}, or call {first} separately first."
            )
    return errors


@dataclass(frozen=True)
class ToolPlan:
    """A step's calls by what happens to them, each list in call order."""

    calls: list[ToolCallRef]

    @property
    def immediate(self) -> list[ToolCallRef]:
        """Worker calls answered before any wait: those that run, and those denied."""
        return [c for c in self.calls if c.kind != "dynamic" and c.policy != "ask"]

    @property
    def run_now(self) -> list[ToolCallRef]:
        """Worker calls the policy lets run without asking (unknown tools too: the worker
        answers them with a "Tool not found" error)."""
        return [c for c in self.immediate if c.policy == "auto"]

    @property
    def denied(self) -> list[ToolCallRef]:
        """Worker calls the policy refuses."""
        return [c for c in self.immediate if c.policy == "deny"]

    @property
    def asked(self) -> list[ToolCallRef]:
        """Worker calls that wait for a person's approval."""
        return [c for c in self.calls if c.kind != "dynamic" and c.policy == "ask"]

    @property
    def client(self) -> list[ToolCallRef]:
        """Client-executed (dynamic) calls; the policy does not apply to them."""
        return [c for c in self.calls if c.kind == "dynamic"]

    @property
    def waiting(self) -> list[ToolCallRef]:
        """The calls a requires_action wait holds."""
        return [c for c in self.calls if c.kind == "dynamic" or c.policy == "ask"]


POLICY_DENIED = "This call was not run: the chat's tool policy does not allow this tool."


def denied_by_person(message: str | None) -> str:
    """The error result of a call a person denied, with what they said."""
    denied = "This call was not run: the user denied it."
    return f"{denied} Their message: {message}" if message else denied


def stops_turn(calls: list[ToolCallRef], failed: set[str]) -> bool:
    """A stop-after tool that succeeded ends the turn."""
    return any(c.stop_after and c.id not in failed for c in calls)


def expired_result(expires_at: datetime) -> str:
    """The error result of a call nobody answered in time (no client result, or no
    decision, or approved while the client's results never came)."""
    return (
        f"this tool call was not answered before the wait expired at "
        f"{expires_at.isoformat(timespec='seconds')}"
    )
