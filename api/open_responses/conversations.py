"""Conversations at `/v1/conversations`: a conversation is a chat, its id the chat's, and
its items the chat's transcript (`conversation_items`). `POST /v1/responses` continues one
with `conversation`; items added here are history the next turn sees, and no turn starts."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from api.access import Owner
from api.errors import ApiError
from api.open_responses.conversation_items import (
    ITEM_ID_PATTERN,
    Item,
    append,
    find,
    message_items,
    page,
    reasoning_shown,
)
from api.open_responses.conversation_requests import (
    AddItems,
    CreateConversation,
    Include,
    UpdateConversation,
)
from api.state import GatewayState, state_of
from chatd.models import ModelConfig
from chatd.store.conversations import (
    ConversationBusy,
    ConversationRecord,
    ConversationStore,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])

ConversationId = Annotated[str, Path(max_length=200, description="The chat's id")]
ItemId = Annotated[str, Path(max_length=200)]


class Conversation(BaseModel):
    """A conversation: a chat, by its id."""

    id: str
    object: Literal["conversation"]
    created_at: int
    metadata: dict[str, str]


class ConversationDeleted(BaseModel):
    id: str
    object: Literal["conversation.deleted"]
    deleted: bool


class ConversationItemList(BaseModel):
    """A page of items; `after` = `last_id` for the next."""

    object: Literal["list"]
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


def _conversation(record: ConversationRecord) -> JSONResponse:
    return JSONResponse(
        {
            "id": str(record.id),
            "object": "conversation",
            "created_at": int(record.created_at.timestamp()),
            "metadata": record.metadata,
        }
    )


def _item_list(items: list[Item], has_more: bool) -> JSONResponse:
    return JSONResponse(
        {
            "object": "list",
            "data": [item.body for item in items],
            "first_id": items[0].body["id"] if items else None,
            "last_id": items[-1].body["id"] if items else None,
            "has_more": has_more,
        }
    )


async def _owned(state: GatewayState, owner: str, conversation_id: str) -> ConversationRecord:
    try:
        chat_id = uuid.UUID(conversation_id)
    except ValueError:
        chat_id = None
    found = await ConversationStore(state.pool).get(chat_id, owner) if chat_id else None
    if found is None:
        raise ApiError(
            404,
            "conversation_not_found",
            f"Conversation with id {conversation_id!r} not found.",
            {"param": "conversation_id"},
        )
    return found


def _busy(err: ConversationBusy) -> ApiError:
    return ApiError(
        409,
        "conversation_busy",
        f"a response is in progress in this conversation ({err.status}): its items change"
        " once it has ended",
        {"param": "conversation_id", "status": err.status},
    )


@router.post("", response_model=Conversation)
async def create_conversation(
    body: CreateConversation, request: Request, owner: Owner
) -> JSONResponse:
    """Create a conversation: a chat, idle, whose transcript is `items` (no turn starts)."""
    state = state_of(request)
    async with state.pool.acquire() as conn, conn.transaction():
        chat = await state.chats.create(owner=owner, model=ModelConfig(), conn=conn)
        if body.metadata:
            await ConversationStore(state.pool).set_metadata(chat.id, body.metadata, conn)
        await append(state, conn, chat.id, owner, body.items or [])
    record = ConversationRecord(
        id=chat.id, created_at=chat.created_at, metadata=body.metadata or {}
    )
    return _conversation(record)


@router.get("/{conversation_id}", response_model=Conversation)
async def retrieve_conversation(
    conversation_id: ConversationId, request: Request, owner: Owner
) -> JSONResponse:
    """The conversation."""
    return _conversation(await _owned(state_of(request), owner, conversation_id))


@router.post("/{conversation_id}", response_model=Conversation)
async def update_conversation(
    conversation_id: ConversationId, body: UpdateConversation, request: Request, owner: Owner
) -> JSONResponse:
    """Replace the conversation's metadata."""
    state = state_of(request)
    record = await _owned(state, owner, conversation_id)
    metadata = body.metadata or {}
    await ConversationStore(state.pool).set_metadata(record.id, metadata)
    return _conversation(record.model_copy(update={"metadata": metadata}))


@router.delete("/{conversation_id}", response_model=ConversationDeleted)
async def delete_conversation(
    conversation_id: ConversationId, request: Request, owner: Owner
) -> JSONResponse:
    """Delete the conversation: its chat is no longer readable through any API, and is
    deleted (its transcript and responses with it) once no turn runs."""
    state = state_of(request)
    record = await _owned(state, owner, conversation_id)
    await state.chats.discard_after(record.id)
    return JSONResponse({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


@router.get("/{conversation_id}/items", response_model=ConversationItemList)
async def list_items(
    conversation_id: ConversationId,
    request: Request,
    owner: Owner,
    include: Include,
    after: Annotated[str | None, Query(pattern=ITEM_ID_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> JSONResponse:
    """The conversation's items, newest first unless `order=asc`, after the item `after`
    (an item id; deleted or not, it marks a place)."""
    state = state_of(request)
    record = await _owned(state, owner, conversation_id)
    shown = await reasoning_shown(state, owner, include)
    store = ConversationStore(state.pool)
    items = await page(store, record.id, after, limit, order == "desc", shown)
    return _item_list(items[:limit], len(items) > limit)


@router.post("/{conversation_id}/items", response_model=ConversationItemList)
async def add_items(
    conversation_id: ConversationId,
    body: AddItems,
    request: Request,
    owner: Owner,
    include: Include,
) -> JSONResponse:
    """Append items to the conversation, as history the next response sees; a 409 while a
    response is in progress in it."""
    state = state_of(request)
    record = await _owned(state, owner, conversation_id)
    async with state.pool.acquire() as conn, conn.transaction():
        try:
            await ConversationStore(state.pool).hold_idle(conn, record.id)
        except ConversationBusy as err:
            raise _busy(err) from err
        saved = await append(state, conn, record.id, owner, body.items)
    shown = await reasoning_shown(state, owner, include)
    return _item_list([item for m in saved for item in message_items(m, shown)], False)


def _item_not_found(item_id: str) -> ApiError:
    return ApiError(
        404, "item_not_found", f"Item with id {item_id!r} not found.", {"param": "item_id"}
    )


@router.get("/{conversation_id}/items/{item_id}", response_model=dict[str, Any])
async def retrieve_item(
    conversation_id: ConversationId,
    item_id: ItemId,
    request: Request,
    owner: Owner,
    include: Include,
) -> JSONResponse:
    """One item of the conversation."""
    state = state_of(request)
    record = await _owned(state, owner, conversation_id)
    shown = await reasoning_shown(state, owner, include)
    found = await find(ConversationStore(state.pool), record.id, item_id, shown)
    if found is None:
        raise _item_not_found(item_id)
    return JSONResponse(found[0].body)


@router.delete("/{conversation_id}/items/{item_id}", response_model=Conversation)
async def delete_item(
    conversation_id: ConversationId, item_id: ItemId, request: Request, owner: Owner
) -> JSONResponse:
    """Delete an item: the model no longer sees it (other items keep their ids). A 409
    while a response is in progress in the conversation."""
    state = state_of(request)
    record = await _owned(state, owner, conversation_id)
    store = ConversationStore(state.pool)
    found = await find(store, record.id, item_id)
    try:
        removed = found is not None and await store.remove_parts(
            record.id, found[1], set(found[0].parts)
        )
    except ConversationBusy as err:
        raise _busy(err) from err
    if not removed:  # none, or deleted meanwhile
        raise _item_not_found(item_id)
    return _conversation(record)
