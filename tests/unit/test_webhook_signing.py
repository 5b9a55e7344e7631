"""Webhook signing (chatd.webhooks.signing): what we sign, the `standardwebhooks` verifier
accepts; a changed body, another secret or a stale timestamp it refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from chatd.webhooks.events import EventData, WebhookMessage
from chatd.webhooks.signing import new_secret, signed_headers

BODY = WebhookMessage(
    type="turn.completed",
    timestamp=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    data=EventData(chat_id="c", turn_id="t", status="waiting"),
).body()


def test_the_verifier_accepts_what_we_sign() -> None:
    secret = new_secret()
    headers = signed_headers(secret, "msg-1", datetime.now(UTC), BODY)
    assert secret.startswith("whsec_")
    assert headers["webhook-id"] == "msg-1"
    assert Webhook(secret).verify(BODY, headers)["data"]["chat_id"] == "c"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda secret, headers, body: (new_secret(), headers, body),
        lambda secret, headers, body: (secret, headers, body.replace('"c"', '"d"')),
        lambda secret, headers, body: (secret, {**headers, "webhook-id": "msg-2"}, body),
    ],
    ids=["other secret", "changed body", "changed id"],
)
def test_the_verifier_refuses_a_tampered_delivery(tamper: object) -> None:
    secret = new_secret()
    headers = signed_headers(secret, "msg-1", datetime.now(UTC), BODY)
    other_secret, other_headers, other_body = tamper(secret, headers, BODY)  # type: ignore[operator]
    with pytest.raises(WebhookVerificationError):
        Webhook(other_secret).verify(other_body, other_headers)


def test_an_attempt_signs_with_its_own_time() -> None:
    """A retry an hour later carries a fresh timestamp, or receivers would refuse it."""
    secret = new_secret()
    stale = signed_headers(secret, "msg-1", datetime.now(UTC) - timedelta(hours=1), BODY)
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(secret).verify(BODY, stale)


def test_the_body_carries_ids_and_status_only() -> None:
    assert BODY == (
        '{"type":"turn.completed","timestamp":"2026-01-02T03:04:05Z",'
        '"data":{"chat_id":"c","turn_id":"t","status":"waiting"}}'
    )
    assert len({new_secret() for _ in range(3)}) == 3
