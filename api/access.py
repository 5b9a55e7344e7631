"""Finding a chat on behalf of its owner."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Depends, Request

from api.auth import current_owner
from api.errors import ApiError
from api.schemas import ChatOut
from api.state import state_of
from chatd.store.chats import ChatRecord

__all__ = ["Owner", "chat_out", "load_chat"]

Owner = Annotated[str, Depends(current_owner)]
"""The authenticated owner of the request."""


async def load_chat(request: Request, chat_id: uuid.UUID, owner: str) -> ChatRecord:
    """The owner's chat; another owner's chat is a 404 like a missing one."""
    chat = await state_of(request).chats.get(chat_id, owner)
    if chat is None:
        raise ApiError(404, "chat_not_found", f"chat {chat_id} not found")
    return chat


async def chat_out(request: Request, chat: ChatRecord) -> ChatOut:
    """The API view of a chat, with its queue."""
    return ChatOut.of(chat, await state_of(request).transcript.queued(chat.id))
