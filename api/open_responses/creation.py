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

from api.errors import ApiError
from api.idempotency import check_same_request, request_digest
from api.open_responses.continuation import (
    chat_to_continue,
    refuse_unless_turn_can_begin,
    unstored_deadline,
)
from api.open_responses.inputs import HistoryMessage, ParsedInput, parse_input, result_media
from api.open_responses.model_names import resolve_model
from api.open_responses.prefixes import (
    PrefixMatch,
    conversation_of,
    matched_prefix,
    remember,
    retried_response,
)
from api.open_responses.references import with_references_resolved
from api.open_responses.requests import CreateResponse, FunctionCallOutputItem
from api.open_responses.resource import APPROVAL_PREFIX
from api.open_responses.turn_settings import (
    TurnSettings,
    dynamic_tools_of,
    echoed_request,
    mcp_servers_of,
    request_model,
    tool_policy_of,
    tool_use_of,
)
from api.routes.messages import hand_over_stored, store_message
from api.state import GatewayState, state_of
from api.turns import submit_tool_approvals, submit_tool_results
from chatd.store.chat_creations import ChatCreations
from chatd.store.chats import ChatRecord
from chatd.store.client_results import ClientResultStaging
from chatd.store.events import Conn
from chatd.store.responses import NewResponse, ResponseRecord, new_response_id
from workflows.payloads import SubmittedToolResult, SubmitToolApprovalsInput, ToolApproval

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
    state = state_of(request)
    owner, key, body, idempotency_key, digest = (
        asked.owner, asked.key, asked.body, asked.idempotency_key, asked.digest
    )  # fmt: skip
    model = request_model(body, resolve_model(body.model, state.model_aliases))
    response_id = new_response_id()
    seal = await state.compaction_seal()
    unseal = partial(seal.open, owner)
    matched = asked.matched
    raw = matched.rest if matched else body.input
    parsed = parse_input(raw, response_id.removeprefix("resp_"), unseal)
    if matched is not None:
        chat: ChatRecord | None = matched.chat
    else:
        chat = await chat_to_continue(state, owner, body, parsed, unseal, connection_responses)
    base = NewResponse(
        id=response_id,
        chat_id=uuid.UUID(int=0),
        owner=owner,
        turn_id="",
        after_message_id=None,
        previous_response_id=matched.response.id if matched else body.previous_response_id,
        request=echoed_request(body),
        input_items=parsed.items,
        idempotency_key=idempotency_key,
        request_digest=digest,
        store=body.store,
    )
    if chat is not None and chat.status == "requires_action":
        on_chat(chat.id)
        return await _answer_calls(request, key, chat, parsed, base)
    refuse_unless_turn_can_begin(chat, parsed)
    given = [body.instructions or "", *(matched.system if matched else []), *parsed.system]
    system = "\n\n".join(t for t in given if t) or None
    settings = TurnSettings(
        model,
        system,
        dynamic_tools_of(body),
        tool_use_of(body),
        # "auto": compact at 70 % of the window; "disabled": never, so an overflow fails.
        compaction_threshold=0.7 if body.truncation == "auto" else 0.0,
    )
    with contextlib.ExitStack() as sending:
        # One commit for the chat (when new), the message, its history and the response's
        # row; a message refused (past the quotas) leaves none of them.
        async with state.pool.acquire() as conn, conn.transaction():
            admitted = False  # a new chat's first message was admitted with the chat
            if chat is None:
                new = _NewChat(owner, body, settings, idempotency_key, digest)
                chat, admitted = await _new_chat(state, new, conn)
            else:
                chat = await _reconfigured(state, chat, settings)
            sending.enter_context(state.chat_sends.slot(chat.id))
            if parsed.message is not None:
                queued, created = await store_message(
                    request, chat, parsed.message, idempotency_key, admitted=admitted, conn=conn
                )
            else:  # the turn begins with the client's function results, in a new chat
                queued, created = await state.transcript.enqueue(
                    chat.id, list(parsed.results), idempotency_key, digest, conn=conn
                )
            await _save_history(
                state, conn, chat.id, response_id, parsed.history if created else []
            )
            answered = [r.tool_call_id for r in parsed.results]
            record, _ = await state.responses.create(
                base.model_copy(
                    update={
                        "chat_id": chat.id,
                        "turn_id": str(queued.id),
                        "answered_call_ids": answered,
                    }
                ),
                conn,
            )
        on_chat(chat.id)
        # A stream (or a response waited for to its end) follows the turn's events anyway:
        # only `background` answers with the turn's status, once it has begun.
        await hand_over_stored(request, chat, queued, created, wait_for_begin=body.background)
    if not created:  # a retry: the first call's message may have had its turn already
        await state.responses.end_if_turn_over(record)
        record = await state.responses.reread(record.id) or record
    return record


