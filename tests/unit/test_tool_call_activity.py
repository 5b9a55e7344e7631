"""The tool activities against a real Postgres: what runs, what a retry may run again, and
which result answers which call (call ids a server omits or reuses included).

Attempts are driven with Temporal's `ActivityEnvironment`, which sets the attempt number and
activity id a worker would; a worker dying is the attempt's task cancelled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pydantic import BaseModel
from temporalio.testing import ActivityEnvironment

import chatd.store
from activities.tools import CRASHED_NON_IDEMPOTENT, REPEATED_ID, ToolActivities
from chatd.models import ModelConfig
from chatd.parts import Part, TextPart, ToolCallPart, ToolResultPart
from chatd.store.chats import ChatStore
from chatd.store.db import connect_pool, migrate
from chatd.store.tool_calls import ToolCallStore
from chatd.store.transcript import TranscriptStore
from chatd.store.turns import TurnStore
from chatd.tools.base import Tool, ToolContext, ToolOutput, ToolRegistry
from chatd.tools.catalog import ToolCatalog
from workflows.payloads import (
    ExecuteToolInput,
    RecordToolResultsInput,
    StageToolResultsInput,
    SubmittedToolResult,
    ToolCallRef,
)


class _Word(BaseModel):
    word: str = ""


@dataclass
class Probe:
    """Tools that count their runs and can be held mid-run."""

    runs: list[tuple[str, str]] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def tools(self) -> list[Tool[Any]]:
        async def once(args: _Word, ctx: ToolContext) -> ToolOutput:
            self.runs.append(("once", args.word))
            return f"once ran with {args.word!r}"

        async def held(args: _Word, ctx: ToolContext) -> ToolOutput:
            self.runs.append(("held", args.word))
            self.started.set()
            await self.release.wait()
            return "held done"

        timeout = timedelta(seconds=30)
        return [
            Tool("once", "A tool that must not run twice.", _Word, once, idempotent=False),
            Tool("held", "Waits to be released.", _Word, held, timeout, idempotent=False),
            Tool("held_again", "Waits to be released; may rerun.", _Word, held, timeout),
        ]


@dataclass
class Turn:
    """A chat in a turn whose steps the tests write."""

    pool: asyncpg.Pool
    activities: ToolActivities
    probe: Probe
    chat_id: uuid.UUID
    turn_id: str

    async def step(self, step: int, *calls: tuple[str, str, str]) -> list[ToolCallRef]:
        """Persist step `step` of the turn with these (id, tool, word) calls."""
        parts: list[Part] = [
            ToolCallPart(id=i, name=name, arguments=json.dumps({"word": word}))
            for i, name, word in calls
        ]
        await TranscriptStore(self.pool).save(
            self.chat_id,
            turn_id=self.turn_id,
            step_key=f"{step}:assistant",
            role="assistant",
            parts=parts,
        )
        return [ToolCallRef(id=i, name=name) for i, name, _ in calls]

    def execute_input(self, step: int, call: ToolCallRef) -> ExecuteToolInput:
        return ExecuteToolInput(
            chat_id=str(self.chat_id), turn_id=self.turn_id, step=step, call=call
        )

    async def execute(
        self, step: int, call: ToolCallRef, *, attempt: int = 1, activity_id: str = "1"
    ) -> bool:
        """One attempt of the call's activity; whether its staged result is an error."""
        env = attempt_env(attempt, activity_id)
        result = await env.run(self.activities.execute_tool_call, self.execute_input(step, call))
        return result.is_error

    async def record(self, step: int, calls: list[ToolCallRef]) -> list[ToolResultPart]:
        """Record the step's results; return the tool message's parts."""
        input = RecordToolResultsInput(
            chat_id=str(self.chat_id), turn_id=self.turn_id, step=step, calls=calls
        )
        await ActivityEnvironment().run(self.activities.record_tool_results, input)
        message = await TranscriptStore(self.pool).find(self.chat_id, self.turn_id, f"{step}:tools")
        assert message is not None
        return [p for p in message.parts if isinstance(p, ToolResultPart)]

    async def next_turn(self) -> Turn:
        """The same chat in its next turn."""
        transcript = TranscriptStore(self.pool)
        queued, _ = await transcript.enqueue(self.chat_id, [TextPart(text="next")], None)
        assert await TurnStore(self.pool).begin(self.chat_id, str(queued.id))
        return dataclasses.replace(self, turn_id=str(queued.id))


