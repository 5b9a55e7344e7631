"""How the gateway hands a user message to the chat's ChatTurn workflow."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from api.errors import ApiError
from api.hand_overs import HandOvers
from chatd.parts import ToolResultPart
from chatd.store.chats import ChatRecord
from chatd.store.client_results import ClientResultStaging
from chatd.store.transcript import TranscriptStore
from chatd.store.turns import TurnStore
from chatd.telemetry import METRICS
from chatd.turn_starts import hand_over_message, queue_message
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
    SubmitMessageResult,
    SubmittedToolResult,
    SubmitToolApprovalsInput,
    SubmitToolResultsInput,
)

__all__ = [
    "interrupt_turn",
    "submit_message",
    "submit_tool_approvals",
    "submit_tool_results",
    "until_begun",
]

log = logging.getLogger("chatd.api.turns")

HAND_OVER_WAIT_S = 0.5
"""How long a send waits for a worker to take the message before queueing it durably."""
BEGIN_WAIT_S = 0.3
"""How long a send that started a turn waits for its first step to begin it (then the
gateway begins it): with `HAND_OVER_WAIT_S`, a send is answered within a second."""


async def submit_message(
    client: Client,
    task_queue: str,
    transcript: TranscriptStore,
    chat: ChatRecord,
    queued_id: uuid.UUID,
    update_id: str,
    *,
    name_chat: bool,
    hand_overs: HandOvers,
) -> SubmitMessageResult | None:
    """Start a turn for this message or queue it in the running one; None if no worker took
    it in time (or the workers are behind, `HandOvers`), so its signal-with-start goes in the
    background: it starts or joins the chat's turns as soon as a worker runs the workflow.

    The chat's older messages Temporal may not have (their gateway died after storing them)
    are handed over first, so messages are taken in the order sent. `update_id` makes a
    retried call the same update (Temporal deduplicates it); with `name_chat`, a turn the
    message starts also names the chat.
    """
    if not hand_overs.behind:
        try:
            with hand_overs.waiting():
                result = await asyncio.wait_for(
                    _update_in_order(
                        client, task_queue, transcript, chat, queued_id, update_id, name_chat
                    ),
                    HAND_OVER_WAIT_S,
                )
        except RPCError as err:
            if err.status != RPCStatusCode.RESOURCE_EXHAUSTED:  # the run's in-flight updates
                raise
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
            # Our deadline, or the server's (cancelling the call surfaces as the SDK's error).
            hand_overs.fell_behind()
        else:
            return result
    hand_overs.in_background(
        str(queued_id),
        lambda: _queue_in_order(
            client, task_queue, transcript, chat, hand_overs, name_chat=name_chat
        ),
    )
    return None


async def _update_in_order(
    client: Client,
    task_queue: str,
    transcript: TranscriptStore,
    chat: ChatRecord,
    queued_id: uuid.UUID,
    update_id: str,
    name_chat: bool,
) -> SubmitMessageResult:
    """The chat's older messages not handed over yet by signal, then this one by update."""
    waiting = await transcript.not_handed_over(chat.id)
    earlier = waiting[: waiting.index(queued_id)] if queued_id in waiting else waiting
    for message_id in earlier:
        await queue_message(client, task_queue, chat, str(message_id), name_chat=name_chat)
    result = await hand_over_message(
        client, task_queue, chat, str(queued_id), update_id, name_chat=name_chat
    )
    await transcript.handed_over([*earlier, queued_id])
    return result


async def _queue_in_order(
    client: Client,
    task_queue: str,
    transcript: TranscriptStore,
    chat: ChatRecord,
    hand_overs: HandOvers,
    *,
    name_chat: bool,
) -> None:
    """Every message of the chat not handed over yet (this send's among them, unless a
    later send's hand-over took it already), oldest first, by signal-with-start; marked in
    the gateway's next batch of marks."""
    waiting = await transcript.not_handed_over(chat.id)
    for message_id in waiting:
        await queue_message(client, task_queue, chat, str(message_id), name_chat=name_chat)
    hand_overs.mark_soon(transcript, waiting)


async def until_begun(
    transcript: TranscriptStore,
    turns: TurnStore,
    chat_id: uuid.UUID,
    queued_id: uuid.UUID,
    notified: asyncio.Event,
) -> None:
    """Return once the turn this message started has begun: a client then finds it running.

    The turn's first step begins it; waiting for that (woken by the chat's notifications,
    `notified` is subscribed before the message was submitted) keeps the gateway's writes
    out of the step's way. If no worker takes the step in time, the gateway begins the turn
    itself: the same idempotent write, whoever is first.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BEGIN_WAIT_S
    while True:
        # Look only when woken: the turn can't have begun unnoticed before the subscription.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(notified.wait(), max(0.0, deadline - loop.time()))
        if notified.is_set():
            notified.clear()  # before looking: a later notification wakes the next wait
            if await transcript.is_promoted(queued_id):
                return
        if loop.time() >= deadline:
            if await turns.begin(chat_id, str(queued_id)):
                METRICS.active_turns.add(1)
            return


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
