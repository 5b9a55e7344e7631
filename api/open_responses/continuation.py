"""The chat a response continues: by `previous_response_id` (its chat, or a fork of it at
that response), by `conversation`, or the chat that waits on the function results a client
sends with its whole conversation."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime, timedelta

from api.errors import ApiError
from api.open_responses.inputs import ParsedInput, Unseal, restart_from_copy
from api.open_responses.requests import CreateResponse
from api.open_responses.resource import APPROVAL_PREFIX
from api.state import GatewayState
from chatd.settings import unstored_keep
from chatd.store.chats import ChatRecord
from chatd.store.forks import ForkRefused, ForkStore
from chatd.store.responses import ResponseRecord

__all__ = [
    "UNSTORED_LIFETIME",
    "chat_to_continue",
    "continued_chat",
    "conversation_end",
    "idle_deadline",
    "owned_chat",
    "previous_not_found",
    "refuse_unless_turn_can_begin",
    "unstored_deadline",
    "waiting_on_answers",
]

UNSTORED_LIFETIME = timedelta(minutes=65)
"""The latest a `store: false` response's chat is deleted (once its turn has ended): a
WebSocket, the one way to continue it, lives at most 60 minutes. Its connection's end, or
the end of the HTTP request that made it, brings that forward to then."""


async def chat_to_continue(
    state: GatewayState,
    owner: str,
    body: CreateResponse,
    parsed: ParsedInput,
    unseal: Unseal,
    connection_responses: AbstractSet[str],
) -> ChatRecord | None:
    """The chat the response continues (None: a new one). Function results with no previous
    response go to the chat that waits on them; when none does, they end a stateless
    client's whole conversation, which `parsed` then holds as the new chat's history."""
    chat = await continued_chat(state, owner, body, connection_responses)
    if chat is None and parsed.message is None:
        chat = await waiting_on_answers(state, owner, parsed)
        if chat is None:
            restart_from_copy(parsed, unseal)
    return chat


def refuse_unless_turn_can_begin(chat: ChatRecord | None, parsed: ParsedInput) -> None:
    """A 400 for no input or answers nothing waits on, a 409 while the continued chat's turn
    runs."""
    if parsed.message is None and not (parsed.results or parsed.outputs or parsed.approvals):
        raise ApiError(
            400,
            "invalid_request",
            "input: give at least one item (an empty input only carries on a turn paused on"
            " its budget)",
            {"param": "input"},
        )
    if parsed.message is None and not parsed.results:
        raise ApiError(
            400,
            "no_pending_calls",
            "function_call_output items answer the previous response's function calls,"
            " and it made none that wait for an answer",
            {"param": "input"},
        )
    if chat is not None and chat.status == "running":  # an idle chat waits, or failed
        raise ApiError(
            409,
            "response_in_progress",
            "the previous response is still in progress: wait for it, or cancel it",
            {"param": "previous_response_id", "status": chat.status},
        )


async def continued_chat(
    state: GatewayState,
    owner: str,
    body: CreateResponse,
    connection_responses: AbstractSet[str],
) -> ChatRecord | None:
    """The chat `previous_response_id` or `conversation` continues. A previous response that
    is not its chat's latest forks the chat at that response's end; so does one stored
    differently (`store`) from this one, so that neither chat holds the other's kind."""
    conversation = body.conversation_id()
    if conversation is not None:
        chat = await owned_chat(state, owner, conversation)
        if chat is None:
            raise ApiError(
                404, "conversation_not_found", f"conversation {conversation!r} not found",
                {"param": "conversation"},
            )  # fmt: skip
        return chat
    if body.previous_response_id is None:
        return None
    if body.previous_response_id in connection_responses:
        previous = await state.responses.reread(body.previous_response_id)
    else:
        previous = await state.responses.get(owner, body.previous_response_id)
    if previous is None:
        raise previous_not_found(body.previous_response_id)
    latest, chat = await asyncio.gather(
        state.responses.latest_in_chat(previous.chat_id), state.chats.get(previous.chat_id, owner)
    )
    if latest == previous.id and previous.store == body.store:
        return chat
    fork = await _fork_at(state, owner, previous)
    if not body.store:
        await state.chats.discard_after(fork.id, unstored_deadline())
    return fork


async def waiting_on_answers(
    state: GatewayState, owner: str, parsed: ParsedInput
) -> ChatRecord | None:
    """The chat waiting on the calls the input answers, for clients that send their whole
    conversation each time instead of `previous_response_id` (None: none waits)."""
    call_ids = [o.call_id for o in parsed.outputs] + [
        a.approval_request_id.removeprefix(APPROVAL_PREFIX) for a in parsed.approvals
    ]
    return await state.chats.waiting_on(owner, call_ids)


async def _fork_at(state: GatewayState, owner: str, previous: ResponseRecord) -> ChatRecord:
    """A new chat whose transcript is the conversation up to the end of `previous`."""
    last = await conversation_end(state, previous, "a continuation can fork it")
    try:
        fork = await ForkStore(state.pool).fork(
            previous.chat_id,
            owner,
            last,
            title=None,
            idempotency_key=None,
            request_digest="",
        )
    except ForkRefused as err:
        raise ApiError(409, err.code, err.message, {"param": "previous_response_id"}) from err
    chat = await state.chats.get(fork.chat_id, owner)
    assert chat is not None
    return chat


async def conversation_end(state: GatewayState, previous: ResponseRecord, then: str) -> int:
    """The last transcript message of the conversation up to the end of `previous` (its
    output's last, or its input's); a 409 while it is in progress (`then`: what the
    client may do once it has ended)."""
    if previous.ended_at is None:
        raise ApiError(
            409,
            "response_in_progress",
            f"that response is still in progress: {then} once it ends",
            {"param": "previous_response_id"},
        )
    messages = await state.responses.output_messages(previous)
    return messages[-1].id if messages else await _input_end(state, previous)


def previous_not_found(response_id: str) -> ApiError:
    return ApiError(
        400,
        "previous_response_not_found",
        f"Previous response with id {response_id!r} not found.",
        {"param": "previous_response_id"},
    )


def unstored_deadline() -> datetime:
    return datetime.now(UTC) + UNSTORED_LIFETIME


def idle_deadline() -> datetime:
    """When a `store: false` chat whose response is over is deleted, unless continued."""
    return datetime.now(UTC) + unstored_keep()


async def _input_end(state: GatewayState, previous: ResponseRecord) -> int:
    """The last transcript message of a response that produced no output: its input."""
    last = await state.responses.last_turn_message_id(previous)
    if last is None:
        raise ApiError(
            409, "response_in_progress", "that response's input is not in the conversation yet"
        )
    return last


async def owned_chat(state: GatewayState, owner: str, chat_id: str) -> ChatRecord | None:
    """The owner's chat `chat_id`; None for one on its way out (a deleted conversation, a
    `store: false` response's chat), which no request may continue."""
    try:
        key = uuid.UUID(chat_id)
    except ValueError:
        return None
    chat = await state.chats.get(key, owner)
    return chat if chat is not None and chat.discard_at is None else None
