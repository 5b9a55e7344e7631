"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from harness import Cluster, Stack, StackFactory, running_stack
from support.worker_process import WorkerProcess

import api.auth
import api.sending
from chatd.devstack.ports import log_tail
from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.server import FakeProviderServer
from chatd.prices import PRICES_ENV


@pytest.fixture(autouse=True)
def patient_hand_overs(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process gateways wait up to 3 s for a worker to take a message, as before the
    burst defaults: tests assert whether a send started its turn (`queued`), and parallel
    tests on two cores can keep a worker's first workflow task past half a second. The
    burst tests set the short waits themselves."""
    monkeypatch.setattr(api.sending, "HAND_OVER_WAIT_S", 3.0)
    monkeypatch.setattr(api.sending, "BEGIN_WAIT_S", 1.0)


@pytest.fixture
def no_pause_after_a_bad_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse a key that failed lately at once: the pause slows a client retrying at once,
    and a test probing many routes with a wrong key would only add it up."""
    monkeypatch.setattr(api.auth, "REFUSAL_PAUSE_S", 0.0)


@pytest.fixture(scope="session")
def fake_provider() -> Iterator[FakeProviderServer]:
    """One fake provider for the session; tests script it under unique model names."""
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def make_stack(
    database_url: str,
    temporal_server: TemporalDevServer,
    fake_provider: FakeProviderServer,
    tmp_path: Path,
) -> StackFactory:
    """Build a stack on this test's fresh database, with options of its own."""
    if not temporal_server.running:  # say why every test after it fails to connect
        log = log_tail(temporal_server.log_path, 80)
        pytest.fail(f"the session's Temporal dev server has exited; its log's tail:\n{log}")

    def make(**options: Any) -> AbstractAsyncContextManager[Stack]:
        return running_stack(
            database_url=database_url,
            temporal_address=temporal_server.address,
            fake=fake_provider,
            workspace=tmp_path / "workspaces",
            **options,
        )

    return make


@pytest.fixture
async def stack(make_stack: StackFactory) -> AsyncIterator[Stack]:
    """A worker and a gateway on a fresh database and task queue."""
    async with make_stack() as running:
        yield running


@pytest.fixture
async def cluster(
    database_url: str,
    temporal_server: TemporalDevServer,
    fake_provider: FakeProviderServer,
    tmp_path: Path,
) -> AsyncIterator[Cluster]:
    workers: list[WorkerProcess] = []
    # A request answered right after a kill may wait for the workflow task to leave the dead
    # worker's sticky queue: the gateway's update takes that long to be accepted.
    async with running_stack(
        database_url=database_url,
        temporal_address=temporal_server.address,
        fake=fake_provider,
        workspace=tmp_path / "workspaces",
        with_worker=False,
        http_timeout_s=60.0,
    ) as stack:
        # Every test model (`m-…`) priced, so what a killed attempt cost is recorded.
        prices = tmp_path / "prices.json"
        prices.write_text(json.dumps({"anthropic/m-": {"input": 2, "output": 10}}))

        def start_worker() -> WorkerProcess:
            worker = WorkerProcess(
                env={PRICES_ENV: str(prices)},
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
