"""The reconciler ends a turn whose workflow no longer runs, and never a live one."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from harness import SseEvent, Stack
from support.names import model_name
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall
from chatd.parts import TextPart
from chatd.reconciler import STUCK_TURN_MESSAGE, Reconciler, SweepReport
from chatd.settings import ReconcilerSettings
from chatd.store.advisory_locks import AdvisoryLock
from chatd.store.db import migrate
from chatd.store.quiet_turns import QUIET_TURNS_SQL
from chatd.store.transcript import TranscriptStore
from chatd.store.turns import TurnStore
from chatd.tools.defaults import default_registry
from workers.worker import WorkerConfig, build_worker
from workflows.constants import workflow_id

QUICK = ReconcilerSettings(
    interval=timedelta(milliseconds=200),
    grace=timedelta(milliseconds=300),
    batch=10,
    hand_over_after=timedelta(milliseconds=300),
)
# ~12 s of deltas: the turn is still streaming while the test looks at it.
_LONG_TEXT = " ".join(f"word{i}" for i in range(60))
ASK_USER = {
    "name": "ask_user",
    "description": "Ask the user a question and wait for the answer.",
    "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}},
}


def _model(stack: Stack, responses: list[FakeResponse]) -> dict[str, str]:
    name = model_name()
    stack.fake.script(name, responses)
    return {"provider": "anthropic", "name": name}


async def _streaming_chat(stack: Stack, then: str = "after") -> str:
    """A chat whose turn is streaming a long answer (the next turn answers `then`)."""
    slow = FakeResponse(parts=[FakeText(text=_LONG_TEXT, chunk_size=4)], delta_delay_s=0.2)
    chat = await stack.create_chat(
        model=_model(stack, [slow, FakeResponse(parts=[FakeText(text=then)])])
    )
    await stack.send(chat["id"], "start")
    await stack.events_until(chat["id"], lambda e: e.event == "message_part")
    return str(chat["id"])


async def _stuck_chat(stack: Stack) -> str:
    """A chat left `running` with no run: its turn's workflow terminated mid-stream."""
    chat_id = await _streaming_chat(stack)
    handle = stack.temporal.get_workflow_handle(workflow_id(chat_id))
    await handle.terminate(reason="test: leave the chat running with no run")
    assert (await handle.describe()).status == WorkflowExecutionStatus.TERMINATED
    assert (await stack.http.get(f"/chats/{chat_id}")).json()["status"] == "running"
    return chat_id


@asynccontextmanager
async def _reconciling_worker(stack: Stack, workspace: Path) -> AsyncIterator[None]:
    """A second worker whose reconciler sweeps QUICK-ly (on a queue of its own: one process
    can't poll a queue twice; the reconciler looks at every chat whatever its queue)."""
    config = WorkerConfig(
        task_queue=f"{stack.task_queue}-reconciling",
        providers=stack.fake.provider_settings(),
        registry=default_registry(),
        workspace_root=workspace,
        generate_titles=False,
        reconciler=QUICK,
    )
    async with build_worker(stack.temporal, stack.pool, config):
        yield


def _reconciler_tasks() -> int:
    return sum(t.get_name() == "chatd-reconciler" for t in asyncio.all_tasks())


def _is_error(event: SseEvent) -> bool:
    return event.event == "error"


async def test_a_terminated_turn_is_ended_with_an_internal_error_and_the_chat_goes_on(
    stack: Stack, tmp_path: Path
) -> None:
    chat_id = await _stuck_chat(stack)
    before = _reconciler_tasks()
    async with _reconciling_worker(stack, tmp_path):
        events = await stack.events_until(
            chat_id, lambda e: e.event == "status" and e.data["status"] == "error"
        )
        assert _reconciler_tasks() == before + 1
    assert _reconciler_tasks() == before, "the reconciler stops with its worker"

    errors = [e for e in events if _is_error(e)]
    assert len(errors) == 1
    assert errors[0].data["kind"] == "internal"
    assert errors[0].data["message"] == STUCK_TURN_MESSAGE
    assert errors[0].data["detail"]["workflow_status"] == "TERMINATED"
    chat = (await stack.http.get(f"/chats/{chat_id}")).json()
    assert chat["status"] == "error" and chat["last_error"]["kind"] == "internal"

    await stack.send(chat_id, "again")
    await stack.events_until(
        chat_id,
        lambda e: e.event == "message" and e.data["parts"] == [{"type": "text", "text": "after"}],
        after=events[-1].id or 0,
    )
    await stack.wait_status(chat_id, "waiting", after=events[-1].id or 0)


async def test_a_turn_begun_with_no_workflow_is_ended_once_quiet(stack: Stack) -> None:
    """The gateway stored the message and began the turn, but no workflow ever started."""
    chat = await stack.create_chat(
        model=_model(stack, [FakeResponse(parts=[FakeText(text="after")])])
    )
    chat_id = uuid.UUID(chat["id"])
    queued, _ = await TranscriptStore(stack.pool).enqueue(
        chat_id, [TextPart(text="lost")], client_message_id=None
    )
    assert await TurnStore(stack.pool).begin(chat_id, str(queued.id))
    assert not await _workflow_exists(stack, chat["id"])

    reconciler = Reconciler(stack.pool, stack.temporal, QUICK, stack.task_queue)
    await _until(lambda: _sweep_ends(reconciler, chat["id"]))
    ended = (await stack.http.get(f"/chats/{chat_id}")).json()
    assert ended["status"] == "error" and ended["last_error"]["kind"] == "internal"
    assert ended["last_error"]["detail"]["workflow_status"] == "NOT_FOUND"

    await stack.send(chat["id"], "again")
    await stack.wait_status(chat["id"], "waiting")
    assert (await stack.messages(chat["id"]))[-1]["parts"] == [{"type": "text", "text": "after"}]


