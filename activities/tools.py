"""Tool activities: run one built-in call; stage client results; record results in call order."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from pathlib import Path
from typing import Any, Literal, NamedTuple

import asyncpg
from pydantic import BaseModel
from temporalio import activity

from activities.failures import classified_failures
from activities.heartbeat import heartbeating
from chatd.parts import ToolCallPart, ToolResultPart, error_result
from chatd.store.chats import ChatRecord, ChatStore
from chatd.store.step_keys import StepKey
from chatd.store.tool_calls import CallKey, Start, ToolCallStore
from chatd.store.transcript import TranscriptStore
from chatd.telemetry import METRICS, TRACER
from chatd.tools.base import InvalidArguments, MediaOutput, Tool, ToolContext, ToolOutput
from chatd.tools.catalog import ToolCatalog, TurnTools
from workflows.payloads import (
    ExecuteToolInput,
    ExecuteToolResult,
    RecordToolResultsInput,
    StageToolResultsInput,
    ToolCallRef,
)

__all__ = ["ToolActivities", "error_result", "run_quick_calls"]

log = logging.getLogger("chatd.tools")
REPEATED_ID = (
    "This call was not run: an earlier call in the same response has the same id. "
    "Call it again if it is still needed."
)
CRASHED_NON_IDEMPOTENT = (
    "The worker failed while this tool was running; it may or may not have completed. "
    "It was not run again because it is not idempotent."
)
MAX_RESULT_CHARS = 32_768
"""Text results above this are truncated (with a note) before the model sees them."""


class ToolActivities:
    """Runs built-in tools for a worker's registry and persists their results."""

    def __init__(self, pool: asyncpg.Pool, catalog: ToolCatalog, workspace_root: Path) -> None:
        self._chats = ChatStore(pool)
        self._transcript = TranscriptStore(pool)
        self._calls = ToolCallStore(pool)
        self._catalog = catalog
        self._workspace_root = workspace_root

    @activity.defn(name="execute_tool_call")
    async def execute_tool_call(self, input: ExecuteToolInput) -> ExecuteToolResult:
        """Run one call once (the first staged result wins) and stage its result."""
        # Heartbeats from the start: a wait for a pooled connection under load must not time
        # out the attempt (a non-idempotent tool would then be reported as maybe-run).
        async with heartbeating(), classified_failures(f"tool {input.call.name[:64]}"):
            return await self._execute(input)

    async def _execute(self, input: ExecuteToolInput) -> ExecuteToolResult:
        key = CallKey(uuid.UUID(input.chat_id), input.turn_id, input.step, input.call.id)
        staged = await self._calls.staged(key.chat_id, key.turn_id, key.step, [key.tool_call_id])
        if key.tool_call_id in staged:
            return ExecuteToolResult(is_error=staged[key.tool_call_id].is_error)
        result = await self._result(key, input.call)
        if result is None:  # another call of the step with this id runs: see `_in_call_order`
            return ExecuteToolResult(is_error=True)
        stored = await self._calls.stage(key, result)
        METRICS.tool_calls.add(1, {"tool": input.call.name})
        if stored.is_error:
            METRICS.tool_errors.add(1, {"tool": input.call.name})
        return ExecuteToolResult(is_error=stored.is_error)

    async def _result(self, key: CallKey, ref: ToolCallRef) -> ToolResultPart | None:
        """The call's result: its output, or why it did not run."""
        log.info(
            "tool call: chat=%s turn=%s step=%d tool=%s call=%s",
            key.chat_id,
            key.turn_id,
            key.step,
            ref.name,
            ref.id,
        )
        chat = await self._chats.get(key.chat_id)
        step = await self._transcript.find(key.chat_id, key.turn_id, StepKey.assistant(key.step))
        calls = [p for p in (step.parts if step else []) if isinstance(p, ToolCallPart)]
        call = next((c for c in calls if c.id == ref.id), None)
        if chat is None or call is None:
            return error_result(ref, "This tool call is not in the transcript.")
        prepared = await self._prepare(chat, key, call)
        if isinstance(prepared, ToolResultPart):
            return prepared
        return await self._start(key, prepared, shared=sum(c.id == ref.id for c in calls) > 1)

    @activity.defn(name="stage_tool_results")
    async def stage_tool_results(self, input: StageToolResultsInput) -> None:
        """Stage the client's results for dynamic calls (first write wins per call)."""
        names = {c.id: c.name for c in input.calls}
        await self._calls.stage_client_results(
            uuid.UUID(input.chat_id),
            input.turn_id,
            input.step,
            [
                ToolResultPart(
                    tool_call_id=result.tool_call_id,
                    name=names.get(result.tool_call_id, ""),
                    output=result.output,
                    is_error=result.is_error,
                )
                for result in input.results
            ],
        )

    @activity.defn(name="record_tool_results")
    async def record_tool_results(self, input: RecordToolResultsInput) -> None:
        """Persist results as one tool message, in the order of the calls.

        A call with a workflow-decided error (policy, interrupt, expiry) gets that error,
        any other its staged result.
        """
        chat_id = uuid.UUID(input.chat_id)
        staged = await self._calls.staged(
            chat_id, input.turn_id, input.step, [c.id for c in input.calls]
        )
        parts = _in_call_order(input.calls, input.errors, staged)
        await _save_results(self._transcript, chat_id, input.turn_id, input.step, input.part, parts)

    async def _prepare(
        self, chat: ChatRecord, key: CallKey, call: ToolCallPart
    ) -> _Prepared | ToolResultPart:
        tools = await self._catalog.for_turn(chat, key.turn_id)
        return await _prepared(tools, key, call, self._workspace_root, self._transcript)

    async def _start(
        self, key: CallKey, prepared: _Prepared, shared: bool
    ) -> ToolResultPart | None:
        """Mark the call started, then run it; unless it started before: then a non-idempotent
        tool is not run again, and a call whose id another call of the step shares (whose
        activity started it) is left to that one (None)."""
        info = activity.info()
        first = await self._calls.mark_started(key, Start(info.activity_id, info.attempt))
        if first.activity_id != info.activity_id and shared:
            return None
        if first != Start(info.activity_id, info.attempt) and not prepared.tool.idempotent:
            return error_result(prepared.call, CRASHED_NON_IDEMPOTENT)
        return await prepared.run()


