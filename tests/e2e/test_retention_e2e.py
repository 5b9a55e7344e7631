"""Retention: stream events pruned per chat as a prefix of their sequence (a cursor expires
exactly when events after it are gone), finished turns' rows and idle workspaces deleted,
one process per round, and `chatd gc` to run a round by hand."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from harness import Stack
from support.names import model_name

from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall
from chatd.parts import TextPart
from chatd.retention import Pruned, Retention, RetentionSettings
from chatd.store.advisory_locks import AdvisoryLock
from chatd.store.events import CursorExpired, EventLog
from chatd.store.missed_hand_overs import MissedHandOverStore
from chatd.store.quiet_turns import QuietTurnStore
from chatd.store.transcript import TranscriptStore
from chatd.tools.defaults import default_registry
from workers.worker import WorkerConfig, build_worker

OLD = "interval '40 days'"
"""Older than every default retention."""


def _assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


async def _answered_chat(stack: Stack, *responses: FakeResponse) -> uuid.UUID:
    """A chat whose one turn has ended with the given model responses."""
    name = model_name()
    stack.fake.script(name, list(responses) or [FakeResponse(parts=[FakeText(text="hello")])])
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "hi")
    await stack.wait_status(chat["id"], "waiting")
    return uuid.UUID(chat["id"])


async def _age(stack: Stack, chat_id: uuid.UUID, seqs: list[int], age: str = "2 days") -> None:
    await stack.pool.execute(
        "UPDATE chat_events SET created_at = now() - $3::text::interval"
        " WHERE chat_id = $1 AND seq = ANY($2)",
        chat_id,
        seqs,
        age,
    )


def _by_what(pruned: list[Pruned]) -> dict[str, int]:
    return {p.what: p.count for p in pruned}


async def test_a_newer_event_before_an_older_one_goes_too_so_no_cursor_skips_one(
    stack: Stack,
) -> None:
    chat_id = await _answered_chat(stack)
    last = await EventLog(stack.pool).last_seq(chat_id)
    assert last >= 4
    # Event 2's transaction started later than event 3's but numbered first (it got the
    # chat's lock first): 1 and 3 are older than the retention, 2 (just) is not.
    await _age(stack, chat_id, [1, 3], "24 hours 1 minute")
    await _age(stack, chat_id, [2], "23 hours 59 minutes")

    report = await Retention(stack.pool, RetentionSettings(batch=2), None).run_round()

    assert report.elected
    assert _by_what(report.pruned)["chat_events"] == 3, "the prefix 1..3, newer 2 included"
    seqs = [r["seq"] for r in await stack.pool.fetch("SELECT seq FROM chat_events ORDER BY seq")]
    assert seqs == list(range(4, last + 1))
    path = f"/chats/{chat_id}/stream"
    for expired in (0, 1, 2):
        _assert_error(
            await stack.http.get(path, headers={"Last-Event-ID": str(expired)}),
            410,
            "cursor_expired",
        )
    with pytest.raises(CursorExpired):
        await EventLog(stack.pool).read_page(chat_id, 2)
    events = await stack.events_until(str(chat_id), lambda e: e.id == last, after=3)
    assert [e.id for e in events] == list(range(4, last + 1)), "from 3 nothing is lost"


async def test_events_newer_than_the_retention_are_kept(stack: Stack) -> None:
    chat_id = await _answered_chat(stack)
    before = await stack.pool.fetchval("SELECT count(*) FROM chat_events")

    report = await Retention(stack.pool, RetentionSettings(), None).run_round()

    assert _by_what(report.pruned)["chat_events"] == 0
    assert await stack.pool.fetchval("SELECT count(*) FROM chat_events") == before
    assert not await EventLog(stack.pool).cursor_expired(chat_id, 0)


async def test_one_process_runs_a_round_while_another_holds_the_lock(stack: Stack) -> None:
    chat_id = await _answered_chat(stack)
    last = await EventLog(stack.pool).last_seq(chat_id)
    await _age(stack, chat_id, list(range(1, last + 1)))
    retention = Retention(stack.pool, RetentionSettings(), None)
    async with stack.pool.acquire() as other, other.transaction():
        assert await other.fetchval(
            "SELECT pg_try_advisory_xact_lock($1)", AdvisoryLock.RETENTION_ROUND
        )
        report = await retention.run_round()
        assert not report.elected and report.pruned == []
        assert await stack.pool.fetchval("SELECT count(*) FROM chat_events") == last

    report = await retention.run_round()
    assert report.elected and _by_what(report.pruned)["chat_events"] == last
    assert await EventLog(stack.pool).cursor_expired(chat_id, last - 1)
    assert not await EventLog(stack.pool).cursor_expired(chat_id, last)


async def test_a_round_runs_while_the_other_background_jobs_hold_their_locks(
    stack: Stack,
) -> None:
    """Each job elects on its own key: a hand-over pass or a reconciler sweep in progress
    (every few seconds on every worker) never makes a retention round stand aside."""
    chat_id = await _answered_chat(stack)
    last = await EventLog(stack.pool).last_seq(chat_id)
    await _age(stack, chat_id, list(range(1, last + 1)))
    async with (
        MissedHandOverStore(stack.pool).pass_lock() as hand_over,
        QuietTurnStore(stack.pool).sweep_lock() as sweep,
    ):
        assert hand_over and sweep
        report = await Retention(stack.pool, RetentionSettings(), None).run_round()
    assert report.elected and _by_what(report.pruned)["chat_events"] == last


async def test_rows_of_finished_turns_go_and_what_a_turn_may_read_stays(
    stack: Stack, tmp_path: Path
) -> None:
    write = FakeToolCall(name="write_file", arguments={"path": "a.txt", "content": "x"})
    chat_id = await _answered_chat(
        stack, FakeResponse(parts=[write]), FakeResponse(parts=[FakeText(text="written")])
    )
    workspace = tmp_path / "workspaces" / str(chat_id)
    assert (workspace / "a.txt").exists()
    waiting, _ = await TranscriptStore(stack.pool).enqueue(chat_id, [TextPart(text="later")], None)
    busy = await _answered_chat(
        stack, FakeResponse(parts=[write]), FakeResponse(parts=[FakeText(text="written")])
    )
    await stack.pool.execute(
        "UPDATE chats SET status = 'running',"
        " turn_id = (SELECT turn_id FROM tool_results WHERE chat_id = $1) WHERE id = $1",
        busy,
    )
    created = await stack.http.post(
        "/chats", json={"model": {"provider": "anthropic"}}, headers={"Idempotency-Key": "c1"}
    )
    assert created.status_code == 201, created.text
    for listed in (chat_id, busy):  # as a turn of a chat with MCP servers lists them
        await stack.pool.execute(
            "INSERT INTO turn_mcp_tools (chat_id, turn_id, tools)"
            " SELECT chat_id, turn_id, '[]' FROM tool_results WHERE chat_id = $1",
            listed,
        )
    for table, column in (
        ("chat_creations", "created_at"),
        ("queued_messages", "promoted_at"),
        ("queued_messages", "created_at"),
        ("tool_results", "created_at"),
        ("tool_call_starts", "started_at"),
        ("turn_mcp_tools", "listed_at"),
    ):
        await stack.pool.execute(f"UPDATE {table} SET {column} = {column} - {OLD}")
    await stack.pool.execute(f"UPDATE chats SET updated_at = updated_at - {OLD}")
    orphan = tmp_path / "workspaces" / str(uuid.uuid4())
    orphan.mkdir()
    other = tmp_path / "workspaces" / "not-a-chat"
    other.mkdir()
    retention = Retention(stack.pool, RetentionSettings(), tmp_path / "workspaces")

    report = await retention.run_round()

    assert _by_what(report.pruned) == {
        "chat_events": 0,
        "queued_messages": 1,
        "chat_creations": 1,
        "tool_results": 1,
        "tool_call_starts": 1,
        "turn_mcp_tools": 1,
        "webhook_deliveries": 0,
        "owner_events": 0,
        "workspaces": 2,
    }
    kept = await stack.pool.fetch("SELECT id, chat_id FROM queued_messages ORDER BY chat_id")
    assert {(r["chat_id"], r["id"] == waiting.id) for r in kept} == {
        (chat_id, True),
        (busy, False),
    }, "the waiting message, and the busy chat's turn message"
    assert await stack.pool.fetchval("SELECT count(*) FROM tool_results WHERE chat_id = $1", busy)
    assert not workspace.exists() and not orphan.exists()
    assert other.exists() and (tmp_path / "workspaces" / str(busy)).exists()
    assert (await stack.http.get(f"/chats/{chat_id}/messages")).status_code == 200


async def test_chatd_gc_prints_what_it_would_delete_then_deletes_it(
    stack: Stack, database_url: str, tmp_path: Path
) -> None:
    chat_id = await _answered_chat(stack)
    last = await EventLog(stack.pool).last_seq(chat_id)
    await _age(stack, chat_id, list(range(1, last + 1)))

    dry = await _chatd_gc(database_url, tmp_path, "--dry-run")
    assert f"chat_events: would delete {last} of 1 chat(s)" in dry.splitlines()
    assert "queued_messages: would delete 0" in dry.splitlines()
    assert await stack.pool.fetchval("SELECT count(*) FROM chat_events") == last

    done = await _chatd_gc(database_url, tmp_path)
    assert f"chat_events: deleted {last} of 1 chat(s)" in done.splitlines()
    assert "workspaces: deleted 0" in done.splitlines()
    assert await stack.pool.fetchval("SELECT count(*) FROM chat_events") == 0
    usage = await _chatd_gc(database_url, tmp_path, "--help")
    assert "--dry-run" in usage and "CHATD_EVENT_RETENTION_HOURS" in usage


async def _chatd_gc(database_url: str, tmp_path: Path, *args: str) -> str:
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "chatd.cli", "gc", *args],
        env={
            **os.environ,
            "DATABASE_URL": database_url,
            "CHATD_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
        },
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_workers_run_rounds_by_themselves(stack: Stack, tmp_path: Path) -> None:
    chat_id = await _answered_chat(stack)
    last = await EventLog(stack.pool).last_seq(chat_id)
    await _age(stack, chat_id, list(range(1, last + 1)))
    quick = RetentionSettings(interval=timedelta(milliseconds=100))
    async with contextlib.AsyncExitStack() as workers:
        for n in range(2):  # both try every round; the lock lets one at a time prune
            config = WorkerConfig(
                task_queue=f"{stack.task_queue}-retention-{n}",
                providers=stack.fake.provider_settings(),
                registry=default_registry(),
                workspace_root=tmp_path / "workspaces",
                generate_titles=False,
                retention=quick,
            )
            await workers.enter_async_context(build_worker(stack.temporal, stack.pool, config))
        for _ in range(600):  # up to 30 s: a round runs every 0.1 s
            if await EventLog(stack.pool).cursor_expired(chat_id, last - 1):
                break
            await asyncio.sleep(0.05)
    assert await EventLog(stack.pool).cursor_expired(chat_id, last - 1), "no worker pruned"
    assert await stack.pool.fetchval("SELECT count(*) FROM chat_events") == 0
