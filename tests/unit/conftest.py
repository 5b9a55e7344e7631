"""Fixtures shared by the unit tests: a fake provider for the real SDKs, and a migrated
database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from chatd.fake_provider import FakeProviderServer
from chatd.providers import close_clients
from chatd.store.db import connect_pool, migrate


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProviderServer]:
    """A fake provider of the module's own, without the demo model (a file that needs the
    demo defines its own `server`)."""
    with FakeProviderServer(demo_model=None) as srv:
        yield srv


@pytest.fixture
async def closed_sdk_clients() -> AsyncIterator[None]:
    """Close the SDK clients `make_provider` cached during the test: the next test's loop
    can't use them."""
    yield
    await close_clients()


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on the test's own database, migrated."""
    await migrate(database_url)
    pool = await connect_pool(database_url)
    yield pool
    await pool.close()
