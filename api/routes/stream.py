"""Server-Sent Events: a chat's events from a cursor, with no gap and no duplicate.

Each stream holds one of its key's stream slots while it is open, and ends when the key is
revoked or the gateway stops."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from api.access import OwnedChat
from api.auth import BearerKey
from api.errors import ApiError
from api.quotas import StreamSlot
from api.state import GatewayState, state_of
from chatd.store.events import CursorExpired
from chatd.store.keys import hash_key

__all__ = ["router"]

router = APIRouter(prefix="/chats/{chat_id}", tags=["stream"])

PING_INTERVAL_S = 15.0
RETRY_MS = 2000
MAX_EVENT_ID = 2**63 - 1
"""Event ids are bigints: a cursor above this can't name one."""


async def _events(
    state: GatewayState, chat_id: uuid.UUID, cursor: int, slot: StreamSlot
) -> AsyncIterator[str]:
    yield f"retry: {RETRY_MS}\n\n"
    with state.hub.subscribe(chat_id) as wake, state.shutdown.watch(wake):
        slot.wake_with(wake)
        while not (slot.ended or state.shutdown.started):
            since = state.stream_reads.mark()
            wake.clear()  # before reading, so a notify during the read is not missed
            try:
                batch = await state.stream_reads.after(chat_id, cursor, since)
            except CursorExpired:
                return  # pruned meanwhile: the client reconnects with its cursor and gets 410
            if batch.frames:
                yield batch.frames  # one socket write per read
                cursor = batch.cursor
            if batch.more:
                continue  # else a notification says when there is more
            try:
                await asyncio.wait_for(wake.wait(), PING_INTERVAL_S)
            except TimeoutError:
                yield ": ping\n\n"


class SlotStream(StreamingResponse):
    """A stream that frees its slot however it ends (finished, disconnected, cancelled, or
    never started)."""

    def __init__(self, state: GatewayState, slot: StreamSlot, body: AsyncIterator[str]) -> None:
        super().__init__(
            body,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._slots = state.stream_slots
        self._slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slots.release(self._slot)


@router.get(
    "/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def stream(
    chat: OwnedChat,
    request: Request,
    key: BearerKey,
    last_event_id: Annotated[str | None, Header(max_length=40)] = None,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_EVENT_ID, description="Start after this event id")
    ] = None,
) -> StreamingResponse:
    """Events after `Last-Event-ID` (or `after`); without either, from now on. A cursor past
    the chat's last event is a 400; so is one more stream than the key's limit (429)."""
    chat_id = chat.id
    state = state_of(request)
    last = await state.events.last_seq(chat_id)
    cursor = starting_cursor(last_event_id, after, last, "chat")
    if await state.events.cursor_expired(chat_id, cursor):
        raise expired_cursor(last, "reload the transcript")
    slot = await state.stream_slots.take(hash_key(key), chat.owner, chat_id)
    return SlotStream(state, slot, _events(state, chat_id, cursor, slot))


def starting_cursor(last_event_id: str | None, after: int | None, last: int, of: str) -> int:
    """Where a stream starts: after `Last-Event-ID` (or `after`), or from now on (`last`);
    a cursor that is not an event id, or is past the `of`'s last event, is a 400."""
    cursor = _cursor(last_event_id, after)
    if cursor is None:
        return last
    if cursor > last:
        raise ApiError(
            400,
            "invalid_cursor",
            f"event {cursor} does not exist: the {of}'s last event is {last}",
            {"last_event_id": last},
        )
    return cursor


def expired_cursor(last: int, reload: str) -> ApiError:
    """The 410 for a cursor whose following events were pruned: `reload`, then stream."""
    return ApiError(
        410,
        "cursor_expired",
        f"events after this cursor are no longer kept: {reload}, then stream",
        {"last_event_id": last},
    )


def _cursor(last_event_id: str | None, after: int | None) -> int | None:
    if last_event_id is None:
        return after
    try:
        value = int(last_event_id)
    except ValueError as err:
        raise ApiError(400, "invalid_cursor", "Last-Event-ID must be an event id") from err
    if not 0 <= value <= MAX_EVENT_ID:
        raise ApiError(400, "invalid_cursor", "Last-Event-ID must be an event id")
    return value
