"""Fixtures of the workflow tests: the real ChatTurn on the time-skipping test server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from time_skipping import time_skipping_server
from turn_fakes import Turn, running_turn


@pytest.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """One time-skipping test server for the session (nothing is downloaded)."""
    async with time_skipping_server() as env:
        yield env


@pytest.fixture
def env_client(time_skipping_env: WorkflowEnvironment) -> Client:
    """A client of the test server that encodes the pydantic payloads."""
    return time_skipping_env.client


@pytest.fixture
async def turn(env_client: Client) -> AsyncIterator[Turn]:
    """A worker with fresh fakes on a unique task queue, and one chat to drive."""
    async with running_turn(env_client) as running:
        yield running
