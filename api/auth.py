"""Bearer-key authentication: every request resolves to one owner."""

from __future__ import annotations

from fastapi import Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError
from api.state import state_of

__all__ = ["current_owner"]

_bearer = HTTPBearer(auto_error=False)


async def current_owner(request: Request) -> str:
    """The owner of the request's API key; 401 otherwise."""
    credentials: HTTPAuthorizationCredentials | None = await _bearer(request)
    if credentials is None or not credentials.credentials:
        raise ApiError(401, "unauthorized", "missing bearer API key")
    owner = await state_of(request).keys.owner_of(credentials.credentials)
    if owner is None:
        raise ApiError(401, "unauthorized", "invalid API key")
    return owner
