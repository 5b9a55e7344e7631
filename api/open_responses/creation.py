"""Making a response: the chat it continues (or a new one, or a fork), the turn's settings,
and the client input handed to the chat through the same doors as the native API's.

A chain of responses is a chat. A response whose input is a user message starts a turn (or
waits behind the running one); a response whose input answers the previous response's
function calls resumes that turn through the validated tool-results update.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import partial

from starlette.requests import HTTPConnection

from api.budgets import refuse_unpriced_models
from api.idempotency import check_same_request, request_digest
from api.open_responses.budget_resume import resume_on_budget
from api.open_responses.call_answers import answer_calls
from api.open_responses.chat_setup import NewChat, new_chat, reconfigured, save_history
from api.open_responses.continuation import (
    chat_to_continue,
    refuse_unless_turn_can_begin,
)
from api.open_responses.inputs import ParsedInput, parse_input
from api.open_responses.model_names import resolve_model
from api.open_responses.prefixes import (
    PrefixMatch,
    conversation_of,
    matched_prefix,
    remember,
    retried_response,
)
from api.open_responses.references import with_references_resolved
from api.open_responses.requests import CreateResponse
from api.open_responses.turn_settings import echoed_request, turn_settings_of
from api.sending import hand_over_stored, store_message
from api.state import state_of
from chatd.store.chats import ChatRecord
from chatd.store.responses import NewResponse, ResponseRecord, new_response_id

__all__ = ["create_response"]


async def create_response(
    request: HTTPConnection,
    owner: str,
    key: str,
    body: CreateResponse,
    idempotency_key: str | None,
    connection_responses: AbstractSet[str] = frozenset(),
    on_chat: Callable[[uuid.UUID], None] = lambda _chat_id: None,
) -> ResponseRecord:
    """Store the response and hand its input to the chat; a retry with the same
    Idempotency-Key (and body), or the same request of the same session just after
    (`retried_response`), gets the response the first call made.

    `connection_responses` are the ids of those a WebSocket made: the only way to continue
    a `store: false` one. `on_chat` is told the response's chat once its rows are
    committed, before the input is handed over (which waits for the chat's workflow): a
    stream takes its slot meanwhile."""
    state = state_of(request)
    digest = request_digest(body)
    if idempotency_key is not None:
        earlier = await state.responses.by_key(owner, idempotency_key)
        if earlier is not None:
            check_same_request(earlier.request_digest, digest)
            return earlier
    body = body.model_copy(
        update={"input": await with_references_resolved(state, owner, body.input)}
    )
    conversation = conversation_of(body)
    if idempotency_key is None:
        retried = await retried_response(state, owner, body, conversation)
        if retried is not None:
            return retried
    matched = await matched_prefix(state, owner, body, conversation)
    record = await _created(
        request,
        _Request(owner, key, body, idempotency_key, digest, matched),
        connection_responses,
        on_chat,
    )
    await remember(state, owner, record, conversation)
    return record


@dataclass(frozen=True)
class _Request:
    """A `POST /v1/responses` as it is being served: who sent what, and the stored
    conversation its input continues, if any."""

    owner: str
    key: str
    body: CreateResponse
    idempotency_key: str | None
    digest: str
    matched: PrefixMatch | None


async def _created(
    request: HTTPConnection,
    asked: _Request,
    connection_responses: AbstractSet[str],
    on_chat: Callable[[uuid.UUID], None],
) -> ResponseRecord:
    """The response's chat found (or none yet) and its input parsed; then either the
    answers its waiting turn takes, or a message sent."""
    state = state_of(request)
    body, matched = asked.body, asked.matched
    response_id = new_response_id()
    seal = await state.compaction_seal()
    unseal = partial(seal.open, asked.owner)
    raw = matched.rest if matched else body.input
    parsed = parse_input(raw, response_id.removeprefix("resp_"), unseal)
    if matched is not None:
        chat: ChatRecord | None = matched.chat
    else:
        chat = await chat_to_continue(
            state, asked.owner, body, parsed, unseal, connection_responses
        )
    base = NewResponse(
        id=response_id,
        chat_id=uuid.UUID(int=0),
        owner=asked.owner,
        turn_id="",
        after_message_id=None,
        previous_response_id=matched.response.id if matched else body.previous_response_id,
        request=echoed_request(body),
        input_items=parsed.items,
        idempotency_key=asked.idempotency_key,
        request_digest=asked.digest,
        store=body.store,
    )
    if chat is not None and chat.pending_budget is not None:
        on_chat(chat.id)
        cap = body.chatd_max_cost_usd
        return await resume_on_budget(request, asked.key, chat, parsed, base, cap)
    if chat is not None and chat.status == "requires_action":
        on_chat(chat.id)
        return await answer_calls(request, asked.key, chat, parsed, base)
    refuse_unless_turn_can_begin(chat, parsed)
    return await _send_message(request, asked, chat, parsed, base, on_chat)


async def _send_message(
    request: HTTPConnection,
    asked: _Request,
    chat: ChatRecord | None,
    parsed: ParsedInput,
    base: NewResponse,
    on_chat: Callable[[uuid.UUID], None],
) -> ResponseRecord:
    """The input stored as the chat's next message (in a new chat if none), with the
    response's row, in one transaction, then handed to the chat's turn."""
    state = state_of(request)
    body, matched, idempotency_key = asked.body, asked.matched, asked.idempotency_key
    model = resolve_model(body.model, state.model_aliases)
    system = [*(matched.system if matched else []), *parsed.system]
    settings = turn_settings_of(body, model, system)
    cap = body.chatd_max_cost_usd
    if cap is not None:
        refuse_unpriced_models(state.prices, [settings.model], "chatd:max_cost_usd")
    message = parsed.message
    if message is not None and cap is not None:
        message = message.model_copy(update={"max_cost_usd": cap})
    with contextlib.ExitStack() as sending:
        # One commit for the chat (when new), the message, its history and the response's
        # row; a message refused (past the quotas) leaves none of them.
        async with state.pool.acquire() as conn, conn.transaction():
            admitted = False  # a new chat's first message was admitted with the chat
            if chat is None:
                new = NewChat(asked.owner, body, settings, idempotency_key, asked.digest)
                chat, admitted = await new_chat(state, new, conn)
            else:
                chat = await reconfigured(state, chat, settings)
            sending.enter_context(state.chat_sends.slot(chat.id))
            if message is not None:
                queued, created = await store_message(
                    request, chat, message, idempotency_key, admitted=admitted, conn=conn
                )
            else:  # the turn begins with the client's function results, in a new chat
                queued, created = await state.transcript.enqueue(
                    chat.id,
                    list(parsed.results),
                    idempotency_key,
                    asked.digest,
                    conn=conn,
                    max_cost_usd=cap,
                )
            await save_history(state, conn, chat.id, base.id, parsed.history if created else [])
            answered = [r.tool_call_id for r in parsed.results]
            update = {"chat_id": chat.id, "turn_id": str(queued.id), "answered_call_ids": answered}
            record, _ = await state.responses.create(base.model_copy(update=update), conn)
        on_chat(chat.id)
        # A stream (or a response waited for to its end) follows the turn's events anyway:
        # only `background` answers with the turn's status, once it has begun.
        await hand_over_stored(request, chat, queued, created, wait_for_begin=body.background)
    if not created:  # a retry: the first call's message may have had its turn already
        await state.responses.end_if_turn_over(record)
        record = await state.responses.reread(record.id) or record
    return record
