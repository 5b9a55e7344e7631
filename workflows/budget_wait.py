"""A turn paused on a budget: requires_action with `pending_budget`, until a person raises
the budget or ends the turn (or an interrupt, or the wait's expiry).

Deterministic workflow code. The wait is durable and costs nothing: no step is sent until
the decision arrives by update, never by polling.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.turn import TurnActivities
    from chatd.chat_status import BusyStatus
    from workflows.constants import LOCAL_TIMEOUT
    from workflows.controls import BudgetWait, TurnControls
    from workflows.payloads import PendingBudget, SetStatusInput

__all__ = ["await_budget"]


async def await_budget(
    chat_id: str, turn_id: str, pending: PendingBudget, controls: TurnControls, wait: timedelta
) -> bool:
    """Pause until the budget `pending` names is raised (True: send the step again) or the
    turn is to end (False: stopped, interrupted, or no decision within `wait`)."""
    controls.budget = BudgetWait(pending)
    expires_at = workflow.now() + wait
    await _set_status(chat_id, turn_id, "requires_action", controls, pending, expires_at)
    try:
        await workflow.wait_condition(
            lambda: controls.budget.staged or controls.interrupted,
            timeout=wait,
            timeout_summary=f"{pending.budget} budget decision",
        )
    except TimeoutError:
        pass
    # A decision accepted a moment ago is persisted before the wait ends.
    await workflow.wait_condition(
        lambda: controls.budget.decision is None or controls.budget.staged
    )
    decision = controls.budget.decision
    controls.budget = BudgetWait()
    raised = decision is not None and not decision.stop and not controls.interrupted
    if raised:
        await _set_status(chat_id, turn_id, "running", controls, None, None)
    return raised


async def _set_status(
    chat_id: str,
    turn_id: str,
    status: BusyStatus,
    controls: TurnControls,
    pending: PendingBudget | None,
    expires_at: datetime | None,
) -> None:
    await workflow.execute_local_activity_method(
        TurnActivities.set_status,
        SetStatusInput(
            chat_id=chat_id,
            turn_id=turn_id,
            status=status,
            step=pending.step if pending else 0,
            expires_at=expires_at,
            pending_budget=pending,
        ),
        start_to_close_timeout=LOCAL_TIMEOUT,
    )
    controls.set_status(status)
