"""Chat rows: creation, lookup by owner, status and usage updates; a chat's children."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel, Field

from chatd.budgets import PendingBudget
from chatd.chat_status import ChatStatus
from chatd.models import ModelConfig, ModelError
from chatd.parts import Usage
from chatd.store.events import Conn, append_events
from chatd.tool_policy import PolicyDecision
from chatd.tool_use import ToolUse

__all__ = [
    "DESCENDANTS_USAGE",
    "QUEUED_COUNT",
    "ROOTS_ONLY",
    "SUMMARY_COLUMNS",
    "ChatRecord",
    "ChatStore",
    "ChatSummary",
    "DynamicTool",
]


class DynamicTool(BaseModel):
    """A client-executed tool declared by the chat."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str = Field(default="", max_length=16_384)
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ChatRecord(BaseModel):
    """A chat as stored."""

    id: uuid.UUID
    owner: str
    title: str | None
    title_source: str | None
    model: ModelConfig
    system_prompt: str | None
    dynamic_tools: list[DynamicTool]
    active_tools: list[str] | None
    max_steps: int
    action_timeout_s: int
    compaction_threshold: float
    status: ChatStatus
    last_error: ModelError | None
    pending_tool_calls: list[dict[str, Any]] | None
    action_expires_at: datetime | None
    usage: Usage
    created_at: datetime
    updated_at: datetime
    turn_id: str | None = None
    """The turn running now: set when it begins, cleared when it ends."""
    budget_usd: float | None = None
    """What the chat and its subagents may spend, in all (None: no budget)."""
    pending_budget: PendingBudget | None = None
    """Set while the turn is paused on a budget (status requires_action)."""

    def model_in_use(self, index: int) -> ModelConfig | None:
        """The model a turn on model `index` calls: the chat's own (0) or its `index`th
        fallback, bound to the chat's output format; None past the list."""
        if index == 0:
            return self.model
        if index > len(self.fallback_models):
            return None
        fallback = self.fallback_models[index - 1]
        return fallback.model_copy(update={"output_format": self.model.output_format})

    tool_policy: dict[str, PolicyDecision] = Field(default_factory=dict)
    """The chat's approval policy (`chatd.tool_policy`), validated before it is stored."""
    mcp_servers: list[str] = Field(default_factory=list)
    """The operator's MCP servers the chat uses, by name."""
    parent_chat_id: uuid.UUID | None = None
    """The chat that spawned this one, if it is a subagent."""
    depth: int = 0
    """How far below a root chat this one is (a root is 0, its child 1)."""
    subagents: bool = False
    """Whether the chat may spawn subagents (the operator's default may also allow it)."""
    fallback_models: list[ModelConfig] = Field(default_factory=list)
    """Models a step falls back on, in order, when the chat's own stays down."""
    tool_use: ToolUse = Field(default_factory=ToolUse)
    """How the model may call the chat's tools (migration 025)."""
    discard_at: datetime | None = None
    """Set for the chat of a `store: false` response: hidden from the native API, and
    deleted once past this time with no turn running (migration 024)."""


class ChatSummary(BaseModel):
    """A chat as a list shows it: what it is and how it stands, without its configuration
    (system prompt, tools) or its queued messages, which `ChatRecord` has; so a page of
    them stays small."""

    id: uuid.UUID
    parent_chat_id: uuid.UUID | None
    title: str | None
    model: ModelConfig
    status: ChatStatus
    last_error: ModelError | None
    action_expires_at: datetime | None
    queued_count: int
    """Messages waiting for their turn."""
    usage: Usage
    created_at: datetime
    updated_at: datetime


def _record(row: asyncpg.Record | dict[str, Any]) -> ChatRecord:
    data = dict(row)
    data.pop("last_event_seq", None)
    return ChatRecord.model_validate(data)


