"""Webhook activities: record an event's deliveries, and make one attempt at a delivery."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

import asyncpg
import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from chatd.tls import client_context
from chatd.webhooks.delivery import AttemptResult, WebhookSettings, retry_delay, send_attempt
from chatd.webhooks.events import EVENT_STATUS, EventData
from chatd.webhooks.store import DeliveryTarget, WebhookStore
from workflows.webhook_payloads import (
    DeliverWebhookInput,
    DeliverWebhookResult,
    RecordDeliveriesInput,
    RecordDeliveriesResult,
)

__all__ = ["ATTEMPT_FAILED", "WebhookActivities"]

log = logging.getLogger("chatd.webhooks")

ATTEMPT_FAILED = "WebhookAttemptFailed"
"""ApplicationError type of a failed attempt that will be retried (after its recorded delay)."""


class WebhookActivities:
    """Delivery of webhooks, with the worker's settings (`CHATD_WEBHOOK_*`)."""

    def __init__(self, pool: asyncpg.Pool, settings: WebhookSettings) -> None:
        self._store = WebhookStore(pool)
        self._settings = settings

    @activity.defn(name="record_webhook_deliveries")
    async def record_webhook_deliveries(
        self, input: RecordDeliveriesInput
    ) -> RecordDeliveriesResult:
        """One delivery per endpoint subscribed to the event (none again for a repeat)."""
        data = EventData(
            chat_id=input.chat_id,
            turn_id=input.turn_id,
            status=EVENT_STATUS[input.event],
            last_error=input.last_error.model_dump(mode="json") if input.last_error else None,
        )
        ids = await self._store.record_deliveries(
            input.event_id, input.event, data, input.occurred_at
        )
        return RecordDeliveriesResult(delivery_ids=[str(i) for i in ids])

    @activity.defn(name="deliver_webhook")
    async def deliver_webhook(self, input: DeliverWebhookInput) -> DeliverWebhookResult:
        """One attempt, recorded. A failure that may be retried is raised with the delay
        it recorded as the next retry; the last one (or a replay, or a refused address)
        leaves the delivery `failed`."""
        target = await self._store.target(uuid.UUID(input.delivery_id))
        if target is None:
            return DeliverWebhookResult(status="gone")
        if target.status == "succeeded" and not input.replay:
            return DeliverWebhookResult(status="succeeded")  # a repeated fanout
        async with httpx.AsyncClient(follow_redirects=False, verify=client_context()) as http:
            result = await send_attempt(
                http,
                self._settings,
                url=target.url,
                secret=target.secret,
                message_id=str(target.id),
                body=target.body,
            )
        return await self._record(target, result, input.replay)

    async def _record(
        self, target: DeliveryTarget, result: AttemptResult, replay: bool
    ) -> DeliverWebhookResult:
        attempt = activity.info().attempt
        final = replay or result.refused or attempt >= self._settings.max_attempts
        if result.succeeded or final:
            status = "succeeded" if result.succeeded else "failed"
            await self._store.record_attempt(
                target.id,
                status=status,
                status_code=result.status_code,
                error=result.error,
                next_retry_at=None,
                replay=replay,
            )
            return DeliverWebhookResult(status=status)
        delay = retry_delay(attempt, self._settings, result.retry_after_s)
        await self._store.record_attempt(
            target.id,
            status="pending",
            status_code=result.status_code,
            error=result.error,
            next_retry_at=datetime.now(UTC) + delay,
            replay=False,
        )
        log.info("webhook delivery %s failed (%s); retry in %s", target.id, result.error, delay)
        # Benign: a receiver that fails is expected, and logged above in one line; the SDK
        # then keeps its traceback at DEBUG.
        raise ApplicationError(
            result.error or "delivery failed",
            type=ATTEMPT_FAILED,
            next_retry_delay=delay,
            category=ApplicationErrorCategory.BENIGN,
        )
