"""Fixtures shared by the unit tests that drive the real SDKs against the fake provider."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from chatd.fake_provider import FakeProviderServer
from chatd.providers import close_clients


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
