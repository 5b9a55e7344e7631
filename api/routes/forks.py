"""Forks: a new chat with a chat's settings and its conversation up to a message."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Request
from pydantic import BaseModel

from api.access import OwnedChat, add_current_status, chat_out, load_chat
from api.errors import ApiError, ErrorBody
from api.idempotency import check_same_request, request_digest
from api.schemas import ChatOut, ForkChat
from api.state import state_of
from chatd.store.chats import ChatRecord
from chatd.store.forks import ForkRefused, ForkStore, RefusalCode

__all__ = ["router"]

router = APIRouter(prefix="/chats/{chat_id}/fork", tags=["chats"])

_STATUS: dict[RefusalCode, int] = {
    "chat_not_found": 404,
    "message_not_found": 404,
    "message_compacted": 409,
    "splits_tool_call": 400,
}


class _ForkRequest(BaseModel):
    """What a fork's Idempotency-Key stands for: the body and the chat it forks (the same
    body on another chat is another request)."""

    chat_id: uuid.UUID
    body: ForkChat


@router.post(
    "",
    status_code=201,
    response_model=ChatOut,
    responses={
        status: {"model": ErrorBody, "description": description}
        for status, description in {
            400: "Invalid input, or a cut between tool calls and their results",
            404: "Unknown, or not yours; or no such message in the chat",
            409: "The message was summarised by a compaction",
        }.items()
    },
)
async def fork_chat(
    chat: OwnedChat,
    body: ForkChat,
    request: Request,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> ChatOut:
    """A new chat with this chat's settings whose transcript is this chat's up to and
    including `message_id`; it is `waiting`, and this chat is unchanged. With an
    `Idempotency-Key`, a retried fork answers with the chat the first one made."""
    state = state_of(request)
    digest = request_digest(_ForkRequest(chat_id=chat.id, body=body))
    try:
        fork = await ForkStore(state.pool).fork(
            chat.id,
            chat.owner,
            body.message_id,
            title=body.title,
            idempotency_key=idempotency_key,
            request_digest=digest,
        )
    except ForkRefused as refused:
        raise await _refusal(request, chat, refused, body.message_id) from None
    check_same_request(fork.request_digest, digest)
    return await chat_out(request, await load_chat(request, fork.chat_id, chat.owner))


async def _refusal(
    request: Request, chat: ChatRecord, refused: ForkRefused, message_id: int
) -> ApiError:
    """The error answering a refused fork (a 409 with the chat's status, as every 409)."""
    detail = {} if refused.code == "chat_not_found" else {"message_id": message_id}
    err = ApiError(_STATUS[refused.code], refused.code, refused.message, detail)
    await add_current_status(request, chat, err)
    return err
