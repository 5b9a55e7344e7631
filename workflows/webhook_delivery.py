"""Webhook delivery as workflows: one `WebhookFanout` per turn event, started by the turn
without waiting for it, and one `WebhookReplay` per re-send an owner asks for.

A fanout records one delivery per subscribed endpoint, then tries each with the
`deliver_webhook` activity. The activity's Temporal retries are the backoff: each failed
attempt is recorded in Postgres with its next retry time, then raised with that delay
(`next_retry_delay`), so the wait is a durable server-side timer and a worker that dies
mid-attempt costs one attempt, not the delivery. A workflow per event (not per delivery)
keeps the turn's history to one child start; the per-delivery state lives in Postgres.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from activities.webhooks import WebhookActivities
    from chatd.models import ModelError
    from chatd.webhooks.events import WebhookEvent
    from workflows.webhook_payloads import (
        DeliverWebhookInput,
        RecordDeliveriesInput,
        WebhookFanoutInput,
        WebhookReplayInput,
    )

__all__ = [
    "WebhookFanout",
    "WebhookReplay",
    "fanout_workflow_id",
    "start_deliveries",
]

FANOUT_ID_PREFIX = "webhook-"
ATTEMPT_TIMEOUT = timedelta(seconds=30)
"""Start-to-close of one attempt: the receiver's answer (10 s by default) and two writes."""
DELIVERY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    backoff_coefficient=3.0,
    maximum_interval=timedelta(hours=1),
    # The activity ends a delivery itself after the worker's `max_attempts`; this bound is
    # for what it can't classify (a database outage, our own bug).
    maximum_attempts=20,
)
_RECORD_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=10)


def fanout_workflow_id(input: WebhookFanoutInput) -> str:
    """`webhook-<chat>-<turn>-<event>[-<occurrence>]`: one fanout per event, ever."""
    suffix = f"-{input.occurrence}" if input.occurrence else ""
    return f"{FANOUT_ID_PREFIX}{input.chat_id}-{input.turn_id}-{input.event}{suffix}"


async def start_deliveries(
    chat_id: str,
    turn_id: str,
    event: WebhookEvent,
    *,
    occurrence: int = 0,
    last_error: ModelError | None = None,
) -> None:
    """From a workflow: start the event's `WebhookFanout` as an abandoned child, on the
    caller's task queue, and return once it has started (deliveries run on their own; the
    caller may complete or continue-as-new at once). Starting the same event twice starts
    one fanout."""
    input = WebhookFanoutInput(
        chat_id=chat_id,
        turn_id=turn_id,
        event=event,
        occurrence=occurrence,
        last_error=last_error,
    )
    try:
        await workflow.start_child_workflow(
            WebhookFanout.run,
            input,
            id=fanout_workflow_id(input),
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        pass  # this event's fanout exists: its deliveries are on their way


@workflow.defn(name="WebhookFanout")
class WebhookFanout:
    """Deliver one turn event to every subscribed endpoint of the chat's owner."""

    @workflow.run
    async def run(self, input: WebhookFanoutInput) -> None:
        recorded = await workflow.execute_activity_method(
            WebhookActivities.record_webhook_deliveries,
            RecordDeliveriesInput(
                event_id=workflow.info().workflow_id,
                chat_id=input.chat_id,
                turn_id=input.turn_id,
                event=input.event,
                occurred_at=workflow.now(),
                last_error=input.last_error,
            ),
            start_to_close_timeout=ATTEMPT_TIMEOUT,
            retry_policy=_RECORD_RETRY,
        )
        await asyncio.gather(*(_deliver(d) for d in recorded.delivery_ids))


@workflow.defn(name="WebhookReplay")
class WebhookReplay:
    """Re-send one delivery once (a new attempt in its log)."""

    @workflow.run
    async def run(self, input: WebhookReplayInput) -> None:
        await _deliver(input.delivery_id, replay=True)


async def _deliver(delivery_id: str, *, replay: bool = False) -> None:
    """Try a delivery until it succeeds or is out of attempts; a delivery that still fails
    is in its log, so it doesn't fail the workflow (nor the other deliveries)."""
    try:
        await workflow.execute_activity_method(
            WebhookActivities.deliver_webhook,
            DeliverWebhookInput(delivery_id=delivery_id, replay=replay),
            start_to_close_timeout=ATTEMPT_TIMEOUT,
            retry_policy=DELIVERY_RETRY,
        )
    except ActivityError:
        workflow.logger.warning("webhook delivery %s gave up", delivery_id)