class ChatStore:
    """Reads and writes chat rows."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create(
        self,
        *,
        owner: str,
        model: ModelConfig,
        title: str | None = None,
        system_prompt: str | None = None,
        dynamic_tools: list[DynamicTool] | None = None,
        active_tools: list[str] | None = None,
        max_steps: int = 25,
        action_timeout_s: int = 600,
        compaction_threshold: float = 0.7,
        tool_policy: Mapping[str, PolicyDecision] | None = None,
        mcp_servers: list[str] | None = None,
        parent_chat_id: uuid.UUID | None = None,
        subagents: bool = False,
        fallback_models: list[ModelConfig] | None = None,
        chat_id: uuid.UUID | None = None,
        discard_at: datetime | None = None,
        tool_use: ToolUse | None = None,
        budget_usd: float | None = None,
        conn: Conn | None = None,
    ) -> ChatRecord:
        """Insert a new chat in `waiting`; with a `chat_id` inserted before (by a create that
        is being retried), that chat.

        A child (`parent_chat_id`) is one level below its parent, whose owner it must have:
        `LookupError` if the owner has no such chat. Its parent's stream gets a `subagent`
        event (migration 016's trigger). With `conn`, within that connection's transaction.
        """
        chat_id = chat_id or uuid.uuid4()
        db = conn or self._pool
        row = await db.fetchrow(
            _CREATE,
            chat_id,
            owner,
            title,
            "user" if title else None,
            model.model_dump(exclude_none=True),
            system_prompt,
            [t.model_dump() for t in dynamic_tools or []],
            active_tools,
            max_steps,
            action_timeout_s,
            compaction_threshold,
            dict(tool_policy or {}),
            mcp_servers or [],
            parent_chat_id,
            subagents,
            [m.model_dump(exclude_none=True) for m in fallback_models or []],
            discard_at,
            (tool_use or ToolUse()).model_dump(exclude_defaults=True),
            budget_usd,
        )
        if row is None:
            row = await db.fetchrow("SELECT * FROM chats WHERE id = $1", chat_id)
        if row is None:
            raise LookupError(f"parent chat {parent_chat_id} of owner {owner!r} not found")
        return _record(row)

    async def children(self, chat_id: uuid.UUID, owner: str) -> list[ChatSummary]:
        """The owner's chat's children (subagents), oldest first: the order they were
        spawned in. Empty for a chat without children, or not the owner's."""
        rows = await self._pool.fetch(_CHILDREN, chat_id, owner)
        return [ChatSummary.model_validate(dict(r)) for r in rows]

    async def children_usage(self, chat_id: uuid.UUID) -> Usage | None:
        """What the chat's subagents used, theirs included; None if it has none."""
        usage = await self._pool.fetchval(_CHILDREN_USAGE, chat_id)
        return None if usage is None else Usage.model_validate(usage)

    async def set_generated_title(self, chat_id: uuid.UUID, title: str) -> bool:
        """Set a generated title unless the chat already has one; publish a `chat` event."""
        async with self._pool.acquire() as conn, conn.transaction():
            updated = await conn.fetchval(
                "UPDATE chats SET title = $2, title_source = 'generated', updated_at = now()"
                " WHERE id = $1 AND title IS NULL RETURNING id",
                chat_id,
                title,
            )
            if updated is None:
                return False
            await append_events(conn, chat_id, [("chat", {"title": title})])
            return True

    async def update_settings(
        self,
        chat_id: uuid.UUID,
        owner: str,
        *,
        title: str | None = None,
        tool_policy: Mapping[str, PolicyDecision] | None = None,
        set_budget: bool = False,
        budget_usd: float | None = None,
    ) -> ChatRecord | None:
        """Change the given settings of the owner's chat (a title set here is the user's;
        with `set_budget`, the budget becomes `budget_usd`, None removing it); None if the
        chat doesn't exist or is another owner's.

        The changed fields are published as a `chat` event, as a generated title is, so
        streams see them. With nothing to change, the chat as it is.
        """
        changes: dict[str, Any] = {}
        if title is not None:
            changes["title"] = title
        if tool_policy is not None:
            changes["tool_policy"] = dict(tool_policy)
        if set_budget:
            changes["budget_usd"] = budget_usd
        if not changes:
            return await self.get(chat_id, owner)
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                """UPDATE chats SET title = coalesce($3, title),
                          title_source = CASE WHEN $3::text IS NULL THEN title_source
                                              ELSE 'user' END,
                          tool_policy = coalesce($4::jsonb, tool_policy),
                          budget_usd = CASE WHEN $5 THEN $6 ELSE budget_usd END,
                          updated_at = now()
                   WHERE id = $1 AND owner = $2 RETURNING *""",
                chat_id,
                owner,
                changes.get("title"),
                changes.get("tool_policy"),
                set_budget,
                budget_usd,
            )
            if row is None:
                return None
            await append_events(conn, chat_id, [("chat", changes)])
            return _record(row)

    async def reconfigure(
        self,
        chat_id: uuid.UUID,
        *,
        model: ModelConfig,
        system_prompt: str | None,
        dynamic_tools: list[DynamicTool],
        tool_use: ToolUse,
        compaction_threshold: float,
    ) -> ChatRecord | None:
        """Set the model, system prompt, client tools, tool use and compaction the chat's next
        turn has (an Open Responses request names them each time); None unless the chat is
        idle (`waiting`, or `error`: its last turn failed)."""
        row = await self._pool.fetchrow(
            """UPDATE chats SET model = $2, system_prompt = $3, dynamic_tools = $4,
                      tool_use = $5, compaction_threshold = $6, updated_at = now()
               WHERE id = $1 AND status IN ('waiting', 'error') RETURNING *""",
            chat_id,
            model.model_dump(exclude_none=True),
            system_prompt,
            [t.model_dump() for t in dynamic_tools],
            tool_use.model_dump(exclude_defaults=True),
            compaction_threshold,
        )
        return _record(row) if row else None

    async def get(self, chat_id: uuid.UUID, owner: str | None = None) -> ChatRecord | None:
        """The chat, or None if it doesn't exist (or belongs to another owner)."""
        row = await self._pool.fetchrow(
            "SELECT * FROM chats WHERE id = $1 AND ($2::text IS NULL OR owner = $2)",
            chat_id,
            owner,
        )
        return _record(row) if row else None

    async def get_with_key(
        self, chat_id: uuid.UUID, key_hash: str
    ) -> tuple[str | None, ChatRecord | None]:
        """The owner of an active API key and, if that owner has the chat, the chat: both
        checks of a request about a chat in one query."""
        row = await self._pool.fetchrow(
            """SELECT k.owner AS key_owner, c.* FROM api_keys k
               LEFT JOIN chats c ON c.id = $1 AND c.owner = k.owner AND c.discard_at IS NULL
               WHERE k.key_hash = $2 AND k.revoked_at IS NULL""",
            chat_id,
            key_hash,
        )
        if row is None:
            return None, None
        data = dict(row)
        owner = str(data.pop("key_owner"))
        return owner, _record(data) if data["id"] is not None else None

    async def waiting_on(self, owner: str, call_ids: Sequence[str]) -> ChatRecord | None:
        """The owner's listed chat whose turn waits on (at least) these calls."""
        row = await self._pool.fetchrow(
            "SELECT * FROM chats WHERE owner = $1 AND status = 'requires_action'"
            " AND discard_at IS NULL AND pending_tool_calls @> $2::jsonb LIMIT 1",
            owner,
            [{"id": call_id} for call_id in call_ids],
        )
        return _record(row) if row else None

    async def discard_after(self, chat_id: uuid.UUID, at: datetime | None = None) -> None:
        """Hide the chat and have it deleted once past `at` (now if None) and settled; an
        earlier deadline stays."""
        await self._pool.execute(
            "UPDATE chats SET discard_at = least(discard_at, coalesce($2, now())) WHERE id = $1",
            chat_id,
            at,
        )

    async def keep_unstored(self, chat_id: uuid.UUID, until: datetime) -> bool:
        """Move a hidden chat's deletion to `until`; False if it was due already (its
        deletion may be under way: nothing may continue it)."""
        kept = await self._pool.fetchval(
            "UPDATE chats SET discard_at = $2 WHERE id = $1 AND discard_at > now() RETURNING id",
            chat_id,
            until,
        )
        return kept is not None

    async def delete_discarded(self, limit: int) -> Sequence[uuid.UUID]:
        """Delete up to `limit` chats past their `discard_at` whose turn has ended and whose
        queue is empty (their rows go with them); the ids deleted."""
        rows = await self._pool.fetch(
            """DELETE FROM chats WHERE id IN (
                   SELECT c.id FROM chats c
                    WHERE c.discard_at <= now() AND c.status IN ('waiting', 'error')
                      AND NOT EXISTS (SELECT 1 FROM queued_messages q
                                       WHERE q.chat_id = c.id AND q.promoted_at IS NULL)
                    LIMIT $1 FOR UPDATE SKIP LOCKED)
               RETURNING id""",
            limit,
        )
        return [row["id"] for row in rows]


