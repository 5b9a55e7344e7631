"""Budgets as the gateway takes them: refused on a model with no price (its cost would be
unknown, so the budget could never hold), and a paused turn's decision handed to it."""

from __future__ import annotations

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from api.errors import ApiError
from chatd.models import ModelConfig
from chatd.prices import Prices
from chatd.store.chats import ChatRecord
from workflows.constants import TurnMessages, workflow_id
from workflows.controls import INVALID_BUDGET_DECISION, NOT_AWAITING_BUDGET
from workflows.payloads import BudgetDecisionInput

__all__ = ["decide_budget", "not_paused_on_budget", "refuse_unpriced", "refuse_unpriced_models"]


def refuse_unpriced_models(prices: Prices, models: list[ModelConfig], field: str) -> None:
    """A 400 naming `field` if any of `models` has no price."""
    unpriced = [m.label for m in models if prices.of(m) is None]
    if unpriced:
        raise ApiError(
            400,
            "invalid_request",
            f"{field}: no price is known for {', '.join(unpriced)}, so its cost can't be "
            "counted; the operator adds one to CHATD_PRICES",
            {"param": field, "unpriced": unpriced},
        )


def refuse_unpriced(prices: Prices, chat: ChatRecord, field: str) -> None:
    """A 400 naming `field` if any model the chat may call has no price."""
    refuse_unpriced_models(prices, [chat.model, *chat.fallback_models], field)


async def decide_budget(client: Client, chat_id: str, decision: BudgetDecisionInput) -> None:
    """Hand the decision to the paused turn; raise `ApiError` 409 unless it is paused on a
    budget and undecided."""
    handle = client.get_workflow_handle(workflow_id(chat_id))
    try:
        _accepted = await handle.execute_update(TurnMessages.DECIDE_BUDGET, decision)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        if isinstance(cause, ApplicationError) and cause.type == INVALID_BUDGET_DECISION:
            raise ApiError(400, "invalid_request", cause.message) from err
        if isinstance(cause, ApplicationError) and cause.type == NOT_AWAITING_BUDGET:
            raise not_paused_on_budget() from err
        raise ApiError(409, "budget_decision_refused", str(cause)) from err
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise not_paused_on_budget() from err
        raise


def not_paused_on_budget(status: str | None = None) -> ApiError:
    """The 409 for a budget decision no paused turn waits for (with the chat's `status`,
    when known)."""
    detail = {} if status is None else {"status": status}
    return ApiError(
        409, "not_paused_on_budget", "the chat's turn is not paused on a budget", detail
    )
