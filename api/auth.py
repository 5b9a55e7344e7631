"""Bearer-key authentication: every request resolves to one owner."""

from __future__ import annotations

from fastapi import Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError
from api.state import state_of

__all__ = ["bearer_key", "current_owner", "invalid_key"]

_bearer = HTTPBearer(auto_error=False)


async def bearer_key(request: Request) -> str:
    """The request's API key as sent; 401 if there is none."""
    credentials: HTTPAuthorizationCredentials | None = await _bearer(request)
    if credentials is None or not credentials.credentials:
        raise ApiError(401, "unauthorized", "missing bearer API key")
    return credentials.credentials


def invalid_key() -> ApiError:
    """The 401 for a key that is unknown or revoked."""
    return ApiError(401, "unauthorized", "invalid API key")


async def current_owner(request: Request) -> str:
    """The owner of the request's API key; 401 otherwise."""
    owner = await state_of(request).keys.owner_of(await bearer_key(request))
    if owner is None:
        raise invalid_key()
    return owner
