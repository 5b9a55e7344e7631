"""Scripted fakes of the ChatTurn activities, registered under the real activity names.

Each test scripts what the model steps and tools answer, runs the real workflow on the
time-skipping test server, and asserts on the inputs the fakes recorded.

Quirks of the time-skipping test server (temporal-test-server 1.40) the tests work around:
- time skipping is global to the server: a workflow left running with a pending task keeps
  it locked for every later test, so `running_turn` terminates its chat's workflow;
- an update sent to a completed workflow fails with "update ... not found" and leaves time
  skipping locked, so no test sends one (the gateway maps that case to 409 itself);
- cancelling an activity whose completion is in flight fails the workflow task with
  ACTIVITY_UNKNOWN (the real server accepts it), so interrupts target blocked activities;
- after a test that cancels a blocked tool, time skipping can stall for the rest of the
  session, so tests wait out seconds, never minutes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import activity
from temporalio.api.testservice.v1 import LockTimeSkippingRequest, UnlockTimeSkippingRequest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from chatd.models import ModelError
from workflows.chat_turn import ChatTurn
from workflows.constants import MODEL_ERROR_TYPE, workflow_id
from workflows.controls import INVALID_TOOL_APPROVALS
from workflows.decide import step_finishes_turn
from workflows.payloads import (
    AgentsChecked,
    BeginTurnInput,
    BeginTurnResult,
    ChatTurnInput,
    CheckAgentsInput,
    CompactInput,
    CompactResult,
    ExecuteToolInput,
    ExecuteToolResult,
    FinishTurnInput,
    InterruptChildrenInput,
    PublishRetryInput,
    RecordToolResultsInput,
    SetStatusInput,
    StageToolDecisionsInput,
    StageToolResultsInput,
    StreamStepInput,
    StreamStepResult,
    SubmitMessageInput,
    SubmitMessageResult,
    TitleInput,
    ToolCallRef,
    TurnPlan,
)

__all__ = [
    "Block",
    "CompactOutcome",
    "FakeActivities",
    "Turn",
    "calls_step",
    "model_error",
    "running_turn",
    "text_step",
]

P = TypeVar("P", bound=BaseModel)
LOCAL_ACTIVITIES = frozenset(
    {
        "begin_turn",
        "finish_turn",
        "set_status",
        "publish_retry",
        "record_tool_results",
        "stage_tool_results",
        "stage_tool_decisions",
        "check_agents",
        "interrupt_children",
    }
)
"""The activities ChatTurn runs as local activities (at least once each)."""
WAIT_S = 15.0
"""Real-time limit for a fake to be reached (a hang fails the test instead of blocking it)."""


@dataclass
class Block:
    """A scripted activity that runs until the test releases it or the workflow cancels it."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    then: StreamStepResult | ExecuteToolResult | None = None
    """What the activity returns when released (a text step / a successful tool by default)."""


StreamOutcome = StreamStepResult | ModelError | Exception | Block
ToolOutcome = ExecuteToolResult | Exception | Block
CompactOutcome = CompactResult | ModelError | Exception | Block


def text_step() -> StreamStepResult:
    """A model step that answered with text only."""
    return StreamStepResult(message_id=1, stop_reason="end_turn", input_tokens=10)


def calls_step(*calls: ToolCallRef) -> StreamStepResult:
    """A model step that called these tools."""
    return StreamStepResult(
        message_id=1, tool_calls=list(calls), stop_reason="tool_use", input_tokens=10
    )


def model_error(
    kind: str = "overloaded",
    *,
    retryable: bool = True,
    retry_after_ms: int | None = None,
    message: str | None = None,
) -> ModelError:
    """A classified provider error, as the model-step activity raises it."""
    return ModelError.model_validate(
        {
            "message": message or f"{kind} error",
            "kind": kind,
            "provider": "anthropic",
            "retryable": retryable,
            "status_code": 529 if kind == "overloaded" else None,
            "retry_after_ms": retry_after_ms,
        }
    )


