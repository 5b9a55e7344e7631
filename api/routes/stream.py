"""Server-Sent Events: a chat's events from a cursor, with no gap and no duplicate."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from api.access import OwnedChat
from api.errors import ApiError
from api.state import GatewayState, state_of
from chatd.store.events import ChatEvent

__all__ = ["router"]

router = APIRouter(prefix="/chats/{chat_id}", tags=["stream"])

PING_INTERVAL_S = 15.0
RETRY_MS = 2000


def _frame(event: ChatEvent) -> str:
    return f"id: {event.seq}\nevent: {event.event}\ndata: {json.dumps(event.data)}\n\n"


async def _events(state: GatewayState, chat_id: uuid.UUID, cursor: int) -> AsyncIterator[str]:
    yield f"retry: {RETRY_MS}\n\n"
    with state.hub.subscribe(chat_id) as wake:
        while True:
            wake.clear()  # before reading, so a notify during the read is not missed
            events = await state.events.read_after(chat_id, cursor)
            if events:
                yield "".join(_frame(e) for e in events)  # one socket write per read
                cursor = events[-1].seq
                continue
            try:
                await asyncio.wait_for(wake.wait(), PING_INTERVAL_S)
            except TimeoutError:
                yield ": ping\n\n"


@router.get(
    "/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def stream(
    chat: OwnedChat,
    request: Request,
    last_event_id: Annotated[str | None, Header(max_length=40)] = None,
    after: Annotated[int | None, Query(ge=0, description="Start after this event id")] = None,
) -> StreamingResponse:
    """Events after `Last-Event-ID` (or `after`); without either, from now on."""
    chat_id = chat.id
    state = state_of(request)
    cursor = _cursor(last_event_id, after)
    if cursor is None:
        cursor = await state.events.last_seq(chat_id)
    if await state.events.cursor_expired(chat_id, cursor):
        raise ApiError(
            410,
            "cursor_expired",
            "events after this cursor are no longer kept: reload the transcript, then stream",
            {"last_event_id": await state.events.last_seq(chat_id)},
        )
    return StreamingResponse(
        _events(state, chat_id, cursor),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _cursor(last_event_id: str | None, after: int | None) -> int | None:
    if last_event_id is None:
        return after
    try:
        value = int(last_event_id)
    except ValueError as err:
        raise ApiError(400, "invalid_cursor", "Last-Event-ID must be an event id") from err
    if value < 0:
        raise ApiError(400, "invalid_cursor", "Last-Event-ID must be an event id")
    return value