def attempt_env(attempt: int, activity_id: str = "1") -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt, activity_id=activity_id)
    return env


def outputs(parts: list[ToolResultPart]) -> list[Any]:
    return [p.output for p in parts]


async def new_turn(pool: asyncpg.Pool, workspace_root: Path) -> Turn:
    probe = Probe()
    catalog = ToolCatalog(pool, ToolRegistry.of(probe.tools()))
    activities = ToolActivities(pool, catalog, workspace_root)
    chat = await ChatStore(pool).create(owner="o", model=ModelConfig())
    turn = Turn(pool, activities, probe, chat.id, "")
    return await turn.next_turn()


@pytest.fixture
async def turn(pool: asyncpg.Pool, tmp_path: Path) -> Turn:
    return await new_turn(pool, tmp_path / "workspaces")


async def test_a_workspace_that_cannot_be_made_is_a_result_the_model_sees(
    pool: asyncpg.Pool, tmp_path: Path
) -> None:
    """Preparing a call can fail (a root-owned workspace root, say): the tool never ran, so
    the model is told, and no retry follows that would report a non-idempotent call as
    maybe-completed."""
    root = tmp_path / "not-a-directory"
    root.write_text("")
    turn = await new_turn(pool, root)
    calls = await turn.step(0, ("c1", "once", "x"))
    assert await turn.execute(0, calls[0]) is True
    [result] = await turn.record(0, calls)
    assert result.is_error and "its workspace could not be created" in str(result.output)
    assert turn.probe.runs == []


async def _wait_for_a_lock_wait(pool: asyncpg.Pool) -> None:
    for _ in range(500):
        waiting = await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        if waiting:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the attempt never waited for the lock")


async def test_a_non_idempotent_call_whose_attempt_died_before_starting_runs_on_the_retry(
    turn: Turn,
) -> None:
    [call] = await turn.step(0, ("c1", "once", "x"))
    async with turn.pool.acquire() as blocker:
        holding = blocker.transaction()
        await holding.start()
        # The attempt waits on the transcript before the tool would start, and dies there
        # (its worker stops).
        await blocker.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
        first = asyncio.create_task(turn.execute(0, call, attempt=1))
        await _wait_for_a_lock_wait(turn.pool)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await holding.rollback()
    assert turn.probe.runs == []
    assert await turn.execute(0, call, attempt=2) is False
    assert turn.probe.runs == [("once", "x")]
    assert outputs(await turn.record(0, [call])) == ["once ran with 'x'"]


@pytest.mark.parametrize(("tool", "reruns"), [("held", False), ("held_again", True)])
async def test_a_call_whose_attempt_died_after_starting(
    turn: Turn, tool: str, reruns: bool
) -> None:
    """Only a tool that really started may have completed: a non-idempotent one is then
    reported so and not run again; an idempotent one runs again."""
    [call] = await turn.step(0, ("c1", tool, "x"))
    first = asyncio.create_task(turn.execute(0, call, attempt=1))
    await asyncio.wait_for(turn.probe.started.wait(), 10)
    first.cancel()  # the worker died mid-tool
    with pytest.raises(asyncio.CancelledError):
        await first
    turn.probe.release.set()
    await turn.execute(0, call, attempt=2)
    [result] = await turn.record(0, [call])
    assert result.output == ("held done" if reruns else CRASHED_NON_IDEMPOTENT)
    assert len(turn.probe.runs) == (2 if reruns else 1)


async def test_a_call_id_used_again_in_a_later_step_or_turn_runs_again(turn: Turn) -> None:
    """A server that numbers its calls per response (or sends none) repeats ids: each
    repeat is a call of its own, never answered with the earlier call's result."""
    answers = []
    for step, word in [(0, "a"), (1, "b")]:
        calls = await turn.step(step, ("call_0", "once", word))
        assert await turn.execute(step, calls[0]) is False
        answers += outputs(await turn.record(step, calls))
    later = await turn.next_turn()
    calls = await later.step(0, ("call_0", "once", "c"))
    assert await later.execute(0, calls[0]) is False
    answers += outputs(await later.record(0, calls))
    assert answers == ["once ran with 'a'", "once ran with 'b'", "once ran with 'c'"]
    assert turn.probe.runs == [("once", "a"), ("once", "b"), ("once", "c")]


