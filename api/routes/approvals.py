"""Approving tool calls: a person's decisions, the audit of them, and the chat's policy."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request

from api.access import OwnedChat, add_current_status
from api.auth import BearerKey
from api.errors import ApiError
from api.schemas import Accepted, ToolApprovals, ToolDecisionList
from api.state import state_of
from api.turn_updates import submit_tool_approvals
from workflows.payloads import SubmitToolApprovalsInput

__all__ = ["router"]

router = APIRouter(prefix="/chats/{chat_id}", tags=["approvals"])
MAX_APPROVALS_BYTES = 256 * 1024
"""Edited arguments travel in the update payload; keep them well under Temporal's limits."""


@router.post(
    "/tool-approvals",
    status_code=202,
    response_model=Accepted,
    responses={400: {"description": "missing, unknown or duplicate ids"}, 409: {}},
)
async def post_tool_approvals(
    chat: OwnedChat, body: ToolApprovals, request: Request, key: BearerKey
) -> Accepted:
    """Decisions for every call waiting for approval; the first accepted submission wins.
    Who decided (the key and its owner) is recorded with each decision."""
    if not any(c.get("action") == "approval" for c in chat.pending_tool_calls or []):
        raise _not_awaiting(chat.status)
    size = len(json.dumps([d.model_dump(mode="json") for d in body.decisions]))
    if size > MAX_APPROVALS_BYTES:
        raise ApiError(400, "too_large", f"tool approvals exceed {MAX_APPROVALS_BYTES} bytes")
    state = state_of(request)
    key_id = await state.keys.id_of(key)
    approvals = SubmitToolApprovalsInput(
        decisions=body.decisions,
        key_id=str(key_id) if key_id else None,
        owner=chat.owner,
    )
    try:
        await submit_tool_approvals(state.temporal, str(chat.id), approvals)
    except ApiError as err:
        await add_current_status(request, chat, err)
        raise
    return Accepted()


def _not_awaiting(status: str) -> ApiError:
    return ApiError(
        409,
        "not_awaiting_tool_approvals",
        "no tool call of the chat is waiting for approval",
        {"status": status},
    )


@router.get("/tool-decisions", response_model=ToolDecisionList)
async def list_tool_decisions(
    chat: OwnedChat,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> ToolDecisionList:
    """Every approval decision of the chat, oldest first: who, when, what, and a SHA-256 of
    the arguments the call ran with. The audit only grows at its end, so `offset` pages are
    stable: pass `next_offset` for the next one."""
    decisions = await state_of(request).decisions.list(chat.id, offset=offset, limit=limit + 1)
    more = len(decisions) > limit
    return ToolDecisionList(
        decisions=decisions[:limit], has_more=more, next_offset=offset + limit if more else None
    )
