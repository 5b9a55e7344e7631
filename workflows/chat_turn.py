"""The ChatTurn workflow: one run per chat turn, read top to bottom as the story of a turn.

begin (promote the user message) -> generate -> tools (maybe requires_action) -> maybe
compact -> generate ... -> finish, then continue-as-new into the next queued message.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from activities.compaction import CompactionActivities
    from activities.tools import ToolActivities
    from activities.turn import TurnActivities
    from chatd.models import ModelError
    from workflows.constants import CHAT_MODEL, EDGES_IN_STEPS_PATCH
    from workflows.controls import TurnControls
    from workflows.decide import (
        MAX_COMPACTIONS_PER_TURN,
        STEPS_PER_RUN,
        Compactions,
        StepOutcome,
        after_step,
        over_threshold,
    )
    from workflows.generation import Generation
    from workflows.payloads import (
        BeginTurnInput,
        BeginTurnResult,
        ChatTurnInput,
        CompactInput,
        FinishTurnInput,
        StageToolResultsInput,
        StreamStepResult,
        SubmitMessageInput,
        SubmitMessageResult,
        SubmitToolResultsInput,
        SubmitToolResultsResult,
        TitleInput,
        TurnPlan,
        TurnResume,
        TurnState,
    )
    from workflows.tool_step import LOCAL_TIMEOUT, ToolStep

__all__ = ["ChatTurn"]

_IDLE_START_TIMEOUT = timedelta(minutes=1)
_EXPIRED = ModelError(
    message="no tool results were submitted before the wait expired", kind="timeout"
)


@workflow.defn(name="ChatTurn")
class ChatTurn:
    """One chat turn; messages sent meanwhile queue up and become the next runs."""

    @workflow.init
    def __init__(self, input: ChatTurnInput) -> None:
        self._chat_id = input.chat_id
        self._queue: list[str] = list(input.queued)
        self._turn_id: str | None = None
        if input.resume is not None:
            self._turn_id = input.resume.plan.turn_id
        elif self._queue:
            self._turn_id = self._queue.pop(0)
        self._controls = TurnControls()
        self._step = 0
        self._generation = Generation(self._chat_id, self._controls)
        self._untitled = False
        """The message that started this run found the chat without a title."""

    @workflow.update(name="submit_message")
    def submit_message(self, input: SubmitMessageInput) -> SubmitMessageResult:
        """Start the turn with this message, or queue it behind the running one."""
        if input.queued_id == self._turn_id:
            return SubmitMessageResult(queued=False, turn_id=input.queued_id)
        if self._turn_id is None:
            self._turn_id = input.queued_id
            self._untitled = input.untitled
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
            retry=self._generation.retry,
        )

    @workflow.run
    async def run(self, input: ChatTurnInput) -> None:
        """Run this turn, then hand queued messages to the next run."""
        # Runs recorded before this patch began and finished every turn with local activities.
        edges_in_steps = workflow.patched(EDGES_IN_STEPS_PATCH)
        self._generation.edges_in_steps = edges_in_steps
        resume = input.resume
        if resume is None:
            try:
                await workflow.wait_condition(
                    lambda: self._turn_id is not None, timeout=_IDLE_START_TIMEOUT
                )
            except TimeoutError:
                return  # started without a message (by hand): nothing to do
        assert self._turn_id is not None
        if resume is not None or edges_in_steps:
            await self._run_steps(self._turn_id, resume)
        elif (resume := await self._begin(self._turn_id)) is not None:
            await self._run_steps(self._turn_id, resume)
        # Rule 6: a message accepted while we were finishing must not be lost.
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._queue:
            workflow.continue_as_new(ChatTurnInput(chat_id=self._chat_id, queued=self._queue))

    async def _begin(self, turn_id: str) -> TurnResume | None:
        """Begin the turn with a local activity, before its first step (runs before the patch)."""
        begin = await self._begin_turn(turn_id)
        if not begin.started or begin.plan is None:
            return None
        self._controls.set_status("running")
        if begin.needs_title:
            self._start_title(TitleInput(chat_id=self._chat_id))
        return TurnResume(plan=begin.plan, next_step=0)

    async def _begin_turn(self, turn_id: str) -> BeginTurnResult:
        return await workflow.execute_local_activity_method(
            TurnActivities.begin_turn,
            BeginTurnInput(chat_id=self._chat_id, turn_id=turn_id),
            start_to_close_timeout=LOCAL_TIMEOUT,
        )

    def _start_title(self, input: TitleInput) -> None:
        """Best effort, in the background: never awaited, so it can't delay the turn."""
        workflow.start_activity_method(
            CompactionActivities.generate_title,
            input,
            start_to_close_timeout=timedelta(minutes=1),
            retry_policy=RetryPolicy(maximum_attempts=3),
            cancellation_type=ActivityCancellationType.ABANDON,
            summary="generate title",
        )

    async def _began(self, turn_id: str, first: StreamStepResult | None) -> TurnPlan | None:
        """The plan of a turn its first step began; begun here if that step did not run."""
        began = first.began if first is not None else None
        if began is None:  # interrupted before the step ran, or the step failed
            began = await self._begin_turn(turn_id)
        if not began.started or began.plan is None:
            if began.chat_status is not None:
                self._controls.show_status(began.chat_status)  # no turn after all
            return None
        self._generation.model_label = began.plan.model_label
        return began.plan

    async def _run_steps(self, turn_id: str, resume: TurnResume | None) -> None:
        """generate -> tools -> maybe compact, until the model is done or a limit is hit.

        A new turn (no `resume`) is begun by its first step, which brings the plan; a step
        that ends the turn finishes it too (`finished_turn`), or `_finish` does.
        """
        plan = resume.plan if resume is not None else None
        first_step = step = resume.next_step if resume is not None else 0
        compactions = Compactions(count=resume.compactions if resume is not None else 0)
        if plan is None:  # a new turn; its title is made alongside its first step
            self._controls.show_status("running")
            if self._untitled:
                self._start_title(TitleInput(chat_id=self._chat_id, turn_id=turn_id))
            self._generation.model_label = (
                workflow.info().typed_search_attributes.get(CHAT_MODEL) or "model"
            )
        else:
            self._generation.model_label = plan.model_label
        error: ModelError | None = None
        finished = False
        while plan is None or step < plan.max_steps:
            await self._continue_long_turn(plan, first_step, step, compactions.count)
            self._step = step
            result, error = await self._generation.step(turn_id, step, plan)
            if plan is None and (plan := await self._began(turn_id, result)) is None:
                return  # its message (or the chat) was deleted before the turn began
            if result is None:
                if self._compacts_overflow(error, compactions):
                    error = await self._compact(plan, step, compactions)
                    if error is None:
                        continue  # the same step again, on the summarised context
                break
            finished = result.finished_turn
            another, error = await self._after_model_step(plan, step, result, compactions)
            if not another:
                break
            step += 1
        if finished:
            self._controls.set_status("waiting")  # the last step recorded the turn's end
        else:
            await self._finish(turn_id, error)

    async def _after_model_step(
        self, plan: TurnPlan, step: int, result: StreamStepResult, compactions: Compactions
    ) -> tuple[bool, ModelError | None]:
        """Tools, then maybe a compaction: whether another step follows, and any turn error."""
        outcome = await self._tools(plan, step, result)
        error = _EXPIRED if outcome == "expired" else None
        move = after_step(
            outcome,
            over_threshold=over_threshold(result.input_tokens, plan.compact_at_tokens),
            just_compacted=compactions.just_compacted,
            compactions=compactions.count,
        )
        compactions.just_compacted = False
        if move == "context_exceeded":
            return False, _too_long(result.input_tokens, plan)
        if move in ("compact_then_next", "compact_then_end"):
            error = await self._compact(plan, step, compactions) or error
            return error is None and move == "compact_then_next", error
        return move == "next", error

    async def _continue_long_turn(
        self, plan: TurnPlan | None, first_step: int, step: int, compactions: int
    ) -> None:
        """Keep history bounded: a long turn goes on in a new run (between two steps)."""
        if plan is None or step == first_step or self._controls.interrupted:
            return  # an interrupt ends the turn in this run (a new run would not know of it)
        if step - first_step < STEPS_PER_RUN and not (
            workflow.info().is_continue_as_new_suggested()
        ):
            return
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            ChatTurnInput(
                chat_id=self._chat_id,
                queued=self._queue,
                resume=TurnResume(plan=plan, next_step=step, compactions=compactions),
            )
        )

    async def _tools(self, plan: TurnPlan, step: int, result: StreamStepResult) -> StepOutcome:
        if result.interrupted:
            return "interrupted"
        if not result.tool_calls:
            return "finished"
        tools = ToolStep(self._chat_id, plan.turn_id, step, self._controls, plan.action_timeout_s)
        return await tools.run(result.tool_calls)

    @staticmethod
    def _compacts_overflow(error: ModelError | None, compactions: Compactions) -> bool:
        """A provider context_exceeded error gets one compaction and one retry."""
        if error is None or error.kind != "context_exceeded" or compactions.for_overflow:
            return False
        if compactions.count >= MAX_COMPACTIONS_PER_TURN:
            return False
        compactions.for_overflow = True
        return True

    async def _compact(
        self, plan: TurnPlan, step: int, compactions: Compactions
    ) -> ModelError | None:
        """Summarise the context; an error if even the summary doesn't fit."""
        result = await workflow.execute_activity_method(
            CompactionActivities.compact_context,
            CompactInput(
                chat_id=self._chat_id, turn_id=plan.turn_id, step=step, index=compactions.count
            ),
            start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=5),
            summary=f"compact context after step {step}",
        )
        compactions.count += 1
        compactions.just_compacted = True
        if result.estimated_tokens >= plan.compact_at_tokens > 0:
            return _too_long(result.estimated_tokens, plan)
        return None

    async def _finish(self, turn_id: str, error: ModelError | None) -> None:
        status = "error" if error else "waiting"
        await workflow.execute_local_activity_method(
            TurnActivities.finish_turn,
            FinishTurnInput(chat_id=self._chat_id, turn_id=turn_id, status=status, error=error),
            start_to_close_timeout=LOCAL_TIMEOUT,
        )
        self._controls.set_status(status)


def _too_long(tokens: int, plan: TurnPlan) -> ModelError:
    return ModelError(
        message=(
            f"the context is still {tokens} tokens after compaction, over the "
            f"{plan.compact_at_tokens}-token threshold"
        ),
        kind="context_exceeded",
        detail={"tokens": tokens, "threshold": plan.compact_at_tokens},
    )
