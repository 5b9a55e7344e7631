"""Activity summaries stay short, whatever names the model invents."""

from __future__ import annotations

import json

from turn_fakes import Turn, calls_step, text_step

from workflows.payloads import ToolCallRef
from workflows.tool_step import SUMMARY_NAME_CHARS


async def test_a_tool_summary_shows_a_cut_name_however_long_the_models_name(turn: Turn) -> None:
    invented = "x" * 10_000
    turn.fakes.stream_script = [calls_step(ToolCallRef(id="call-1", name=invented)), text_step()]
    await turn.run()
    history = await turn.handle().fetch_history()
    summaries = [
        json.loads(event.user_metadata.summary.data)
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
        and event.user_metadata.HasField("summary")
    ]
    (tool,) = [s for s in summaries if s.startswith("tool ")]
    assert tool == f"tool {'x' * (SUMMARY_NAME_CHARS - 1)}… (step 0)"
