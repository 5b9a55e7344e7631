"""A chat's subagents: the chats it spawned."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from api.access import OwnedChat
from api.schemas import ChatChildren
from api.state import state_of

__all__ = ["router"]

router = APIRouter(prefix="/chats/{chat_id}/children", tags=["chats"])


@router.get("", response_model=ChatChildren)
async def list_children(chat: OwnedChat, request: Request) -> Response:
    """The chat's subagents as summaries, oldest first (the order they were spawned in)."""
    children = await state_of(request).chats.children(chat.id, chat.owner)
    return Response(ChatChildren(data=children).model_dump_json(), media_type="application/json")
