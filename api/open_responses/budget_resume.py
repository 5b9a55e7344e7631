"""A response that carries on a turn paused on its budget: `chatd:max_cost_usd` above the
limit it stopped at raises the turn's budget, and the same turn goes on."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from api.budgets import decide_budget
from api.errors import ApiError
from api.open_responses.call_answers import response_in_turn
from api.open_responses.inputs import ParsedInput
from api.state import state_of
from chatd.store.chats import ChatRecord
from chatd.store.responses import NewResponse, ResponseRecord
from workflows.payloads import BudgetDecisionInput

__all__ = ["resume_on_budget"]


async def resume_on_budget(
    request: HTTPConnection,
    key: str,
    chat: ChatRecord,
    parsed: ParsedInput,
    base: NewResponse,
    max_cost_usd: float | None,
) -> ResponseRecord:
    """Raise the paused turn's budget to `max_cost_usd` and answer with a response of that
    turn; a 400 unless the request raises it (and sends no new input), a 409 when the pause
    is on a budget `/v1` doesn't set (the chat's or the owner's)."""
    state = state_of(request)
    pending = chat.pending_budget
    assert pending is not None and chat.turn_id is not None
    if pending.budget != "turn":
        raise ApiError(
            409,
            "budget_exhausted",
            f"the turn is paused on the {pending.budget} budget (${pending.limit_usd:g}, "
            f"${pending.spent_usd:.4f} spent); raise it with POST /api/v1/chats/{chat.id}/budget",
            {"pending_budget": pending.model_dump()},
        )
    if (
        parsed.message is not None
        or parsed.outputs
        or parsed.approvals
        or (max_cost_usd is None or max_cost_usd <= pending.limit_usd)
    ):
        raise ApiError(
            400,
            "budget_exhausted",
            f"the previous response stopped at its budget of ${pending.limit_usd:g}"
            f" (${pending.spent_usd:.4f} spent, the next step needs"
            f" ${pending.next_step_usd:.4f}): continue it with a higher chatd:max_cost_usd"
            " and no new input",
            {"param": "chatd:max_cost_usd", "pending_budget": pending.model_dump()},
        )
    record, created = await response_in_turn(state, chat, base, [])
    if not created:
        return record
    key_id = await state.keys.id_of(key)
    decision = BudgetDecisionInput(
        add_usd=max_cost_usd - pending.limit_usd, key_id=str(key_id) if key_id else None
    )
    try:
        await decide_budget(state.temporal, str(chat.id), decision)
    except ApiError:
        await state.responses.discard(record.id)
        raise
    return record
