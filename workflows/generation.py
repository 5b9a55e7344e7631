"""Model steps of a turn, retried on workflow timers: the generate phase of ChatTurn.

Deterministic workflow code; whether to retry, and how long to wait, come from
`workflows.decide`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from activities.model_step import ModelStepActivities
    from activities.turn import TurnActivities
    from chatd.models import ModelError
    from workflows.budget_wait import await_budget
    from workflows.constants import LOCAL_TIMEOUT, MODEL_ERROR_TYPE
    from workflows.controls import TurnControls
    from workflows.decide import Failed, Interrupted, OverBudget, StepOutcome, Streamed
    from workflows.fallback import (
        FALLBACK_DELAY,
        fallback_model,
        model_label,
        model_seems_down,
    )
    from workflows.model_retries import (
        DEFAULT_MAX_MODEL_ATTEMPTS,
        backoff_delay,
        gave_up,
        should_retry,
    )
    from workflows.payloads import (
        BeginTurnInput,
        BeginTurnResult,
        PublishRetryInput,
        RetryState,
        StreamStepInput,
        StreamStepResult,
        TurnPlan,
    )
    from workflows.retries import activity_error, retry_policy

__all__ = ["Generation"]


_MODEL_RETRY = retry_policy(non_retryable=[MODEL_ERROR_TYPE])
"""Classified provider errors are the workflow's to retry, with its timers."""
_BUDGET_WAIT_S = 86_400
"""How long a paused turn with no plan yet waits for a decision (a plan brings its own)."""
_LEAST_TIME = timedelta(seconds=1)
"""An attempt's least time, however little of the deadline is left (the step decides)."""
_STREAM_HEARTBEAT_TIMEOUT = timedelta(seconds=4)
"""How long a streaming step's worker may be silent before its attempt moves elsewhere.

The step beats every `activities.heartbeat.LIVENESS_EVERY_S` (a quarter of this), so a dead
worker is noticed 3-4 s after it died; the retry follows `_MODEL_RETRY`'s first interval
later (a shorter one than its 1 s doesn't start the retry sooner: Temporal fires a timer set
less than about a second ahead a second after setting it; see bench/README.md, chaos.py).
Interrupts don't wait for a beat (the gateway announces them): the beats are for liveness.
"""


