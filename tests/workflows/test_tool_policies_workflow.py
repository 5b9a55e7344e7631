"""Tool policies through the workflow: max_steps, stop-after, exclusive tools, interrupts."""

from __future__ import annotations

from turn_fakes import Block, Turn, calls_step, text_step

from workflows.payloads import (
    ExecuteToolInput,
    ExecuteToolResult,
    FinishTurnInput,
    RecordToolResultsInput,
    StreamStepInput,
    ToolCallRef,
)
from workflows.tool_batch import INTERRUPTED_RESULT


def _call(n: int, name: str = "current_time", **flags: bool) -> ToolCallRef:
    return ToolCallRef(id=f"call-{n}", name=name, **flags)


def _steps(turn: Turn) -> list[int]:
    return [s.step for s in turn.fakes.of("stream_model_step", StreamStepInput)]


def _finish(turn: Turn) -> FinishTurnInput:
    (finish,) = turn.fakes.finishes()
    return finish


async def test_each_step_with_tool_calls_runs_them_and_generates_again(turn: Turn) -> None:
    turn.fakes.stream_script = [calls_step(_call(1), _call(2)), calls_step(_call(3)), text_step()]
    await turn.run()
    assert _steps(turn) == [0, 1, 2]
    executed = turn.fakes.of("execute_tool_call", ExecuteToolInput)
    assert sorted((e.step, e.call.id) for e in executed) == [
        (0, "call-1"),
        (0, "call-2"),
        (1, "call-3"),
    ]
    recorded = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert [(r.step, [c.id for c in r.calls], r.errors) for r in recorded] == [
        (0, ["call-1", "call-2"], {}),
        (1, ["call-3"], {}),
    ]
    assert _finish(turn).status == "waiting"


async def test_max_steps_ends_the_turn_after_answering_the_last_steps_calls(turn: Turn) -> None:
    turn.fakes.plan = {"max_steps": 3}
    turn.fakes.stream_script = [calls_step(_call(n)) for n in range(10)]
    await turn.run()
    assert _steps(turn) == [0, 1, 2]
    recorded = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert [r.step for r in recorded] == [0, 1, 2], "every call of every step got a result"
    assert _finish(turn).status == "waiting" and _finish(turn).error is None


async def test_a_successful_stop_after_tool_ends_the_turn(turn: Turn) -> None:
    turn.fakes.stream_script = [calls_step(_call(1), _call(2, "handoff", stop_after=True))]
    await turn.run()
    assert _steps(turn) == [0]
    assert len(turn.fakes.calls["execute_tool_call"]) == 2
    assert _finish(turn).status == "waiting"


async def test_a_failed_stop_after_tool_lets_the_model_go_on(turn: Turn) -> None:
    turn.fakes.stream_script = [calls_step(_call(1, "handoff", stop_after=True)), text_step()]
    turn.fakes.tool_script = {"call-1": ExecuteToolResult(is_error=True)}
    await turn.run()
    assert _steps(turn) == [0, 1]


async def test_an_exclusive_tool_in_a_batch_runs_nothing_and_the_model_is_told_why(
    turn: Turn,
) -> None:
    batch = [_call(1, "list_files"), _call(2, "execute", exclusive=True), _call(3)]
    turn.fakes.stream_script = [calls_step(*batch), text_step()]
    await turn.run()
    assert turn.fakes.calls["execute_tool_call"] == []
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert recorded.calls == batch and recorded.part == "tools"
    skipped = (
        "this tool was skipped because execute must run alone in its batch. "
        "Retry your tool calls without execute, or call execute separately first."
    )
    assert recorded.errors == {
        "call-1": skipped,
        "call-2": (
            "execute must be called alone, without other tools in the same batch. "
            "Retry with only the execute call."
        ),
        "call-3": skipped,
    }
    assert _steps(turn) == [0, 1], "the model retries on the next step"
    assert _finish(turn).status == "waiting"


async def test_an_exclusive_tool_alone_runs(turn: Turn) -> None:
    turn.fakes.stream_script = [calls_step(_call(1, "execute", exclusive=True)), text_step()]
    await turn.run()
    (executed,) = turn.fakes.of("execute_tool_call", ExecuteToolInput)
    assert executed.call.id == "call-1"
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert recorded.errors == {}


async def test_an_interrupt_cancels_running_tools_and_answers_them(turn: Turn) -> None:
    slow = Block()
    dynamic = ToolCallRef(id="call-ask", name="ask_user", kind="dynamic")
    turn.fakes.stream_script = [calls_step(_call(1), _call(2, "sleep"), dynamic)]
    turn.fakes.tool_script = {"call-2": slow}
    await turn.send("turn-1")
    await turn.fakes.reached("execute_tool_call", 2)
    await turn.history_has("activity_task_completed", 2)  # step 0 and call-1: done first
    await turn.interrupt()
    await turn.finished()
    recorded = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert [(r.part, [c.id for c in r.calls], r.errors) for r in recorded] == [
        ("tools", ["call-1", "call-2"], {"call-2": INTERRUPTED_RESULT}),
        ("client-tools", ["call-ask"], {"call-ask": INTERRUPTED_RESULT}),
    ]
    assert turn.fakes.calls["set_status"] == [], "no requires_action after an interrupt"
    assert _steps(turn) == [0]
    assert _finish(turn).status == "waiting"
    assert not slow.release.is_set()
