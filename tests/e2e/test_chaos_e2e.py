"""Killing workers mid-stream and mid-tool: the turn moves to another worker, nothing lost."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness import SseEvent, Stack, running_stack
from support.names import model_name
from support.worker_process import WorkerProcess

from activities.tools import CRASHED_NON_IDEMPOTENT
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.script import FakeResponse, FakeText, FakeToolCall
from chatd.fake_provider.server import FakeProviderServer

LONG_TEXT = " ".join(f"word{i}" for i in range(60))


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
    async with running_stack(
        database_url=database_url,
        temporal_address=temporal_server.address,
        fake=fake_provider,
        workspace=tmp_path / "workspaces",
        with_worker=False,
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


async def _chat(stack: Stack, responses: list[FakeResponse]) -> tuple[str, str]:
    name = model_name()
    stack.fake.script(name, responses)
    chat = await stack.create_chat(model={"provider": "anthropic", "name": name})
    await stack.send(chat["id"], "work")
    return chat["id"], name


def _statuses(events: list[SseEvent]) -> list[str]:
    return [e.data["status"] for e in events if e.event == "status"]


def _text(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_a_worker_stopped_mid_stream_hands_the_step_to_another(
    cluster: Cluster, sig: signal.Signals
) -> None:
    stack = cluster.stack
    streaming = FakeResponse(parts=[FakeText(text=LONG_TEXT, chunk_size=6)], delta_delay_s=0.1)
    again = FakeResponse(parts=[FakeText(text=LONG_TEXT, chunk_size=60)])
    first = cluster.start_worker()
    chat_id, name = await _chat(stack, [streaming, again])
    seen = await stack.events_until(chat_id, lambda e: e.event == "message_part", within_s=60)
    cluster.start_worker()
    await asyncio.to_thread(first.signal, sig)
    events = seen + await stack.wait_status(chat_id, "waiting", after=seen[-1].id or 0, within_s=60)

    assert _statuses(events) == ["running", "waiting"], "never waiting/error because of a stop"
    kinds = [e.event for e in events]
    reset_at = kinds.index("reset")
    resumed = "".join(
        e.data["part"]["text"] for e in events[reset_at:] if e.event == "message_part"
    )
    assert resumed == LONG_TEXT, "after the reset, the new attempt's parts arrive whole"
    messages = await stack.messages(chat_id)
    assert [(m["role"], _text(m)) for m in messages] == [("user", "work"), ("assistant", LONG_TEXT)]
    assert len(stack.fake.requests(name)) == 2


@pytest.mark.parametrize(
    ("tool", "expected"),
    [("slow_idempotent", "slow work done"), ("slow_once", CRASHED_NON_IDEMPOTENT)],
)
async def test_a_worker_killed_mid_tool(cluster: Cluster, tool: str, expected: str) -> None:
    stack = cluster.stack
    marker = cluster.tmp / f"{tool}.started"
    first = cluster.start_worker()
    chat_id, _ = await _chat(
        stack,
        [
            FakeResponse(parts=[FakeToolCall(name=tool, arguments={"marker": str(marker)})]),
            FakeResponse(parts=[FakeText(text="all done")]),
        ],
    )
    for _ in range(600):
        if marker.exists():
            break
        await asyncio.sleep(0.05)
    assert marker.exists(), "the tool never started"
    marker.unlink()
    cluster.start_worker()
    await asyncio.to_thread(first.signal, signal.SIGKILL)
    await stack.wait_status(chat_id, "waiting", within_s=90)
    messages = await stack.messages(chat_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    result = messages[2]["parts"][0]
    assert result["output"] == expected
    assert marker.exists() == (tool == "slow_idempotent"), "only the idempotent tool re-ran"
