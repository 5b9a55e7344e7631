"""Webhook delivery activities (activities.webhooks) on a real database and a real receiver:
one delivery per subscribed endpoint and event, signed; each attempt recorded with its
outcome; retries raised with the delay they recorded; internal addresses refused unless
allowed; a replay is one more attempt."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from support.webhook_receiver import WebhookReceiver, webhook_receiver
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.webhooks import ATTEMPT_FAILED, WebhookActivities
from chatd.models import ModelConfig, ModelError
from chatd.store.chats import ChatStore
from chatd.webhooks.delivery import WebhookSettings
from chatd.webhooks.signing import new_secret
from chatd.webhooks.store import Delivery, WebhookStore
from workflows.webhook_payloads import DeliverWebhookInput, RecordDeliveriesInput

ALLOWED = WebhookSettings(allow_private=True, max_attempts=3, first_retry_s=2.0)


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as running:
        running.secret = new_secret()
        yield running


def _env(attempt: int = 1) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt)
    return env


async def _event(
    pool: asyncpg.Pool, receiver: WebhookReceiver, event: str = "turn.failed"
) -> tuple[WebhookStore, uuid.UUID, str]:
    """A chat of owner `o` with an endpoint at the receiver, and the event's one delivery."""
    store = WebhookStore(pool)
    chat = await ChatStore(pool).create(owner="o", model=ModelConfig())
    assert receiver.secret is not None
    endpoint = await store.create_endpoint("o", receiver.url, [event], receiver.secret)
    recorded = await _env().run(
        WebhookActivities(pool, ALLOWED).record_webhook_deliveries,
        RecordDeliveriesInput(
            event_id=f"webhook-{chat.id}-t1-{event}",
            chat_id=str(chat.id),
            turn_id="t1",
            event=event,  # type: ignore[arg-type]
            occurred_at=datetime.now(UTC),
            last_error=ModelError(message="overloaded", kind="overloaded", status_code=529),
        ),
    )
    [delivery_id] = recorded.delivery_ids
    return store, endpoint.id, delivery_id


async def _log(store: WebhookStore, endpoint_id: uuid.UUID) -> Delivery:
    [delivery] = await store.deliveries(endpoint_id, limit=10)
    return delivery


async def test_each_subscribed_endpoint_gets_one_delivery_per_event(pool: asyncpg.Pool) -> None:
    store = WebhookStore(pool)
    chat = await ChatStore(pool).create(owner="o", model=ModelConfig())
    both = await store.create_endpoint("o", "http://a/", ["turn.completed", "turn.failed"], "s")
    await store.create_endpoint("o", "http://b/", ["turn.requires_action"], "s")
    await store.create_endpoint("someone else", "http://c/", ["turn.completed"], "s")
    record = RecordDeliveriesInput(
        event_id="e1",
        chat_id=str(chat.id),
        turn_id="t1",
        event="turn.completed",
        occurred_at=datetime.now(UTC),
    )
    activities = WebhookActivities(pool, ALLOWED)
    first = await _env().run(activities.record_webhook_deliveries, record)
    again = await _env().run(activities.record_webhook_deliveries, record)
    assert len(first.delivery_ids) == 1
    assert again == first
    assert [d.event for d in await store.deliveries(both.id, limit=10)] == ["turn.completed"]


async def test_a_delivery_is_signed_and_logged(
    pool: asyncpg.Pool, receiver: WebhookReceiver
) -> None:
    store, endpoint_id, delivery_id = await _event(pool, receiver)
    result = await _env().run(
        WebhookActivities(pool, ALLOWED).deliver_webhook,
        DeliverWebhookInput(delivery_id=delivery_id),
    )
    assert result.status == "succeeded"
    again = await _env().run(
        WebhookActivities(pool, ALLOWED).deliver_webhook,
        DeliverWebhookInput(delivery_id=delivery_id),
    )
    assert again.status == "succeeded"
    [got] = receiver.received  # a fanout run again sends nothing twice
    assert got.verified is not None, "the signature must verify"
    assert got.headers["webhook-id"] == delivery_id
    assert got.verified["type"] == "turn.failed"
    assert got.verified["data"]["status"] == "error"
    assert got.verified["data"]["last_error"]["kind"] == "overloaded"
    delivery = await _log(store, endpoint_id)
    assert delivery.status == "succeeded"
    assert [(a.attempt, a.status_code, a.error) for a in delivery.attempts] == [(1, 200, None)]


