"""Bearer-key authentication: every request resolves to one owner.

A key is checked in two places. In front of the whole app (`install_key_gate`), from memory
only: a key that failed lately is refused with a 401 and a key over its request rate with a
429, before routing, tracing or any query, so a flood of refused requests costs little. The
dependencies then look the key up (`current_owner`, `access.owned_chat`).
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import ApiError, error_response
from api.quotas import REFUSAL_PAUSE_S
from api.state import GatewayState, state_of
from chatd.store.keys import hash_key

__all__ = ["BearerKey", "authenticated", "current_owner", "install_key_gate", "invalid_key"]

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


def install_key_gate(app: FastAPI, under: str) -> None:
    """Put `_KeyGate` in front of everything the app runs, tracing middleware included
    (call it after instrumenting the app), for the paths `under` a prefix: the routes that
    take a key (health checks take none, and answer whatever key comes with them)."""
    build = app.build_middleware_stack

    def build_behind_gate() -> ASGIApp:
        return _KeyGate(build(), app, under)

    app.build_middleware_stack = build_behind_gate  # type: ignore[method-assign]


class _KeyGate:
    """Refuses, from memory, a request whose bearer key failed lately or is over its rate
    (after the pause of every such refusal, `REFUSAL_PAUSE_S`)."""

    def __init__(self, inner: ASGIApp, app: FastAPI, under: str) -> None:
        self._inner = inner
        self._app = app
        self._under = under

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gated = scope["type"] == "http" and scope["path"].startswith(self._under)
        key = _bearer_key(scope) if gated else None
        if key is not None:
            state: GatewayState = self._app.state.gateway
            key_hash = hash_key(key)
            try:
                if state.key_gate.recently_failed(key_hash):
                    raise invalid_key()
                state.key_gate.take(key_hash)
            except ApiError as refusal:
                await asyncio.sleep(REFUSAL_PAUSE_S)
                response = error_response(
                    refusal.status, refusal.code, refusal.message, refusal.detail,
                    headers=refusal.headers, path=scope["path"],
                )  # fmt: skip
                await response(scope, receive, send)
                return
        await self._inner(scope, receive, send)


def _bearer_key(scope: Scope) -> str | None:
    """The key of an `Authorization: Bearer <key>` header, as `HTTPBearer` reads it."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, key = value.decode("latin-1").partition(" ")
            return key if scheme.lower() == "bearer" and key else None
    return None
