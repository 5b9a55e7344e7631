"""Names shared by the workflow, the worker and the gateway."""

from datetime import timedelta

from temporalio.common import SearchAttributeKey

__all__ = [
    "CHAT_ID",
    "CHAT_MODEL",
    "CHAT_OWNER",
    "CHAT_PARENT",
    "CHAT_STATUS",
    "LOCAL_TIMEOUT",
    "MODEL_ERROR_TYPE",
    "TURN_WORKFLOW",
    "WORKFLOW_ID_PREFIX",
    "WORKFLOW_TASK_TIMEOUT",
    "TurnMessages",
    "workflow_id",
]

WORKFLOW_ID_PREFIX = "chat-"

TURN_WORKFLOW = "ChatTurn"
"""The turn workflow's type. The gateway starts and messages it by name, so that it never
imports the workflow module (and with it every activity, the MCP SDK, the providers)."""


class TurnMessages:
    """The names of the turn workflow's updates and signals."""

    SUBMIT_MESSAGE = "submit_message"
    QUEUE_MESSAGE = "queue_message"
    SUBMIT_TOOL_RESULTS = "submit_tool_results"
    SUBMIT_TOOL_APPROVALS = "submit_tool_approvals"
    DECIDE_BUDGET = "decide_budget"
    CHILD_FINISHED = "child_finished"
    INTERRUPT = "interrupt"


WORKFLOW_TASK_TIMEOUT = timedelta(seconds=5)
"""How long a workflow task may run on a worker before the server hands it to another.

It is how long a turn stalls when its worker dies holding a workflow task (Temporal's
default is 10 s). Our workflow tasks take milliseconds; local activities longer than this
keep the task alive with heartbeats. Runs continued-as-new inherit it.
"""

MODEL_ERROR_TYPE = "ModelError"
"""ApplicationError type of classified provider errors; the workflow owns their retries."""

LOCAL_TIMEOUT = timedelta(seconds=30)
"""Start-to-close of each attempt of a local activity (a Postgres write or two)."""

CHAT_ID = SearchAttributeKey.for_keyword("ChatId")
CHAT_STATUS = SearchAttributeKey.for_keyword("ChatStatus")
CHAT_OWNER = SearchAttributeKey.for_keyword("ChatOwner")
CHAT_MODEL = SearchAttributeKey.for_keyword("ChatModel")
CHAT_PARENT = SearchAttributeKey.for_keyword("ChatParent")
"""A subagent's parent chat: `ChatId="<id>" OR ChatParent="<id>"` lists a chat's family."""


def workflow_id(chat_id: str) -> str:
    """The id of a chat's ChatTurn workflow: one run per turn."""
    return f"{WORKFLOW_ID_PREFIX}{chat_id}"
