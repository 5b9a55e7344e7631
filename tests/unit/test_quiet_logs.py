"""An expected, classified provider error is not a bug: the worker logs no traceback for it.
An unexpected exception is, and keeps its traceback."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.failures import classified_failures, model_failure
from chatd.models import ModelError


@activity.defn
async def fail(kind: str) -> None:
    """Fail as a model step does: a classified error, or a bug (`kind` "bug")."""
    async with classified_failures("model step 0"):
        if kind == "bug":
            raise KeyError("a bug")
        raise model_failure(ModelError(message="Overloaded", kind=kind, retryable=True))  # type: ignore[arg-type]


@workflow.defn(sandboxed=False)
class FailOnce:
    """One attempt of `fail`."""

    @workflow.run
    async def run(self, kind: str) -> None:
        try:
            await workflow.execute_activity(
                fail,
                kind,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        except ActivityError:
            pass


async def _run(client: Client, kind: str) -> None:
    queue = f"quiet-logs-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[FailOnce],
        activities=[fail],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        await client.execute_workflow(FailOnce.run, kind, id=queue, task_queue=queue)


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info and r.levelno >= logging.INFO]


@pytest.mark.parametrize("kind", ["overloaded", "rate_limit", "timeout", "auth"])
async def test_a_classified_provider_error_logs_no_traceback(
    temporal_client: Client, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    with caplog.at_level(logging.INFO):
        await _run(temporal_client, kind)
    assert _tracebacks(caplog) == []


async def test_a_bug_keeps_its_traceback(
    temporal_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        await _run(temporal_client, "bug")
    assert any(r.exc_info and r.exc_info[0] is KeyError for r in _tracebacks(caplog))
