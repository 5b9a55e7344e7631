"""Tool activities: run one built-in tool call; record a step's results in call order."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import asyncpg
from pydantic import ValidationError
from temporalio import activity

from chatd.parts import ToolCallPart, ToolResultPart
from chatd.store.chats import ChatRecord, ChatStore
from chatd.store.transcript import TranscriptStore
from chatd.tools.base import MediaOutput, Tool, ToolContext, ToolOutput, ToolRegistry
from workflows.payloads import ExecuteToolInput, ExecuteToolResult, RecordToolResultsInput

__all__ = ["ToolActivities", "assistant_step_key", "tool_step_key"]

CRASHED_NON_IDEMPOTENT = (
    "The worker failed while this tool was running; it may or may not have completed. "
    "It was not run again because it is not idempotent."
)
_HEARTBEAT_EVERY_S = 5.0


def assistant_step_key(step: int) -> str:
    """Step key of the assistant message of `step` (within its turn)."""
    return f"{step}:assistant"


def tool_step_key(step: int) -> str:
    """Step key of the tool message holding the results of `step`."""
    return f"{step}:tools"


def error_result(call: ToolCallPart | Any, message: str) -> ToolResultPart:
    """An error result the model sees instead of output."""
    return ToolResultPart(tool_call_id=call.id, name=call.name, output=message, is_error=True)


class ToolActivities:
    """Runs built-in tools for a worker's registry and persists their results."""

    def __init__(self, pool: asyncpg.Pool, registry: ToolRegistry, workspace_root: Path) -> None:
        self._chats = ChatStore(pool)
        self._transcript = TranscriptStore(pool)
        self._registry = registry
        self._workspace_root = workspace_root

    @activity.defn(name="execute_tool_call")
    async def execute_tool_call(self, input: ExecuteToolInput) -> ExecuteToolResult:
        """Run one call once (first staged result wins) and stage its result."""
        chat_id = uuid.UUID(input.chat_id)
        staged = await self._transcript.staged_tool_results(chat_id, [input.call.id])
        if input.call.id in staged:
            return ExecuteToolResult(is_error=staged[input.call.id].is_error)
        chat = await self._chats.get(chat_id)
        step = await self._transcript.find(chat_id, input.turn_id, assistant_step_key(input.step))
        calls = [p for p in (step.parts if step else []) if isinstance(p, ToolCallPart)]
        call = next((c for c in calls if c.id == input.call.id), None)
        if chat is None or call is None:
            raise RuntimeError(f"tool call {input.call.id} is not in the transcript")
        result = await self._run(chat, call)
        stored = await self._transcript.stage_tool_result(chat_id, result)
        return ExecuteToolResult(is_error=stored.is_error)

    @activity.defn(name="record_tool_results")
    async def record_tool_results(self, input: RecordToolResultsInput) -> None:
        """Persist the step's staged results as one tool message, in the order of the calls."""
        chat_id = uuid.UUID(input.chat_id)
        staged = await self._transcript.staged_tool_results(chat_id, [c.id for c in input.calls])
        parts = [
            staged.get(c.id) or error_result(c, "tool produced no result") for c in input.calls
        ]
        await self._transcript.save(
            chat_id,
            turn_id=input.turn_id,
            step_key=tool_step_key(input.step),
            role="tool",
            parts=list(parts),
            extra_events=[
                ("message_part", {"role": "tool", "part": p.model_dump(exclude_none=True)})
                for p in parts
            ],
        )

    async def _run(self, chat: ChatRecord, call: ToolCallPart) -> ToolResultPart:
        tool = self._registry.get(call.name)
        if tool is None:
            return error_result(call, f"Tool not found: {call.name}")
        if chat.active_tools is not None and call.name not in chat.active_tools:
            return error_result(call, f"Tool not active in this turn: {call.name}")
        if not tool.idempotent and activity.info().attempt > 1:
            return error_result(call, CRASHED_NON_IDEMPOTENT)
        try:
            args = tool.args.model_validate(json.loads(call.arguments or "{}"))
        except (json.JSONDecodeError, ValidationError) as err:
            return error_result(call, f"Invalid arguments for {call.name}: {err}")
        workspace = self._workspace_root / str(chat.id)
        workspace.mkdir(parents=True, exist_ok=True)
        context = ToolContext(chat_id=str(chat.id), tool_call_id=call.id, workspace=workspace)
        try:
            output = await _with_heartbeat(tool, args, context)
        except TimeoutError:
            return error_result(call, f"{call.name} timed out after {tool.timeout}")
        except Exception as err:  # the model sees every tool failure as a result
            return error_result(call, f"{call.name} failed: {type(err).__name__}: {err}")
        return _result_part(call, output)


async def _with_heartbeat(tool: Tool[Any], args: Any, context: ToolContext) -> ToolOutput:
    """Run the tool under its timeout, heartbeating so a dead worker is noticed."""

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(_HEARTBEAT_EVERY_S)

    beater = asyncio.create_task(beat())
    try:
        return await asyncio.wait_for(tool.run(args, context), tool.timeout.total_seconds())
    finally:
        beater.cancel()


def _result_part(call: ToolCallPart, output: ToolOutput) -> ToolResultPart:
    if isinstance(output, MediaOutput):
        return ToolResultPart(
            tool_call_id=call.id, name=call.name, media_type=output.media_type, data=output.data
        )
    return ToolResultPart(tool_call_id=call.id, name=call.name, output=output)