class FakeActivities:
    """The worker-side half of a test: scripted answers and every input received."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.calls: defaultdict[str, list[BaseModel]] = defaultdict(list)
        self.stream_script: list[StreamOutcome] = []
        """Answers of successive stream_model_step calls; a text step once exhausted."""
        self.tool_script: dict[str, ToolOutcome] = {}
        """Answers of execute_tool_call by call id; a successful result if absent."""
        self.compact_script: list[CompactOutcome] = []
        """Answers of successive compact_context calls; a short summary once exhausted."""
        self.stream_attempts: list[int] = []
        """Temporal's activity attempt of each stream_model_step call."""
        self.agents_done: Callable[[CheckAgentsInput], AgentsChecked] | None = None
        """How check_agents answers (default: every child finished)."""
        self.refuse_decisions: list[str] = []
        """Messages with which successive stage_tool_decisions calls refuse their arguments."""
        self.plan: dict[str, Any] = {}
        """Overrides of the TurnPlan a beginning returns (max_steps, action_timeout_s ...)."""
        self.started = True
        self.edges: list[BeginTurnInput | FinishTurnInput] = []
        """Every turn begun and finished, by a local activity or by a model step."""
        self.on_set_status: Callable[[SetStatusInput], Awaitable[None]] | None = None
        self.on_record_tool_results: Callable[[RecordToolResultsInput], Awaitable[None]] | None = (
            None
        )
        self._called = asyncio.Condition()

    def of(self, name: str, kind: type[P]) -> list[P]:
        """The recorded inputs of one activity, in call order.

        A local activity runs again when the workflow task that ran it is retried (say the
        server refused its completion because an update arrived meanwhile), as it may in
        production, so repeats of the same local activity input are counted once.
        """
        inputs = [i for i in self.calls[name] if isinstance(i, kind)]
        assert len(inputs) == len(self.calls[name]), f"{name} got another input type"
        if name not in LOCAL_ACTIVITIES:
            return inputs
        return [i for n, i in enumerate(inputs) if i not in inputs[:n]]

    async def reached(self, name: str, count: int = 1) -> None:
        """Wait (in real time) until activity `name` was called `count` times."""
        async with asyncio.timeout(WAIT_S), self._called:
            await self._called.wait_for(lambda: len(self.calls[name]) >= count)

    async def _record(self, name: str, input: BaseModel) -> None:
        async with self._called:
            self.calls[name].append(input)
            self._called.notify_all()

    def activities(self) -> Sequence[Callable[..., Any]]:
        """Every activity of the real worker, by name."""
        return [
            self.begin_turn,
            self.finish_turn,
            self.set_status,
            self.publish_retry,
            self.stream_model_step,
            self.execute_tool_call,
            self.record_tool_results,
            self.stage_tool_results,
            self.stage_tool_decisions,
            self.check_agents,
            self.interrupt_children,
            self.compact_context,
            self.generate_title,
        ]

    def begun(self) -> list[str]:
        """The turns begun (by either way), each once, in order."""
        turns = [e.turn_id for e in self.edges if isinstance(e, BeginTurnInput)]
        return list(dict.fromkeys(turns))

    def finishes(self) -> list[FinishTurnInput]:
        """How the turns were finished (by either way), in order; a step's finish and a
        finish_turn both count (a turn finished twice fails the tests that look)."""
        return [e for e in self.edges if isinstance(e, FinishTurnInput)]

    def _begin(self, input: BeginTurnInput) -> BeginTurnResult:
        self.edges.append(input)
        if not self.started:
            return BeginTurnResult(started=False)
        plan = TurnPlan.model_validate(
            {"turn_id": input.turn_id, "model_label": "fake/model", **self.plan}
        )
        return BeginTurnResult(started=True, plan=plan)

    @activity.defn(name="begin_turn")
    async def begin_turn(self, input: BeginTurnInput) -> BeginTurnResult:
        await self._record("begin_turn", input)
        return self._begin(input)

    @activity.defn(name="finish_turn")
    async def finish_turn(self, input: FinishTurnInput) -> None:
        if input not in self.calls["finish_turn"]:  # not a workflow-task retry's repeat
            self.edges.append(input)
        await self._record("finish_turn", input)

    @activity.defn(name="set_status")
    async def set_status(self, input: SetStatusInput) -> None:
        await self._record("set_status", input)
        if self.on_set_status is not None:
            await self.on_set_status(input)

    @activity.defn(name="publish_retry")
    async def publish_retry(self, input: PublishRetryInput) -> None:
        await self._record("publish_retry", input)

    @activity.defn(name="stream_model_step")
    async def stream_model_step(self, input: StreamStepInput) -> StreamStepResult:
        """As the real one: begin the turn first, finish it if the step ends it."""
        await self._record("stream_model_step", input)
        began = None
        if input.begin:
            began = self._begin(BeginTurnInput(chat_id=input.chat_id, turn_id=input.turn_id))
            if not began.started:
                return StreamStepResult(message_id=None, began=began)
        result = await self._scripted_step()
        finished = step_finishes_turn(input, began, result)
        if finished:
            self.edges.append(
                FinishTurnInput(chat_id=input.chat_id, turn_id=input.turn_id, status="waiting")
            )
        return result.model_copy(update={"began": began, "finished_turn": finished})

    async def _scripted_step(self) -> StreamStepResult:
        self.stream_attempts.append(activity.info().attempt)
        outcome = self.stream_script.pop(0) if self.stream_script else text_step()
        if isinstance(outcome, ModelError | Exception):
            raise _raised(outcome)
        if isinstance(outcome, Block):
            released = await _blocked(outcome)
            if not released:
                return StreamStepResult(message_id=1, interrupted=True)
            then = outcome.then or text_step()
            assert isinstance(then, StreamStepResult)
            return then
        return outcome

    @activity.defn(name="execute_tool_call")
    async def execute_tool_call(self, input: ExecuteToolInput) -> ExecuteToolResult:
        await self._record("execute_tool_call", input)
        outcome = self.tool_script.get(input.call.id, ExecuteToolResult(is_error=False))
        if isinstance(outcome, Exception):
            raise outcome
        if isinstance(outcome, Block):
            await _blocked(outcome)  # TRY_CANCEL: the workflow doesn't wait for this answer
            then = outcome.then or ExecuteToolResult(is_error=False)
            assert isinstance(then, ExecuteToolResult)
            return then
        return outcome

    @activity.defn(name="record_tool_results")
    async def record_tool_results(self, input: RecordToolResultsInput) -> None:
        await self._record("record_tool_results", input)
        if self.on_record_tool_results is not None:
            await self.on_record_tool_results(input)

    @activity.defn(name="stage_tool_results")
    async def stage_tool_results(self, input: StageToolResultsInput) -> None:
        await self._record("stage_tool_results", input)

    @activity.defn(name="stage_tool_decisions")
    async def stage_tool_decisions(self, input: StageToolDecisionsInput) -> None:
        """As the real one: arguments that don't fit are refused, not retried."""
        await self._record("stage_tool_decisions", input)
        if self.refuse_decisions:
            message = self.refuse_decisions.pop(0)
            raise ApplicationError(message, type=INVALID_TOOL_APPROVALS, non_retryable=True)

    @activity.defn(name="check_agents")
    async def check_agents(self, input: CheckAgentsInput) -> AgentsChecked:
        await self._record("check_agents", input)
        if self.agents_done is None:
            return AgentsChecked(done=True)
        return self.agents_done(input)

    @activity.defn(name="interrupt_children")
    async def interrupt_children(self, input: InterruptChildrenInput) -> None:
        await self._record("interrupt_children", input)

    @activity.defn(name="compact_context")
    async def compact_context(self, input: CompactInput) -> CompactResult:
        await self._record("compact_context", input)
        outcome = self.compact_script.pop(0) if self.compact_script else None
        if isinstance(outcome, ModelError | Exception):
            raise _raised(outcome)
        if isinstance(outcome, Block):
            if not await _blocked(outcome):
                raise asyncio.CancelledError  # as the real one: a cancelled summary is dropped
            outcome = None
        return outcome or CompactResult(message_id=2, estimated_tokens=1)

    @activity.defn(name="generate_title")
    async def generate_title(self, input: TitleInput) -> None:
        await self._record("generate_title", input)


