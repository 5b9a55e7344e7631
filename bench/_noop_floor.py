"""The Temporal floor under any turn: the smallest workflow with one no-op activity.

Its own small module, as a minimal workflow would be: the workflow sandbox re-imports a
workflow's module for every run, so a floor defined in a big module would pay for that size.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.worker import Worker

__all__ = ["NoopFloor", "floor_worker", "noop_activity"]


@activity.defn(name="bench_noop")
async def noop_activity() -> None:
    """Does nothing."""


@workflow.defn(name="BenchNoopFloor")
class NoopFloor:
    """One no-op activity, start to result."""

    @workflow.run
    async def run(self) -> None:
        """Run one no-op activity."""
        await workflow.execute_activity(noop_activity, start_to_close_timeout=timedelta(seconds=30))


def floor_worker(template: Worker) -> Worker:
    """A worker for `NoopFloor` with `template`'s settings (client included), own task queue."""
    config: dict[str, Any] = {**template.config()}
    config.update(
        task_queue=f"{template.task_queue}-floor",
        workflows=[NoopFloor],
        activities=[noop_activity],
        plugins=[],  # the template's background jobs are its own; its threads it shuts down
    )
    return Worker(**config)