class Generation:
    """Runs a turn's model steps; the backoff in progress is `retry` (for the state query).

    A step that keeps failing on its model may move to the chat's next one
    (`workflows.fallback.fallback_model`); the turn then stays on it (`model_index`) to its end.
    """

    def __init__(
        self, chat_id: str, controls: TurnControls, deadline: timedelta, model_index: int = 0
    ) -> None:
        self._chat_id = chat_id
        self._controls = controls
        self._deadline = deadline
        self.model_label = ""
        """The chat model's label (summaries name the model in use)."""
        self.model_index = model_index
        """The model the turn streams from: 0 the chat's own, i its i-th fallback."""
        self.retry: RetryState | None = None
        self.began: BeginTurnResult | None = None
        """The turn's beginning, once `begin` was asked for it."""

    async def step(
        self,
        turn_id: str,
        step: int,
        plan: TurnPlan | None,
        opens_response: bool,
        steps_before: int,
    ) -> StepOutcome:
        """One model step, retried with workflow-timer backoff on retryable model errors.

        The activity may go on past steps whose calls were all quick, but not to
        `steps_before` or the plan's step limit (a step that begins the turn learns that
        limit itself); its result then names the step it ended on. A retry asks for `step`
        again, and the activity goes on from the first step not saved.

        Without a `plan` yet, the step begins the turn and brings the plan
        (`StreamStepResult.began`); if it fails, `begin` is asked for the plan instead.
        Retries stop once the step has failed on its model for the turn's deadline; a move
        to the next model starts its attempts and its deadline anew.
        """
        failing_since: datetime | None = None
        # The step's attempt (clients drop a shown partial after 1), the attempt on the model
        # in use, and its failures that count toward a fallback.
        attempt, on_model, down = 1, 1, 0
        while not self._controls.interrupted:
            attempt_started = workflow.now()
            try:
                result = await self._stream(
                    StreamStepInput(
                        chat_id=self._chat_id,
                        turn_id=turn_id,
                        step=step,
                        attempt=attempt,
                        begin=plan is None,
                        run_id=workflow.info().run_id if plan is None else None,
                        compact_at_tokens=plan.compact_at_tokens if plan is not None else 0,
                        model_index=self.model_index,
                        opens_response=opens_response,
                        steps_before=min(steps_before, plan.max_steps) if plan else steps_before,
                    ),
                    self._deadline - (workflow.now() - (failing_since or attempt_started)),
                    self._label(plan),
                )
            except ActivityError as err:
                error = activity_error(err, "the model step")
            else:
                self.retry = None
                if result.pending_budget is None:
                    return Streamed(result)  # interrupted or not: its partial step is persisted
                ended, plan = await self._pause(turn_id, result, plan)
                if ended is not None:
                    return ended
                continue  # nothing was sent: the same attempt, now within the budget
            if self._controls.interrupted:
                break
            if plan is None and (plan := (await self.begin(turn_id)).plan) is None:
                return Failed(error)  # no turn after all: its message was deleted
            down += model_seems_down(error)
            following = fallback_model(error, down, self.model_index, plan)
            if following is not None:
                self.model_index = following  # for the rest of the turn
                then = f"moving to {model_label(plan, following)} in {_seconds(FALLBACK_DELAY)}"
                _log_failure(step, attempt, error, then)
                await self._back_off(attempt, error, FALLBACK_DELAY, plan)
                failing_since, on_model, down = None, 1, 0
                attempt += 1
                continue
            failing_since = failing_since or attempt_started
            failing_for = workflow.now() - failing_since
            deadline = self._deadline
            if not should_retry(error, on_model, DEFAULT_MAX_MODEL_ATTEMPTS, failing_for, deadline):
                self.retry = None
                final = gave_up(error, on_model, failing_for, deadline)
                _log_failure(step, attempt, error, f"not retried: the turn ends with {final.kind}")
                return Failed(final)
            delay = backoff_delay(on_model, error.retry_after_ms)
            _log_failure(step, attempt, error, f"retrying in {_seconds(delay)}")
            await self._back_off(attempt, error, delay, plan)
            attempt, on_model = attempt + 1, on_model + 1
        self.retry = None
        return Interrupted()

    async def _pause(
        self, turn_id: str, result: StreamStepResult, plan: TurnPlan | None
    ) -> tuple[StepOutcome | None, TurnPlan | None]:
        """Wait on the budget the step couldn't be paid from: None once it is raised (with
        the turn's plan: a first step begins the turn, paused or not), else how the step
        ends."""
        assert result.pending_budget is not None
        if plan is None:
            self.began = result.began
            plan = result.began.plan if result.began is not None else None
        wait = timedelta(seconds=plan.action_timeout_s if plan else _BUDGET_WAIT_S)
        pending = result.pending_budget
        if await await_budget(self._chat_id, turn_id, pending, self._controls, wait):
            return None, plan
        return (Interrupted() if self._controls.interrupted else OverBudget()), plan

    async def begin(self, turn_id: str) -> BeginTurnResult:
        """Begin the turn (idempotent): for a first step that failed or never ran."""
        began = await workflow.execute_local_activity_method(
            TurnActivities.begin_turn,
            BeginTurnInput(chat_id=self._chat_id, turn_id=turn_id, run_id=workflow.info().run_id),
            start_to_close_timeout=LOCAL_TIMEOUT,
        )
        self.began = began
        return began

    def _label(self, plan: TurnPlan | None) -> str:
        """The label of the model in use (before the plan, only the chat's own can be)."""
        return self.model_label if plan is None else model_label(plan, self.model_index)

    async def _stream(
        self, input: StreamStepInput, time_left: timedelta, label: str
    ) -> StreamStepResult:
        """The model-step activity; an interrupt cancels it and it returns its partial step."""
        handle = workflow.start_activity_method(
            ModelStepActivities.stream_model_step,
            input,
            start_to_close_timeout=timedelta(minutes=15),
            schedule_to_close_timeout=max(time_left, _LEAST_TIME),
            heartbeat_timeout=_STREAM_HEARTBEAT_TIMEOUT,
            retry_policy=_MODEL_RETRY,
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=f"{label} step {input.step}",
        )
        return await self._controls.unless_interrupted(handle)

    async def _back_off(
        self, attempt: int, error: ModelError, delay: timedelta, plan: TurnPlan
    ) -> None:
        """Publish the retry (naming the fallback model the next attempt uses, if it does),
        then wait on a durable timer that an interrupt cuts short."""
        fallback = model_label(plan, self.model_index) if self.model_index else None
        retrying_at = workflow.now() + delay
        self.retry = RetryState(attempt=attempt, next_attempt_at=retrying_at, error=error)
        await workflow.execute_local_activity_method(
            TurnActivities.publish_retry,
            PublishRetryInput(
                chat_id=self._chat_id,
                attempt=attempt,
                delay_ms=int(delay.total_seconds() * 1000),
                retrying_at=retrying_at,
                error=error,
                model=fallback,
            ),
            start_to_close_timeout=LOCAL_TIMEOUT,
        )
        try:
            await workflow.wait_condition(
                lambda: self._controls.interrupted,
                timeout=delay,
                timeout_summary=f"retry backoff after {error.kind}",
            )
        except TimeoutError:
            pass
        self.retry = None


def _log_failure(step: int, attempt: int, error: ModelError, then: str) -> None:
    """One line for a classified model error: its kind and what happens next. No traceback:
    an expected error is not a bug (the activity raised it as BENIGN)."""
    status = f" (status {error.status_code})" if error.status_code is not None else ""
    workflow.logger.warning(
        "model step %d failed: %s%s, %s, attempt %d: %s",
        step,
        error.kind,
        status,
        then,
        attempt,
        error.message[:200],
    )


def _seconds(delay: timedelta) -> str:
    return f"{delay.total_seconds():.1f}s"
