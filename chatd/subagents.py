"""Subagents: which chats may have them, how deep they nest, and how a child stands.

Shared by the tools that spawn and address children (`chatd.tools.agents`, on workers), the
turn's tool catalog, and the parent's wait (`activities.agents`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import asyncpg
from pydantic import BaseModel, Field

from chatd.chat_status import BUSY
from chatd.store.chats import ChatRecord

__all__ = [
    "AGENT_TOOLS",
    "CHILDREN_SQL",
    "SPAWN_AGENT",
    "WAIT_AGENT",
    "SubagentSettings",
    "WaitArgs",
    "child_status",
]

SPAWN_AGENT = "spawn_agent"
WAIT_AGENT = "wait_agent"
AGENT_TOOLS = frozenset(
    {SPAWN_AGENT, WAIT_AGENT, "message_agent", "interrupt_agent", "list_agents"}
)
"""Offered only to chats with `subagents` on (spawn_agent only below the depth limit)."""


@dataclass(frozen=True)
class SubagentSettings:
    """The operator's subagent settings (`CHATD_SUBAGENT_*`)."""

    max_depth: int = 1
    """How deep children may nest: 1 lets a root chat spawn, and its children not."""
    max_children: int = 4
    """Running children per chat."""
    default_on: bool = False
    """For chats that don't say (`CHATD_SUBAGENTS`)."""

    @classmethod
    def from_env(cls) -> SubagentSettings:
        return cls(
            max_depth=int(os.environ.get("CHATD_SUBAGENT_MAX_DEPTH", "1")),
            max_children=int(os.environ.get("CHATD_SUBAGENT_MAX_CHILDREN", "4")),
            default_on=os.environ.get("CHATD_SUBAGENTS", "").lower() in ("1", "true", "yes"),
        )

    def offers(self, chat: ChatRecord, tool: str) -> bool:
        """Whether the chat is offered the subagent tool called `tool`."""
        if not (chat.subagents or self.default_on):
            return False
        return tool != SPAWN_AGENT or chat.depth < self.max_depth


class WaitArgs(BaseModel):
    ids: list[str] | None = Field(
        default=None,
        max_length=32,
        description="Subagents to wait for (default: all of yours; finished ones are"
        " returned at once).",
    )
    timeout_s: float = Field(default=300, gt=0, le=3600, description="How long to wait.")


def child_status(chat: asyncpg.Record | dict[str, Any]) -> str:
    """`running` while the child has a turn to run, else how its last turn ended
    (`finished`, `error`) or `requires_action`."""
    if chat["status"] in BUSY:
        return str(chat["status"])
    if chat["queued"]:
        return "running"  # its next turn has not begun yet
    return "error" if chat["status"] == "error" else "finished"


CHILDREN_SQL = """
SELECT c.id, c.title, c.status, c.last_error, c.created_at,
       EXISTS (SELECT 1 FROM queued_messages q
               WHERE q.chat_id = c.id AND q.promoted_at IS NULL) AS queued
FROM chats c WHERE c.parent_chat_id = $1 ORDER BY c.created_at, c.id
"""
"""A chat's children with what `child_status` needs, in spawn order."""
