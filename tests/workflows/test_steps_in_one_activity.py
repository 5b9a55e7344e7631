"""A model step's activity may go on past steps whose calls were all quick: the workflow
says where it must stop, and takes the turn up at the step its result names."""

from __future__ import annotations

from turn_fakes import Turn, calls_step, model_error, text_step

from workflows.chat_turn import ChatTurn
from workflows.decide import STEPS_PER_RUN
from workflows.payloads import (
    ExecuteToolInput,
    RecordToolResultsInput,
    StreamStepInput,
    ToolCallRef,
)


async def test_a_result_naming_a_later_step_moves_the_turn_there(turn: Turn) -> None:
    quick = ToolCallRef(id="call-quick", name="current_time", inline=True)
    slow = ToolCallRef(id="call-slow", name="read_file")
    # The activity streamed steps 0 and 1 and ended on step 2, whose calls are not all quick.
    turn.fakes.stream_script = [calls_step(quick, slow).model_copy(update={"step": 2}), text_step()]
    await turn.run()
    assert {i.step for i in turn.fakes.of("execute_tool_call", ExecuteToolInput)} == {2}
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert recorded.step == 2
    streams = turn.fakes.of("stream_model_step", StreamStepInput)
    assert [(s.step, s.steps_before) for s in streams] == [(0, STEPS_PER_RUN), (3, 25)]
    assert (await turn.handle().query(ChatTurn.state)).step == 3


async def test_a_retried_first_step_stops_before_the_step_limit_of_the_plan_it_began(
    turn: Turn,
) -> None:
    """The first attempt began the turn and learnt its limit itself; the retry, which does
    not begin it, is given the limit."""
    turn.fakes.plan = {"max_steps": 3}
    turn.fakes.stream_script = [model_error(), text_step()]
    await turn.run()
    streams = turn.fakes.of("stream_model_step", StreamStepInput)
    assert [(s.step, s.attempt, s.begin, s.steps_before) for s in streams] == [
        (0, 1, True, STEPS_PER_RUN),
        (0, 2, False, 3),
    ]
