"""What the gateway tells a running turn: stop (`interrupt_turn`), the client's tool results,
a person's approvals. Sending a message, which starts or joins a turn, is `api.sending`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from api.errors import ApiError
from chatd.parts import ToolResultPart
from chatd.store.chats import ChatRecord
from chatd.store.client_results import ClientResultStaging
from chatd.store.turns import TurnStore
from workflows.constants import (
    TurnMessages,
    workflow_id,
)
from workflows.controls import (
    INVALID_TOOL_APPROVALS,
    INVALID_TOOL_RESULTS,
    NOT_AWAITING_TOOL_APPROVALS,
    NOT_AWAITING_TOOL_RESULTS,
)
from workflows.payloads import (
    SubmittedToolResult,
    SubmitToolApprovalsInput,
    SubmitToolResultsInput,
)

__all__ = ["interrupt_turn", "submit_tool_approvals", "submit_tool_results"]

log = logging.getLogger("chatd.api.turn_updates")


async def interrupt_turn(client: Client, turns: TurnStore, chat: ChatRecord) -> bool:
    """Signal the chat's running turn to stop; False if no turn is running.

    Then announce it to the worker streaming the turn's step (`chat.turn_id`, as read
    before the signal), which would otherwise learn of the workflow's cancellation only
    with its next heartbeat (up to 0.5 s later).
    """
    handle = client.get_workflow_handle(workflow_id(str(chat.id)))
    try:
        await handle.signal(TurnMessages.INTERRUPT)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    if chat.turn_id is not None:
        try:
            await asyncio.wait_for(turns.announce_interrupt(chat.id, chat.turn_id), 1.0)
        except Exception as err:  # best effort: the signal alone still stops the turn
            log.warning("interrupt of chat %s not announced to workers: %r", chat.id, err)
    return True


async def submit_tool_results(
    client: Client,
    staging: ClientResultStaging,
    chat: ChatRecord,
    results: list[SubmittedToolResult],
) -> None:
    """Stage the client's results in Postgres, then tell the waiting turn their call ids;
    raise `ApiError` 409/400 if refused.

    Only a submission that answers exactly the pending client calls is staged: staging is
    first write wins, so a refused one must not stand in for the next. Of submissions that
    race, the first staged is the one the turn reads, whichever update it accepts.
    """
    names = {c["id"]: c["name"] for c in _client_calls(chat)}
    ids = [r.tool_call_id for r in results]
    if chat.turn_id is None or sorted(ids) != sorted(names):
        expected = list(names)
        raise ApiError(
            400,
            "invalid_tool_results",
            "tool results must answer each pending call exactly once: "
            f"expected {expected}, received {ids}",
            {"expected": expected, "received": ids},
        )
    parts = [
        ToolResultPart(
            tool_call_id=r.tool_call_id,
            name=names[r.tool_call_id],
            output=r.output,
            is_error=r.is_error,
            media_type=r.media_type,
            data=r.data,
        )
        for r in results
    ]
    if not await staging.stage(chat.id, chat.turn_id, parts):
        raise ApiError(409, "not_awaiting_tool_results", "no turn is waiting for tool results")
    handle = client.get_workflow_handle(workflow_id(str(chat.id)))
    try:
        # The SDK types an async handler's result as a coroutine; the value is unused.
        _accepted = await handle.execute_update(
            TurnMessages.SUBMIT_TOOL_RESULTS, SubmitToolResultsInput(tool_call_ids=ids)
        )
    except WorkflowUpdateFailedError as err:
        raise _refusal(err.cause) from err
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ApiError(
                409, "not_awaiting_tool_results", "no turn is waiting for tool results"
            ) from err
        raise


async def submit_tool_approvals(
    client: Client, chat_id: str, approvals: SubmitToolApprovalsInput
) -> None:
    """Hand a person's decisions to the waiting turn; raise `ApiError` 409/400 if refused."""
    handle = client.get_workflow_handle(workflow_id(chat_id))
    try:
        _accepted = await handle.execute_update(TurnMessages.SUBMIT_TOOL_APPROVALS, approvals)
    except WorkflowUpdateFailedError as err:
        raise _refusal(err.cause) from err
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ApiError(
                409, "not_awaiting_tool_approvals", "no turn is waiting for tool approvals"
            ) from err
        raise


def _client_calls(chat: ChatRecord) -> list[dict[str, Any]]:
    """The pending calls the client answers (the rest wait for a person's approval)."""
    return [c for c in chat.pending_tool_calls or [] if c.get("action") == "client_tool"]


_REFUSALS = {
    INVALID_TOOL_RESULTS: (400, "invalid_tool_results"),
    NOT_AWAITING_TOOL_RESULTS: (409, "not_awaiting_tool_results"),
    INVALID_TOOL_APPROVALS: (400, "invalid_tool_approvals"),
    NOT_AWAITING_TOOL_APPROVALS: (409, "not_awaiting_tool_approvals"),
}
"""How the turn's update rejections answer over HTTP, by ApplicationError type."""


def _refusal(cause: BaseException | None) -> ApiError:
    if isinstance(cause, ApplicationError) and cause.type in _REFUSALS:
        status, code = _REFUSALS[cause.type]
        detail = cause.details[0] if cause.details and isinstance(cause.details[0], dict) else {}
        return ApiError(status, code, cause.message, dict(detail))
    return ApiError(409, "tool_answer_refused", str(cause))
