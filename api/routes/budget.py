"""A turn paused on a budget: raise the budget, or end the turn; and the audit of those
decisions."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from api.access import OwnedChat, add_current_status
from api.auth import BearerKey
from api.budgets import decide_budget, not_paused_on_budget
from api.errors import ApiError
from api.schemas import Accepted, BudgetDecision
from api.state import state_of
from chatd.store.spend import DecidedBudget
from workflows.payloads import BudgetDecisionInput

__all__ = ["router"]

router = APIRouter(prefix="/chats/{chat_id}", tags=["spend"])


@router.post(
    "/budget",
    status_code=202,
    response_model=Accepted,
    responses={400: {"description": "neither or both of add_usd and decision"}, 409: {}},
)
async def post_budget_decision(
    chat: OwnedChat, body: BudgetDecision, request: Request, key: BearerKey
) -> Accepted:
    """Answer a turn paused on a budget (`pending_budget`): `add_usd` raises the budget it
    names and the step goes ahead; `"decision": "stop"` ends the turn, its work so far kept.
    The first decision wins; who decided is recorded."""
    if chat.pending_budget is None:
        raise not_paused_on_budget(chat.status)
    state = state_of(request)
    key_id = await state.keys.id_of(key)
    decision = BudgetDecisionInput(
        add_usd=body.add_usd,
        stop=body.decision == "stop",
        key_id=str(key_id) if key_id else None,
    )
    try:
        await decide_budget(state.temporal, str(chat.id), decision)
    except ApiError as err:
        await add_current_status(request, chat, err)
        raise
    return Accepted()


class BudgetDecisionList(BaseModel):
    """A chat's budget decisions, oldest first."""

    data: list[DecidedBudget]


@router.get("/budget-decisions", response_model=BudgetDecisionList)
async def get_budget_decisions(chat: OwnedChat, request: Request) -> BudgetDecisionList:
    """Who raised which budget by how much, or ended a paused turn, and when."""
    return BudgetDecisionList(data=await state_of(request).spend.decisions(chat.id))