def _raised(outcome: ModelError | Exception) -> Exception:
    """What an activity raises for a scripted failure: a classified model error as the real
    activities raise it, any other exception as it is."""
    if isinstance(outcome, Exception):
        return outcome
    return ApplicationError(
        outcome.message, outcome.model_dump(mode="json"), type=MODEL_ERROR_TYPE, non_retryable=True
    )


async def _blocked(block: Block) -> bool:
    """Heartbeat until released (True) or cancelled (False)."""
    while not block.release.is_set():
        activity.heartbeat()
        try:
            await asyncio.wait_for(block.release.wait(), 0.1)
        except TimeoutError:
            continue
        except asyncio.CancelledError:
            return False
    return True


@dataclass
class Turn:
    """A worker running the real ChatTurn with fakes, and a client to drive one chat."""

    client: Client
    fakes: FakeActivities
    task_queue: str
    chat_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    retry_deadline_s: int = 1800
    parent_chat_id: str | None = None

    @property
    def workflow_id(self) -> str:
        return workflow_id(self.chat_id)

    def handle(self) -> WorkflowHandle[ChatTurn, None]:
        """The chat's workflow (latest run)."""
        return self.client.get_workflow_handle_for(ChatTurn.run, self.workflow_id)

    async def send(
        self, queued_id: str, *, untitled: bool = False, update_id: str | None = None
    ) -> SubmitMessageResult:
        """What the gateway does with a user message: update-with-start `submit_message`."""
        start = WithStartWorkflowOperation(
            ChatTurn.run,
            ChatTurnInput(
                chat_id=self.chat_id,
                retry_deadline_s=self.retry_deadline_s,
                parent_chat_id=self.parent_chat_id,
            ),
            id=self.workflow_id,
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        return await self.client.execute_update_with_start_workflow(
            ChatTurn.submit_message,
            SubmitMessageInput(queued_id=queued_id, untitled=untitled),
            start_workflow_operation=start,
            id=update_id,
        )

    async def finished(self) -> None:
        """Wait until the chat's last run ends, skipping time while waiting.

        Time is locked otherwise, so a test can look at a timer in progress.
        """
        service = self.client.test_service
        await service.unlock_time_skipping(UnlockTimeSkippingRequest())
        try:
            await self.handle().result()
        finally:
            await service.lock_time_skipping(LockTimeSkippingRequest())

    async def run(self, queued_id: str = "turn-1") -> None:
        """Send a message and wait until the chat's last run ends."""
        await self.send(queued_id)
        await self.finished()

    async def history_has(self, kind: str, count: int = 1) -> None:
        """Poll (in real time) until the run's history has `count` events of `kind`
        (`timer_fired`, `activity_task_completed` ...)."""
        for _ in range(int(WAIT_S / 0.05)):
            history = await self.handle().fetch_history()
            kinds = [str(e.WhichOneof("attributes")) for e in history.events]
            if kinds.count(f"{kind}_event_attributes") >= count:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"fewer than {count} {kind} events in the history")

    async def interrupt(self) -> None:
        await self.handle().signal(ChatTurn.interrupt)

    async def stop(self) -> None:
        """Terminate the chat's workflow if a test left it running.

        The test server is shared: a workflow left with a pending task would keep time
        skipping locked for the tests that follow.
        """
        try:
            described = await self.handle().describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return
            raise
        if described.status == WorkflowExecutionStatus.RUNNING:
            await self.handle().terminate(reason="test over")


@asynccontextmanager
async def running_turn(client: Client) -> AsyncIterator[Turn]:
    """A worker on a fresh task queue with a fresh set of fakes."""
    fakes = FakeActivities(client)
    task_queue = f"wf-{uuid.uuid4().hex[:12]}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[ChatTurn],
        activities=fakes.activities(),
        max_heartbeat_throttle_interval=timedelta(milliseconds=100),
        default_heartbeat_throttle_interval=timedelta(milliseconds=100),
    ):
        turn = Turn(client, fakes, task_queue)
        try:
            yield turn
        finally:
            await turn.stop()
