"""Tool activities: run one built-in call; stage client results; record results in call order."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from pathlib import Path

import asyncpg
from pydantic import ValidationError
from temporalio import activity

from activities.heartbeat import heartbeating
from chatd.parts import ToolCallPart, ToolResultPart
from chatd.store.chats import ChatRecord, ChatStore
from chatd.store.transcript import TranscriptStore
from chatd.telemetry import METRICS
from chatd.tools.base import MediaOutput, ToolContext, ToolOutput, ToolRegistry
from workflows.payloads import (
    ExecuteToolInput,
    ExecuteToolResult,
    RecordToolResultsInput,
    StageToolResultsInput,
    ToolCallRef,
)

__all__ = ["ToolActivities", "assistant_step_key", "error_result"]

log = logging.getLogger("chatd.tools")
CRASHED_NON_IDEMPOTENT = (
    "The worker failed while this tool was running; it may or may not have completed. "
    "It was not run again because it is not idempotent."
)
MAX_RESULT_CHARS = 32_768
"""Text results above this are truncated (with a note) before the model sees them."""


def assistant_step_key(step: int) -> str:
    """Step key of the assistant message of `step` (within its turn)."""
    return f"{step}:assistant"


def error_result(call: ToolCallPart | ToolCallRef, message: str) -> ToolResultPart:
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
        """Run one call once (the first staged result wins) and stage its result."""
        # Heartbeats from the start: a wait for a pooled connection under load must not time
        # out the attempt (a non-idempotent tool would then be reported as maybe-run).
        async with heartbeating():
            return await self._execute(input)

    async def _execute(self, input: ExecuteToolInput) -> ExecuteToolResult:
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
        log.info(
            "tool call: chat=%s turn=%s step=%d tool=%s call=%s",
            input.chat_id,
            input.turn_id,
            input.step,
            call.name,
            call.id,
        )
        result = await self._run(chat, call)
        stored = await self._transcript.stage_tool_result(chat_id, result)
        METRICS.tool_calls.add(1, {"tool": call.name})
        if stored.is_error:
            METRICS.tool_errors.add(1, {"tool": call.name})
        return ExecuteToolResult(is_error=stored.is_error)

    @activity.defn(name="stage_tool_results")
    async def stage_tool_results(self, input: StageToolResultsInput) -> None:
        """Stage the client's results for dynamic calls (first write wins per call)."""
        chat_id = uuid.UUID(input.chat_id)
        names = {c.id: c.name for c in input.calls}
        for result in input.results:
            part = ToolResultPart(
                tool_call_id=result.tool_call_id,
                name=names.get(result.tool_call_id, ""),
                output=result.output,
                is_error=result.is_error,
            )
            await self._transcript.stage_tool_result(chat_id, part)

    @activity.defn(name="record_tool_results")
    async def record_tool_results(self, input: RecordToolResultsInput) -> None:
        """Persist results as one tool message, in the order of the calls.

        A call with a workflow-decided error (policy, interrupt, expiry) gets that error,
        any other its staged result.
        """
        chat_id = uuid.UUID(input.chat_id)
        staged = await self._transcript.staged_tool_results(chat_id, [c.id for c in input.calls])
        parts = [
            error_result(c, input.errors[c.id])
            if c.id in input.errors
            else staged.get(c.id) or error_result(c, "no result was recorded for this call")
            for c in input.calls
        ]
        await self._transcript.save(
            chat_id,
            turn_id=input.turn_id,
            step_key=f"{input.step}:{input.part}",
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
        except json.JSONDecodeError as err:
            return error_result(call, f"Invalid arguments for {call.name}: not valid JSON ({err})")
        except ValidationError as err:
            return error_result(
                call, f"Invalid arguments for {call.name}: they don't fit the schema: {err}"
            )
        workspace = self._workspace_root / str(chat.id)
        await asyncio.to_thread(workspace.mkdir, parents=True, exist_ok=True)
        context = ToolContext(chat_id=str(chat.id), tool_call_id=call.id, workspace=workspace)
        try:
            output = await asyncio.wait_for(tool.run(args, context), tool.timeout.total_seconds())
        except TimeoutError:
            return error_result(call, f"{call.name} timed out after {tool.timeout}")
        except Exception as err:  # the model sees every tool failure as a result
            return error_result(call, f"{call.name} failed: {type(err).__name__}: {err}")
        return _result_part(call, output)


def _result_part(call: ToolCallPart, output: ToolOutput) -> ToolResultPart:
    """Map a tool's output to a result part; invalid output is an error the model sees."""
    if isinstance(output, MediaOutput):
        return ToolResultPart(
            tool_call_id=call.id, name=call.name, media_type=output.media_type, data=output.data
        )
    if isinstance(output, dict | list):
        try:
            text = json.dumps(output)
        except (TypeError, ValueError) as err:
            return error_result(call, f"{call.name} returned output that is not JSON: {err}")
        if len(text) <= MAX_RESULT_CHARS:
            return ToolResultPart(tool_call_id=call.id, name=call.name, output=output)
        output = text
    if not isinstance(output, str):
        return error_result(call, f"{call.name} returned {type(output).__name__}, not a result")
    return ToolResultPart(tool_call_id=call.id, name=call.name, output=_truncated(output))


def _truncated(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return (
        text[:MAX_RESULT_CHARS]
        + f"\n[truncated: showing the first {MAX_RESULT_CHARS} of {len(text)} characters]"
    )
