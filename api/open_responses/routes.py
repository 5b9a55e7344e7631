"""Open Responses at `/v1`: every response is a durable chat turn (see `creation`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from api.access import Owner
from api.auth import BearerKey
from api.errors import ApiError
from api.open_responses.compaction import compact
from api.open_responses.creation import create_response
from api.open_responses.requests import CompactRequest, CreateResponse
from api.open_responses.views import current_resource, discard_later, event_stream, until_ended
from api.quotas import StreamSlot
from api.routes.stream import SlotStream
from api.state import GatewayState, state_of
from api.turn_updates import interrupt_turn
from chatd.store.keys import hash_key
from chatd.store.responses import ResponseRecord

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["open-responses"])

ResponseId = Annotated[str, Path(max_length=200)]


class _StreamSlotDuringHandOver:
    """A new response's stream slot, taken while the response's input is handed over to its
    chat (a wait for the workflow) rather than after it: the stream opens as it returns."""

    def __init__(self, state: GatewayState, key: str, owner: str) -> None:
        self._take = partial(state.stream_slots.take, hash_key(key), owner)
        self._slots = state.stream_slots
        self._task: asyncio.Task[StreamSlot] | None = None

    def take(self, chat_id: uuid.UUID) -> None:
        self._task = asyncio.create_task(self._take(chat_id))

    async def slot(self, record: ResponseRecord) -> StreamSlot:
        """The slot (taken now if the response was an earlier call's)."""
        if self._task is None:
            self.take(record.chat_id)
        assert self._task is not None
        return await self._task

    def abandon(self) -> None:
        """No stream after all: free the slot once taken. Synchronous, for a request that
        ends by cancellation."""
        if self._task is not None:
            self._task.add_done_callback(self._release)

    def _release(self, task: asyncio.Task[StreamSlot]) -> None:
        if not task.cancelled() and task.exception() is None:
            self._slots.release(task.result())


def _no_slot(_chat_id: uuid.UUID) -> None:
    """A response that isn't streamed takes no slot."""


async def _stream(
    state: GatewayState, key: str, record: ResponseRecord, starting_after: int | None
) -> StreamingResponse:
    """The response's events, holding one of the key's stream slots while open."""
    slot = await state.stream_slots.take(hash_key(key), record.owner, record.chat_id)
    return _slot_stream(state, slot, record, starting_after)


def _slot_stream(
    state: GatewayState, slot: StreamSlot, record: ResponseRecord, starting_after: int | None
) -> StreamingResponse:
    frames = event_stream(state, record, starting_after, slot)
    if not record.store:
        frames = _then_discarded(state, record, frames)
    return SlotStream(state, slot, frames)


async def _then_discarded(
    state: GatewayState, record: ResponseRecord, frames: AsyncIterator[str]
) -> AsyncIterator[str]:
    """The frames of a `store: false` response; then, however the stream ends, its chat is
    discarded once idle for a while (only its client, sending the conversation again, can
    continue it)."""
    try:
        async for frame in frames:
            yield frame
    finally:
        discard_later(state, record)


async def _owned(state: GatewayState, owner: str, response_id: str) -> ResponseRecord:
    record = await state.responses.get(owner, response_id)
    if record is None:
        raise _not_found(response_id)
    return record


def _not_found(response_id: str) -> ApiError:
    return ApiError(
        404,
        "response_not_found",
        f"No response found with id {response_id!r}.",
        {"param": "response_id"},
    )


_RESPONSE_OR_EVENTS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The response (JSON), or with `stream` its events (SSE)",
        "content": {"application/json": {}, "text/event-stream": {}},
    }
}


@router.post("/responses", response_model=None, responses=_RESPONSE_OR_EVENTS)
async def create(
    body: CreateResponse,
    request: Request,
    owner: Owner,
    key: BearerKey,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> Response:
    """Create a response. With `stream`, its events as SSE; with `background`, the response
    at once (queued); otherwise the response once it has ended. A client that goes away
    stops nothing: the response is a durable turn, readable later."""
    state = state_of(request)
    early = _StreamSlotDuringHandOver(state, key, owner) if body.stream else None
    try:
        record = await create_response(
            request, owner, key, body, idempotency_key, on_chat=early.take if early else _no_slot
        )
    except BaseException:
        if early is not None:
            early.abandon()
        raise
    if early is not None:
        try:
            return _slot_stream(state, await early.slot(record), record, None)
        except ApiError as refusal:  # over the key's streams: the response runs all the same
            refusal.message += f"; response {record.id} was created: read it with GET"
            raise
    if not body.background:
        try:
            record = await until_ended(state, record)
        finally:
            if not record.store:
                discard_later(state, record)
    return JSONResponse(await current_resource(state, record))


@router.post("/responses/compact", response_model=None)
async def compact_conversation(
    body: CompactRequest, request: Request, owner: Owner
) -> JSONResponse:
    """Summarise a conversation (`previous_response_id`'s, then `input`) into one
    `compaction` item: given later as input, it stands for that context."""
    return JSONResponse(await compact(state_of(request), owner, body))


@router.get("/responses/{response_id}", response_model=None, responses=_RESPONSE_OR_EVENTS)
async def retrieve(
    response_id: ResponseId,
    request: Request,
    owner: Owner,
    key: BearerKey,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=-1)] = None,
) -> Response:
    """The response as it is now; with `stream=true`, its events after `starting_after`."""
    state = state_of(request)
    record = await _owned(state, owner, response_id)
    if stream:
        return await _stream(state, key, record, starting_after)
    return JSONResponse(await current_resource(state, record))


@router.post("/responses/{response_id}/cancel", response_model=None)
async def cancel(response_id: ResponseId, request: Request, owner: Owner) -> JSONResponse:
    """Interrupt the response's turn: its partial output is kept, its status `cancelled`.
    A response that has ended is returned as it is."""
    state = state_of(request)
    record = await _owned(state, owner, response_id)
    if record.ended_at is None:
        await state.responses.request_cancel(record.id)
        chat = await state.chats.get(record.chat_id, owner)
        if chat is not None and chat.turn_id == record.turn_id:
            await interrupt_turn(state.temporal, state.turns, chat)
        elif await state.transcript.drop_queued(record.chat_id, uuid.UUID(record.turn_id)):
            await state.responses.end_unstarted(record.id)  # its turn will never begin
        record = await until_ended(state, record)
    return JSONResponse(await current_resource(state, record))


@router.delete("/responses/{response_id}", response_model=None)
async def delete(response_id: ResponseId, request: Request, owner: Owner) -> JSONResponse:
    """Delete the response: it is no longer readable (its chat's transcript stays)."""
    if not await state_of(request).responses.delete(owner, response_id):
        raise _not_found(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@router.get("/responses/{response_id}/input_items", response_model=None)
async def input_items(
    response_id: ResponseId,
    request: Request,
    owner: Owner,
    after: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> JSONResponse:
    """The response's own input items (not its chain's), paged by item id."""
    record = await _owned(state_of(request), owner, response_id)
    items = record.input_items if order == "asc" else list(reversed(record.input_items))
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise ApiError(400, "invalid_request", f"no input item {after!r}", {"param": "after"})
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return JSONResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )
