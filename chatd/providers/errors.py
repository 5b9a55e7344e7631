"""Helpers shared by the provider error classifiers: status table, retry-after, transport errors,
and our own words for errors whose provider text must not reach a chat's `last_error`."""

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
    "described",
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
    """A retryable error for a connection failure or timeout (SDK-wrapped or raw httpx2).

    The exception's text names hosts and addresses of the worker's network: only its type is
    kept.
    """
    cause = type(exc.__cause__ or exc).__name__
    what = "did not answer in time" if is_timeout else "could not be reached"
    return ModelError(
        message=f"the {provider} API {what} ({cause})",
        kind="timeout" if is_timeout else "generic",
        provider=provider,
        retryable=True,
        detail={"type": "timeout" if is_timeout else "connection_error"},
    )


_KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
_BILLING_CODES = {"billing_error", "insufficient_quota"}
_NOT_FOUND_CODES = {"not_found_error", "model_not_found"}


def described(
    kind: ErrorKind, provider: str, status_code: int | None, code: str | None, message: str
) -> str:
    """The message of a classified error: the provider's own for most kinds, ours for `auth`
    and `config`, whose provider text can echo a masked key, an account or an organisation."""
    if kind not in ("auth", "config"):
        return message
    status = f" ({status_code})" if status_code else ""
    key = _KEY_VARIABLES.get(provider, "provider settings")
    base_url = f"{provider.upper()}_BASE_URL"
    if kind == "auth" and (status_code == 403 or code == "permission_error"):
        return f"the {provider} API key may not make this request{status}: check its permissions"
    if kind == "auth":
        return f"the {provider} API key was refused{status}: check the worker's {key}"
    if status_code == 402 or code in _BILLING_CODES:
        return f"the {provider} account has no credit or quota left{status}: check its billing"
    if status_code == 404 or code in _NOT_FOUND_CODES:
        return (
            f"the {provider} API does not know this model or endpoint{status}:"
            f" check the chat's model and the worker's {base_url}"
        )
    return f"the {provider} API refused the worker's configuration{status}"


def incomplete_stream_error(provider: str) -> ModelError:
    """The retryable error for a stream that ended before the model finished its response."""
    return ModelError(
        message="model stream ended before the response finished",
        kind="generic",
        provider=provider,
        retryable=True,
        detail={"type": "incomplete_stream"},
    )
