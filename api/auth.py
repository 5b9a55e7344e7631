"""Bearer-key authentication: every request resolves to one owner."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError
from api.state import state_of
from chatd.store.keys import hash_key

__all__ = ["BearerKey", "authenticated", "current_owner", "invalid_key"]

_bearer = HTTPBearer(auto_error=False)


async def bearer_key(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The request's API key as sent; 401 if there is none or it failed lately, 429 if the
    key is over its request rate. Nothing here reads the database: a flood of refused
    requests costs no queries."""
    if credentials is None or not credentials.credentials:
        raise ApiError(401, "unauthorized", "missing bearer API key")
    key = credentials.credentials
    gate = state_of(request).key_gate
    key_hash = hash_key(key)
    if gate.recently_failed(key_hash):
        raise invalid_key()
    gate.take(key_hash)
    return key


BearerKey = Annotated[str, Depends(bearer_key)]
"""The request's API key (a dependency: it runs, and answers 401 or 429, before path
parameters are validated)."""


def invalid_key() -> ApiError:
    """The 401 for a key that is unknown or revoked."""
    return ApiError(401, "unauthorized", "invalid API key")


async def authenticated(request: Request, key: str, owner: str | None) -> str:
    """`owner` as looked up for `key`: remembered as the key's (for its request rate), or,
    if None, the key is remembered as failed and refused with a 401."""
    gate = state_of(request).key_gate
    if owner is None:
        gate.failed(hash_key(key))
        raise invalid_key()
    await gate.authenticated(hash_key(key), owner)
    return owner


async def current_owner(request: Request, key: BearerKey) -> str:
    """The owner of the request's API key; 401 otherwise."""
    return await authenticated(request, key, await state_of(request).keys.owner_of(key))
