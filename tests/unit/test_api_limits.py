"""Request bodies over the size limit are a 413 in the error shape, declared or streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI
from pydantic import BaseModel

from api.errors import install_error_handlers
from api.limits import BodySizeLimit

LIMIT = 1000


class Body(BaseModel):
    text: str


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=LIMIT)

    @app.post("/echo")
    async def echo(body: Body) -> dict[str, int]:
        return {"length": len(body.text)}

    return app


async def _post(content: bytes | AsyncIterator[bytes]) -> httpx.Response:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        return await client.post(
            "/echo", content=content, headers={"content-type": "application/json"}
        )


async def _chunks(body: bytes, size: int = 100) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def _body(length: int) -> bytes:
    return b'{"text": "' + b"x" * length + b'"}'


async def test_a_declared_oversized_body_is_413() -> None:
    response = await _post(_body(LIMIT))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


async def test_an_oversized_chunked_body_is_413_not_a_parse_error() -> None:
    """Without a Content-Length the limit trips while the body is read, inside FastAPI's
    body parsing, which turns any other exception into a 400."""
    response = await _post(_chunks(_body(LIMIT)))
    assert "content-length" not in response.request.headers
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "request_too_large"


async def test_a_chunked_body_under_the_limit_is_read_whole() -> None:
    response = await _post(_chunks(_body(LIMIT - 100)))
    assert response.status_code == 200, response.text
    assert response.json() == {"length": LIMIT - 100}
