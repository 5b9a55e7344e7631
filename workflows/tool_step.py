"""The tool phase of a step: policies, built-in calls in parallel, then client calls.

Deterministic workflow code; every decision comes from `workflows.decide`.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.workflow import ActivityCancellationType, ActivityHandle

with workflow.unsafe.imports_passed_through():
    from activities.tools import ToolActivities
    from activities.turn import TurnActivities
    from workflows.constants import LOCAL_TIMEOUT
    from workflows.controls import TurnControls
    from workflows.decide import (
        INTERRUPTED_RESULT,
        ToolsOutcome,
        exclusive_violation,
        expired_result,
        split_calls,
        stops_turn,
    )
    from workflows.payloads import (
        ExecuteToolInput,
        ExecuteToolResult,
        RecordToolResultsInput,
        SetStatusInput,
        ToolCallRef,
        TurnPlan,
    )
    from workflows.retries import activity_error, retry_policy

__all__ = ["ToolStep"]

_TOOL_RETRY = retry_policy()

SUMMARY_NAME_CHARS = 64
"""How much of a tool's name an activity summary shows: the model chooses the name, and a
summary is stored in the workflow's history and shown by the Temporal UI and CLI."""


def short_name(name: str) -> str:
    """`name`, cut to `SUMMARY_NAME_CHARS` characters (an ellipsis marks the cut)."""
    if len(name) <= SUMMARY_NAME_CHARS:
        return name
    return name[: SUMMARY_NAME_CHARS - 1] + "…"


class ToolStep:
    """Runs the tool calls of one persisted model step."""

    def __init__(
        self,
        chat_id: str,
        plan: TurnPlan,
        step: int,
        controls: TurnControls,
        deadline: timedelta,
    ) -> None:
        self._chat_id = chat_id
        self._turn_id = plan.turn_id
        self._step = step
        self._controls = controls
        self._action_timeout = timedelta(seconds=plan.action_timeout_s)
        self._deadline = deadline

    async def run(self, calls: list[ToolCallRef]) -> ToolsOutcome:
        """Built-in calls first (persisted), then the client's; say how the turn goes on."""
        policy_errors = exclusive_violation(calls)
        if policy_errors:
            await self._record(calls, policy_errors)
            return "continue"
        builtin, dynamic = split_calls(calls)
        failed: set[str] = set()
        if builtin:
            failed = await self._run_builtin(builtin)
        if self._controls.interrupted:
            if dynamic:
                interrupted = dict.fromkeys([c.id for c in dynamic], INTERRUPTED_RESULT)
                await self._record(dynamic, interrupted, "client-tools")
            return "interrupted"
        if dynamic:
            outcome = await self._await_client(dynamic)
            if outcome != "continue":
                return outcome
        return "stop" if stops_turn(builtin, failed) else "continue"

    async def _run_builtin(self, calls: list[ToolCallRef]) -> set[str]:
        """Each call is its own activity, all in parallel; an interrupt cancels the rest."""
        handles = [self._start_tool(call) for call in calls]
        await workflow.wait_condition(
            lambda: all(h.done() for h in handles) or self._controls.interrupted
        )
        for handle in handles:
            if not handle.done():
                handle.cancel()
        results = await asyncio.gather(*handles, return_exceptions=True)
        errors = {
            call.id: _failure_result(call, result)
            for call, result in zip(calls, results, strict=True)
            if isinstance(result, BaseException)
        }
        await self._record(calls, errors)
        return {
            call.id
            for call, result in zip(calls, results, strict=True)
            if not isinstance(result, ExecuteToolResult) or result.is_error
        }

    def _start_tool(self, call: ToolCallRef) -> ActivityHandle[ExecuteToolResult]:
        return workflow.start_activity_method(
            ToolActivities.execute_tool_call,
            ExecuteToolInput(
                chat_id=self._chat_id, turn_id=self._turn_id, step=self._step, call=call
            ),
            start_to_close_timeout=min(self._deadline, timedelta(minutes=30)),
            schedule_to_close_timeout=self._deadline,
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=_TOOL_RETRY,
            cancellation_type=ActivityCancellationType.TRY_CANCEL,
            summary=f"tool {short_name(call.name)} (step {self._step})",
        )

    async def _await_client(self, calls: list[ToolCallRef]) -> ToolsOutcome:
        """requires_action: wait durably for the client's results, an interrupt, or expiry."""
        controls = self._controls
        expires_at = workflow.now() + self._action_timeout
        controls.await_results(calls, expires_at)
        await self._set_status("requires_action", calls, expires_at)
        try:
            await workflow.wait_condition(
                lambda: controls.accepted or controls.interrupted, timeout=self._action_timeout
            )
        except TimeoutError:
            pass
        accepted = controls.accepted
        controls.stop_awaiting()
        if accepted:
            await workflow.wait_condition(lambda: controls.staged)
            await self._record(calls, {}, "client-tools")
            await self._set_status("running", [], None)
            return "continue"
        reason = INTERRUPTED_RESULT if controls.interrupted else expired_result(expires_at)
        await self._record(calls, dict.fromkeys([c.id for c in calls], reason), "client-tools")
        return "interrupted" if controls.interrupted else "expired"

    async def _record(
        self,
        calls: list[ToolCallRef],
        errors: dict[str, str],
        part: Literal["tools", "client-tools"] = "tools",
    ) -> None:
        await workflow.execute_local_activity_method(
            ToolActivities.record_tool_results,
            RecordToolResultsInput(
                chat_id=self._chat_id,
                turn_id=self._turn_id,
                step=self._step,
                calls=calls,
                errors=errors,
                part=part,
            ),
            start_to_close_timeout=LOCAL_TIMEOUT,
        )

    async def _set_status(
        self,
        status: Literal["running", "requires_action"],
        pending: list[ToolCallRef],
        expires_at: datetime | None,
    ) -> None:
        await workflow.execute_local_activity_method(
            TurnActivities.set_status,
            SetStatusInput(
                chat_id=self._chat_id,
                turn_id=self._turn_id,
                status=status,
                step=self._step,
                pending=pending,
                expires_at=expires_at,
            ),
            start_to_close_timeout=LOCAL_TIMEOUT,
        )
        self._controls.set_status(status)


def _failure_result(call: ToolCallRef, failure: BaseException) -> str:
    """What the model sees of a call whose activity was cancelled or gave up: errors are
    tool results, and the turn goes on."""
    if isinstance(failure, ActivityError) and not isinstance(failure.cause, CancelledError):
        return f"{call.name} could not be run: {activity_error(failure, call.name).message}"
    return INTERRUPTED_RESULT
