"""Messages: send (start or queue a turn), read the transcript, edit a user message."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request
from starlette.requests import HTTPConnection

from api.access import OwnedChat
from api.background import in_background
from api.edits import cut_and_queue
from api.errors import ApiError
from api.idempotency import check_same_request, request_digest
from api.schemas import EditMessage, MessageList, SendMessage, SendMessageResult
from api.state import state_of
from api.turns import interrupt_turn, submit_message, until_begun
from chatd.chat_status import BUSY
from chatd.store.chats import ChatRecord
from chatd.store.events import Conn
from chatd.store.pages import page_bytes
from chatd.store.transcript import QueuedMessage

__all__ = ["accept_message", "hand_over_stored", "router", "store_message"]

router = APIRouter(prefix="/chats/{chat_id}/messages", tags=["messages"])


async def accept_message(
    request: Request, chat: ChatRecord, body: SendMessage, idempotency_key: str | None
) -> SendMessageResult:
    """Store the message, then start its turn or queue it. A retried send (the same
    Idempotency-Key or `client_message_id`, and the same body) is answered as the first was,
    whatever the chat does now; the same key with another body is a 422."""
    with state_of(request).chat_sends.slot(chat.id):
        queued, created = await store_message(request, chat, body, idempotency_key)
        return await hand_over_stored(request, chat, queued, created)


async def store_message(
    request: HTTPConnection,
    chat: ChatRecord,
    body: SendMessage,
    idempotency_key: str | None,
    *,
    admitted: bool = False,
    conn: Conn | None = None,
) -> tuple[QueuedMessage, bool]:
    """Store the message in the chat's queue (after the quota and `on_busy` checks, unless
    `admitted` with a chat made for it just now), or find the one a retry of this send
    stored; and whether this call stored it. With `conn`, within its transaction."""
    state = state_of(request)
    client_id = idempotency_key or body.client_message_id
    digest = request_digest(body)
    if client_id is not None:
        earlier = await state.transcript.sent(chat.id, client_id)
        if earlier is not None:
            check_same_request(earlier.request_digest, digest)
            return earlier, False
    if body.on_busy == "reject" and chat.status in BUSY:
        raise ApiError(409, "chat_busy", "a turn is running", {"status": chat.status})
    if not admitted:  # before storing: a refused message leaves no trace
        await state.message_gate.admit(chat)
    if body.on_busy == "interrupt" and chat.status in BUSY:
        await interrupt_turn(state.temporal, state.turns, chat)
    queued, created = await state.transcript.enqueue(
        chat.id, body.user_parts(), client_id, digest, conn=conn
    )
    if not created:  # a concurrent send with the same key stored it first
        check_same_request(queued.request_digest, digest)
    return queued, created


async def hand_over_stored(
    request: HTTPConnection,
    chat: ChatRecord,
    queued: QueuedMessage,
    created: bool,
    *,
    wait_for_begin: bool = True,
) -> SendMessageResult:
    """Start the stored message's turn or queue it in the running one. A message stored by
    an earlier call (`created` False) is handed over again (the same update, which Temporal
    deduplicates) unless its turn has taken it.

    A started turn is waited for until it has begun (`until_begun`), so the client finds it
    running; without `wait_for_begin` (a caller that streams the turn's events next, and
    would only delay the first of them) that wait goes on in the background."""
    state = state_of(request)
    with contextlib.ExitStack() as subscription:
        # Subscribed before anything can begin the turn: `until_begun` then misses no wake-up.
        notified = subscription.enter_context(state.hub.subscribe(chat.id))
        if not created and await state.transcript.is_promoted(queued.id):
            return SendMessageResult(queued=False, message_id=queued.id, turn_id=str(queued.id))
        result = await submit_message(
            state.temporal,
            state.task_queue,
            state.transcript,
            chat,
            queued.id,
            update_id=f"msg-{queued.id}",
            name_chat=state.generate_titles and chat.title is None,
            hand_overs=state.hand_overs,
        )
        if result is None:  # no worker took it in time: queued durably, its turn to come
            return SendMessageResult(queued=True, message_id=queued.id, turn_id=None)
        if not result.queued:
            begun = until_begun(state.transcript, state.turns, chat.id, queued.id, notified)
            if wait_for_begin:
                await begun
            else:
                in_background(_subscribed(subscription.pop_all(), begun), "beginning a turn")
    return SendMessageResult(queued=result.queued, message_id=queued.id, turn_id=result.turn_id)


async def _subscribed(subscription: contextlib.ExitStack, work: Awaitable[None]) -> None:
    """`work`, then the subscription it was woken by is closed."""
    with subscription:
        await work


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
