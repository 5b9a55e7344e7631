"""`wait_agent`: the parent's durable wait for its subagents, woken by their signals.

No polling: the wait sleeps on a condition that a child's `child_finished` signal (sent when
any of its turns ends) or an interrupt wakes, with a timer for the call's timeout; each wake
looks at the children once. Deterministic workflow code.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.agents import AgentActivities
    from workflows.constants import LOCAL_TIMEOUT
    from workflows.controls import TurnControls
    from workflows.payloads import (
        AgentsChecked,
        CheckAgentsInput,
        ExecuteToolResult,
        ToolCallRef,
    )

__all__ = ["AgentWait"]


class AgentWait:
    """Waits, for one `wait_agent` call, until its children finished or its time is up."""

    def __init__(self, chat_id: str, turn_id: str, step: int, controls: TurnControls) -> None:
        self._chat_id = chat_id
        self._turn_id = turn_id
        self._step = step
        self._controls = controls

    async def run(self, call: ToolCallRef) -> ExecuteToolResult:
        """Wait; then the call's result (what finished, and what still runs) is staged."""
        checked = await self._check(call, final=False)
        if not checked.done:
            deadline = workflow.now() + timedelta(seconds=checked.timeout_s)
            while not checked.done and workflow.now() < deadline:
                try:
                    await workflow.wait_condition(
                        self._woken(self._controls.children_finished),
                        timeout=deadline - workflow.now(),
                    )
                except TimeoutError:
                    break
                checked = await self._check(call, final=False)
            if not checked.done:
                checked = await self._check(call, final=True)
        return ExecuteToolResult(is_error=checked.is_error)

    def _woken(self, seen: int) -> Callable[[], bool]:
        """True once another child finished since `seen` signals had arrived."""
        return lambda: self._controls.children_finished != seen

    async def _check(self, call: ToolCallRef, *, final: bool) -> AgentsChecked:
        return await workflow.execute_local_activity_method(
            AgentActivities.check_agents,
            CheckAgentsInput(
                chat_id=self._chat_id,
                turn_id=self._turn_id,
                step=self._step,
                call=call,
                final=final,
            ),
            start_to_close_timeout=LOCAL_TIMEOUT,
        )
