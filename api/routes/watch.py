"""The owner's watch stream: every chat's `status`, `chat`, `error` and `subagent` events on
one SSE stream, numbered on the owner's own sequence, with no gap and no duplicate.

A gateway listens once for all owners (`chatd_owner_events`, `listening`), not once per
chat; a watch stream holds one of its key's stream slots, and ends when the key is revoked or
the gateway stops, like a chat's stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import APIRouter, FastAPI, Header, Query, Request
from fastapi.responses import StreamingResponse

from api.access import Owner
from api.auth import BearerKey
from api.quotas import StreamSlot
from api.routes.stream import (
    MAX_EVENT_ID,
    PING_INTERVAL_S,
    RETRY_MS,
    SlotStream,
    expired_cursor,
    starting_cursor,
)
from api.state import GatewayState, state_of
from chatd.store.keys import hash_key
from chatd.store.listen_hub import ListenHub
from chatd.store.owner_events import (
    NOTIFY_CHANNEL,
    OwnerCursorExpired,
    OwnerEvent,
    OwnerEventLog,
    owner_key,
)

__all__ = ["listening", "router"]

router = APIRouter(tags=["stream"])


@asynccontextmanager
async def listening(app: FastAPI, dsn: str) -> AsyncIterator[None]:
    """The gateway's one LISTEN for its watch streams, for the duration of the block (the
    app's lifespan)."""
    hub = ListenHub(dsn, NOTIFY_CHANNEL, wake_all_on_reconnect=True)
    await hub.start()
    app.state.owner_hub = hub
    try:
        yield
    finally:
        await hub.stop()


def _frames(events: list[OwnerEvent]) -> str:
    """Events as SSE frames, one string: one socket write per read."""
    return "".join(f"id: {e.seq}\nevent: {e.event}\ndata: {json.dumps(e.data)}\n\n" for e in events)


async def _events(
    state: GatewayState, hub: ListenHub, owner: str, cursor: int, slot: StreamSlot
) -> AsyncIterator[str]:
    log = OwnerEventLog(state.pool)
    yield f"retry: {RETRY_MS}\n\n"
    with hub.subscribe(owner_key(owner)) as wake, state.shutdown.watch(wake):
        slot.wake_with(wake)
        while not (slot.ended or state.shutdown.started):
            wake.clear()  # before reading, so a notify during the read is not missed
            try:
                page = await log.read_page(owner, cursor)
            except OwnerCursorExpired:
                return  # pruned meanwhile: the client reconnects with its cursor and gets 410
            if page.events:
                yield _frames(page.events)
                cursor = page.events[-1].seq
            if page.more:
                continue  # else a notification says when there is more
            try:
                await asyncio.wait_for(wake.wait(), PING_INTERVAL_S)
            except TimeoutError:
                yield ": ping\n\n"


@router.get(
    "/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def watch(
    owner: Owner,
    request: Request,
    key: BearerKey,
    last_event_id: Annotated[
        str | None,
        # Documented, and checked by `starting_cursor` (a 400 `invalid_cursor`, as a chat's).
        Header(max_length=40, json_schema_extra={"pattern": "^[0-9]{1,19}$"}),
    ] = None,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_EVENT_ID, description="Start after this event id")
    ] = None,
) -> StreamingResponse:
    """Every chat's `status`, `chat`, `error` and `subagent` events after `Last-Event-ID` (or
    `after`) on the owner's sequence, each naming its chat in `chat_id`; without a cursor,
    from now on. A cursor past the owner's last event is a 400, one whose events were pruned
    a 410; one more stream than the key's limit a 429."""
    state = state_of(request)
    last, pruned = await OwnerEventLog(state.pool).position(owner)
    cursor = starting_cursor(last_event_id, after, last, "owner")
    if cursor < pruned:
        raise expired_cursor(last, "reload the chats")
    hub: ListenHub = request.app.state.owner_hub
    # The owner's watch streams share one slot key: a per-chat limit counts them together.
    slot = await state.stream_slots.take(hash_key(key), owner, owner_key(owner))
    return SlotStream(state, slot, _events(state, hub, owner, cursor, slot))
