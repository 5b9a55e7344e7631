"""`chatd codec-server`: Temporal's remote codec endpoint, so `temporal workflow show
--codec-endpoint` and the Temporal UI can read the histories `chatd.codec` encrypts.

It speaks the remote codec protocol: `POST /decode` and `POST /encode` take and return
`{"payloads": [...]}` (a `Payloads` message as protobuf JSON). Anyone who can call it reads
every chat, so it answers only a bearer token (`CHATD_CODEC_SERVER_TOKEN`), compared in
constant time; browsers get CORS headers only for the origins listed in
`CHATD_CODEC_CORS_ORIGINS` (the Temporal UI's).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.api.common.v1 import Payload, Payloads

from chatd.codec import KEYS_ENV, CodecKeyError, CodecKeys, EncryptionCodec

__all__ = ["TOKEN_ENV", "CodecServerConfig", "codec_app"]

TOKEN_ENV = "CHATD_CODEC_SERVER_TOKEN"
ORIGINS_ENV = "CHATD_CODEC_CORS_ORIGINS"
MIN_TOKEN_CHARS = 16

Transform = Callable[[Iterable[Payload]], Awaitable[list[Payload]]]


@dataclass(frozen=True)
class CodecServerConfig:
    """The keys, the one token that may call the server, and the browser origins allowed."""

    keys: CodecKeys
    token: str
    cors_origins: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CodecServerConfig:
        """Read `CHATD_CODEC_KEYS`, `CHATD_CODEC_SERVER_TOKEN` and `CHATD_CODEC_CORS_ORIGINS`;
        a `CodecKeyError` says what is missing."""
        env = os.environ if env is None else env
        keys = env.get(KEYS_ENV, "").strip()
        if not keys:
            raise CodecKeyError(f"set {KEYS_ENV}: the codec server has no key to decrypt with")
        token = env.get(TOKEN_ENV, "").strip()
        if len(token) < MIN_TOKEN_CHARS:
            raise CodecKeyError(
                f"set {TOKEN_ENV} to a secret of at least {MIN_TOKEN_CHARS} characters:"
                " callers present it as a bearer token"
            )
        origins = tuple(o.strip() for o in env.get(ORIGINS_ENV, "").split(",") if o.strip())
        return cls(CodecKeys.parse(keys), token, origins)


def _error(status: int, code: str, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": {"code": code, "message": message}}, status, headers=headers)


def _endpoint(transform: Transform, token: str) -> Callable[[Request], Awaitable[Response]]:
    """A POST handler applying `transform` to the request's payloads, for `token`'s holder."""
    expected = f"Bearer {token}".encode()

    async def handle(request: Request) -> Response:
        sent = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(sent, expected):
            return _error(401, "unauthorized", "missing or wrong bearer token")
        try:
            payloads = json_format.Parse(await request.body(), Payloads())
        except json_format.ParseError as err:
            return _error(400, "invalid_payloads", f"body is not a Payloads message: {err}")
        try:
            done = await transform(payloads.payloads)
        except CodecKeyError as err:
            return _error(400, "undecodable_payload", str(err))
        body = json_format.MessageToJson(Payloads(payloads=done))
        return Response(body, media_type="application/json")

    return handle


def codec_app(config: CodecServerConfig) -> Starlette:
    """The codec server's ASGI app."""
    codec = EncryptionCodec(config.keys)
    return Starlette(
        routes=[
            Route("/encode", _endpoint(codec.encode, config.token), methods=["POST"]),
            Route("/decode", _endpoint(codec.decode, config.token), methods=["POST"]),
        ],
        middleware=[
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["POST"],
                allow_headers=["authorization", "content-type", "x-namespace"],
                allow_credentials=True,
            )
        ],
    )
