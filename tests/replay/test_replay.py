"""Recorded ChatTurn and SummariseWindow histories must replay on the current workflow code.

A failure here means a change to `workflows/` would break turns that are running while it
is deployed (nondeterminism): guard the change with `workflow.patched` instead. The
histories are recorded by tests/replay/record_histories.py (see its docstring).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from workflows.chat_turn import ChatTurn
from workflows.decide import Finish
from workflows.payloads import ChatTurnInput
from workflows.summarise_window import SummariseWindow

HISTORIES = Path(__file__).parent / "histories"
RECORDED = {
    f"{path.parent.name}/{path.stem}": path.read_text()
    for path in sorted(HISTORIES.glob("*/*.json"))
}
""""<generation>/<scenario>" -> `WorkflowHistory.to_json()` of one recorded run."""
GENERATIONS = ("v4", "v5", "v6")
SCENARIOS = {
    "text_turn",
    "tool_turn",
    "requires_action_turn",
    "approval_turn",
    "fallback_turn",
    "subagent_wait",
    "webhook_turn",
    "retry_turn",
    "interrupted_turn",
    "queued_turn",
    "queued_next_run",
    "failed_first_step",
    "compaction_turn",
    "failed_compaction",
    "long_turn_continued",
    "titled_turn",
    "signalled_turn",
    "signalled_after_its_turn",
    "summarise_window",
    "overflow_uncompacted",
    "forced_tool_response",
    "format_corrected_turn",
    "format_failed_turn",
    "budget_turn",
}
MAX_HISTORY_BYTES = 32 * 1024
"""Rule 1: a turn's history holds ids and summaries, never the transcript."""
CLOSING_EVENTS = {
    "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED",
    "EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW",
}


def _history(name: str) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"chat-replay-{name.replace('/', '-')}", RECORDED[name])


def _replayer() -> Replayer:
    return Replayer(workflows=[ChatTurn, SummariseWindow], data_converter=pydantic_data_converter)


def test_every_scenario_has_a_whole_recorded_run() -> None:
    expected = {f"{generation}/{name}" for generation in GENERATIONS for name in SCENARIOS}
    assert set(RECORDED) == expected, "record with `python tests/replay/record_histories.py`"
    for name, text in RECORDED.items():
        events = json.loads(text)["events"]
        assert events[0]["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED", name
        assert events[-1]["eventType"] in CLOSING_EVENTS, f"{name} was recorded before its end"


@pytest.mark.parametrize("name", sorted(RECORDED))
async def test_a_recorded_history_replays_without_nondeterminism(name: str) -> None:
    result = await _replayer().replay_workflow(_history(name), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{name}: {result.replay_failure!r}"


async def test_all_histories_replay_together_on_one_replayer() -> None:
    async def histories() -> AsyncIterator[WorkflowHistory]:
        for name in sorted(RECORDED):
            yield _history(name)

    results = await _replayer().replay_workflows(histories(), raise_on_replay_failure=False)
    assert {run: repr(failure) for run, failure in results.replay_failures.items()} == {}


@workflow.defn(name="ChatTurn", sandboxed=False)
class _ChatTurnThatSleepsBeforeFinishing(ChatTurn):
    """An incompatible change: a timer where the recorded runs finished the turn."""

    @workflow.run
    async def run(self, input: ChatTurnInput) -> None:
        await super().run(input)

    async def _finish(self, turn_id: str, finish: Finish | None) -> None:
        await workflow.sleep(timedelta(seconds=1))
        await super()._finish(turn_id, finish)


async def test_an_incompatible_change_is_caught() -> None:
    """The check itself works: a changed command sequence is nondeterminism."""
    replayer = Replayer(
        workflows=[_ChatTurnThatSleepsBeforeFinishing], data_converter=pydantic_data_converter
    )
    result = await replayer.replay_workflow(_history("v4/text_turn"), raise_on_replay_failure=False)
    assert isinstance(result.replay_failure, NondeterminismError)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_recorded_history_stays_small(name: str) -> None:
    assert len(RECORDED[name].encode()) < MAX_HISTORY_BYTES