# Inserting a chat, a child one level below its parent (read here, so a caller can't get the
# depth wrong); nothing if the parent isn't the owner's, or the id was inserted before.
_CREATE = """
WITH parent AS (
    SELECT id, depth FROM chats WHERE id = $14 AND owner = $2
)
INSERT INTO chats (id, owner, title, title_source, model, system_prompt, dynamic_tools,
                   active_tools, max_steps, action_timeout_s, compaction_threshold,
                   tool_policy, mcp_servers, parent_chat_id, depth, subagents, fallback_models,
                   discard_at, tool_use, budget_usd)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
       parent.id, coalesce(parent.depth + 1, 0), $15, $16, $17, $18, $19
FROM (SELECT) AS one LEFT JOIN parent ON true
WHERE $14::uuid IS NULL OR parent.id IS NOT NULL
ON CONFLICT (id) DO NOTHING RETURNING *
"""


SUMMARY_COLUMNS = """c.id, c.parent_chat_id, c.title, c.model, c.status, c.last_error,
       c.action_expires_at, c.usage, c.created_at, c.updated_at"""
"""SQL: the columns of `ChatSummary` read from chats `c` (all but `queued_count`)."""

QUEUED_COUNT = """(SELECT count(*) FROM queued_messages q
        WHERE q.chat_id = {chat} AND q.promoted_at IS NULL) AS queued_count"""
