"""Outbound webhook endpoints of the key's owner, their delivery log, and replays."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.access import Owner
from api.errors import ApiError
from api.state import state_of
from chatd.webhooks.address_guard import AddressRefused, check_url
from chatd.webhooks.events import WebhookEvent
from chatd.webhooks.signing import new_secret
from chatd.webhooks.store import Delivery, Endpoint, NewEndpoint, WebhookStore
from workflows.webhook_delivery import WebhookReplay
from workflows.webhook_payloads import WebhookReplayInput

__all__ = ["router"]

router = APIRouter(prefix="/webhooks", tags=["webhooks"])
MAX_ENDPOINTS = 20
"""Endpoints per owner: each turn event is sent to every subscribed one."""


_PORT = "(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
URL_PATTERN = rf"^https?://[A-Za-z0-9._~%!$&'()*+,;=-]+(:{_PORT})?([/?#][^\x00-\x20\x7f]*)?$"
"""An absolute http(s) URL with a host name or IPv4 address (no credentials, no IPv6
literal), in the document so clients learn the rule from it."""


class WebhookCreate(BaseModel):
    """Body of `POST /webhooks`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: str = Field(max_length=2048, pattern=URL_PATTERN)
    """An absolute http(s) URL. Workers refuse internal addresses unless their operator
    allows them (`CHATD_WEBHOOK_ALLOW_PRIVATE`): such a delivery fails, and its log says why."""
    events: list[WebhookEvent] = Field(min_length=1, json_schema_extra={"uniqueItems": True})
    """The event types to send: `turn.completed`, `turn.requires_action`, `turn.failed`."""

    @field_validator("url")
    @classmethod
    def _absolute_http(cls, url: str) -> str:
        try:
            check_url(url)
        except AddressRefused as err:
            raise ValueError(str(err)) from None
        return url

    @field_validator("events")
    @classmethod
    def _distinct(cls, events: list[WebhookEvent]) -> list[WebhookEvent]:
        if len(set(events)) != len(events):
            raise ValueError("events must not repeat")
        return events


class WebhookList(BaseModel):
    """The owner's endpoints, oldest first (their secrets are never shown again)."""

    data: list[Endpoint]


class DeliveryList(BaseModel):
    """An endpoint's deliveries, newest first, each with its attempts; pass `next_before`
    as `before` for the next page."""

    data: list[Delivery]
    has_more: bool
    next_before: uuid.UUID | None


class ReplayAccepted(BaseModel):
    """A replay was started: its attempt shows in the delivery's log."""

    accepted: bool = True
    delivery_id: uuid.UUID


def _store(request: Request) -> WebhookStore:
    return WebhookStore(state_of(request).pool)


async def _owned(request: Request, owner: str, webhook_id: uuid.UUID) -> Endpoint:
    endpoint = await _store(request).endpoint(owner, webhook_id)
    if endpoint is None:
        raise ApiError(404, "webhook_not_found", f"webhook {webhook_id} not found")
    return endpoint


@router.post("", status_code=201, response_model=NewEndpoint)
async def create_webhook(body: WebhookCreate, owner: Owner, request: Request) -> NewEndpoint:
    """Register an endpoint. The answer holds its signing secret (Standard Webhooks,
    `whsec_...`): it is shown this once."""
    store = _store(request)
    if await store.count_endpoints(owner) >= MAX_ENDPOINTS:
        raise ApiError(
            409, "too_many_webhooks", f"at most {MAX_ENDPOINTS} webhooks per owner",
            {"limit": MAX_ENDPOINTS},
        )  # fmt: skip
    return await store.create_endpoint(owner, body.url, list(body.events), new_secret())


@router.get("", response_model=WebhookList)
async def list_webhooks(owner: Owner, request: Request) -> WebhookList:
    """The owner's endpoints, without their secrets."""
    return WebhookList(data=await _store(request).endpoints(owner))


@router.delete("/{webhook_id}", status_code=204, response_class=Response)
async def delete_webhook(webhook_id: uuid.UUID, owner: Owner, request: Request) -> Response:
    """Remove an endpoint and its delivery log; deliveries under way stop."""
    if not await _store(request).delete_endpoint(owner, webhook_id):
        raise ApiError(404, "webhook_not_found", f"webhook {webhook_id} not found")
    return Response(status_code=204)


@router.get("/{webhook_id}/deliveries", response_model=DeliveryList)
async def list_deliveries(
    webhook_id: uuid.UUID,
    owner: Owner,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: uuid.UUID | None = None,
) -> DeliveryList:
    """The endpoint's latest deliveries with every attempt: status code or error, and when
    the next retry is due; `before` (a delivery id) pages back."""
    await _owned(request, owner, webhook_id)
    store = _store(request)
    if before is not None and not await store.deliveries(webhook_id, limit=1, delivery_id=before):
        raise ApiError(400, "invalid_cursor", f"before: {before} is not a delivery of this webhook")
    rows = await store.deliveries(webhook_id, limit=limit + 1, before=before)
    more = len(rows) > limit
    return DeliveryList(
        data=rows[:limit], has_more=more, next_before=rows[limit - 1].id if more else None
    )


@router.post(
    "/{webhook_id}/deliveries/{delivery_id}/replay",
    status_code=202,
    response_model=ReplayAccepted,
)
async def replay_delivery(
    webhook_id: uuid.UUID, delivery_id: uuid.UUID, owner: Owner, request: Request
) -> ReplayAccepted:
    """Send a delivery again, once: the same message (same `webhook-id`, same body), signed
    anew; the attempt joins the delivery's log."""
    await _owned(request, owner, webhook_id)
    found = await _store(request).deliveries(webhook_id, limit=1, delivery_id=delivery_id)
    if not found:
        raise ApiError(404, "delivery_not_found", f"delivery {delivery_id} not found")
    state = state_of(request)
    await state.temporal.start_workflow(
        WebhookReplay.run,
        WebhookReplayInput(delivery_id=str(delivery_id)),
        id=f"webhook-replay-{delivery_id}-{uuid.uuid4()}",
        task_queue=state.task_queue,
    )
    return ReplayAccepted(delivery_id=delivery_id)
