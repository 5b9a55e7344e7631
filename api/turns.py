"""How the gateway hands a user message to the chat's ChatTurn workflow."""

from __future__ import annotations

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)

from chatd.store.chats import ChatRecord
from workflows.chat_turn import ChatTurn
from workflows.constants import CHAT_ID, CHAT_MODEL, CHAT_OWNER, CHAT_STATUS, workflow_id
from workflows.payloads import ChatTurnInput, SubmitMessageInput, SubmitMessageResult

__all__ = ["submit_message"]


async def submit_message(
    client: Client, task_queue: str, chat: ChatRecord, queued_id: str, update_id: str
) -> SubmitMessageResult:
    """Update-with-start: start a turn for this message, or queue it in the running one.

    `update_id` makes a retried call the same update (Temporal deduplicates it).
    """
    chat_id = str(chat.id)
    start = WithStartWorkflowOperation(
        ChatTurn.run,
        ChatTurnInput(chat_id=chat_id),
        id=workflow_id(chat_id),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(CHAT_ID, chat_id),
                SearchAttributePair(CHAT_OWNER, chat.owner),
                SearchAttributePair(CHAT_MODEL, chat.model.label),
                SearchAttributePair(CHAT_STATUS, "running"),
            ]
        ),
        static_summary=f"chat {chat_id} ({chat.model.label})",
    )
    result: SubmitMessageResult = await client.execute_update_with_start_workflow(
        ChatTurn.submit_message,
        SubmitMessageInput(queued_id=queued_id),
        start_workflow_operation=start,
        id=update_id,
    )
    return result
