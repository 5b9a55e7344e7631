"""`wait_agent`: a durable wait woken by the children's signals, bounded by its timeout."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

from turn_fakes import Block, Turn, calls_step, text_step

from workflows.payloads import (
    AgentsChecked,
    CheckAgentsInput,
    InterruptChildrenInput,
    RecordToolResultsInput,
    ToolCallRef,
)
from workflows.tool_batch import INTERRUPTED_RESULT

WAIT = ToolCallRef(id="call-wait", name="wait_agent", kind="wait")


def _checks(turn: Turn) -> list[CheckAgentsInput]:
    return turn.fakes.of("check_agents", CheckAgentsInput)


def _timers(turn: Turn, history_events: list[object]) -> list[timedelta]:
    return [
        e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()  # type: ignore[attr-defined]
        for e in history_events
        if e.HasField("timer_started_event_attributes")  # type: ignore[attr-defined]
    ]


async def test_children_already_finished_answer_at_once_without_a_timer(turn: Turn) -> None:
    turn.fakes.stream_script = [calls_step(WAIT), text_step()]
    await turn.run()
    (check,) = _checks(turn)
    assert (check.call, check.step, check.final) == (WAIT, 0, False)
    assert turn.fakes.calls["execute_tool_call"] == [], "no worker runs wait_agent"
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert (recorded.calls, recorded.errors) == ([WAIT], {})
    history = await turn.handle().fetch_history()
    assert _timers(turn, list(history.events)) == []
    assert len(turn.fakes.calls["stream_model_step"]) == 2


async def test_a_childs_finish_wakes_the_wait_which_looks_once_more(turn: Turn) -> None:
    finished: list[str] = []
    looked_after_the_finish: list[bool] = []

    def done_once_a_child_finished(input: CheckAgentsInput) -> AgentsChecked:
        looked_after_the_finish.append(bool(finished))
        return AgentsChecked(done=bool(finished), timeout_s=600)

    turn.fakes.agents_done = done_once_a_child_finished
    turn.fakes.stream_script = [calls_step(WAIT), text_step()]
    await turn.send("turn-1")
    await turn.history_has("timer_started")  # waiting, with the call's timeout

    child = dataclasses.replace(turn, chat_id=str(uuid.uuid4()), parent_chat_id=turn.chat_id)
    finished.append(child.chat_id)
    await child.send("child-turn")  # its turn ends, and signals the parent
    await turn.finished()

    assert looked_after_the_finish[0] is False and looked_after_the_finish[-1] is True
    assert [c.final for c in _checks(turn)] == [False], "never a final look: it finished"
    history = await turn.handle().fetch_history()
    kinds = [str(e.WhichOneof("attributes")) for e in history.events]
    assert "workflow_execution_signaled_event_attributes" in kinds
    assert "timer_fired_event_attributes" not in kinds
    assert len(turn.fakes.begun()) == 2, "the parent's turn and the child's"


async def test_a_wait_that_times_out_reports_what_still_runs(turn: Turn) -> None:
    turn.fakes.agents_done = lambda input: AgentsChecked(done=input.final, timeout_s=90)
    turn.fakes.stream_script = [calls_step(WAIT), text_step()]
    await turn.run()
    assert [c.final for c in _checks(turn)] == [False, True]
    history = await turn.handle().fetch_history()
    assert _timers(turn, list(history.events)) == [timedelta(seconds=90)]
    assert len(turn.fakes.calls["stream_model_step"]) == 2, "the model goes on"


async def test_an_interrupt_ends_the_wait_and_interrupts_the_children(turn: Turn) -> None:
    turn.fakes.agents_done = lambda input: AgentsChecked(done=False, timeout_s=600)
    turn.fakes.stream_script = [calls_step(WAIT), Block()]
    await turn.send("turn-1")
    await turn.history_has("timer_started")
    await turn.interrupt()
    await turn.finished()
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert recorded.errors == {"call-wait": INTERRUPTED_RESULT}
    assert turn.fakes.of("interrupt_children", InterruptChildrenInput) == [
        InterruptChildrenInput(chat_id=turn.chat_id)
    ]
    assert len(turn.fakes.calls["stream_model_step"]) == 1
