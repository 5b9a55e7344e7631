"""The ChatTurn workflow: one run per chat turn, read top to bottom as the story of a turn.

begin (promote the user message) -> generate -> run tools -> generate ... -> finish,
then continue-as-new into the next queued message, if any.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.model_step import ModelStepActivities
    from activities.tools import ToolActivities
    from activities.turn import TurnActivities
    from chatd.models import ModelError
    from workflows.constants import CHAT_STATUS, MODEL_ERROR_TYPE
    from workflows.decide import (
        DEFAULT_MAX_MODEL_ATTEMPTS,
        after_step,
        backoff_delay,
        should_retry,
    )
    from workflows.payloads import (
        BeginTurnInput,
        ChatTurnInput,
        ExecuteToolInput,
        FinishTurnInput,
        PublishRetryInput,
        RecordToolResultsInput,
        RetryState,
        StreamStepInput,
        StreamStepResult,
        SubmitMessageInput,
        SubmitMessageResult,
        ToolCallRef,
        TurnState,
    )

__all__ = ["ChatTurn"]

_LOCAL = timedelta(seconds=30)
_INFRA_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    non_retryable_error_types=[MODEL_ERROR_TYPE],
)
_IDLE_START_TIMEOUT = timedelta(minutes=1)


@workflow.defn(name="ChatTurn")
class ChatTurn:
    """One chat turn; messages sent meanwhile queue up and become the next runs."""

    @workflow.init
    def __init__(self, input: ChatTurnInput) -> None:
        self._chat_id = input.chat_id
        self._turn_id: str | None = input.queued[0] if input.queued else None
        self._queue: list[str] = list(input.queued[1:])
        self._status = "running"
        self._step = 0
        self._retry: RetryState | None = None
        self._model_label = ""

    @workflow.update(name="submit_message")
    def submit_message(self, input: SubmitMessageInput) -> SubmitMessageResult:
        """Start the turn with this message, or queue it behind the running one."""
        if input.queued_id == self._turn_id:
            return SubmitMessageResult(queued=False, turn_id=input.queued_id)
        if self._turn_id is None:
            self._turn_id = input.queued_id
            return SubmitMessageResult(queued=False, turn_id=input.queued_id)
        if input.queued_id not in self._queue:
            self._queue.append(input.queued_id)
        return SubmitMessageResult(queued=True, turn_id=input.queued_id)

    @workflow.query(name="state")
    def state(self) -> TurnState:
        """Status, step, queued messages and any backoff in progress."""
        return TurnState(
            chat_id=self._chat_id,
            turn_id=self._turn_id,
            status=self._status,
            step=self._step,
            queued_messages=list(self._queue),
            retry=self._retry,
        )

    @workflow.run
    async def run(self, input: ChatTurnInput) -> None:
        """Run this turn, then hand queued messages to the next run."""
        try:
            await workflow.wait_condition(
                lambda: self._turn_id is not None, timeout=_IDLE_START_TIMEOUT
            )
        except TimeoutError:
            return  # started without a message (by hand): nothing to do
        assert self._turn_id is not None
        await self._run_turn(self._turn_id)
        # Rule 6: a message accepted while we were finishing must not be lost.
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._queue:
            workflow.continue_as_new(ChatTurnInput(chat_id=self._chat_id, queued=self._queue))

    async def _run_turn(self, turn_id: str) -> None:
        begin = await workflow.execute_local_activity_method(
            TurnActivities.begin_turn,
            BeginTurnInput(chat_id=self._chat_id, turn_id=turn_id),
            start_to_close_timeout=_LOCAL,
        )
        if not begin.started:
            return
        self._model_label = begin.model_label
        self._set_status("running")
        error: ModelError | None = None
        for step in range(begin.max_steps):
            self._step = step
            result, error = await self._generate(turn_id, step)
            if result is None:
                break
            decision = after_step(
                has_tool_calls=bool(result.tool_calls), step=step, max_steps=begin.max_steps
            )
            if decision.run_tools:
                await self._run_tools(turn_id, step, result.tool_calls)
            if decision.then == "finish":
                break
        status = "error" if error else "waiting"
        await workflow.execute_local_activity_method(
            TurnActivities.finish_turn,
            FinishTurnInput(
                chat_id=self._chat_id,
                turn_id=turn_id,
                status=status,
                error=error,
            ),
            start_to_close_timeout=_LOCAL,
        )
        self._set_status(status)

    async def _generate(
        self, turn_id: str, step: int
    ) -> tuple[StreamStepResult | None, ModelError | None]:
        """One model step, retried with workflow-timer backoff on retryable model errors."""
        attempt = 1
        while True:
            try:
                result = await workflow.execute_activity_method(
                    ModelStepActivities.stream_model_step,
                    StreamStepInput(
                        chat_id=self._chat_id, turn_id=turn_id, step=step, attempt=attempt
                    ),
                    start_to_close_timeout=timedelta(minutes=15),
                    heartbeat_timeout=timedelta(seconds=5),
                    retry_policy=_INFRA_RETRY,
                    summary=f"{self._model_label} step {step}",
                )
                self._retry = None
                return result, None
            except ActivityError as err:
                error = _model_error(err)
            if not should_retry(error, attempt, DEFAULT_MAX_MODEL_ATTEMPTS):
                self._retry = None
                return None, error
            await self._back_off(attempt, error)
            attempt += 1

    async def _back_off(self, attempt: int, error: ModelError) -> None:
        delay = backoff_delay(attempt, error.retry_after_ms)
        retrying_at = workflow.now() + delay
        self._retry = RetryState(attempt=attempt, next_attempt_at=retrying_at, error=error)
        await workflow.execute_local_activity_method(
            TurnActivities.publish_retry,
            PublishRetryInput(
                chat_id=self._chat_id,
                attempt=attempt,
                delay_ms=int(delay.total_seconds() * 1000),
                retrying_at=retrying_at,
                error=error,
            ),
            start_to_close_timeout=_LOCAL,
        )
        await workflow.sleep(delay, summary=f"retry backoff after {error.kind}")

    async def _run_tools(self, turn_id: str, step: int, calls: list[ToolCallRef]) -> None:
        """Each call is its own activity, all in parallel; results are recorded in call order."""
        await asyncio.gather(
            *(
                workflow.execute_activity_method(
                    ToolActivities.execute_tool_call,
                    ExecuteToolInput(chat_id=self._chat_id, turn_id=turn_id, step=step, call=call),
                    start_to_close_timeout=timedelta(minutes=10),
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=_INFRA_RETRY,
                    summary=f"tool {call.name}",
                )
                for call in calls
            )
        )
        await workflow.execute_local_activity_method(
            ToolActivities.record_tool_results,
            RecordToolResultsInput(chat_id=self._chat_id, turn_id=turn_id, step=step, calls=calls),
            start_to_close_timeout=_LOCAL,
        )

    def _set_status(self, status: str) -> None:
        self._status = status
        workflow.upsert_search_attributes([CHAT_STATUS.value_set(status)])


def _model_error(err: ActivityError) -> ModelError:
    """The classified error the activity raised, or a generic one for anything else."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.type == MODEL_ERROR_TYPE and cause.details:
        return ModelError.model_validate(cause.details[0])
    return ModelError(message=str(cause or err), kind="generic", retryable=False)
