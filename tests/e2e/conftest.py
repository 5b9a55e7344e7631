"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from harness import Stack, running_stack

from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.server import FakeProviderServer


@pytest.fixture(scope="session")
def fake_provider() -> Iterator[FakeProviderServer]:
    """One fake provider for the session; tests script it under unique model names."""
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
async def stack(
    database_url: str,
    temporal_server: TemporalDevServer,
    fake_provider: FakeProviderServer,
    tmp_path: Path,
) -> AsyncIterator[Stack]:
    """A worker and a gateway on a fresh database and task queue."""
    async with running_stack(
        database_url=database_url,
        temporal_address=temporal_server.address,
        fake=fake_provider,
        workspace=tmp_path / "workspaces",
    ) as running:
        yield running
