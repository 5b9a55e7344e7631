"""A response whose input answers the function calls or approvals its chat's turn waits
for: handed to that turn through the same validated updates as the native API's."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from api.errors import ApiError
from api.open_responses.inputs import ParsedInput, result_media
from api.open_responses.requests import FunctionCallOutputItem
from api.open_responses.resource import APPROVAL_PREFIX
from api.state import GatewayState, state_of
from api.turn_updates import submit_tool_approvals, submit_tool_results
from chatd.store.chats import ChatRecord
from chatd.store.client_results import ClientResultStaging
from chatd.store.responses import NewResponse, ResponseRecord
from workflows.payloads import SubmittedToolResult, SubmitToolApprovalsInput, ToolApproval

__all__ = ["answer_calls", "response_in_turn"]


async def answer_calls(
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
    record, created = await response_in_turn(state, chat, base, answered)
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


async def response_in_turn(
    state: GatewayState, chat: ChatRecord, base: NewResponse, answered: list[str]
) -> tuple[ResponseRecord, bool]:
    """The row of a response that carries on the chat's waiting turn from its newest
    message (and whether this call wrote it: a retry finds the first one's)."""
    assert chat.turn_id is not None
    return await state.responses.create(
        base.model_copy(
            update={
                "chat_id": chat.id,
                "turn_id": chat.turn_id,
                "after_message_id": await state.responses.last_message_id(chat.id),
                "answered_call_ids": answered,
            }
        )
    )


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
