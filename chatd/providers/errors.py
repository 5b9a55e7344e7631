"""Helpers shared by the provider error classifiers: status table, retry-after, transport errors."""

from __future__ import annotations

import email.utils
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import httpx2

from chatd.models import ErrorKind, ModelError

__all__ = [
    "STATUS_KINDS",
    "error_fields",
    "incomplete_stream_error",
    "kind_for_status",
    "parse_retry_after_ms",
    "transport_error",
]

STATUS_KINDS: dict[int, tuple[ErrorKind, bool]] = {
    400: ("invalid_request", False),
    401: ("auth", False),
    402: ("config", False),
    403: ("auth", False),
    404: ("config", False),
    408: ("timeout", True),
    409: ("generic", True),
    413: ("invalid_request", False),
    422: ("invalid_request", False),
    429: ("rate_limit", True),
    503: ("overloaded", True),
    504: ("timeout", True),
    529: ("overloaded", True),
}
"""HTTP status -> (kind, retryable); other 5xx are generic retryable, other 4xx invalid requests."""


def kind_for_status(status: int) -> tuple[ErrorKind, bool]:
    """Classify an HTTP error status as (kind, retryable)."""
    if status in STATUS_KINDS:
        return STATUS_KINDS[status]
    if status >= 500:
        return "generic", True
    if status >= 400:
        return "invalid_request", False
    return "generic", False


def parse_retry_after_ms(
    headers: Mapping[str, str] | httpx2.Headers | None, now: datetime | None = None
) -> int | None:
    """The retry hint of `retry-after-ms`, or `retry-after` (seconds or HTTP-date), in ms."""
    if not headers:
        return None
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return millis
    raw = headers.get("retry-after")
    if raw is None:
        return None
    seconds = _number(raw, scale=1000)
    if seconds is not None:
        return seconds
    return _http_date_ms(raw, now)


def _number(raw: str | None, scale: int = 1) -> int | None:
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    if math.isnan(value) or math.isinf(value) or value < 0:
        return None
    return math.ceil(value * scale)


def _http_date_ms(raw: str, now: datetime | None) -> int | None:
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delta = when - (now or datetime.now(UTC))
    return max(0, math.ceil(delta.total_seconds() * 1000))


def error_fields(body: object) -> dict[str, Any]:
    """The error object of a provider error body (`{"error": {...}}` or the bare object)."""
    if not isinstance(body, Mapping):
        return {}
    inner = body.get("error")
    if isinstance(inner, Mapping):
        return dict(inner)
    return dict(body)


def transport_error(exc: BaseException, provider: str, *, is_timeout: bool) -> ModelError:
    """A retryable error for a connection failure or timeout (SDK-wrapped or raw httpx2)."""
    return ModelError(
        message=str(exc) or type(exc).__name__,
        kind="timeout" if is_timeout else "generic",
        provider=provider,
        retryable=True,
        detail={"type": "timeout" if is_timeout else "connection_error"},
    )


def incomplete_stream_error(provider: str) -> ModelError:
    """The retryable error for a stream that ended before the model finished its response."""
    return ModelError(
        message="model stream ended before the response finished",
        kind="generic",
        provider=provider,
        retryable=True,
        detail={"type": "incomplete_stream"},
    )