class _Prepared(NamedTuple):
    """A call ready to run: its tool, validated arguments and context."""

    tool: Tool[Any]
    call: ToolCallPart
    args: BaseModel
    context: ToolContext

    async def run(self) -> ToolResultPart:
        """Run the tool; a failure or timeout is a result the model sees."""
        tool, call = self.tool, self.call
        try:
            output = await asyncio.wait_for(
                tool.run(self.args, self.context), tool.timeout.total_seconds()
            )
        except TimeoutError:
            return error_result(call, f"{call.name} timed out after {tool.timeout}")
        except Exception as err:  # the model sees every tool failure as a result
            return error_result(call, f"{call.name} failed: {type(err).__name__}: {err}")
        return _result_part(call, output)


async def _prepared(
    tools: TurnTools,
    key: CallKey,
    call: ToolCallPart,
    workspace_root: Path,
    transcript: TranscriptStore,
) -> _Prepared | ToolResultPart:
    """Everything before the tool starts; any failure is a result the model sees (the tool
    never ran, so there is nothing for a retry to be unsure about)."""
    chat = tools.chat
    tool = tools.tool(call.name)
    if tool is None:
        return error_result(call, f"Tool not found: {call.name}")
    if not tools.active(call.name):
        return error_result(call, f"Tool not active in this turn: {call.name}")
    try:
        args = tool.parse_arguments(call.arguments)
    except InvalidArguments as err:
        return error_result(call, f"Invalid arguments for {call.name}: {err}")
    workspace = workspace_root / str(chat.id)
    try:
        await asyncio.to_thread(workspace.mkdir, parents=True, exist_ok=True)
    except OSError as err:
        return error_result(
            call, f"{call.name} was not run: its workspace could not be created: {err}"
        )
    context = ToolContext(
        chat_id=str(chat.id),
        tool_call_id=call.id,
        workspace=workspace,
        owner=chat.owner,
        turn_id=key.turn_id,
        step=key.step,
        chat=chat,
        transcript=transcript,
    )
    return _Prepared(tool, call, args, context)


async def run_quick_calls(
    tools: TurnTools,
    turn_id: str,
    step: int,
    calls: list[ToolCallRef],
    parts: list[ToolCallPart],
    workspace_root: Path,
    transcript: TranscriptStore,
) -> None:
    """Run a step's quick calls (`Tool.inline`, idempotent) inside the model-step activity and
    record their results in call order, as one tool message.

    Unlike `execute_tool_call`, nothing is staged or marked started: a retried attempt runs
    them again, and the message is saved once (its first results stand).
    """
    first: dict[str, ToolCallPart] = {}
    for part in parts:
        first.setdefault(part.id, part)

    async def result(call: ToolCallPart) -> ToolResultPart:
        log.info(
            "tool call: chat=%s turn=%s step=%d tool=%s call=%s (in the model step)",
            tools.chat.id,
            turn_id,
            step,
            call.name,
            call.id,
        )
        key = CallKey(tools.chat.id, turn_id, step, call.id)
        with TRACER.start_as_current_span("tool.call", attributes={"chatd.tool": call.name}):
            prepared = await _prepared(tools, key, call, workspace_root, transcript)
            done = prepared if isinstance(prepared, ToolResultPart) else await prepared.run()
        METRICS.tool_calls.add(1, {"tool": call.name})
        if done.is_error:
            METRICS.tool_errors.add(1, {"tool": call.name})
        return done

    results = await asyncio.gather(*(result(call) for call in first.values()))
    by_id = {r.tool_call_id: r for r in results}
    await _save_results(
        transcript, tools.chat.id, turn_id, step, "tools", _in_call_order(calls, {}, by_id)
    )


async def _save_results(
    transcript: TranscriptStore,
    chat_id: uuid.UUID,
    turn_id: str,
    step: int,
    part: Literal["tools", "approved", "client-tools"],
    parts: list[ToolResultPart],
) -> None:
    """The step's results as one tool message (once), each published to the chat's stream."""
    await transcript.save(
        chat_id,
        turn_id=turn_id,
        step_key=StepKey.tool_results(step, part),
        role="tool",
        parts=list(parts),
        extra_events=[
            ("message_part", {"role": "tool", "part": p.model_dump(exclude_none=True)})
            for p in parts
        ],
    )


def _in_call_order(
    calls: list[ToolCallRef], errors: dict[str, str], staged: dict[str, ToolResultPart]
) -> list[ToolResultPart]:
    """One result per call, in call order. A call whose id an earlier call of the step has
    already (a server that repeats ids) was not run: results are keyed by id, so only the
    first call with an id runs, and the model is told so of the others."""
    seen: set[str] = set()
    parts: list[ToolResultPart] = []
    for call in calls:
        if call.id in errors:
            parts.append(error_result(call, errors[call.id]))
        elif call.id in seen:
            parts.append(error_result(call, REPEATED_ID))
        else:
            parts.append(
                staged.get(call.id) or error_result(call, "no result was recorded for this call")
            )
        seen.add(call.id)
    return parts


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
