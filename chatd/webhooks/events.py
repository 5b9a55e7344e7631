"""The webhook event types and the body each delivery sends (ids and status, no content)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

__all__ = ["EVENT_STATUS", "WEBHOOK_EVENTS", "EventData", "WebhookEvent", "WebhookMessage"]

WebhookEvent = Literal["turn.completed", "turn.requires_action", "turn.failed"]
WEBHOOK_EVENTS: tuple[WebhookEvent, ...] = (
    "turn.completed",
    "turn.requires_action",
    "turn.failed",
)
EVENT_STATUS: dict[WebhookEvent, str] = {
    "turn.completed": "waiting",
    "turn.requires_action": "requires_action",
    "turn.failed": "error",
}
"""The chat status each event reports (the status the turn left the chat in)."""


class EventData(BaseModel):
    """What happened, by id: a receiver reads the chat over the API for the rest."""

    chat_id: str
    turn_id: str
    status: str
    last_error: dict[str, Any] | None = None
    """For `turn.failed`: the chat's `last_error` (kind, provider, status code, message)."""


class WebhookMessage(BaseModel):
    """A delivery's JSON body, as Standard Webhooks lays it out: `type`, `timestamp`, `data`."""

    type: WebhookEvent
    timestamp: datetime
    data: EventData

    def body(self) -> str:
        """The exact text sent and signed (`last_error` left out when there is none)."""
        return self.model_dump_json(exclude_none=True)
