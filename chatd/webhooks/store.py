"""Webhook endpoints, their deliveries and each delivery's attempts, in Postgres."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg
from pydantic import BaseModel

from chatd.webhooks.events import EventData, WebhookEvent, WebhookMessage

__all__ = [
    "Attempt",
    "Delivery",
    "DeliveryTarget",
    "Endpoint",
    "NewEndpoint",
    "WebhookStore",
    "subscribed_events_sql",
]


class Endpoint(BaseModel):
    """A registered endpoint as listed (never with its secret)."""

    id: uuid.UUID
    url: str
    events: list[str]
    created_at: datetime


class NewEndpoint(Endpoint):
    """A just registered endpoint: the only time its signing secret is shown."""

    secret: str


class Attempt(BaseModel):
    """One attempt to deliver a message."""

    attempt: int
    replay: bool
    status_code: int | None
    error: str | None
    next_retry_at: datetime | None
    created_at: datetime


class Delivery(BaseModel):
    """One message to one endpoint, with its attempts (oldest first)."""

    id: uuid.UUID
    event: str
    chat_id: uuid.UUID
    turn_id: str
    status: str
    """`pending` (being tried), `succeeded` or `failed` (out of attempts, or refused)."""
    attempts: list[Attempt]
    next_retry_at: datetime | None
    created_at: datetime


class DeliveryTarget(BaseModel):
    """What the worker needs to try a delivery."""

    id: uuid.UUID
    url: str
    secret: str
    body: str
    status: str


_RECORD = """
INSERT INTO webhook_deliveries (id, endpoint_id, event_id, event, chat_id, turn_id, body)
SELECT gen_random_uuid(), e.id, $2, $3, c.id, $4, $5
FROM chats c JOIN webhook_endpoints e ON e.owner = c.owner AND $3 = ANY (e.events)
WHERE c.id = $1
ON CONFLICT (endpoint_id, event_id) DO NOTHING
"""
_ATTEMPT = """
WITH d AS (
    UPDATE webhook_deliveries SET attempts = attempts + 1, status = $2, last_status_code = $3,
        last_error = $4, next_retry_at = $5, updated_at = now()
    WHERE id = $1 RETURNING id, attempts
)
INSERT INTO webhook_attempts (delivery_id, attempt, replay, status_code, error, next_retry_at)
SELECT id, attempts, $6, $3, $4, $5 FROM d
"""
_DELIVERIES = """
SELECT d.id, d.event, d.chat_id, d.turn_id, d.status, d.next_retry_at, d.created_at,
    coalesce(jsonb_agg(jsonb_build_object('attempt', a.attempt, 'replay', a.replay,
        'status_code', a.status_code, 'error', a.error, 'next_retry_at', a.next_retry_at,
        'created_at', a.created_at) ORDER BY a.attempt) FILTER (WHERE a.attempt IS NOT NULL),
        '[]') AS tries
FROM webhook_deliveries d LEFT JOIN webhook_attempts a ON a.delivery_id = d.id
WHERE d.endpoint_id = $1 AND ($3::uuid IS NULL OR d.id = $3)
  AND ($4::uuid IS NULL OR (d.created_at, d.id) < (
      SELECT b.created_at, b.id FROM webhook_deliveries b WHERE b.id = $4 AND b.endpoint_id = $1))
