"""Who begins and finishes a turn: its first and last model steps, else local activities."""

from __future__ import annotations

from turn_fakes import Turn, calls_step, model_error, text_step

from workflows.chat_turn import ChatTurn
from workflows.payloads import (
    BeginTurnInput,
    FinishTurnInput,
    StreamStepInput,
    StreamStepResult,
    TitleInput,
    ToolCallRef,
)


def _steps(turn: Turn) -> list[StreamStepInput]:
    return turn.fakes.of("stream_model_step", StreamStepInput)


async def test_a_tool_turn_is_begun_by_its_first_step_and_finished_by_its_last(
    turn: Turn,
) -> None:
    turn.fakes.stream_script = [
        calls_step(ToolCallRef(id="call-1", name="current_time")),
        text_step(),
    ]
    await turn.run("turn-1")
    assert [(s.step, s.begin, s.may_finish) for s in _steps(turn)] == [
        (0, True, True),
        (1, False, True),
    ]
    assert turn.fakes.begun() == ["turn-1"]
    assert [f.status for f in turn.fakes.finishes()] == ["waiting"]
    assert turn.fakes.calls["begin_turn"] == [] and turn.fakes.calls["finish_turn"] == []
    assert (await turn.handle().query(ChatTurn.state)).status == "waiting"


async def test_a_first_step_that_fails_leaves_both_edges_to_local_activities(turn: Turn) -> None:
    turn.fakes.stream_script = [model_error("auth", retryable=False)]
    await turn.run("turn-1")
    # The failed step brought no plan: begin_turn (idempotent) tells it, finish_turn records
    # the error.
    (begin,) = turn.fakes.of("begin_turn", BeginTurnInput)
    (step,) = turn.fakes.of("stream_model_step", StreamStepInput)
    assert begin == BeginTurnInput(chat_id=turn.chat_id, turn_id="turn-1", run_id=step.run_id)
    assert begin.run_id, "the same run that the step would have begun it in"
    (finish,) = turn.fakes.of("finish_turn", FinishTurnInput)
    assert finish.status == "error" and finish.error is not None and finish.error.kind == "auth"
    assert (await turn.handle().query(ChatTurn.state)).status == "error"


async def test_a_step_over_the_compaction_threshold_leaves_the_end_to_the_workflow(
    turn: Turn,
) -> None:
    turn.fakes.plan = {"compact_at_tokens": 100}
    turn.fakes.stream_script = [StreamStepResult(message_id=1, input_tokens=150), text_step()]
    await turn.run("turn-1")
    # Step 0 called no tool but must be compacted after: not the step's to finish. The step
    # after the compaction is under the threshold again and finishes the turn itself.
    assert len(turn.fakes.calls["compact_context"]) == 1
    assert [(s.step, s.compact_at_tokens) for s in _steps(turn)] == [(0, 0), (1, 100)]
    assert [f.status for f in turn.fakes.finishes()] == ["waiting"]
    assert turn.fakes.calls["finish_turn"] == []


async def test_an_untitled_chat_is_named_alongside_its_first_step(turn: Turn) -> None:
    await turn.send("turn-1", untitled=True)
    await turn.finished()
    assert turn.fakes.of("generate_title", TitleInput) == [
        TitleInput(chat_id=turn.chat_id, turn_id="turn-1")
    ]


async def test_a_titled_chat_is_not_named_again(turn: Turn) -> None:
    await turn.run("turn-1")
    assert turn.fakes.calls["generate_title"] == []
