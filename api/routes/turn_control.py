"""Controlling the running turn: interrupt it, answer its dynamic tool calls, drop queued input."""

from __future__ import annotations

import json
import uuid

from fastapi import APIRouter, Request, Response

from api.access import OwnedChat, add_current_status
from api.errors import ApiError
from api.schemas import Accepted, ToolResults
from api.state import state_of
from api.turn_updates import interrupt_turn, submit_tool_results
from chatd.chat_status import BUSY
from chatd.store.client_results import ClientResultStaging

__all__ = ["router"]

router = APIRouter(prefix="/chats/{chat_id}", tags=["turns"])
MAX_TOOL_RESULTS_BYTES = 512 * 1024
"""The most a submission of client tool results may hold (they are staged in Postgres)."""


@router.post("/interrupt", status_code=202, response_model=Accepted)
async def interrupt(chat: OwnedChat, request: Request) -> Accepted:
    """Stop the running turn; what it produced so far is kept and the chat ends `waiting`."""
    state = state_of(request)
    if chat.status not in BUSY:
        raise ApiError(409, "not_running", "no turn is running", {"status": chat.status})
    if not await interrupt_turn(state.temporal, state.turns, chat):
        raise ApiError(409, "not_running", "no turn is running", {"status": chat.status})
    return Accepted()


@router.post(
    "/tool-results",
    status_code=202,
    response_model=Accepted,
    responses={400: {"description": "missing, unknown or duplicate ids"}, 409: {}},
)
async def post_tool_results(chat: OwnedChat, body: ToolResults, request: Request) -> Accepted:
    """Results for the pending dynamic tool calls; the first accepted submission wins."""
    if not any(c.get("action") == "client_tool" for c in chat.pending_tool_calls or []):
        raise ApiError(
            409,
            "not_awaiting_tool_results",
            "no tool call of the chat is waiting for the client's result",
            {"status": chat.status},
        )
    size = len(json.dumps([r.model_dump(mode="json") for r in body.results]))
    if size > MAX_TOOL_RESULTS_BYTES:
        raise ApiError(400, "too_large", f"tool results exceed {MAX_TOOL_RESULTS_BYTES} bytes")
    state = state_of(request)
    try:
        await submit_tool_results(
            state.temporal, ClientResultStaging(state.pool), chat, body.results
        )
    except ApiError as err:
        await add_current_status(request, chat, err)
        raise
    return Accepted()


@router.delete("/queue/{queued_id}", status_code=204, response_class=Response)
async def drop_queued(chat: OwnedChat, queued_id: uuid.UUID, request: Request) -> Response:
    """Drop a queued message before its turn begins (404 once promoted)."""
    if not await state_of(request).transcript.drop_queued(chat.id, queued_id):
        raise ApiError(404, "queued_message_not_found", f"no queued message {queued_id}")
    return Response(status_code=204)