async def test_messages_stored_with_no_hand_over_are_handed_over_once_in_order(
    stack: Stack,
) -> None:
    """A gateway stored two messages and died before handing them to a workflow (it answers a
    burst's sends first), and the client sent nothing after them: once they have waited
    `hand_over_after` the reconciler hands them over, and each runs once, in the order sent."""
    replies = [FakeResponse(parts=[FakeText(text=t)]) for t in ("a1", "a2")]
    chat = await stack.create_chat(model=_model(stack, replies))
    chat_id = uuid.UUID(chat["id"])
    for text in ("m1", "m2"):
        await TranscriptStore(stack.pool).enqueue(chat_id, [TextPart(text=text)], None)
    assert not await _workflow_exists(stack, chat["id"])

    reconciler = Reconciler(stack.pool, stack.temporal, QUICK, stack.task_queue)
    handed_over: list[uuid.UUID] = []

    async def both_handed_over() -> bool:
        handed_over.extend(await reconciler.hand_over_stranded() or [])
        return len(handed_over) >= 2

    await _until(both_handed_over)

    async def answered() -> bool:
        return len(await stack.messages(chat["id"])) == 4

    await _until(answered)
    await stack.wait_status(chat["id"], "waiting")
    texts = [m["parts"][0]["text"] for m in await stack.messages(chat["id"])]
    assert texts == ["m1", "a1", "m2", "a2"]
    assert len(handed_over) == 2, "a message is handed over once Temporal has it, not after"
    assert await reconciler.hand_over_stranded() == []


@pytest.mark.slow
async def test_a_streaming_turn_and_a_wait_for_the_client_are_never_ended(stack: Stack) -> None:
    streaming = await _streaming_chat(stack)
    calls = [FakeToolCall(name="ask_user", arguments={"question": "?"})]
    waiting = await stack.create_chat(
        model=_model(
            stack,
            [FakeResponse(parts=calls), FakeResponse(parts=[FakeText(text="Thanks!")])],
        ),
        dynamic_tools=[ASK_USER],
    )
    await stack.send(waiting["id"], "help me")
    await stack.wait_status(waiting["id"], "requires_action")

    # Both are past the grace period and looked at, while their runs are open; one a sweep,
    # so the second is reached only because a sweep carries on where the last one stopped.
    reconciler = Reconciler(
        stack.pool, stack.temporal, QUICK.model_copy(update={"batch": 1}), stack.task_queue
    )
    examined: set[str] = set()

    async def both_examined() -> bool:
        report = await reconciler.sweep()
        assert report is not None and report.ended == []
        examined.update(str(chat_id) for chat_id in report.examined)
        return {streaming, waiting["id"]} <= examined

    await _until(both_examined)
    assert (await stack.http.get(f"/chats/{streaming}")).json()["status"] == "running"

    pending = (await stack.http.get(f"/chats/{waiting['id']}")).json()["pending_tool_calls"]
    answered = await stack.http.post(
        f"/chats/{waiting['id']}/tool-results",
        json={"results": [{"tool_call_id": pending[0]["id"], "output": "blue"}]},
    )
    assert answered.status_code == 202, answered.text
    for chat_id in (streaming, waiting["id"]):
        events = await stack.wait_status(chat_id, "waiting")
        assert not [e for e in events if _is_error(e)]


async def test_one_reconciler_sweeps_at_a_time_and_only_quiet_turns(
    stack: Stack, database_url: str
) -> None:
    chat_id = await _stuck_chat(stack)
    patient = Reconciler(
        stack.pool,
        stack.temporal,
        QUICK.model_copy(update={"grace": timedelta(hours=1)}),
        stack.task_queue,
    )
    assert await patient.sweep() == SweepReport(), "the turn changed within the grace period"

    other = await asyncpg.connect(database_url)
    try:
        await other.execute("SELECT pg_advisory_lock($1)", AdvisoryLock.RECONCILER_SWEEP)
        reconciler = Reconciler(stack.pool, stack.temporal, QUICK, stack.task_queue)
        assert await reconciler.sweep() is None, "another reconciler holds the lock"
        assert (await stack.http.get(f"/chats/{chat_id}")).json()["status"] == "running"
        await other.execute("SELECT pg_advisory_unlock($1)", AdvisoryLock.RECONCILER_SWEEP)
    finally:
        await other.close()
    await _until(lambda: _sweep_ends(reconciler, chat_id))


async def _workflow_exists(stack: Stack, chat_id: str) -> bool:
    try:
        await stack.temporal.get_workflow_handle(workflow_id(chat_id)).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def _sweep_ends(reconciler: Reconciler, chat_id: str) -> bool:
    report = await reconciler.sweep()
    return report is not None and uuid.UUID(chat_id) in report.ended


async def _until(check: Callable[[], Any], within_s: float = 30.0) -> None:
    """Poll `check` until it is true (a deadline for a hung stack, not a timing assertion)."""

    async def poll() -> None:
        while not await check():  # noqa: ASYNC110 (polling Temporal and Postgres: no event)
            await asyncio.sleep(0.1)

    await asyncio.wait_for(poll(), within_s)


async def test_a_sweep_reads_only_the_index_of_chats_in_a_turn(database_url: str) -> None:
    await migrate(database_url)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("SET enable_seqscan = off")  # an empty table would be scanned
        plan = await conn.fetchval(
            f"EXPLAIN (FORMAT JSON) {QUIET_TURNS_SQL}", timedelta(minutes=1), None, None, 100
        )
    finally:
        await conn.close()
    assert '"Index Name": "chats_in_turn"' in plan
