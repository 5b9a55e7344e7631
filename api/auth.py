"""Bearer-key authentication: every request resolves to one owner."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError
from api.state import state_of

__all__ = ["BearerKey", "current_owner", "invalid_key"]

_bearer = HTTPBearer(auto_error=False)


async def bearer_key(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The request's API key as sent; 401 if there is none."""
    if credentials is None or not credentials.credentials:
        raise ApiError(401, "unauthorized", "missing bearer API key")
    return credentials.credentials


BearerKey = Annotated[str, Depends(bearer_key)]
"""The request's API key (a dependency: it runs, and answers 401, before path parameters are
validated)."""


def invalid_key() -> ApiError:
    """The 401 for a key that is unknown or revoked."""
    return ApiError(401, "unauthorized", "invalid API key")


async def current_owner(request: Request, key: BearerKey) -> str:
    """The owner of the request's API key; 401 otherwise."""
    owner = await state_of(request).keys.owner_of(key)
    if owner is None:
        raise invalid_key()
    return owner
