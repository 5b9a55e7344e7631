"""Subagent activities of a parent's turn: look at the children a `wait_agent` call waits
for (staging its result), and interrupt the children of an interrupted turn."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import asyncpg
from pydantic import ValidationError
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.failures import classified_failures
from chatd.chat_status import BUSY
from chatd.parts import ToolCallPart, ToolResultPart, error_result
from chatd.store.step_keys import StepKey
from chatd.store.tool_calls import CallKey, ToolCallStore
from chatd.store.transcript import TranscriptStore
from chatd.subagents import CHILDREN_SQL, WaitArgs, child_status
from workflows.constants import TurnMessages, workflow_id
from workflows.payloads import AgentsChecked, CheckAgentsInput, InterruptChildrenInput

__all__ = ["AgentActivities"]

log = logging.getLogger("chatd.agents")
_LAST_ANSWER = """
SELECT parts FROM messages WHERE chat_id = $1 AND role = 'assistant'
ORDER BY id DESC LIMIT 1
"""


class AgentActivities:
    """Reads a parent's children for its workflow, and signals them."""

    def __init__(self, pool: asyncpg.Pool, client: Client) -> None:
        self._pool = pool
        self._transcript = TranscriptStore(pool)
        self._calls = ToolCallStore(pool)
        self._client = client

    @activity.defn(name="check_agents")
    async def check_agents(self, input: CheckAgentsInput) -> AgentsChecked:
        """Whether every child the call waits for finished; if so (or with `final`), its
        result is staged: each child's id, status and final answer."""
        async with classified_failures("checking subagents"):
            chat_id = uuid.UUID(input.chat_id)
            key = CallKey(chat_id, input.turn_id, input.step, input.call.id)
            args = await self._arguments(input)
            if isinstance(args, ToolResultPart):
                await self._calls.stage(key, args)
                return AgentsChecked(done=True, is_error=True)
            children = {str(r["id"]): r for r in await self._pool.fetch(CHILDREN_SQL, chat_id)}
            ids = args.ids if args.ids is not None else list(children)
            unknown = [i for i in ids if i not in children]
            if unknown:
                result = error_result(input.call, f"no subagents {unknown} of this chat")
                await self._calls.stage(key, result)
                return AgentsChecked(done=True, is_error=True)
            statuses = {i: child_status(children[i]) for i in ids}
            waiting = [i for i, s in statuses.items() if s in BUSY]
            if waiting and not input.final:
                return AgentsChecked(done=False, timeout_s=args.timeout_s)
            outcome = [await self._outcome(i, statuses[i], children[i]) for i in ids]
            await self._calls.stage(
                key,
                ToolResultPart(tool_call_id=input.call.id, name=input.call.name, output=outcome),
            )
            return AgentsChecked(done=True)

    @activity.defn(name="interrupt_children")
    async def interrupt_children(self, input: InterruptChildrenInput) -> None:
        """Signal `interrupt` to every child with a turn to run."""
        async with classified_failures("interrupting subagents"):
            rows = await self._pool.fetch(CHILDREN_SQL, uuid.UUID(input.chat_id))
            for row in rows:
                if child_status(row) not in BUSY:
                    continue
                handle = self._client.get_workflow_handle(workflow_id(str(row["id"])))
                try:
                    await handle.signal(TurnMessages.INTERRUPT)
                except RPCError as err:
                    if err.status != RPCStatusCode.NOT_FOUND:
                        raise
                    log.info("subagent %s has no run to interrupt", row["id"])

    async def _arguments(self, input: CheckAgentsInput) -> WaitArgs | ToolResultPart:
        """The call's arguments, or the error result the model gets for bad ones."""
        step = await self._transcript.find(
            uuid.UUID(input.chat_id), input.turn_id, StepKey.assistant(input.step)
        )
        call = next(
            (
                p
                for p in (step.parts if step else [])
                if isinstance(p, ToolCallPart) and p.id == input.call.id
            ),
            None,
        )
        if call is None:
            return error_result(input.call, "This tool call is not in the transcript.")
        try:
            return WaitArgs.model_validate(json.loads(call.arguments or "{}"))
        except (json.JSONDecodeError, ValidationError) as err:
            return error_result(input.call, f"Invalid arguments for wait_agent: {err}")

    async def _outcome(self, child_id: str, status: str, row: asyncpg.Record) -> dict[str, Any]:
        """What the parent's model learns of one child."""
        outcome: dict[str, Any] = {"id": child_id, "status": status, "title": row["title"]}
        if status == "finished":
            parts = await self._pool.fetchval(_LAST_ANSWER, uuid.UUID(child_id))
            texts = [p["text"] for p in parts or [] if p.get("type") == "text"]
            outcome["answer"] = "\n".join(texts)
        elif status == "error" and row["last_error"]:
            outcome["error"] = row["last_error"].get("message")
        return outcome
