"""The chat a response runs in, set up: a new chat made from the request's settings (within
the owner's quotas, once per Idempotency-Key), or a continued chat given them; and the
conversation a client restated, saved before its message."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from api.errors import ApiError
from api.idempotency import check_same_request
from api.open_responses.continuation import unstored_deadline
from api.open_responses.inputs import HistoryMessage
from api.open_responses.model_names import resolve_model
from api.open_responses.requests import CreateResponse
from api.open_responses.turn_settings import TurnSettings, mcp_servers_of, tool_policy_of
from api.state import GatewayState
from chatd.store.chat_creations import ChatCreations
from chatd.store.chats import ChatRecord
from chatd.store.events import Conn

__all__ = ["NewChat", "new_chat", "reconfigured", "save_history"]


@dataclass(frozen=True)
class NewChat:
    """What a response that starts a chat makes it from."""

    owner: str
    body: CreateResponse
    settings: TurnSettings
    idempotency_key: str | None
    digest: str


async def save_history(
    state: GatewayState,
    conn: Conn,
    chat_id: uuid.UUID,
    response_id: str,
    history: list[HistoryMessage],
) -> None:
    """The input's earlier items, as the chat's transcript before the new message."""
    for index, message in enumerate(history):
        await state.transcript.save(
            chat_id,
            turn_id=f"input:{response_id}",
            step_key=f"input:{response_id}:{index}",
            role=message.role,
            parts=message.parts,
            conn=conn,
        )


async def new_chat(state: GatewayState, new: NewChat, conn: Conn) -> tuple[ChatRecord, bool]:
    """The chat a response without a previous one starts, and whether its first turn was
    admitted here (past the owner's quotas). Under an Idempotency-Key, a retry whose first
    call died before writing the response's row gets the chat that call made (and the
    message it stored under the same key), admitted when its message is stored."""
    owner, body, settings = new.owner, new.body, new.settings
    chat_id = None
    if new.idempotency_key is not None:
        key = f"response:{new.idempotency_key}"
        claim = await ChatCreations(state.pool).claim(owner, key, new.digest)
        check_same_request(claim.request_digest, new.digest)
        chat_id = claim.chat_id
    admitted = chat_id is None or await state.chats.get(chat_id, owner) is None
    if admitted:
        await state.message_gate.admit_turn(owner)
    chat = await state.chats.create(
        conn=conn,
        chat_id=chat_id,
        owner=owner,
        discard_at=None if body.store else unstored_deadline(),
        model=settings.model,
        system_prompt=settings.system,
        dynamic_tools=settings.tools,
        tool_use=settings.tool_use,
        active_tools=body.chatd_tools or [],
        compaction_threshold=settings.compaction_threshold,
        tool_policy=tool_policy_of(body),
        mcp_servers=mcp_servers_of(state, body),
        subagents=body.chatd_subagents,
        fallback_models=[
            resolve_model(name, state.model_aliases) for name in body.chatd_fallback_models or []
        ],
    )
    return chat, admitted


async def reconfigured(state: GatewayState, chat: ChatRecord, settings: TurnSettings) -> ChatRecord:
    """The continued chat with this request's settings (rewritten only if they differ)."""
    current = TurnSettings(
        chat.model,
        chat.system_prompt,
        chat.dynamic_tools,
        chat.tool_use,
        chat.compaction_threshold,
    )
    if current == settings:
        return chat
    reconfigured = await state.chats.reconfigure(
        chat.id,
        model=settings.model,
        system_prompt=settings.system,
        dynamic_tools=settings.tools,
        tool_use=settings.tool_use,
        compaction_threshold=settings.compaction_threshold,
    )
    if reconfigured is None:
        raise ApiError(409, "response_in_progress", "the previous response is still in progress")
    return reconfigured
