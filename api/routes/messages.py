"""Messages: send (start or queue a turn, `api.sending`), read the transcript, edit a user
message."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request

from api.access import OwnedChat
from api.edits import cut_and_queue
from api.idempotency import request_digest
from api.schemas import EditMessage, MessageList, SendMessage, SendMessageResult
from api.sending import accept_message, hand_over_stored
from api.state import state_of
from chatd.chat_status import BUSY
from chatd.store.pages import page_bytes

__all__ = ["router"]

router = APIRouter(prefix="/chats/{chat_id}/messages", tags=["messages"])


@router.post("", status_code=202, response_model=SendMessageResult)
async def send_message(
    chat: OwnedChat,
    body: SendMessage,
    request: Request,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> SendMessageResult:
    """Send a user message; it starts a turn or waits behind the running one."""
    return await accept_message(request, chat, body, idempotency_key)


@router.get("", response_model=MessageList)
async def list_messages(
    chat: OwnedChat,
    request: Request,
    after_id: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> MessageList:
    """The transcript, oldest first, as persisted."""
    page = await state_of(request).transcript.page(
        chat.id, after_id=after_id, limit=limit, max_bytes=page_bytes()
    )
    return MessageList(
        messages=[m.for_client() for m in page.rows],
        has_more=page.more,
        next_after_id=page.rows[-1].id if page.more else None,
    )


@router.patch(
    "/{message_id}",
    status_code=202,
    response_model=SendMessageResult,
    responses={409: {"description": "a turn is running, or the message was compacted"}},
)
async def edit_message(
    chat: OwnedChat,
    message_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    body: EditMessage,
    request: Request,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> SendMessageResult:
    """Replace a user message: it and everything after it leave the transcript, and the
    edited text starts a new turn as a new message. With an `Idempotency-Key`, a retried
    edit (after a 503) is answered as the first one was, instead of with a 404."""
    state = state_of(request)
    with state.chat_sends.slot(chat.id):
        if chat.status not in BUSY:  # a busy chat's edit is refused (or, retried, answered) below
            await state.message_gate.admit(chat)
        parts, digest = body.user_parts(), request_digest(body)
        queued, created = await cut_and_queue(
            state.pool, chat.id, message_id, parts, idempotency_key, digest
        )
        return await hand_over_stored(request, chat, queued, created)
