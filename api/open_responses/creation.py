"""Making a response: the chat it continues (or a new one, or a fork), the turn's settings,
and the client input handed to the chat through the same doors as the native API's.

A chain of responses is a chat. A response whose input is a user message starts a turn (or
waits behind the running one); a response whose input answers the previous response's
function calls resumes that turn through the validated tool-results update.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from starlette.requests import HTTPConnection

from api.errors import ApiError
from api.idempotency import check_same_request, request_digest
from api.open_responses.inputs import HistoryMessage, ParsedInput, parse_input
from api.open_responses.model_names import resolve_model
from api.open_responses.requests import AllowedTools, CreateResponse, SpecificFunction
from api.open_responses.resource import APPROVAL_PREFIX
from api.routes.messages import hand_over_stored, store_message
from api.state import GatewayState, state_of
from api.turns import submit_tool_approvals, submit_tool_results
from chatd.models import ModelConfig, WebSearchConfig
from chatd.store.chat_creations import ChatCreations
from chatd.store.chats import ChatRecord, DynamicTool
from chatd.store.client_results import ClientResultStaging
from chatd.store.events import Conn
from chatd.store.forks import ForkRefused, ForkStore
from chatd.store.responses import NewResponse, ResponseRecord, new_response_id
from chatd.tool_policy import PolicyDecision
from chatd.tool_use import ToolUse
from chatd.tools.names import MCP_SEPARATOR
from workflows.payloads import SubmittedToolResult, SubmitToolApprovalsInput, ToolApproval

__all__ = [
    "UNSTORED_LIFETIME",
    "conversation_end",
    "create_response",
    "previous_not_found",
    "unstored_deadline",
]

UNSTORED_LIFETIME = timedelta(minutes=65)
"""The latest a `store: false` response's chat is deleted (once its turn has ended): a
WebSocket, the one way to continue it, lives at most 60 minutes. Its connection's end, or
the end of the HTTP request that made it, brings that forward to then."""

_THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384}
"""Anthropic's thinking budget for a Responses `reasoning.effort`."""


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
    Idempotency-Key (and body) gets the response the first call made.

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
    model = _model(body, resolve_model(body.model, state.model_aliases))
    response_id = new_response_id()
    seal = await state.compaction_seal()
    parsed = parse_input(body.input, response_id.removeprefix("resp_"), partial(seal.open, owner))
    chat = await _continued_chat(state, owner, body, connection_responses)
    if chat is None and parsed.message is None:
        chat = await _waiting_on_answers(state, owner, parsed)
    base = NewResponse(
        id=response_id,
        chat_id=uuid.UUID(int=0),
        owner=owner,
        turn_id="",
        after_message_id=None,
        previous_response_id=body.previous_response_id,
        request=_echoed(body),
        input_items=parsed.items,
        idempotency_key=idempotency_key,
        request_digest=digest,
        store=body.store,
    )
    if chat is not None and chat.status == "requires_action":
        on_chat(chat.id)
        return await _answer_calls(request, key, chat, parsed, base)
    if parsed.message is None:
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
    system = "\n\n".join(t for t in [body.instructions or "", *parsed.system] if t) or None
    settings = _TurnSettings(
        model,
        system,
        _dynamic_tools(body),
        _tool_use(body),
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
            queued, created = await store_message(
                request, chat, parsed.message, idempotency_key, admitted=admitted, conn=conn
            )
            await _save_history(
                state, conn, chat.id, response_id, parsed.history if created else []
            )
            record, _ = await state.responses.create(
                base.model_copy(update={"chat_id": chat.id, "turn_id": str(queued.id)}), conn
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
class _TurnSettings:
    """What a request sets for its turn: the model, the system prompt, the client tools,
    how the model may call tools, and when the context is compacted."""

    model: ModelConfig
    system: str | None
    tools: list[DynamicTool]
    tool_use: ToolUse
    compaction_threshold: float


@dataclass(frozen=True)
class _NewChat:
    """What a response that starts a chat makes it from."""

    owner: str
    body: CreateResponse
    settings: _TurnSettings
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
        tool_policy=_tool_policy(body),
        mcp_servers=_mcp_servers(state, body),
        subagents=body.chatd_subagents,
        fallback_models=[
            resolve_model(name, state.model_aliases) for name in body.chatd_fallback_models or []
        ],
    )
    return chat, admitted


async def _reconfigured(
    state: GatewayState, chat: ChatRecord, settings: _TurnSettings
) -> ChatRecord:
    """The continued chat with this request's settings (rewritten only if they differ)."""
    current = _TurnSettings(
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


async def _continued_chat(
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
        chat = await _owned_chat(state, owner, conversation)
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


async def _waiting_on_answers(
    state: GatewayState, owner: str, parsed: ParsedInput
) -> ChatRecord | None:
    """The chat waiting on the calls the input answers, for clients that send their whole
    conversation each time instead of `previous_response_id`."""
    call_ids = [o.call_id for o in parsed.outputs] + [
        a.approval_request_id.removeprefix(APPROVAL_PREFIX) for a in parsed.approvals
    ]
    chat = await state.chats.waiting_on(owner, call_ids)
    if chat is None:
        raise ApiError(
            400,
            "no_pending_calls",
            f"no response waits for the results of calls {call_ids}: answer a response's"
            " function calls while it waits for them (with its previous_response_id, or"
            " the whole conversation), or end the input with a user message",
            {"param": "input"},
        )
    return chat


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


async def _input_end(state: GatewayState, previous: ResponseRecord) -> int:
    """The last transcript message of a response that produced no output: its input."""
    last = await state.responses.last_turn_message_id(previous)
    if last is None:
        raise ApiError(
            409, "response_in_progress", "that response's input is not in the conversation yet"
        )
    return last


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
            results = [
                SubmittedToolResult(tool_call_id=o.call_id, output=o.text()) for o in parsed.outputs
            ]
            await submit_tool_results(
                state.temporal, ClientResultStaging(state.pool), chat, results
            )
        if parsed.approvals:
            await _approve(state, key, chat, parsed)
    except ApiError:
        await state.responses.discard(record.id)
        raise
    return record


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


async def _owned_chat(state: GatewayState, owner: str, chat_id: str) -> ChatRecord | None:
    try:
        key = uuid.UUID(chat_id)
    except ValueError:
        return None
    return await state.chats.get(key, owner)


def _model(body: CreateResponse, model: ModelConfig) -> ModelConfig:
    """The model with the request's sampling, output limit and reasoning effort."""
    effort = body.reasoning.effort if body.reasoning else None
    changes: dict[str, Any] = {
        "max_output_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
    }
    if body.text is not None:
        changes["output_format"] = body.text.output_format()
        changes["verbosity"] = body.text.verbosity
    search = body.web_search()
    if search is not None:
        domains = search.filters.allowed_domains if search.filters else None
        changes["web_search"] = WebSearchConfig(allowed_domains=domains)
        if model.provider == "openai":
            changes["openai_api"] = "responses"  # OpenAI searches on its Responses API only
    if effort and effort != "none":
        if model.provider == "anthropic":
            changes["thinking_budget_tokens"] = _THINKING_BUDGETS[effort]
        else:
            changes["reasoning_effort"] = effort
    return model.model_copy(update={k: v for k, v in changes.items() if v is not None})


def _tool_use(body: CreateResponse) -> ToolUse:
    """`tool_choice` and `parallel_tool_calls` as the chat keeps them."""
    choice = body.tool_choice
    parallel = body.parallel_tool_calls
    if isinstance(choice, SpecificFunction):
        return ToolUse(mode="required", only=[choice.name], parallel=parallel)
    if isinstance(choice, AllowedTools):
        return ToolUse(mode=choice.mode, only=[t.name for t in choice.tools], parallel=parallel)
    return ToolUse(mode=choice, parallel=parallel)


def _dynamic_tools(body: CreateResponse) -> list[DynamicTool]:
    return [
        DynamicTool(
            name=tool.name,
            description=tool.description or "",
            input_schema=tool.parameters or {"type": "object"},
        )
        for tool in body.function_tools()
    ]


def _mcp_servers(state: GatewayState, body: CreateResponse) -> list[str]:
    """`chatd:mcp_servers` and the `mcp` tools' `server_label`s: servers the operator
    configured, by name."""
    names = [*(body.chatd_mcp_servers or []), *(t.server_label for t in body.mcp_tools())]
    unknown = [n for n in names if n not in state.mcp_servers]
    if unknown:
        raise ApiError(
            400,
            "invalid_request",
            f"unknown MCP servers {unknown}: a chat selects servers the operator configured",
            {"param": "tools", "known": sorted(state.mcp_servers)},
        )
    return list(dict.fromkeys(names))


def _tool_policy(body: CreateResponse) -> dict[str, PolicyDecision]:
    """`chatd:tool_policy`, with each `mcp` tool's `require_approval` for its server's
    tools."""
    policy: dict[str, PolicyDecision] = {}
    for tool in body.mcp_tools():
        if tool.require_approval is not None:
            decision: PolicyDecision = "ask" if tool.require_approval == "always" else "auto"
            policy[f"{tool.server_label}{MCP_SEPARATOR}*"] = decision
    return {**policy, **(body.chatd_tool_policy or {})}


def _echoed(body: CreateResponse) -> dict[str, Any]:
    """The request fields a Response object repeats."""
    return {
        "model": body.model,
        "instructions": body.instructions,
        "tools": [tool.model_dump() for tool in body.function_tools()],
        "tool_choice": body.tool_choice
        if isinstance(body.tool_choice, str)
        else body.tool_choice.model_dump(),
        "parallel_tool_calls": body.parallel_tool_calls,
        "truncation": body.truncation,
        "max_output_tokens": body.max_output_tokens,
        "reasoning": body.reasoning.model_dump() if body.reasoning else None,
        "metadata": body.metadata,
        "background": body.background,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "text": body.text.model_dump(by_alias=True, exclude_none=True) if body.text else None,
        "service_tier": body.service_tier,
        "prompt_cache_key": body.prompt_cache_key,
        "safety_identifier": body.safety_identifier,
        "user": body.user,
        "chatd:events": body.chatd_events,
    }
