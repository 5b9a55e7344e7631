"""The tool phase of a step: policies, calls in parallel, then the wait for a person and
the client, then the approved calls.

Deterministic workflow code; every decision comes from `workflows.decide`.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from activities.tools import ToolActivities
    from activities.turn import TurnActivities
    from chatd.chat_status import BusyStatus
    from workflows.agent_wait import AgentWait
    from workflows.constants import LOCAL_TIMEOUT
    from workflows.controls import TurnControls
    from workflows.decide import ToolsOutcome
    from workflows.payloads import (
        ExecuteToolInput,
        ExecuteToolResult,
        RecordToolResultsInput,
        SetStatusInput,
        ToolCallRef,
        TurnPlan,
    )
    from workflows.retries import activity_error, retries_within, retry_policy
    from workflows.tool_batch import (
        INTERRUPTED_RESULT,
        POLICY_DENIED,
        ToolPlan,
        denied_by_person,
        exclusive_violation,
        expired_result,
        stops_turn,
    )
    from workflows.webhook_delivery import start_deliveries

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
        self._announce_waits = "turn.requires_action" in plan.webhook_events
        self.answered = False
        """The step's calls waited for the client or a person, who answered."""

    async def run(self, calls: list[ToolCallRef]) -> ToolsOutcome:
        """The calls the policy lets run (persisted), then the wait for a person and the
        client, then the approved calls; say how the turn goes on."""
        policy_errors = exclusive_violation(calls)
        if policy_errors:
            await self._record(calls, policy_errors)
            return "continue"
        plan = ToolPlan(calls)
        failed: set[str] = set()
        if plan.immediate:
            refused = dict.fromkeys([c.id for c in plan.denied], POLICY_DENIED)
            failed = await self._run(plan.run_now, plan.immediate, refused, "tools")
        ran = list(plan.run_now)
        if plan.asked or plan.client:
            waited = await self._await_answers(plan)
            if waited != "continue":
                return waited
            self.answered = True
            denied_now = self._decisions_denied()
            approved = [c for c in plan.asked if c.id not in denied_now]
            self._controls.decisions = {}
            failed |= await self._run(approved, plan.asked, denied_now, "approved")
            ran += approved
        if self._controls.interrupted:
            return "interrupted"
        return "stop" if stops_turn(ran, failed) else "continue"

    def _decisions_denied(self) -> dict[str, str]:
        """The error result of each call a person denied."""
        return {
            call_id: denied_by_person(decision.message)
            for call_id, decision in self._controls.decisions.items()
            if decision.decision == "deny"
        }

    async def _run(
        self,
        calls: list[ToolCallRef],
        recorded: list[ToolCallRef],
        errors: dict[str, str],
        part: Literal["tools", "approved"],
    ) -> set[str]:
        """Run `calls`, each its own activity, all in parallel (an interrupt cancels the
        rest); then record a result for each of `recorded`, in call order (`errors` for
        those that did not run). The ids of the calls that failed."""
        handles = [self._start(call) for call in calls]
        await workflow.wait_condition(
            lambda: all(h.done() for h in handles) or self._controls.interrupted
        )
        for handle in handles:
            if not handle.done():
                handle.cancel()
        results = await asyncio.gather(*handles, return_exceptions=True)
        errors = errors | {
            call.id: _failure_result(call, result)
            for call, result in zip(calls, results, strict=True)
            if isinstance(result, BaseException)
        }
        if recorded:
            await self._record(recorded, errors, part)
        return {
            call.id
            for call, result in zip(calls, results, strict=True)
            if not isinstance(result, ExecuteToolResult) or result.is_error
        }

    def _start(self, call: ToolCallRef) -> asyncio.Task[ExecuteToolResult]:
        """The call's activity (a local one for an inline tool); or, for `wait_agent`, the
        workflow's own wait."""
        if call.kind == "wait":
            wait = AgentWait(self._chat_id, self._turn_id, self._step, self._controls)
            return asyncio.create_task(wait.run(call))
        input = ExecuteToolInput(
            chat_id=self._chat_id, turn_id=self._turn_id, step=self._step, call=call
        )
        summary = f"tool {short_name(call.name)} (step {self._step})"
        if call.inline:
            return workflow.start_local_activity_method(
                ToolActivities.execute_tool_call,
                input,
                start_to_close_timeout=min(self._deadline, LOCAL_TIMEOUT),
                schedule_to_close_timeout=self._deadline,
                retry_policy=retries_within(self._deadline),
                cancellation_type=ActivityCancellationType.TRY_CANCEL,
                summary=summary,
            )
        return workflow.start_activity_method(
            ToolActivities.execute_tool_call,
            input,
            start_to_close_timeout=min(self._deadline, timedelta(minutes=30)),
            schedule_to_close_timeout=self._deadline,
            heartbeat_timeout=timedelta(seconds=10),
            retry_policy=_TOOL_RETRY,
            cancellation_type=ActivityCancellationType.TRY_CANCEL,
            summary=summary,
        )

    async def _await_answers(self, plan: ToolPlan) -> ToolsOutcome:
        """requires_action: wait durably until a person decided on the asked calls and the
        client answered its calls, or an interrupt, or expiry. Records the client's results;
        on interrupt or expiry, an error result for every call that got no answer."""
        controls = self._controls
        if controls.interrupted:
            await self._unanswered(plan, INTERRUPTED_RESULT)
            return "interrupted"
        expires_at = workflow.now() + self._action_timeout
        controls.await_answers(plan.asked, plan.client, expires_at)
        await self._set_status("requires_action", plan.waiting, expires_at)
        if self._announce_waits:
            await start_deliveries(
                self._chat_id, self._turn_id, "turn.requires_action", occurrence=self._step
            )
        try:
            await workflow.wait_condition(
                lambda: controls.answered or controls.interrupted, timeout=self._action_timeout
            )
        except TimeoutError:
            pass
        # A submission accepted a moment ago is persisted, or refused, before the wait ends.
        await workflow.wait_condition(
            lambda: all(a.staged or not a.accepted for a in (controls.approvals, controls.client))
        )
        answered, interrupted = controls.answered, controls.interrupted
        client_staged = controls.client.staged
        controls.stop_awaiting()
        if answered and not interrupted:
            if plan.client:
                await self._record(plan.client, {}, "client-tools")
            await self._set_status("running", [], None)
            return "continue"
        reason = INTERRUPTED_RESULT if interrupted else expired_result(expires_at)
        await self._unanswered(plan, reason, client_staged=client_staged)
        return "interrupted" if interrupted else "expired"

    async def _unanswered(
        self, plan: ToolPlan, reason: str, *, client_staged: bool = False
    ) -> None:
        """Results for the calls of a wait that ended before all its answers came: the
        client's results if they came, the denials that came, and `reason` for the rest
        (an approved call does not run once the wait ended without the client's results)."""
        if plan.client:
            errors = {} if client_staged else dict.fromkeys([c.id for c in plan.client], reason)
            await self._record(plan.client, errors, "client-tools")
        if plan.asked:
            not_run = dict.fromkeys([c.id for c in plan.asked], reason)
            await self._record(plan.asked, not_run | self._decisions_denied(), "approved")
        self._controls.decisions = {}

    async def _record(
        self,
        calls: list[ToolCallRef],
        errors: dict[str, str],
        part: Literal["tools", "approved", "client-tools"] = "tools",
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
        status: BusyStatus,
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
