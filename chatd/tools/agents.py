"""Subagent tools: a chat spawns, messages, interrupts and lists child chats of its own.

A child is a chat like any other (its own transcript and ChatTurn runs), with the parent's
owner and a `parent_chat_id`. `wait_agent` is not here: it is a durable wait of the parent's
workflow (see `workflows/agent_wait.py`), not a call a worker runs.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from pydantic import BaseModel, Field
from temporalio.client import Client

from chatd.chat_status import BUSY
from chatd.models import ModelConfig
from chatd.parts import TextPart
from chatd.store.chats import ChatRecord, ChatStore
from chatd.store.quotas import QuotaStore
from chatd.store.transcript import TranscriptStore
from chatd.subagents import (
    CHILDREN_SQL,
    SPAWN_AGENT,
    WAIT_AGENT,
    SubagentSettings,
    WaitArgs,
    child_status,
)
from chatd.tools.base import Tool, ToolContext, ToolOutput
from chatd.turn_starts import hand_over_message
from workflows.constants import TurnMessages, workflow_id

_CHILD_IDS = uuid.UUID("6d9a4c1e-6f0b-4b8e-9a55-3f1f0e2b7c11")
"""Namespace of child chat ids: one per spawning call, so a retried spawn finds its child."""

__all__ = ["agent_tools"]


class SpawnArgs(BaseModel):
    prompt: str = Field(min_length=1, max_length=100_000, description="The child's task.")
    model: ModelConfig | None = Field(
        default=None, description="The child's model (default: this chat's)."
    )
    tools: list[str] | None = Field(
        default=None,
        max_length=64,
        description="The tools the child may use, a subset of yours (default: all of yours).",
    )


class MessageArgs(BaseModel):
    id: str = Field(description="The child's id.")
    message: str = Field(min_length=1, max_length=100_000)


class AgentId(BaseModel):
    id: str = Field(description="The child's id.")


class _NoArgs(BaseModel):
    pass


class _Agents:
    """What the subagent tools share: the store, Temporal, the limits."""

    def __init__(
        self, pool: asyncpg.Pool, client: Client, task_queue: str, settings: SubagentSettings
    ) -> None:
        self._pool = pool
        self._chats = ChatStore(pool)
        self._transcript = TranscriptStore(pool)
        self._quotas = QuotaStore(pool)
        self._client = client
        self._task_queue = task_queue
        self._settings = settings

    async def spawn(self, args: SpawnArgs, ctx: ToolContext) -> ToolOutput:
        parent = await self._parent(ctx)
        if parent.depth >= self._settings.max_depth:
            raise ValueError(f"subagents may not spawn subagents (depth {parent.depth})")
        child_id = uuid.uuid5(_CHILD_IDS, f"{parent.id}:{ctx.turn_id}:{ctx.tool_call_id}")
        key = f"spawn:{ctx.tool_call_id}"
        # Spawns of one parent take turns: the count of running children and the new child
        # (with its queued first message, which makes it count as running) go together.
        async with self._pool.acquire() as lock:
            await lock.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", str(parent.id))
            try:
                child = await self._chats.get(child_id) or await self._new_child(
                    parent, child_id, args
                )
                queued, _ = await self._transcript.enqueue(
                    child.id, [TextPart(text=args.prompt)], key
                )
            finally:
                await lock.execute(
                    "SELECT pg_advisory_unlock(hashtextextended($1, 0))", str(parent.id)
                )
        await self._hand_over(child, str(queued.id), key)
        return {"id": str(child.id), "status": "running"}

    async def _new_child(
        self, parent: ChatRecord, child_id: uuid.UUID, args: SpawnArgs
    ) -> ChatRecord:
        """Create the child, if the parent has room for one more running."""
        rows = await self._pool.fetch(CHILDREN_SQL, parent.id)
        running = sum(child_status(r) in BUSY for r in rows)
        if running >= self._settings.max_children:
            raise ValueError(
                f"{running} subagents are running, the most a chat may have at once; "
                "wait for one to finish first"
            )
        await self._admit_turn(parent.owner)
        tools = parent.active_tools
        if args.tools is not None:
            tools = [t for t in args.tools if tools is None or t in tools]
        depth = parent.depth + 1
        return await self._chats.create(
            chat_id=child_id,
            owner=parent.owner,
            model=args.model or parent.model.for_prose(),
            system_prompt=parent.system_prompt,
            active_tools=tools,
            tool_policy=parent.tool_policy,
            mcp_servers=parent.mcp_servers,
            max_steps=parent.max_steps,
            parent_chat_id=parent.id,
            subagents=parent.subagents and depth < self._settings.max_depth,
        )

    async def message(self, args: MessageArgs, ctx: ToolContext) -> ToolOutput:
        child = await self._child(ctx, args.id)
        if child.status not in BUSY:  # the message starts a turn
            await self._admit_turn(child.owner)
        await self._send(child, args.message, f"message:{ctx.turn_id}:{ctx.tool_call_id}")
        return {"id": str(child.id), "status": "message sent"}

    async def interrupt(self, args: AgentId, ctx: ToolContext) -> ToolOutput:
        child = await self._child(ctx, args.id)
        handle = self._client.get_workflow_handle(workflow_id(str(child.id)))
        await handle.signal(TurnMessages.INTERRUPT)
        return {"id": str(child.id), "status": "interrupt sent"}

    async def list(self, args: _NoArgs, ctx: ToolContext) -> ToolOutput:
        rows = await self._pool.fetch(CHILDREN_SQL, uuid.UUID(ctx.chat_id))
        return [{"id": str(r["id"]), "title": r["title"], "status": child_status(r)} for r in rows]

    async def _admit_turn(self, owner: str) -> None:
        """A subagent's turn is one of its owner's running turns: refused (an error result
        the parent's model reads) when the owner has no room for one more."""
        limits = await self._quotas.limits(owner)
        running = await self._quotas.turns_in_flight(owner)
        if running >= limits.running_turns:
            raise ValueError(
                f"{running} turns of this user are running, their limit: a subagent can't"
                " start now; wait for one to finish (for example with wait_agent)"
            )

    async def _parent(self, ctx: ToolContext) -> ChatRecord:
        parent = await self._chats.get(uuid.UUID(ctx.chat_id))
        if parent is None:
            raise ValueError("this chat is gone")
        return parent

    async def _child(self, ctx: ToolContext, child_id: str) -> ChatRecord:
        """The calling chat's child `child_id`; anything else is not found."""
        try:
            key = uuid.UUID(child_id)
        except ValueError:
            key = None
        child = await self._chats.get(key) if key else None
        if child is None or str(child.parent_chat_id) != ctx.chat_id:
            raise ValueError(f"no subagent {child_id!r} of this chat")
        return child

    async def _send(self, child: ChatRecord, text: str, key: str) -> None:
        """Queue `text` for the child (once per `key`) and hand it to the child's turn."""
        queued, _ = await self._transcript.enqueue(child.id, [TextPart(text=text)], key)
        await self._hand_over(child, str(queued.id), key)

    async def _hand_over(self, child: ChatRecord, queued_id: str, key: str) -> None:
        """Start the child's turn for a queued message, or queue it behind the running one
        (the same update for the same `key`, however often a retry asks)."""
        await hand_over_message(
            self._client,
            self._task_queue,
            child,
            queued_id,
            f"{child.id}:{key}",
            name_chat=child.title is None,
        )
        await self._transcript.handed_over([uuid.UUID(queued_id)])


def agent_tools(
    pool: asyncpg.Pool, client: Client, task_queue: str, settings: SubagentSettings
) -> list[Tool[Any]]:
    """The worker-run subagent tools (`wait_agent` is the workflow's own)."""
    agents = _Agents(pool, client, task_queue, settings)
    return [
        Tool(
            name=SPAWN_AGENT,
            description="Start a subagent on a task; returns its id. It works on its own "
            "until you wait for it (wait_agent).",
            args=SpawnArgs,
            run=agents.spawn,
        ),
        Tool(
            name=WAIT_AGENT,
            description="Wait for subagents to finish (all of `ids`, default every running "
            "one) for up to `timeout_s`; returns each one's status and final answer.",
            args=WaitArgs,
            run=_waited_by_the_workflow,
        ),
        Tool(
            name="message_agent",
            description="Send a subagent a message (it runs as the subagent's next turn).",
            args=MessageArgs,
            run=agents.message,
        ),
        Tool(
            name="interrupt_agent",
            description="Stop a subagent's running turn.",
            args=AgentId,
            run=agents.interrupt,
        ),
        Tool(
            name="list_agents",
            description="Your subagents, with their status and title.",
            args=_NoArgs,
            run=agents.list,
            read_only=True,
        ),
    ]


async def _waited_by_the_workflow(args: WaitArgs, ctx: ToolContext) -> ToolOutput:
    """`wait_agent` is the turn's own durable wait; a worker is never asked to run it."""
    raise RuntimeError("wait_agent is run by the turn's workflow, not by a worker")
