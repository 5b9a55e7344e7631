"""Idempotency keys: a retry with the same key and body gets the first answer; the same key
with another body is refused, instead of silently answered for the first request."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel

from api.errors import ApiError

__all__ = ["check_same_request", "request_digest"]


def request_digest(body: BaseModel) -> str:
    """A digest of the validated body: equal for bodies that mean the same request."""
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


def check_same_request(stored_digest: str | None, digest: str) -> None:
    """Raise 422 `idempotency_key_reused` unless the key's first request had this body
    (a request stored before digests were kept is taken to be the same)."""
    if stored_digest is not None and stored_digest != digest:
        raise ApiError(
            422,
            "idempotency_key_reused",
            "this Idempotency-Key was used for a request with a different body:"
            " use a new key for a new request",
        )
