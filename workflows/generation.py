"""Model steps of a turn, retried on workflow timers: the generate phase of ChatTurn.

Deterministic workflow code; whether to retry, and how long to wait, come from
`workflows.decide`.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from activities.model_step import ModelStepActivities
    from activities.turn import TurnActivities
    from chatd.models import ModelError
    from workflows.constants import MODEL_ERROR_TYPE
    from workflows.controls import TurnControls
    from workflows.decide import DEFAULT_MAX_MODEL_ATTEMPTS, backoff_delay, should_retry
    from workflows.payloads import (
        PublishRetryInput,
        RetryState,
        StreamStepInput,
        StreamStepResult,
        TurnPlan,
    )
    from workflows.tool_step import LOCAL_TIMEOUT

__all__ = ["Generation"]

_MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    non_retryable_error_types=[MODEL_ERROR_TYPE],
)


class Generation:
    """Runs a turn's model steps; the backoff in progress is `retry` (for the state query)."""

    def __init__(self, chat_id: str, controls: TurnControls) -> None:
        self._chat_id = chat_id
        self._controls = controls
        self.edges_in_steps = False
        """Set by the run: it took the `turn-edges-in-steps` patch, so steps may finish it."""
        self.model_label = ""
        """Shown in the step activities' summaries."""
        self.retry: RetryState | None = None

    async def step(
        self, turn_id: str, step: int, plan: TurnPlan | None
    ) -> tuple[StreamStepResult | None, ModelError | None]:
        """One model step, retried with workflow-timer backoff on retryable model errors.

        Without a `plan` yet, the step begins the turn (each attempt: beginning is idempotent)
        and is the turn's first: `stream_first_model_step`. A step may finish the turn
        (`finished_turn`) only in runs that took the `turn-edges-in-steps` patch.
        """
        attempt = 1
        while not self._controls.interrupted:
            try:
                result = await self._stream(
                    StreamStepInput(
                        chat_id=self._chat_id,
                        turn_id=turn_id,
                        step=step,
                        attempt=attempt,
                        begin=plan is None,
                        may_finish=self.edges_in_steps,
                        compact_at_tokens=plan.compact_at_tokens if plan is not None else 0,
                    )
                )
                self.retry = None
                return result, None
            except ActivityError as err:
                error = _model_error(err)
            if self._controls.interrupted or not should_retry(
                error, attempt, DEFAULT_MAX_MODEL_ATTEMPTS
            ):
                self.retry = None
                return None, None if self._controls.interrupted else error
            await self._back_off(attempt, error)
            self.retry = None
            attempt += 1
        return None, None

    async def _stream(self, input: StreamStepInput) -> StreamStepResult:
        """The model-step activity; an interrupt cancels it and it returns its partial step."""
        handle = workflow.start_activity_method(
            (
                ModelStepActivities.stream_first_model_step
                if input.begin
                else ModelStepActivities.stream_model_step
            ),
            input,
            start_to_close_timeout=timedelta(minutes=15),
            heartbeat_timeout=timedelta(seconds=5),
            retry_policy=_MODEL_RETRY,
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=f"{self.model_label} step {input.step}",
        )
        await workflow.wait_condition(lambda: handle.done() or self._controls.interrupted)
        if not handle.done():
            handle.cancel()
        return await handle

    async def _back_off(self, attempt: int, error: ModelError) -> None:
        """Publish the retry, then wait on a durable timer that an interrupt cuts short."""
        delay = backoff_delay(attempt, error.retry_after_ms)
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


def _model_error(err: ActivityError) -> ModelError:
    """The classified error the activity raised, or a generic one for anything else."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.type == MODEL_ERROR_TYPE and cause.details:
        return ModelError.model_validate(cause.details[0])
    if isinstance(cause, CancelledError):
        return ModelError(message="the model step was cancelled", kind="generic")
    return ModelError(message=str(cause or err), kind="generic", retryable=False)
