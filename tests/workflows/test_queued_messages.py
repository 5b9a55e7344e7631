"""One running turn per chat: later messages queue and run next (continue-as-new)."""

from __future__ import annotations

from turn_fakes import Block, Turn, text_step

from workflows.chat_turn import ChatTurn
from workflows.payloads import (
    ChatTurnInput,
    StreamStepInput,
    SubmitMessageResult,
)


def _begun(turn: Turn) -> list[str]:
    return turn.fakes.begun()


async def test_a_message_sent_while_a_turn_runs_is_queued_and_runs_next(turn: Turn) -> None:
    first = Block()
    turn.fakes.stream_script = [first, text_step()]
    assert await turn.send("turn-1") == SubmitMessageResult(queued=False, turn_id="turn-1")
    await turn.fakes.reached("stream_model_step")
    first_run = (await turn.handle().describe()).run_id

    assert await turn.send("turn-2") == SubmitMessageResult(queued=True, turn_id="turn-2")
    state = await turn.handle().query(ChatTurn.state)
    assert (state.turn_id, state.queued_messages) == ("turn-1", ["turn-2"])

    first.release.set()
    await turn.finished()
    assert _begun(turn) == ["turn-1", "turn-2"]
    streams = turn.fakes.of("stream_model_step", StreamStepInput)
    assert [(s.turn_id, s.step) for s in streams] == [("turn-1", 0), ("turn-2", 0)]
    finishes = turn.fakes.finishes()
    assert [(f.turn_id, f.status) for f in finishes] == [
        ("turn-1", "waiting"),
        ("turn-2", "waiting"),
    ]

    last = await turn.handle().describe()
    assert last.run_id != first_run, "the next turn is a new run of the same workflow id"
    history = await turn.client.get_workflow_handle(
        turn.workflow_id, run_id=first_run
    ).fetch_history()
    continued = [
        e.workflow_execution_continued_as_new_event_attributes
        for e in history.events
        if e.HasField("workflow_execution_continued_as_new_event_attributes")
    ]
    assert len(continued) == 1
    state = await turn.handle().query(ChatTurn.state)
    assert (state.turn_id, state.queued_messages, state.status) == ("turn-2", [], "waiting")


async def test_queued_messages_run_in_order_one_turn_each(turn: Turn) -> None:
    first = Block()
    turn.fakes.stream_script = [first]
    await turn.send("turn-1")
    await turn.fakes.reached("stream_model_step")
    assert (await turn.send("turn-2")).queued
    assert (await turn.send("turn-3")).queued
    first.release.set()
    await turn.finished()
    assert _begun(turn) == ["turn-1", "turn-2", "turn-3"]


async def test_a_resent_message_is_neither_queued_twice_nor_behind_itself(turn: Turn) -> None:
    first = Block()
    turn.fakes.stream_script = [first]
    await turn.send("turn-1")
    await turn.fakes.reached("stream_model_step")
    assert await turn.send("turn-1") == SubmitMessageResult(queued=False, turn_id="turn-1")
    assert (await turn.send("turn-2")).queued
    assert (await turn.send("turn-2")).queued
    assert (await turn.handle().query(ChatTurn.state)).queued_messages == ["turn-2"]
    first.release.set()
    await turn.finished()
    assert _begun(turn) == ["turn-1", "turn-2"]


async def test_a_message_sent_after_the_turn_ended_starts_a_new_run(turn: Turn) -> None:
    await turn.run("turn-1")
    assert await turn.send("turn-2") == SubmitMessageResult(queued=False, turn_id="turn-2")
    await turn.finished()
    assert _begun(turn) == ["turn-1", "turn-2"]


async def test_a_queued_message_deleted_before_its_turn_is_skipped(turn: Turn) -> None:
    turn.fakes.started = False
    await turn.run("turn-1")
    assert _begun(turn) == ["turn-1"]
    assert turn.fakes.stream_attempts == []  # the step found no turn to begin: no model call
    assert turn.fakes.finishes() == []


async def test_a_run_started_without_a_message_ends_after_the_idle_timeout(turn: Turn) -> None:
    await turn.client.start_workflow(
        ChatTurn.run,
        ChatTurnInput(chat_id=turn.chat_id),
        id=turn.workflow_id,
        task_queue=turn.task_queue,
    )
    await turn.finished()  # the idle minute passes at once
    assert turn.fakes.begun() == []
    assert (await turn.handle().query(ChatTurn.state)).turn_id is None


async def test_a_continued_run_starts_with_the_first_queued_message(turn: Turn) -> None:
    await turn.client.start_workflow(
        ChatTurn.run,
        ChatTurnInput(chat_id=turn.chat_id, queued=["turn-7", "turn-8"]),
        id=turn.workflow_id,
        task_queue=turn.task_queue,
    )
    await turn.finished()
    assert _begun(turn) == ["turn-7", "turn-8"]
