"""Finding a chat on behalf of its owner."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request

from api.auth import BearerKey, authenticated, current_owner
from api.errors import ApiError
from api.schemas import ChatOut
from api.state import state_of
from chatd.store.chat_reads import ChatReads
from chatd.store.chats import ChatRecord, ChatSummary
from chatd.store.keys import hash_key
from chatd.store.pages import Page, page_bytes

__all__ = [
    "OwnedChat",
    "OwnedChatView",
    "Owner",
    "add_current_status",
    "chat_out",
    "load_chat",
    "owned_chats",
]

Owner = Annotated[str, Depends(current_owner)]
"""The authenticated owner of the request."""


def _not_found(chat_id: uuid.UUID) -> ApiError:
    return ApiError(404, "chat_not_found", f"chat {chat_id} not found")


async def owned_chat(chat_id: uuid.UUID, request: Request, key: BearerKey) -> ChatRecord:
    """The path's chat, if the request's key is its owner's: the key and the chat in one
    query. 401 for a missing or invalid key; another owner's chat is a 404 like a missing one."""
    owner, chat = await state_of(request).chats.get_with_key(chat_id, hash_key(key))
    await authenticated(request, key, owner)
    if chat is None:
        raise _not_found(chat_id)
    return chat


OwnedChat = Annotated[ChatRecord, Depends(owned_chat)]
"""The chat of the request's path, checked to be the authenticated owner's."""


async def owned_chat_view(chat_id: uuid.UUID, request: Request, key: BearerKey) -> ChatOut:
    """The path's chat as the API shows it, queue included, if the request's key is its
    owner's: the key, the chat and its queue in one query (`OwnedChat`'s answers otherwise)."""
    reads = ChatReads(state_of(request).pool)
    owner, chat = await reads.chat_with_queue(chat_id, hash_key(key), ChatOut)
    await authenticated(request, key, owner)
    if chat is None:
        raise _not_found(chat_id)
    return chat


OwnedChatView = Annotated[ChatOut, Depends(owned_chat_view)]
"""The chat of the request's path as `GET /chats/{id}` shows it, checked as `OwnedChat` is."""


async def owned_chats(
    request: Request,
    key: str,
    *,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None,
    include_children: bool = False,
) -> Page[ChatSummary]:
    """A page of the summaries of the key owner's root chats, or all of them with
    `include_children` (`ChatReads.summaries`): the key and the page in one query. 401 for an
    invalid key."""
    owner, page = await ChatReads(state_of(request).pool).summaries(
        hash_key(key),
        limit=limit,
        before=before,
        max_bytes=page_bytes(),
        include_children=include_children,
    )
    await authenticated(request, key, owner)
    return page


async def load_chat(request: Request, chat_id: uuid.UUID, owner: str) -> ChatRecord:
    """The owner's chat (read again); another owner's chat is a 404 like a missing one."""
    chat = await state_of(request).chats.get(chat_id, owner)
    if chat is None or chat.discard_at is not None:  # a `store: false` response's chat
        raise _not_found(chat_id)
    return chat


async def add_current_status(request: Request, chat: ChatRecord, err: ApiError) -> None:
    """Put the chat's status now into a 409's `detail` (read again: the turn's refusal may
    come from a state the request didn't see)."""
    if err.status == 409:
        current = await load_chat(request, chat.id, chat.owner)
        err.detail.setdefault("status", current.status)


async def chat_out(request: Request, chat: ChatRecord) -> ChatOut:
    """The API view of a chat, with its queue and its subagents' usage."""
    state = state_of(request)
    queued = await state.transcript.queued(chat.id)
    children = await state.chats.children_usage(chat.id)
    return ChatOut.of(chat, queued, children, await state.spend.chat_cost(chat.id))
