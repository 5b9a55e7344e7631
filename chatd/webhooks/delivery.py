"""Sending one webhook attempt, and when to try again after a failed one."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from pydantic import BaseModel

from chatd.webhooks.address_guard import AddressRefused, resolve_target
from chatd.webhooks.signing import signed_headers

__all__ = ["AttemptResult", "WebhookSettings", "retry_delay", "send_attempt"]

ALLOW_PRIVATE_ENV = "CHATD_WEBHOOK_ALLOW_PRIVATE"
_MAX_ERROR_CHARS = 500


class WebhookSettings(BaseModel):
    """How a worker delivers webhooks."""

    allow_private: bool = False
    """Send to private, loopback and link-local addresses too (a local receiver, tests)."""
    max_attempts: int = 8
    """Attempts of one delivery before it is `failed` (a replay is one more)."""
    first_retry_s: float = 5.0
    """The wait after the first failure; each next wait is `backoff` times longer."""
    backoff: float = 3.0
    max_retry_s: float = 3600.0
    timeout_s: float = 10.0
    """How long one attempt may take to be answered."""

    @classmethod
    def from_env(cls) -> WebhookSettings:
        """`CHATD_WEBHOOK_ALLOW_PRIVATE`, `CHATD_WEBHOOK_MAX_ATTEMPTS`,
        `CHATD_WEBHOOK_FIRST_RETRY_S` (the rest keep their defaults)."""
        env = os.environ
        return cls(
            allow_private=env.get(ALLOW_PRIVATE_ENV, "").lower() in ("1", "true", "yes"),
            max_attempts=int(env.get("CHATD_WEBHOOK_MAX_ATTEMPTS", "8")),
            first_retry_s=float(env.get("CHATD_WEBHOOK_FIRST_RETRY_S", "5")),
        )


def retry_delay(attempt: int, settings: WebhookSettings, retry_after_s: float | None) -> timedelta:
    """The wait after failed attempt `attempt` (1-based): exponential, capped, or the
    receiver's own `Retry-After` when it is longer (still capped)."""
    delay = settings.first_retry_s * settings.backoff ** (attempt - 1)
    if retry_after_s is not None:
        delay = max(delay, retry_after_s)
    return timedelta(seconds=min(delay, settings.max_retry_s))


@dataclass(frozen=True)
class AttemptResult:
    """How one attempt went: the receiver's status code, or why there was none."""

    status_code: int | None
    error: str | None
    retry_after_s: float | None = None
    refused: bool = False
    """The address guard refused the URL: trying again won't help."""

    @property
    def succeeded(self) -> bool:
        """A 2xx is a delivery; anything else (redirects included) is not."""
        return self.status_code is not None and 200 <= self.status_code < 300


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


async def send_attempt(
    http: httpx.AsyncClient,
    settings: WebhookSettings,
    *,
    url: str,
    secret: str,
    message_id: str,
    body: str,
) -> AttemptResult:
    """POST the signed body to the URL's checked address; redirects are not followed."""
    try:
        target = await resolve_target(url, allow_private=settings.allow_private)
    except AddressRefused as err:
        return AttemptResult(status_code=None, error=f"refused: {err}", refused=True)
    headers = signed_headers(secret, message_id, datetime.now(UTC), body)
    headers["host"] = target.host_header
    try:
        response = await http.post(
            target.url,
            content=body.encode(),
            headers=headers,
            timeout=settings.timeout_s,
            extensions={"sni_hostname": target.server_name},
        )
    except httpx.InvalidURL as err:
        return AttemptResult(None, f"refused: {err}"[:_MAX_ERROR_CHARS], refused=True)
    except httpx.HTTPError as err:
        return AttemptResult(None, f"{type(err).__name__}: {err}"[:_MAX_ERROR_CHARS])
    if 200 <= response.status_code < 300:
        return AttemptResult(response.status_code, None)
    error = f"HTTP {response.status_code}: {response.text}"[:_MAX_ERROR_CHARS]
    return AttemptResult(response.status_code, error, _retry_after(response))
