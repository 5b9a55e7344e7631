"""Edges of a run: the idle start timer racing a message, and long turns continued as new."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.testservice.v1 import SleepRequest
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker
from turn_fakes import Block, FakeActivities, Turn, calls_step, text_step

from workflows.chat_turn import ChatTurn
from workflows.decide import STEPS_PER_RUN
from workflows.payloads import (
    ChatTurnInput,
    SetStatusInput,
    StreamStepInput,
    StreamStepResult,
    SubmitMessageResult,
    SubmittedToolResult,
    SubmitToolResultsInput,
    ToolCallRef,
)

ASK = ToolCallRef(id="call-ask", name="ask_user", kind="dynamic")


def _steps(turn: Turn) -> list[int]:
    return [s.step for s in turn.fakes.of("stream_model_step", StreamStepInput)]


def _tool_steps(count: int) -> list[StreamStepResult]:
    return [calls_step(ToolCallRef(id=f"call-{n}", name="current_time")) for n in range(count)]


async def _start(turn: Turn, *queued: str) -> str:
    handle = await turn.client.start_workflow(
        ChatTurn.run,
        ChatTurnInput(chat_id=turn.chat_id, queued=list(queued)),
        id=turn.workflow_id,
        task_queue=turn.task_queue,
    )
    assert handle.first_execution_run_id is not None
    return handle.first_execution_run_id


async def test_a_long_turn_continues_as_new_between_steps_and_keeps_counting(
    turn: Turn,
) -> None:
    turn.fakes.plan = {"max_steps": STEPS_PER_RUN + 5}
    turn.fakes.stream_script = [*_tool_steps(STEPS_PER_RUN), text_step()]
    first_run = await _start(turn, "turn-1")
    await turn.finished()
    assert _steps(turn) == list(range(STEPS_PER_RUN + 1))
    assert turn.fakes.begun() == ["turn-1"]
    assert (await turn.handle().describe()).run_id != first_run, "the turn went on in a new run"
    state = await turn.handle().query(ChatTurn.state)
    assert (state.turn_id, state.step, state.status) == ("turn-1", STEPS_PER_RUN, "waiting")


async def _interrupt_while_results_are_recorded(
    turn: Turn, at_step: int, next_step: StreamStepResult | Block
) -> None:
    """Answer a dynamic call at `at_step`; the user interrupts as the answer is recorded."""
    turn.fakes.plan = {"max_steps": STEPS_PER_RUN + 5}
    turn.fakes.stream_script = [*_tool_steps(at_step), calls_step(ASK), next_step, text_step()]
    interrupted = asyncio.Event()

    async def interrupt_once_answered(status: SetStatusInput) -> None:
        if status.status == "running" and not interrupted.is_set():
            interrupted.set()
            await turn.interrupt()

    turn.fakes.on_set_status = interrupt_once_answered
    await turn.send("turn-1")
    await turn.fakes.reached("set_status")
    _accepted = await turn.handle().execute_update(
        ChatTurn.submit_tool_results,
        SubmitToolResultsInput(results=[SubmittedToolResult(tool_call_id=ASK.id)]),
    )
    await turn.finished()
    assert interrupted.is_set()


async def test_an_interrupt_as_client_results_are_recorded_ends_the_turn(turn: Turn) -> None:
    """The control of the next test: within a run the interrupt stops the turn (at the
    latest by cancelling the step that was already scheduled)."""
    next_step = Block()
    await _interrupt_while_results_are_recorded(turn, at_step=3, next_step=next_step)
    assert _steps(turn) in ([0, 1, 2, 3], [0, 1, 2, 3, 4]), "nothing after a scheduled step"
    assert not next_step.release.is_set()
    (finish,) = turn.fakes.finishes()
    assert (finish.status, finish.error) == ("waiting", None)


async def test_an_interrupt_just_before_a_long_turn_continues_as_new_ends_the_turn(
    turn: Turn,
) -> None:
    await _interrupt_while_results_are_recorded(
        turn, at_step=STEPS_PER_RUN - 1, next_step=text_step()
    )
    assert _steps(turn) == list(range(STEPS_PER_RUN)), "no step after the interrupt"


@asynccontextmanager
async def _uncached_worker(
    client: Client, fakes: FakeActivities, queue: str
) -> AsyncIterator[None]:
    """A worker that keeps no workflow in cache, so the next task can go to a later worker."""
    async with Worker(
        client,
        task_queue=queue,
        workflows=[ChatTurn],
        activities=fakes.activities(),
        max_cached_workflows=0,
    ):
        yield


def _kind(event: HistoryEvent) -> str:
    return str(event.WhichOneof("attributes")).removesuffix("_event_attributes")


async def test_a_message_accepted_as_the_idle_start_timer_fires_still_runs(
    env_client: Client,
) -> None:
    """Rule 6: the idle timer firing and a message landing in the same workflow task."""
    turn = Turn(env_client, FakeActivities(env_client), f"wf-{uuid.uuid4().hex[:12]}")
    try:
        async with _uncached_worker(env_client, turn.fakes, turn.task_queue):
            await _start(turn)
            await turn.history_has("timer_started")
        # No worker now: the idle minute passes, then the message arrives; the timer and
        # the update wait for the same workflow task.
        await env_client.test_service.unlock_time_skipping_with_sleep(
            SleepRequest(duration=Duration(seconds=61))
        )
        sent = asyncio.create_task(turn.send("turn-1", update_id="send-turn-1"))
        await turn.history_has("timer_fired")
        await _admitted(turn, "send-turn-1")  # the server has the update (no worker yet)
        async with _uncached_worker(env_client, turn.fakes, turn.task_queue):
            assert await asyncio.wait_for(sent, 10) == SubmitMessageResult(
                queued=False, turn_id="turn-1"
            )
            await turn.finished()
        kinds = [_kind(e) for e in await _events(turn)]
        fired = kinds.index("timer_fired")
        assert kinds[fired + 1 : fired + 5] == [
            "workflow_task_scheduled",
            "workflow_task_started",
            "workflow_task_completed",
            "workflow_execution_update_accepted",
        ], "the race was set up: one workflow task saw both"
        assert turn.fakes.begun() == ["turn-1"]
        assert [s.turn_id for s in turn.fakes.of("stream_model_step", StreamStepInput)] == [
            "turn-1"
        ]
    finally:
        await turn.stop()


_ADMITTED = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED


async def _admitted(turn: Turn, update_id: str) -> None:
    """Return once the server has admitted the update (it waits for a worker to run it).

    The poll is refused until the update's request has reached the server at all: the send
    runs in a task of its own, and may not have been made yet.
    """
    request = PollWorkflowExecutionUpdateRequest(
        namespace=turn.client.namespace,
        update_ref=UpdateRef(
            workflow_execution=WorkflowExecution(workflow_id=turn.workflow_id),
            update_id=update_id,
        ),
        identity="test",
        wait_policy=WaitPolicy(lifecycle_stage=_ADMITTED),
    )
    async with asyncio.timeout(10):
        while True:
            try:
                await turn.client.workflow_service.poll_workflow_execution_update(
                    request, timeout=timedelta(seconds=10)
                )
                return
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
            await asyncio.sleep(0.01)


async def _events(turn: Turn) -> list[HistoryEvent]:
    return list((await turn.handle().fetch_history()).events)


@pytest.mark.slow
async def test_a_500_step_turn_runs_across_several_runs_with_bounded_history(
    turn: Turn,
) -> None:
    turn.fakes.plan = {"max_steps": 600}
    turn.fakes.stream_script = [*_tool_steps(499), text_step()]
    first_run = await _start(turn, "turn-1")
    await turn.finished()
    assert _steps(turn) == list(range(500)), "every step once, in order, across the runs"
    assert turn.fakes.begun() == ["turn-1"]
    (finish,) = turn.fakes.finishes()
    assert (finish.status, finish.error) == ("waiting", None)
    runs, run_id, longest = 0, first_run, 0
    while run_id:
        handle = turn.client.get_workflow_handle(turn.workflow_id, run_id=run_id)
        events = [e async for e in handle.fetch_history_events()]
        runs, longest = runs + 1, max(longest, len(events))
        last = events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else ""
        )
    assert runs == 500 // STEPS_PER_RUN, "continued as new every STEPS_PER_RUN steps"
    assert longest < STEPS_PER_RUN * 25, "each run's history stays bounded"