"""SQL: a chat's messages waiting for their turn (`.format(chat=<its id>)`)."""


def _descendants_usage() -> str:
    fields = ", ".join(
        f"'{k}', coalesce(sum((tree.usage ->> '{k}')::bigint), 0)" for k in Usage.model_fields
    )
    return f"""
    WITH RECURSIVE tree AS (
        SELECT d.id, d.usage FROM chats d WHERE d.parent_chat_id = {{chat}}
        UNION ALL
        SELECT d.id, d.usage FROM chats d JOIN tree ON d.parent_chat_id = tree.id
    )
    SELECT jsonb_build_object({fields}) FROM tree HAVING count(*) > 0"""


DESCENDANTS_USAGE = _descendants_usage()
"""SQL: the usage of a chat's children and theirs, summed; no row if it has none
(`.format(chat=<its id>)`)."""


_CHILDREN_USAGE = f"SELECT ({DESCENDANTS_USAGE.format(chat='$1')})"

_CHILDREN = f"""
SELECT {SUMMARY_COLUMNS}, {QUEUED_COUNT.format(chat="c.id")}
FROM chats c
WHERE c.parent_chat_id = $1 AND c.owner = $2
ORDER BY c.created_at, c.id
"""


ROOTS_ONLY = "AND c.parent_chat_id IS NULL"
"""SQL: chats `c` that are no one's subagent. A condition of its own, not a parameter, so
the plan of a roots-only list can use the index of root chats (migration 016)."""
