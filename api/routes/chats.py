"""Chats: create, list, get."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from pydantic import BaseModel

from api.access import OwnedChat, OwnedChatView, Owner, chat_out, load_chat, owned_chats
from api.auth import BearerKey
from api.budgets import refuse_unpriced, refuse_unpriced_models
from api.errors import ApiError, ErrorBody
from api.idempotency import check_same_request, request_digest
from api.schemas import ChatList, ChatOut, ChatSettings, CreateChat
from api.sending import accept_message
from api.state import state_of
from chatd.store.chat_creations import ChatCreations
from chatd.store.chats import ChatSummary

__all__ = ["router"]

router = APIRouter(prefix="/chats", tags=["chats"])


@router.post(
    "",
    status_code=201,
    response_model=ChatOut,
    responses={422: {"model": ErrorBody, "description": "Idempotency-Key reused"}},
)
async def create_chat(
    body: CreateChat,
    request: Request,
    owner: Owner,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> ChatOut:
    """Create a chat; with `message`, its first turn starts at once. With an
    `Idempotency-Key`, a retried create answers with the chat the first one made."""
    state = state_of(request)
    unknown = [name for name in body.mcp_servers if name not in state.mcp_servers]
    if unknown:
        raise ApiError(
            400,
            "invalid_request",
            f"unknown MCP servers {unknown}: a chat selects servers the operator configured",
            {"known": sorted(state.mcp_servers)},
        )
    if body.budget_usd is not None or (body.message and body.message.max_cost_usd is not None):
        field = "budget_usd" if body.budget_usd is not None else "message.max_cost_usd"
        refuse_unpriced_models(state.prices, [body.model, *body.fallback_models], field)
    chat_id = None
    if idempotency_key is not None:
        creation = await ChatCreations(state.pool).claim(
            owner, idempotency_key, request_digest(body)
        )
        check_same_request(creation.request_digest, request_digest(body))
        chat_id = creation.chat_id
    made_before = chat_id is not None and await state.chats.get(chat_id, owner) is not None
    if body.message is not None and not made_before:
        # Refused before the chat exists: a 429 leaves nothing behind.
        await state.message_gate.admit_turn(owner)
    chat = await state.chats.create(
        owner=owner,
        model=body.model,
        title=body.title,
        system_prompt=body.system_prompt,
        dynamic_tools=body.dynamic_tools,
        active_tools=body.active_tools,
        max_steps=body.max_steps,
        action_timeout_s=body.action_timeout_s,
        compaction_threshold=body.compaction_threshold,
        tool_policy=body.tool_policy,
        mcp_servers=body.mcp_servers,
        subagents=body.subagents,
        fallback_models=body.fallback_models,
        chat_id=chat_id,
        budget_usd=body.budget_usd,
    )
    if body.message is not None:
        # Under a key of its own: a retried create hands the same first message over again.
        first_key = f"create:{idempotency_key}" if idempotency_key else None
        await accept_message(request, chat, body.message, idempotency_key=first_key)
        chat = await load_chat(request, chat.id, owner)
    return await chat_out(request, chat)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
CURSOR_PATTERN = r"^[0-9]{1,16}_[0-9a-f]{32}$"
"""`<created_at in µs since 1970>_<chat id in hex>`: every string that matches is a cursor
(so the document's pattern is the whole rule), up to the year 2286."""


def _cursor(chat: ChatSummary) -> str:
    return f"{(chat.created_at - _EPOCH) // _MICROSECOND}_{chat.id.hex}"


def _parse_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    created, chat_id = cursor.split("_")
    return _EPOCH + int(created) * _MICROSECOND, uuid.UUID(hex=chat_id)


@router.get("", response_model=ChatList)
async def list_chats(
    key: BearerKey,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[str | None, Query(pattern=CURSOR_PATTERN)] = None,
    include_children: Annotated[
        bool, Query(description="List subagents (chats a chat spawned) too, not only roots.")
    ] = False,
) -> Response:
    """Your chats, newest first, as summaries (`GET /chats/{id}` has the rest): root chats
    only, unless `include_children`."""
    page = await owned_chats(
        request,
        key,
        limit=limit,
        before=_parse_cursor(before) if before else None,
        include_children=include_children,
    )
    chats = ChatList(
        chats=page.rows,
        has_more=page.more,
        next_before=_cursor(page.rows[-1]) if page.more else None,
    )
    return _prepared(chats)


@router.get("/{chat_id}", response_model=ChatOut)
async def get_chat(chat: OwnedChatView) -> Response:
    """One chat with its status, last error, pending tool calls, queue and usage."""
    return _prepared(chat)


def _prepared(body: BaseModel) -> Response:
    """`body` as JSON, serialized here: FastAPI would validate a returned model against the
    route's `response_model` (kept for the document) before serializing it the same way."""
    return Response(body.model_dump_json(), media_type="application/json")


@router.patch("/{chat_id}", response_model=ChatOut)
async def change_chat(chat: OwnedChat, body: ChatSettings, request: Request) -> ChatOut:
    """Change the chat's title, tool policy or budget; a running turn uses the new policy
    and budget from its next step."""
    state = state_of(request)
    set_budget = "budget_usd" in body.model_fields_set
    if body.budget_usd is not None:
        refuse_unpriced(state.prices, chat, "budget_usd")
    changed = await state.chats.update_settings(
        chat.id,
        chat.owner,
        title=body.title,
        tool_policy=body.tool_policy,
        set_budget=set_budget,
        budget_usd=body.budget_usd,
    )
    if changed is None:
        raise ApiError(404, "chat_not_found", f"chat {chat.id} not found")
    return await chat_out(request, changed)
