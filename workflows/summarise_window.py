"""`SummariseWindow`: the summary behind `POST /v1/responses/compact`, made by a worker (where
the provider keys are) with the retries of any model call, while the gateway waits."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.compaction import CompactionActivities
    from workflows.payloads import SummariseWindowInput, SummariseWindowResult
    from workflows.retries import activity_error, retry_policy

__all__ = ["SUMMARY_DEADLINE", "SummariseWindow"]

SUMMARY_DEADLINE = timedelta(minutes=5)
"""How long a summary may take, retries included: the client waits for it."""


@workflow.defn(name="SummariseWindow")
class SummariseWindow:
    @workflow.run
    async def run(self, input: SummariseWindowInput) -> SummariseWindowResult:
        try:
            return await workflow.execute_activity_method(
                CompactionActivities.summarise_window,
                input,
                schedule_to_close_timeout=SUMMARY_DEADLINE,
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=retry_policy(),
            )
        except ActivityError as err:  # the workflow ends either way: the gateway waits on it
            return SummariseWindowResult(error=activity_error(err, "the summary"))