async def test_a_failed_attempt_is_retried_after_the_delay_it_recorded(
    pool: asyncpg.Pool, receiver: WebhookReceiver
) -> None:
    store, endpoint_id, delivery_id = await _event(pool, receiver)
    receiver.answers = [500, 503, 500]
    activities = WebhookActivities(pool, ALLOWED)
    for attempt, delay in ((1, 2.0), (2, 6.0)):
        with pytest.raises(ApplicationError) as raised:
            await _env(attempt).run(
                activities.deliver_webhook, DeliverWebhookInput(delivery_id=delivery_id)
            )
        assert raised.value.type == ATTEMPT_FAILED
        assert raised.value.next_retry_delay == timedelta(seconds=delay)
        pending = await _log(store, endpoint_id)
        assert pending.status == "pending"
        assert pending.next_retry_at is not None
    last = await _env(3).run(
        activities.deliver_webhook, DeliverWebhookInput(delivery_id=delivery_id)
    )
    assert last.status == "failed"
    delivery = await _log(store, endpoint_id)
    assert [a.status_code for a in delivery.attempts] == [500, 503, 500]
    assert [a.next_retry_at is not None for a in delivery.attempts] == [True, True, False]
    assert delivery.attempts[0].error is not None and "HTTP 500" in delivery.attempts[0].error
    assert (delivery.status, delivery.next_retry_at) == ("failed", None)

    replayed = await _env().run(
        activities.deliver_webhook, DeliverWebhookInput(delivery_id=delivery_id, replay=True)
    )
    assert replayed.status == "succeeded"
    delivery = await _log(store, endpoint_id)
    assert delivery.status == "succeeded"
    assert [(a.attempt, a.replay, a.status_code) for a in delivery.attempts][-1] == (4, True, 200)
    bodies = {r.body for r in receiver.received}
    assert len(bodies) == 1, "every attempt sends the same bytes"


async def test_an_internal_address_is_refused_without_a_request(
    pool: asyncpg.Pool, receiver: WebhookReceiver
) -> None:
    store, endpoint_id, delivery_id = await _event(pool, receiver)
    refusing = WebhookActivities(pool, WebhookSettings(allow_private=False))
    result = await _env().run(
        refusing.deliver_webhook, DeliverWebhookInput(delivery_id=delivery_id)
    )
    assert result.status == "failed"
    assert receiver.received == []
    [attempt] = (await _log(store, endpoint_id)).attempts
    assert attempt.status_code is None
    assert attempt.error is not None and "internal address" in attempt.error


async def test_a_removed_endpoint_ends_its_deliveries(
    pool: asyncpg.Pool, receiver: WebhookReceiver
) -> None:
    store, endpoint_id, delivery_id = await _event(pool, receiver)
    assert await store.delete_endpoint("o", endpoint_id)
    result = await _env().run(
        WebhookActivities(pool, ALLOWED).deliver_webhook,
        DeliverWebhookInput(delivery_id=delivery_id),
    )
    assert result.status == "gone"
    assert receiver.received == []


async def test_a_url_the_http_client_cannot_send_fails_at_once(
    pool: asyncpg.Pool, receiver: WebhookReceiver
) -> None:
    store, endpoint_id, delivery_id = await _event(pool, receiver)
    await pool.execute(
        "UPDATE webhook_endpoints SET url = $1 WHERE id = $2",
        receiver.url + "x" * 70_000,
        endpoint_id,
    )
    result = await _env().run(
        WebhookActivities(pool, ALLOWED).deliver_webhook,
        DeliverWebhookInput(delivery_id=delivery_id),
    )
    assert result.status == "failed"
    [attempt] = (await _log(store, endpoint_id)).attempts
    assert attempt.error is not None and attempt.error.startswith("refused")
