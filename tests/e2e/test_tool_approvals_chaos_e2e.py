"""Killing workers while a turn waits for approval and while an approved call runs: the wait
outlives its worker, and an approved call keeps its tool's guarantee (idempotent tools run
to completion, others at most once)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness import Stack, running_stack
from support.names import model_name
from support.worker_process import WorkerProcess

from activities.tools import CRASHED_NON_IDEMPOTENT
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall
from chatd.fake_provider.server import FakeProviderServer

SLOW_S = 10.0
"""How long the slow tools run: long enough that the kill lands while one runs."""


@dataclass
class Cluster:
    """A gateway in this process and worker processes started on demand."""

    stack: Stack
    start_worker: Callable[[], WorkerProcess]
    tmp: Path


@pytest.fixture
async def cluster(
    database_url: str,
    temporal_server: TemporalDevServer,
    fake_provider: FakeProviderServer,
    tmp_path: Path,
) -> AsyncIterator[Cluster]:
    workers: list[WorkerProcess] = []
    # An approval answered right after a kill waits for the workflow task to leave the dead
    # worker's sticky queue: the gateway's update takes that long to be accepted.
    async with running_stack(
        database_url=database_url,
        temporal_address=temporal_server.address,
        fake=fake_provider,
        workspace=tmp_path / "workspaces",
        with_worker=False,
        http_timeout_s=60.0,
    ) as stack:

        def start_worker() -> WorkerProcess:
            worker = WorkerProcess(
                database_url=database_url,
                temporal_address=temporal_server.address,
                task_queue=stack.task_queue,
                fake=fake_provider,
                workspace=tmp_path / "workspaces",
                log=tmp_path / f"worker-{len(workers)}.log",
            ).start()
            workers.append(worker)
            return worker

        try:
            yield Cluster(stack, start_worker, tmp_path)
        finally:
            for worker in workers:
                await asyncio.to_thread(worker.stop)


async def _waiting_for_approval(cluster: Cluster, tool: str, marker: Path) -> tuple[str, str]:
    """A chat whose model called `tool`, waiting for its approval; (chat id, call id)."""
    stack = cluster.stack
    name = model_name()
    arguments = {"marker": str(marker), "seconds": SLOW_S}
    stack.fake.script(
        name,
        [
            FakeResponse(parts=[FakeToolCall(name=tool, arguments=arguments)]),
            FakeResponse(parts=[FakeText(text="all done")]),
        ],
    )
    chat = await stack.create_chat(
        model={"provider": "anthropic", "name": name}, tool_policy={"slow_*": "ask"}
    )
    await stack.send(chat["id"], "work")
    await stack.wait_status(chat["id"], "requires_action", within_s=60)
    pending = (await stack.http.get(f"/chats/{chat['id']}")).json()["pending_tool_calls"]
    [call] = pending
    assert call["action"] == "approval" and call["name"] == tool
    return chat["id"], call["id"]


async def _approve(stack: Stack, chat_id: str, call_id: str) -> None:
    response = await stack.http.post(
        f"/chats/{chat_id}/tool-approvals",
        json={"decisions": [{"tool_call_id": call_id, "decision": "approve"}]},
    )
    assert response.status_code == 202, response.text


async def _result(stack: Stack, chat_id: str) -> dict[str, Any]:
    """The one tool result of the chat's finished turn."""
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    result: dict[str, Any] = messages[2]["parts"][0]
    return result


async def test_a_wait_for_approval_outlives_a_killed_worker(cluster: Cluster) -> None:
    stack = cluster.stack
    marker = cluster.tmp / "slow_once.started"
    first = cluster.start_worker()
    chat_id, call_id = await _waiting_for_approval(cluster, "slow_once", marker)
    await asyncio.to_thread(first.kill)
    cluster.start_worker()

    assert (await stack.http.get(f"/chats/{chat_id}")).json()["status"] == "requires_action"
    await _approve(stack, chat_id, call_id)
    await stack.wait_status(chat_id, "waiting", within_s=90)
    assert (await _result(stack, chat_id))["output"] == "slow work done"
    assert marker.exists(), "the approved call ran on the new worker"


async def _wait_for(marker: Path) -> None:
    """Until the tool touched `marker` (it started)."""
    for _ in range(1200):
        if await asyncio.to_thread(marker.exists):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the tool never started: {marker} is missing")


@pytest.mark.parametrize(
    ("tool", "expected"),
    [("slow_idempotent", "slow work done"), ("slow_once", CRASHED_NON_IDEMPOTENT)],
)
async def test_a_worker_killed_during_an_approved_call(
    cluster: Cluster, tool: str, expected: str
) -> None:
    stack = cluster.stack
    marker = cluster.tmp / f"{tool}.started"
    first = cluster.start_worker()
    chat_id, call_id = await _waiting_for_approval(cluster, tool, marker)
    await _approve(stack, chat_id, call_id)
    await _wait_for(marker)
    marker.unlink()
    cluster.start_worker()
    await asyncio.to_thread(first.signal, signal.SIGKILL)
    await stack.wait_status(chat_id, "waiting", within_s=120)

    result = await _result(stack, chat_id)
    assert result["output"] == expected
    assert result.get("is_error", False) is (tool == "slow_once")
    assert marker.exists() == (tool == "slow_idempotent"), "only the idempotent tool re-ran"
    [decision] = (await stack.http.get(f"/chats/{chat_id}/tool-decisions")).json()["decisions"]
    assert decision["decision"] == "approve" and decision["tool_call_id"] == call_id