GROUP BY d.id ORDER BY d.created_at DESC, d.id DESC LIMIT $2
"""


def subscribed_events_sql(owner: str) -> str:
    """The events any endpoint of `owner` (an SQL expression) takes, as a text array."""
    return (
        "SELECT coalesce(array_agg(DISTINCT e ORDER BY e), '{}')"
        f" FROM webhook_endpoints, unnest(events) AS e WHERE owner = {owner}"
    )


class WebhookStore:
    """Reads and writes of the webhook tables; an owner sees only their own endpoints."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create_endpoint(
        self, owner: str, url: str, events: list[str], secret: str
    ) -> NewEndpoint:
        """Register an endpoint."""
        row = await self._pool.fetchrow(
            "INSERT INTO webhook_endpoints (id, owner, url, events, secret)"
            " VALUES ($1, $2, $3, $4, $5) RETURNING id, url, events, secret, created_at",
            uuid.uuid4(), owner, url, events, secret,
        )  # fmt: skip
        assert row is not None
        return NewEndpoint.model_validate(dict(row))

    async def count_endpoints(self, owner: str) -> int:
        """How many endpoints the owner has."""
        count: int = await self._pool.fetchval(
            "SELECT count(*) FROM webhook_endpoints WHERE owner = $1", owner
        )
        return count

    async def subscribed_events(self, owner: str) -> list[str]:
        """The events any of the owner's endpoints takes (what a turn must announce)."""
        events: list[str] = await self._pool.fetchval(subscribed_events_sql("$1"), owner)
        return events

    async def endpoints(self, owner: str) -> list[Endpoint]:
        """The owner's endpoints, oldest first."""
        rows = await self._pool.fetch(
            "SELECT id, url, events, created_at FROM webhook_endpoints WHERE owner = $1"
            " ORDER BY created_at, id",
            owner,
        )
        return [Endpoint.model_validate(dict(r)) for r in rows]

    async def endpoint(self, owner: str, endpoint_id: uuid.UUID) -> Endpoint | None:
        """One of the owner's endpoints."""
        row = await self._pool.fetchrow(
            "SELECT id, url, events, created_at FROM webhook_endpoints"
            " WHERE owner = $1 AND id = $2",
            owner, endpoint_id,
        )  # fmt: skip
        return Endpoint.model_validate(dict(row)) if row else None

    async def delete_endpoint(self, owner: str, endpoint_id: uuid.UUID) -> bool:
        """Remove an endpoint and its delivery log; whether it was the owner's."""
        result: str = await self._pool.execute(
            "DELETE FROM webhook_endpoints WHERE owner = $1 AND id = $2", owner, endpoint_id
        )
        return result != "DELETE 0"

    async def record_deliveries(
        self,
        event_id: str,
        event: WebhookEvent,
        data: EventData,
        occurred_at: datetime,
    ) -> list[uuid.UUID]:
        """One delivery per endpoint of the chat's owner subscribed to `event`, recorded
        once per `event_id` (a repeat records nothing new); the ids of all of them."""
        body = WebhookMessage(type=event, timestamp=occurred_at, data=data).body()
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(
                _RECORD, uuid.UUID(data.chat_id), event_id, event, data.turn_id, body
            )
            rows = await conn.fetch(
                "SELECT id FROM webhook_deliveries WHERE event_id = $1 ORDER BY id", event_id
            )
        return [r["id"] for r in rows]

    async def target(self, delivery_id: uuid.UUID) -> DeliveryTarget | None:
        """The delivery with its endpoint's URL and secret (None once the endpoint is gone)."""
        row = await self._pool.fetchrow(
            "SELECT d.id, e.url, e.secret, d.body, d.status FROM webhook_deliveries d"
            " JOIN webhook_endpoints e ON e.id = d.endpoint_id WHERE d.id = $1",
            delivery_id,
        )
        return DeliveryTarget.model_validate(dict(row)) if row else None

    async def record_attempt(
        self,
        delivery_id: uuid.UUID,
        *,
        status: str,
        status_code: int | None,
        error: str | None,
        next_retry_at: datetime | None,
        replay: bool,
    ) -> None:
        """An attempt's outcome, numbered after the delivery's earlier ones, and the
        delivery's status after it."""
        await self._pool.execute(
            _ATTEMPT, delivery_id, status, status_code, error, next_retry_at, replay
        )

    async def deliveries(
        self,
        endpoint_id: uuid.UUID,
        *,
        limit: int,
        delivery_id: uuid.UUID | None = None,
        before: uuid.UUID | None = None,
    ) -> list[Delivery]:
        """The endpoint's deliveries, newest first (or the one named; or those older than
        delivery `before`, none if it is not the endpoint's), with their attempts."""
        rows = await self._pool.fetch(_DELIVERIES, endpoint_id, limit, delivery_id, before)
        return [_delivery(r) for r in rows]


def _delivery(row: asyncpg.Record) -> Delivery:
    attempts = [Attempt.model_validate(t) for t in row["tries"]]
    return Delivery(
        id=row["id"],
        event=row["event"],
        chat_id=row["chat_id"],
        turn_id=row["turn_id"],
        status=row["status"],
        attempts=attempts,
        next_retry_at=row["next_retry_at"],
        created_at=row["created_at"],
    )
