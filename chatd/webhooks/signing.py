"""Standard Webhooks signing: secrets and the `webhook-*` headers of a delivery."""

from __future__ import annotations

import base64
import secrets
from datetime import datetime

from standardwebhooks.webhooks import Webhook

__all__ = ["new_secret", "signed_headers"]

_SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh signing secret in the spec's `whsec_<base64>` form."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(_SECRET_BYTES)).decode()


def signed_headers(secret: str, message_id: str, sent_at: datetime, body: str) -> dict[str, str]:
    """The headers of one attempt. `webhook-id` stays the same across retries and replays
    (receivers deduplicate on it); the timestamp is the attempt's, since receivers refuse
    one more than a few minutes off."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, sent_at, body),
        "content-type": "application/json",
    }
