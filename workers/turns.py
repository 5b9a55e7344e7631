"""Handing a stored user message to its chat's ChatTurn workflow: the one way a turn starts,
used by the gateway (a client's message) and by the subagent tools (a parent's)."""

from __future__ import annotations

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy

from chatd.settings import retry_deadline_s
from chatd.store.chats import ChatRecord
from workflows.chat_turn import ChatTurn
from workflows.constants import (
    CHAT_ID,
    CHAT_MODEL,
    CHAT_OWNER,
    CHAT_PARENT,
    CHAT_STATUS,
    WORKFLOW_TASK_TIMEOUT,
    workflow_id,
)
from workflows.payloads import ChatTurnInput, SubmitMessageInput, SubmitMessageResult

__all__ = ["hand_over_message"]


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
    `name_chat`, a turn the message starts also names the chat.
    """
    chat_id = str(chat.id)
    parent = str(chat.parent_chat_id) if chat.parent_chat_id else None
    start = WithStartWorkflowOperation(
        ChatTurn.run,
        ChatTurnInput(chat_id=chat_id, retry_deadline_s=retry_deadline_s(), parent_chat_id=parent),
        id=workflow_id(chat_id),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        task_timeout=WORKFLOW_TASK_TIMEOUT,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(CHAT_ID, chat_id),
                SearchAttributePair(CHAT_OWNER, chat.owner),
                SearchAttributePair(CHAT_MODEL, chat.model.label),
                SearchAttributePair(CHAT_STATUS, "running"),
                *([SearchAttributePair(CHAT_PARENT, parent)] if parent else []),
            ]
        ),
        static_summary=f"chat {chat_id} ({chat.model.label})"
        + (f", subagent of {parent}" if parent else ""),
    )
    result: SubmitMessageResult = await client.execute_update_with_start_workflow(
        ChatTurn.submit_message,
        SubmitMessageInput(queued_id=queued_id, untitled=name_chat),
        start_workflow_operation=start,
        id=update_id,
    )
    return result
