"""Payloads of the webhook workflows and their activities: ids, an event name, an error."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from chatd.models import ModelError
from chatd.webhooks.events import WebhookEvent

__all__ = [
    "DeliverWebhookInput",
    "DeliverWebhookResult",
    "RecordDeliveriesInput",
    "RecordDeliveriesResult",
    "WebhookFanoutInput",
    "WebhookReplayInput",
]


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True)


class WebhookFanoutInput(_Payload):
    """An event of a chat's turn, to send to every endpoint of the chat's owner that
    subscribed to it."""

    chat_id: str
    turn_id: str
    event: WebhookEvent
    occurrence: int = 0
    """Tells apart events of one kind in one turn (a turn may ask for action at several
    steps: pass the step); part of the fanout's workflow id."""
    last_error: ModelError | None = None
    """For `turn.failed`: the turn's error, as the chat's `last_error` shows it."""


class RecordDeliveriesInput(_Payload):
    """Record the deliveries of one event (idempotent per `event_id`)."""

    event_id: str
    chat_id: str
    turn_id: str
    event: WebhookEvent
    occurred_at: datetime
    last_error: ModelError | None = None


class RecordDeliveriesResult(_Payload):
    """The event's deliveries, one per subscribed endpoint."""

    delivery_ids: list[str]


class DeliverWebhookInput(_Payload):
    """Try one delivery; `replay` is an owner's re-send: one attempt, whatever came before."""

    delivery_id: str
    replay: bool = False


class DeliverWebhookResult(_Payload):
    """Where the delivery stands after the attempt (`gone`: its endpoint was removed)."""

    status: Literal["succeeded", "failed", "gone"]


class WebhookReplayInput(_Payload):
    """Re-send a delivery once (`POST /webhooks/{id}/deliveries/{delivery_id}/replay`)."""

    delivery_id: str
