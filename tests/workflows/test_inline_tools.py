"""A quick tool (`Tool.inline`) runs as a local activity in the workflow's own task: the
server schedules no activity for it, and its result is recorded in call order with the
step's other calls."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from turn_fakes import Turn, calls_step, text_step

from workflows.payloads import ExecuteToolInput, RecordToolResultsInput, ToolCallRef


async def test_an_inline_call_runs_in_the_workflow_task_beside_a_scheduled_one(
    turn: Turn,
) -> None:
    quick = ToolCallRef(id="call-quick", name="current_time", inline=True)
    slow = ToolCallRef(id="call-slow", name="read_file")
    turn.fakes.stream_script = [calls_step(quick, slow), text_step()]
    await turn.run()

    history = await turn.handle().fetch_history()
    scheduled = [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == ["stream_model_step", "execute_tool_call", "stream_model_step"]
    markers = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert len(markers) == 2, "the inline call, then the recording of both results"
    ran = {i.call.id for i in turn.fakes.of("execute_tool_call", ExecuteToolInput)}
    assert ran == {"call-quick", "call-slow"}
    (recorded,) = turn.fakes.of("record_tool_results", RecordToolResultsInput)
    assert [c.id for c in recorded.calls] == ["call-quick", "call-slow"]
    assert recorded.errors == {}