async def test_calls_sharing_an_id_within_a_step(turn: Turn) -> None:
    """Results are keyed by call id, so of the calls of one step that share an id only the
    first runs (once, though each has an activity), and the model is told the others did
    not; results stay one per call, in call order."""
    calls = await turn.step(
        0, ("dup", "once", "first"), ("dup", "once", "second"), ("solo", "once", "x")
    )
    await asyncio.gather(
        *(turn.execute(0, c, activity_id=str(i)) for i, c in enumerate(calls, start=1))
    )
    assert sorted(turn.probe.runs) == [("once", "first"), ("once", "x")]
    results = await turn.record(0, calls)
    assert outputs(results) == ["once ran with 'first'", REPEATED_ID, "once ran with 'x'"]
    assert [(r.tool_call_id, r.is_error) for r in results] == [
        ("dup", False),
        ("dup", True),
        ("solo", False),
    ]


async def test_client_results_answer_the_step_that_awaits_them(turn: Turn) -> None:
    """A client's results are staged for the step the chat awaits them in, so a reused id
    of a later turn gets the later result."""

    async def answer(turn: Turn, output: str) -> list[Any]:
        calls = [ToolCallRef(id="c1", name="client_tool", kind="dynamic")]
        await turn.step(0, ("c1", "client_tool", ""))
        stage = StageToolResultsInput(
            chat_id=str(turn.chat_id),
            turn_id=turn.turn_id,
            step=0,
            results=[SubmittedToolResult(tool_call_id="c1", output=output)],
            calls=calls,
        )
        await ActivityEnvironment().run(turn.activities.stage_tool_results, stage)
        record = RecordToolResultsInput(
            chat_id=str(turn.chat_id), turn_id=turn.turn_id, step=0, calls=calls,
            part="client-tools",
        )  # fmt: skip
        await ActivityEnvironment().run(turn.activities.record_tool_results, record)
        message = await TranscriptStore(turn.pool).find(
            turn.chat_id, turn.turn_id, "0:client-tools"
        )
        assert message is not None
        return [p.output for p in message.parts if isinstance(p, ToolResultPart)]

    assert await answer(turn, "first turn's") == ["first turn's"]
    assert await answer(await turn.next_turn(), "second turn's") == ["second turn's"]


async def test_results_staged_before_the_turn_keys_stay_readable(
    empty_database_url: str,
) -> None:
    """Staged results from before 006 (keyed by chat and call id only) belong to the newest
    step that made their call: a turn waiting for its results across the upgrade finds them."""
    folder = Path(chatd.store.__file__).parent / "migrations"
    conn = await asyncpg.connect(empty_database_url)
    try:
        await conn.execute("CREATE TABLE schema_migrations (name text PRIMARY KEY)")
        for sql in sorted(folder.glob("00[1-5]_*.sql")):
            await conn.execute(sql.read_text())
            await conn.execute("INSERT INTO schema_migrations VALUES ($1)", sql.name)
        chat_id, turn_id = uuid.uuid4(), str(uuid.uuid4())
        await conn.execute("INSERT INTO chats (id, owner, model) VALUES ($1, 'o', '{}')", chat_id)
        for step, call_ids in [(1, ["old"]), (3, ["old", "other"])]:
            calls = [{"type": "tool_call", "id": i, "name": "once"} for i in call_ids]
            await conn.execute(
                "INSERT INTO messages (chat_id, turn_id, step_key, role, parts)"
                " VALUES ($1, $2, $3, 'assistant', $4)",
                chat_id, turn_id, f"{turn_id}:{step}:assistant", json.dumps(calls),
            )  # fmt: skip
        for call_id in ["old", "unknown"]:
            part = {"type": "tool_result", "tool_call_id": call_id, "name": "once", "output": 1}
            await conn.execute(
                "INSERT INTO tool_results (chat_id, tool_call_id, part) VALUES ($1, $2, $3)",
                chat_id,
                call_id,
                json.dumps(part),
            )
    finally:
        await conn.close()
    await migrate(empty_database_url)
    pool = await connect_pool(empty_database_url)
    try:
        staged = await ToolCallStore(pool).staged(chat_id, turn_id, 3, ["old", "other"])
        assert list(staged) == ["old"]
        rows = await pool.fetch("SELECT tool_call_id, turn_id, step FROM tool_results ORDER BY 1")
        assert [tuple(r) for r in rows] == [("old", turn_id, 3), ("unknown", "", -1)]
    finally:
        await pool.close()
