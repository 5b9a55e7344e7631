"""The ChatTurn workflow: one run per chat turn, read top to bottom as the story of a turn.

A turn begins with its first model step (which promotes the user message), then makes the
moves `decide.next_move` picks: generate, run tools (maybe waiting in requires_action),
compact, until a `Finish`. Every way out of the loop, an exception included, reaches the
one `_finish`: a turn always ends. Then the run continues-as-new into the next queued
message.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from activities.agents import AgentActivities
    from activities.approvals import ApprovalActivities
    from activities.compaction import CompactionActivities
    from activities.spend import SpendActivities
    from activities.tools import ToolActivities
    from activities.turn import TurnActivities
    from chatd.models import ModelError
    from chatd.webhooks.events import WebhookEvent
    from workflows.constants import (
        CHAT_MODEL,
        LOCAL_TIMEOUT,
        TURN_WORKFLOW,
        TurnMessages,
        workflow_id,
    )
    from workflows.controls import (
        INVALID_TOOL_APPROVALS,
        TurnControls,
    )
    from workflows.decide import (
        STEPS_PER_RUN,
        Compact,
        Compacted,
        Failed,
        Finish,
        Generate,
        Interrupted,
        Move,
        Outcome,
        RunTools,
        StepOutcome,
        Streamed,
        ToolsDone,
        TurnProgress,
        next_move,
    )
    from workflows.generation import Generation
    from workflows.payloads import (
        BeginTurnResult,
        BudgetDecisionInput,
        BudgetDecisionResult,
        ChatTurnInput,
        ChildFinished,
        CompactInput,
        FinishTurnInput,
        InterruptChildrenInput,
        StageToolDecisionsInput,
        StageToolResultsInput,
        SubmitMessageInput,
        SubmitMessageResult,
        SubmitToolApprovalsInput,
        SubmitToolApprovalsResult,
        SubmitToolResultsInput,
        SubmitToolResultsResult,
        TitleInput,
        TurnPlan,
        TurnResume,
        TurnState,
    )
    from workflows.retries import activity_error, retries_within, retry_policy
    from workflows.tool_step import ToolStep
    from workflows.webhook_delivery import start_deliveries

__all__ = ["ChatTurn"]

_IDLE_START_TIMEOUT = timedelta(minutes=1)
_COMPACT_RETRY = retry_policy()


@workflow.defn(name=TURN_WORKFLOW)
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
        self._deadline_s = input.retry_deadline_s
        self._deadline = timedelta(seconds=input.retry_deadline_s)
        self._generation = Generation(
            self._chat_id,
            self._controls,
            self._deadline,
            model_index=input.resume.model_index if input.resume is not None else 0,
        )
        self._untitled = False
        """The message that started this run found the chat without a title."""
        self._plan: TurnPlan | None = input.resume.plan if input.resume is not None else None
        self._parent = input.parent_chat_id
        self._end_recorded = False
        """The turn's last step recorded its end itself (`StreamStepResult.finished_turn`)."""

    @workflow.update(name=TurnMessages.SUBMIT_MESSAGE)
    def submit_message(self, input: SubmitMessageInput) -> SubmitMessageResult:
        """Start the turn with this message, or queue it behind the running one."""
        return self._take(input)

    @workflow.signal(name=TurnMessages.QUEUE_MESSAGE)
    def queue_message(self, input: SubmitMessageInput) -> None:
        """`submit_message` sent as a signal-with-start, when no worker took the update in
        time: the same start-or-queue, durable without a worker, with no answer."""
        self._take(input)

    def _take(self, input: SubmitMessageInput) -> SubmitMessageResult:
        """A message sent twice (the update and its signal) is taken once."""
        if input.queued_id == self._turn_id:
            return SubmitMessageResult(queued=False, turn_id=input.queued_id)
        if self._turn_id is None:
            self._turn_id = input.queued_id
            self._untitled = input.untitled
            return SubmitMessageResult(queued=False, turn_id=input.queued_id)
        if input.queued_id not in self._queue:
            self._queue.append(input.queued_id)
        return SubmitMessageResult(queued=True, turn_id=input.queued_id)

    @workflow.update(name=TurnMessages.SUBMIT_TOOL_RESULTS)
    async def submit_tool_results(self, input: SubmitToolResultsInput) -> SubmitToolResultsResult:
        """Accept the client's answer to the pending dynamic calls (the first submission wins).

        The gateway stages the results in Postgres and sends their ids only; results sent
        straight to Temporal are staged here.
        """
        answers = self._controls.client
        answers.accepted = True
        if input.results:
            await workflow.execute_local_activity_method(
                ToolActivities.stage_tool_results,
                StageToolResultsInput(
                    chat_id=self._chat_id,
                    turn_id=self._turn_id or "",
                    step=self._step,
                    results=input.results,
                    calls=answers.calls,
                ),
                start_to_close_timeout=LOCAL_TIMEOUT,
            )
        answers.staged = True
        return SubmitToolResultsResult()

    @submit_tool_results.validator
    def _validate_tool_results(self, input: SubmitToolResultsInput) -> None:
        self._controls.validate_results(input)

    @workflow.update(name=TurnMessages.SUBMIT_TOOL_APPROVALS)
    async def submit_tool_approvals(
        self, input: SubmitToolApprovalsInput
    ) -> SubmitToolApprovalsResult:
        """Accept a person's decisions for the calls waiting for approval (the first valid
        submission wins); edited arguments that don't fit the tool's schema refuse it."""
        controls = self._controls
        answers = controls.approvals
        answers.accepted = True
        try:
            await workflow.execute_local_activity_method(
                ApprovalActivities.stage_tool_decisions,
                StageToolDecisionsInput(
                    chat_id=self._chat_id,
                    turn_id=self._turn_id or "",
                    step=self._step,
                    approvals=input,
                    calls=answers.calls,
                ),
                start_to_close_timeout=LOCAL_TIMEOUT,
            )
        except FailureError as err:
            answers.accepted = False  # refused: the next submission may still win
            # A local activity's own ApplicationError may arrive unwrapped.
            cause = err.cause if isinstance(err, ActivityError) else err
            if isinstance(cause, ApplicationError) and cause.type == INVALID_TOOL_APPROVALS:
                raise ApplicationError(
                    cause.message, *cause.details, type=INVALID_TOOL_APPROVALS
                ) from None
            raise
        controls.decisions = {d.tool_call_id: d for d in input.decisions}
        answers.staged = True
        return SubmitToolApprovalsResult()

    @submit_tool_approvals.validator
    def _validate_tool_approvals(self, input: SubmitToolApprovalsInput) -> None:
        self._controls.validate_approvals(input)

    @workflow.update(name=TurnMessages.DECIDE_BUDGET)
    async def decide_budget(self, input: BudgetDecisionInput) -> BudgetDecisionResult:
        """Accept a person's decision on the budget the turn is paused on (the first one
        wins): raise it, and the step is sent again; or stop, and the turn ends."""
        wait = self._controls.budget
        wait.decision = input
        try:
            await workflow.execute_local_activity_method(
                SpendActivities.decide_budget,
                input.model_copy(
                    update={
                        "chat_id": self._chat_id,
                        "turn_id": self._turn_id or "",
                        "pending": wait.pending,
                    }
                ),
                start_to_close_timeout=LOCAL_TIMEOUT,
            )
        except FailureError:
            wait.decision = None  # not recorded: the next decision may still win
            raise
        wait.staged = True
        return BudgetDecisionResult()

    @decide_budget.validator
    def _validate_budget(self, input: BudgetDecisionInput) -> None:
        self._controls.validate_budget(input)

    @workflow.signal(name=TurnMessages.CHILD_FINISHED)
    def child_finished(self, input: ChildFinished) -> None:
        """A subagent's turn ended: a `wait_agent` in progress looks at its children again."""
        self._controls.children_finished += 1

    @workflow.signal(name=TurnMessages.INTERRUPT)
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
            pending_budget=self._controls.budget.pending,
        )

    @workflow.run
    async def run(self, input: ChatTurnInput) -> None:
        """Run this turn, then hand queued messages to the next run."""
        if input.resume is None:
            try:
                await workflow.wait_condition(
                    lambda: self._turn_id is not None, timeout=_IDLE_START_TIMEOUT
                )
            except TimeoutError:
                return  # started without a message (by hand): nothing to do
        assert self._turn_id is not None
        finish = await self._turn(self._turn_id, input.resume)
        await self._finish(self._turn_id, finish)
        await self._tell_family(finish)
        await self._announce(self._turn_id, finish)
        # A message accepted while we were finishing must not be lost (docs/architecture.md,
        # rule 6).
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._queue:
            workflow.continue_as_new(
                ChatTurnInput(
                    chat_id=self._chat_id,
                    queued=self._queue,
                    retry_deadline_s=self._deadline_s,
                    parent_chat_id=self._parent,
                )
            )

    async def _turn(self, turn_id: str, resume: TurnResume | None) -> Finish | None:
        """The turn's moves until one says finish; None if it never began (its message, or
        the chat, was deleted first). Whatever fails, the turn still finishes
        (docs/architecture.md, rule 8)."""
        try:
            return await self._moves(turn_id, resume)
        except workflow.NondeterminismError:
            raise  # a code change broke replay: fail the task until a fixed worker runs it
        except Exception as err:  # out of attempts, or our own bug
            workflow.logger.exception("turn %s of chat %s failed", turn_id, self._chat_id)
            if isinstance(err, ActivityError):
                return Finish(activity_error(err, "the turn"))
            return Finish(ModelError(message=f"the turn failed: {err!r}"[:500], kind="internal"))

    async def _moves(self, turn_id: str, resume: TurnResume | None) -> Finish | None:
        """generate -> tools -> maybe compact -> generate ... as `decide.next_move` says."""
        begun = await self._first_move(turn_id, resume)
        if begun is None:
            return None
        progress, move = begun
        first_step = progress.step
        answered = False  # the client answered the last step's calls or approvals
        while True:
            match move:
                case Generate(step=step):
                    await self._continue_long_turn(first_step, step, progress)
                    outcome = await self._generate(
                        turn_id, step, first_step + STEPS_PER_RUN, opens_response=answered
                    )
                    progress.step = self._step
                    move, answered = next_move(progress, outcome), False
                case RunTools(result=result):
                    assert self._plan is not None
                    tools = ToolStep(
                        self._chat_id, self._plan, progress.step, self._controls, self._deadline
                    )
                    done = await tools.run(result.tool_calls)
                    answered = tools.answered
                    move = next_move(progress, ToolsDone(done, result.input_tokens))
                case Compact() as compact:
                    move = next_move(progress, await self._compact(progress, compact))
                case Finish():
                    return move

    async def _first_move(
        self, turn_id: str, resume: TurnResume | None
    ) -> tuple[TurnProgress, Move] | None:
        """A new turn's first step (which begins it), or where a long turn left off."""
        self._start_turn(turn_id)
        if resume is not None:
            plan = resume.plan
            progress = TurnProgress(
                resume.next_step,
                plan.max_steps,
                plan.compact_at_tokens,
                resume.compactions,
                compacts_on_overflow=plan.compacts_on_overflow,
            )
            return progress, Generate(resume.next_step)
        outcome = await self._generate(turn_id, 0, STEPS_PER_RUN, opens_response=True)
        if self._plan is None:
            return None
        progress = TurnProgress(
            self._step,
            self._plan.max_steps,
            self._plan.compact_at_tokens,
            compacts_on_overflow=self._plan.compacts_on_overflow,
        )
        return progress, next_move(progress, outcome)

    def _start_turn(self, turn_id: str) -> None:
        """Show the turn running; a new turn's title is made alongside its first step."""
        if self._plan is not None:
            self._generation.model_label = self._plan.model_label
            return
        self._controls.show_status("running")
        if self._untitled:
            self._start_title(TitleInput(chat_id=self._chat_id, turn_id=turn_id))
        self._generation.model_label = (
            workflow.info().typed_search_attributes.get(CHAT_MODEL) or "model"
        )

    async def _generate(
        self, turn_id: str, step: int, steps_before: int, *, opens_response: bool
    ) -> StepOutcome:
        """Model step `step` (and any the activity went on to, before `steps_before`:
        `self._step` is then the last); the turn's first begins the turn and brings its
        plan."""
        self._step = step
        outcome = await self._generation.step(
            turn_id, step, self._plan, opens_response, steps_before
        )
        result = outcome.result if isinstance(outcome, Streamed) else None
        if result is not None and result.step is not None:
            self._step = result.step
        self._end_recorded = result is not None and result.finished_turn
        if self._plan is None:
            began = (result.began if result else None) or self._generation.began
            self._began(began or await self._generation.begin(turn_id))
        return outcome

    def _began(self, began: BeginTurnResult) -> None:
        """Take the plan of the turn, unless it could not begin after all."""
        if began.started and began.plan is not None:
            self._plan = began.plan
            self._generation.model_label = began.plan.model_label
        elif began.chat_status is not None:
            self._controls.show_status(began.chat_status)  # no turn after all

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

    async def _continue_long_turn(self, first_step: int, step: int, progress: TurnProgress) -> None:
        """Keep history bounded: a long turn goes on in a new run (between two steps)."""
        if self._plan is None or step == first_step:
            return
        if self._controls.interrupted:
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
                resume=TurnResume(
                    plan=self._plan,
                    next_step=step,
                    compactions=progress.compactions,
                    model_index=self._generation.model_index,
                ),
                retry_deadline_s=self._deadline_s,
                parent_chat_id=self._parent,
            )
        )

    async def _compact(self, progress: TurnProgress, move: Compact) -> Outcome:
        """Summarise the context; an interrupt cancels the summary."""
        assert self._plan is not None
        progress.compactions += 1
        progress.compacted_for = move.then.step if isinstance(move.then, Generate) else None
        progress.overflow_compacted |= move.for_overflow
        handle = workflow.start_activity_method(
            CompactionActivities.compact_context,
            CompactInput(
                chat_id=self._chat_id,
                turn_id=self._plan.turn_id,
                step=progress.step,
                index=progress.compactions - 1,
                model_index=self._generation.model_index,
            ),
            start_to_close_timeout=timedelta(minutes=10),
            schedule_to_close_timeout=self._deadline,
            heartbeat_timeout=timedelta(seconds=30),
            retry_policy=_COMPACT_RETRY,
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=f"compact context after step {progress.step}",
        )
        try:
            result = await self._controls.unless_interrupted(handle)
        except ActivityError as err:
            if self._controls.interrupted:
                return Interrupted()
            return Failed(activity_error(err, "compaction"))
        return Compacted(move, result.estimated_tokens)

    async def _announce(self, turn_id: str, finish: Finish | None) -> None:
        """The turn's end, to the owner's webhooks that take it (started, never awaited)."""
        if finish is None or self._plan is None:
            return
        event: WebhookEvent = "turn.failed" if finish.error else "turn.completed"
        if event in self._plan.webhook_events:
            await start_deliveries(self._chat_id, turn_id, event, last_error=finish.error)

    async def _tell_family(self, finish: Finish | None) -> None:
        """After the turn: an interrupted one interrupts its subagents too, and a subagent's
        turn tells its parent it ended (a parent with no run open then needs no telling:
        the outcome is on this chat)."""
        if finish is None:
            return
        if self._controls.interrupted:
            await workflow.execute_local_activity_method(
                AgentActivities.interrupt_children,
                InterruptChildrenInput(chat_id=self._chat_id),
                start_to_close_timeout=LOCAL_TIMEOUT,
                retry_policy=retries_within(self._deadline),
            )
        if self._parent is not None:
            parent = workflow.get_external_workflow_handle(workflow_id(self._parent))
            try:
                await parent.signal(
                    ChatTurn.child_finished,
                    ChildFinished(chat_id=self._chat_id, status=self._controls.status),
                )
            except FailureError:
                pass  # the parent has no run open

    async def _finish(self, turn_id: str, finish: Finish | None) -> None:
        """The one end of every turn: its status, usage and error are recorded."""
        if finish is None:
            return  # it never began
        status = "error" if finish.error else "waiting"
        if not self._end_recorded or finish.error:
            try:
                await workflow.execute_local_activity_method(
                    TurnActivities.finish_turn,
                    FinishTurnInput(
                        chat_id=self._chat_id, turn_id=turn_id, status=status, error=finish.error
                    ),
                    start_to_close_timeout=LOCAL_TIMEOUT,
                    retry_policy=retries_within(self._deadline),
                )
            except ActivityError:
                # Nothing more can be written from here; with the run closed, the reconciler
                # ends the chat's turn once the database takes writes again.
                workflow.logger.exception("turn %s of chat %s not finished", turn_id, self._chat_id)
                return
        self._controls.set_status(status)
