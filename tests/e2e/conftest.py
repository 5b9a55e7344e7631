"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from harness import Stack, StackFactory, running_stack

from chatd.devstack.temporal import TemporalDevServer
from chatd.fake_provider.server import FakeProviderServer


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
