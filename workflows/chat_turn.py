"""The ChatTurn workflow: one run per chat turn, read top to bottom as the story of a turn.

begin (promote the user message) -> generate -> tools (maybe requires_action) -> generate
... -> finish, then continue-as-new into the next queued message, if any.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from activities.model_step import ModelStepActivities
    from activities.tools import ToolActivities
    from activities.turn import TurnActivities
    from chatd.models import ModelError
    from workflows.constants import MODEL_ERROR_TYPE
    from workflows.controls import TurnControls
    from workflows.decide import DEFAULT_MAX_MODEL_ATTEMPTS, backoff_delay, should_retry
    from workflows.payloads import (
        BeginTurnInput,
        ChatTurnInput,
        FinishTurnInput,
        PublishRetryInput,
        RetryState,
        StageToolResultsInput,
        StreamStepInput,
        StreamStepResult,
        SubmitMessageInput,
        SubmitMessageResult,
        SubmitToolResultsInput,
        SubmitToolResultsResult,
        TurnState,
    )
    from workflows.tool_step import LOCAL_TIMEOUT, ToolStep

__all__ = ["ChatTurn"]

_MODEL_RETRY = RetryPolicy(
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
        self._controls = TurnControls()
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

    @workflow.update(name="submit_tool_results")
    async def submit_tool_results(self, input: SubmitToolResultsInput) -> SubmitToolResultsResult:
        """Accept the client's results for the pending dynamic calls (the first submission wins)."""
        controls = self._controls
        controls.accepted = True
        await workflow.execute_local_activity_method(
            ToolActivities.stage_tool_results,
            StageToolResultsInput(
                chat_id=self._chat_id, results=input.results, calls=controls.pending
            ),
            start_to_close_timeout=LOCAL_TIMEOUT,
        )
        controls.staged = True
        return SubmitToolResultsResult()

    @submit_tool_results.validator
    def _validate_tool_results(self, input: SubmitToolResultsInput) -> None:
        self._controls.validate_submission(input)

    @workflow.signal(name="interrupt")
    def interrupt(self) -> None:
        """Stop the running turn; what was produced so far is kept."""
        if self._turn_id is not None:
            self._controls.interrupted = True

    @workflow.query(name="state")
    def state(self) -> TurnState:
        """Status, step, pending tool calls, queued messages and any backoff in progress."""
        return TurnState(
            chat_id=self._chat_id,
            turn_id=self._turn_id,
            status=self._controls.status,
            step=self._step,
            queued_messages=list(self._queue),
            pending_tool_calls=list(self._controls.pending),
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
            start_to_close_timeout=LOCAL_TIMEOUT,
        )
        if not begin.started:
            return
        self._model_label = begin.model_label
        self._controls.set_status("running")
        error: ModelError | None = None
        for step in range(begin.max_steps):
            self._step = step
            result, error = await self._generate(turn_id, step)
            if result is None or result.interrupted or not result.tool_calls:
                break
            tools = ToolStep(self._chat_id, turn_id, step, self._controls, begin.action_timeout_s)
            outcome = await tools.run(result.tool_calls)
            if outcome == "expired":
                error = ModelError(
                    message="no tool results were submitted before the wait expired",
                    kind="timeout",
                )
            if outcome != "continue":
                break
        await self._finish(turn_id, error)

    async def _finish(self, turn_id: str, error: ModelError | None) -> None:
        status = "error" if error else "waiting"
        await workflow.execute_local_activity_method(
            TurnActivities.finish_turn,
            FinishTurnInput(chat_id=self._chat_id, turn_id=turn_id, status=status, error=error),
            start_to_close_timeout=LOCAL_TIMEOUT,
        )
        self._controls.set_status(status)

    async def _generate(
        self, turn_id: str, step: int
    ) -> tuple[StreamStepResult | None, ModelError | None]:
        """One model step, retried with workflow-timer backoff on retryable model errors."""
        attempt = 1
        while not self._controls.interrupted:
            try:
                result = await self._stream(turn_id, step, attempt)
                self._retry = None
                return result, None
            except ActivityError as err:
                error = _model_error(err)
            if self._controls.interrupted or not should_retry(
                error, attempt, DEFAULT_MAX_MODEL_ATTEMPTS
            ):
                self._retry = None
                return None, None if self._controls.interrupted else error
            await self._back_off(attempt, error)
            attempt += 1
        return None, None

    async def _stream(self, turn_id: str, step: int, attempt: int) -> StreamStepResult:
        """The model-step activity; an interrupt cancels it and it returns its partial step."""
        handle = workflow.start_activity_method(
            ModelStepActivities.stream_model_step,
            StreamStepInput(chat_id=self._chat_id, turn_id=turn_id, step=step, attempt=attempt),
            start_to_close_timeout=timedelta(minutes=15),
            heartbeat_timeout=timedelta(seconds=5),
            retry_policy=_MODEL_RETRY,
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=f"{self._model_label} step {step}",
        )
        await workflow.wait_condition(lambda: handle.done() or self._controls.interrupted)
        if not handle.done():
            handle.cancel()
        return await handle

    async def _back_off(self, attempt: int, error: ModelError) -> None:
        """Publish the retry, then wait on a durable timer that an interrupt cuts short."""
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