@dataclass(frozen=True)
class _NewChat:
    """What a response that starts a chat makes it from."""

    owner: str
    body: CreateResponse
    settings: TurnSettings
    idempotency_key: str | None
    digest: str


async def _save_history(
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


async def _new_chat(state: GatewayState, new: _NewChat, conn: Conn) -> tuple[ChatRecord, bool]:
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


async def _reconfigured(
    state: GatewayState, chat: ChatRecord, settings: TurnSettings
) -> ChatRecord:
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


async def _answer_calls(
    request: HTTPConnection, key: str, chat: ChatRecord, parsed: ParsedInput, base: NewResponse
) -> ResponseRecord:
    """Hand the client's answers to the turn waiting for them: function results through the
    validated tool-results update, a person's decisions through the approvals update (both
    first submission wins; a missing, extra or unknown id is a 400)."""
    state = state_of(request)
    pending = chat.pending_tool_calls or []
    calls = [c["id"] for c in pending if c.get("action") == "client_tool"]
    asks = [c["id"] for c in pending if c.get("action") == "approval"]
    if parsed.message is not None or not (parsed.outputs or parsed.approvals):
        raise ApiError(
            400,
            "function_calls_pending",
            f"the previous response waits for the results of function calls {calls} and"
            f" approvals of calls {asks}: send a function_call_output or mcp_approval_response"
            " item for each (and nothing else)",
            {"param": "input", "pending_call_ids": calls + asks},
        )
    answered = [o.call_id for o in parsed.outputs]
    decided = [a.approval_request_id.removeprefix(APPROVAL_PREFIX) for a in parsed.approvals]
    for given, expected, kind in ((answered, calls, "function_call_output"),
                                  (decided, asks, "mcp_approval_response")):  # fmt: skip
        if sorted(given) != sorted(expected):
            raise ApiError(
                400,
                "invalid_tool_results",
                f"{kind} items must answer each pending call exactly once:"
                f" expected {expected}, received {given}",
                {"param": "input", "expected": expected, "received": given},
            )
    assert chat.turn_id is not None
    record, created = await state.responses.create(
        base.model_copy(
            update={
                "chat_id": chat.id,
                "turn_id": chat.turn_id,
                "after_message_id": await state.responses.last_message_id(chat.id),
                "answered_call_ids": answered,
            }
        )
    )
    if not created:
        return record
    try:
        if parsed.outputs:
            results = [_submitted(index, output) for index, output in enumerate(parsed.outputs)]
            await submit_tool_results(
                state.temporal, ClientResultStaging(state.pool), chat, results
            )
        if parsed.approvals:
            await _approve(state, key, chat, parsed)
    except ApiError:
        await state.responses.discard(record.id)
        raise
    return record


def _submitted(index: int, output: FunctionCallOutputItem) -> SubmittedToolResult:
    """A function result as the turn takes it: text, and an image or file if it has one."""
    media = result_media(index, output)
    return SubmittedToolResult(
        tool_call_id=output.call_id,
        output=output.text(),
        media_type=media.media_type if media else None,
        data=media.data if media else None,
    )


async def _approve(state: GatewayState, key: str, chat: ChatRecord, parsed: ParsedInput) -> None:
    """The decisions, recorded with the key that sent them (the approval audit)."""
    key_id = await state.keys.id_of(key)
    decisions = [
        ToolApproval(
            tool_call_id=a.approval_request_id.removeprefix(APPROVAL_PREFIX),
            decision="approve" if a.approve else "deny",
            message=None if a.approve else a.reason,
        )
        for a in parsed.approvals
    ]
    approvals = SubmitToolApprovalsInput(
        decisions=decisions, key_id=str(key_id) if key_id else None, owner=chat.owner
    )
    await submit_tool_approvals(state.temporal, str(chat.id), approvals)
