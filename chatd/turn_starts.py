"""Handing a stored user message to its chat's ChatTurn workflow: the one way a turn starts,
used by the gateway (a client's message) and by the subagent tools (a parent's)."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy
from temporalio.service import RPCError

from chatd.settings import retry_deadline_s
from chatd.store.chats import ChatRecord
from workflows.constants import (
    CHAT_ID,
    CHAT_MODEL,
    CHAT_OWNER,
    CHAT_PARENT,
    CHAT_STATUS,
    TURN_WORKFLOW,
    WORKFLOW_TASK_TIMEOUT,
    TurnMessages,
    workflow_id,
)
from workflows.payloads import ChatTurnInput, SubmitMessageInput, SubmitMessageResult

__all__ = ["QUEUE_RPC_TIMEOUT", "hand_over_message", "queue_message"]

QUEUE_RPC_TIMEOUT = timedelta(seconds=10)
"""How long the server may take to accept a signal-with-start (a send then answers 503)."""


async def hand_over_message(
    client: Client,
    task_queue: str,
    chat: ChatRecord,
    queued_id: str,
    update_id: str,
    *,
    name_chat: bool,
) -> SubmitMessageResult:
    """Update-with-start: start a turn for this message, or queue it in the running one.

    `update_id` makes a retried call the same update (Temporal deduplicates it); with
    `name_chat`, a turn the message starts also names the chat. It waits for a worker to
    run the update; `queue_message` does not.
    """
    start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
        TURN_WORKFLOW,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        **_start_options(chat, task_queue),
    )
    try:
        result: SubmitMessageResult = await client.execute_update_with_start_workflow(
            TurnMessages.SUBMIT_MESSAGE,
            SubmitMessageInput(queued_id=queued_id, untitled=name_chat),
            start_workflow_operation=start,
            id=update_id,
            result_type=SubmitMessageResult,
        )
    except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError):
        # The SDK settled the start's handle too (with this error, if it had not started):
        # read it, or asyncio logs an exception never retrieved.
        with contextlib.suppress(BaseException):
            await start.workflow_handle()
        raise
    return result


async def queue_message(
    client: Client, task_queue: str, chat: ChatRecord, queued_id: str, *, name_chat: bool
) -> None:
    """Signal-with-start: the same start-or-queue as `hand_over_message`, durable once the
    server has it, without waiting for a worker (for a burst no worker keeps up with).

    If the update it stands in for lands too, the workflow takes the message once: a run
    knows its turn and queue, and a later run leaves a message another run began.
    """
    await client.start_workflow(
        TURN_WORKFLOW,
        start_signal=TurnMessages.QUEUE_MESSAGE,
        start_signal_args=[SubmitMessageInput(queued_id=queued_id, untitled=name_chat)],
        rpc_timeout=QUEUE_RPC_TIMEOUT,
        **_start_options(chat, task_queue),
    )


def _start_options(chat: ChatRecord, task_queue: str) -> dict[str, Any]:
    """How a chat's turn workflow starts (its input too), whichever way the message comes."""
    chat_id = str(chat.id)
    parent = str(chat.parent_chat_id) if chat.parent_chat_id else None
    return {
        "arg": ChatTurnInput(
            chat_id=chat_id, retry_deadline_s=retry_deadline_s(), parent_chat_id=parent
        ),
        "id": workflow_id(chat_id),
        "task_queue": task_queue,
        "task_timeout": WORKFLOW_TASK_TIMEOUT,
        "search_attributes": TypedSearchAttributes(
            [
                SearchAttributePair(CHAT_ID, chat_id),
                SearchAttributePair(CHAT_OWNER, chat.owner),
                SearchAttributePair(CHAT_MODEL, chat.model.label),
                SearchAttributePair(CHAT_STATUS, "running"),
                *([SearchAttributePair(CHAT_PARENT, parent)] if parent else []),
            ]
        ),
        "static_summary": f"chat {chat_id} ({chat.model.label})"
        + (f", subagent of {parent}" if parent else ""),
    }
