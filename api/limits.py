"""Request size limits, enforced while a body is read."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response
from chatd.settings import max_body_bytes

__all__ = ["MAX_BODY_BYTES", "BodySizeLimit"]

MAX_BODY_BYTES = max_body_bytes()


class BodySizeLimit:
    """Answer 413 (with the error shape) to bodies over `max_bytes`, declared or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            refusal = error_response(413, "request_too_large", self._message, path=scope["path"])
            await refusal(scope, receive, send)
            return
        seen = 0

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                # An HTTPException: FastAPI's body parsing passes it on to the error
                # handlers, where any other exception would become a 400 parse error.
                raise HTTPException(413, self._message)
            return message

        await self.app(scope, counting_receive, send)

    @property
    def _message(self) -> str:
        return f"request bodies are limited to {self.max_bytes} bytes"
