"""Claude on the clouds, as the fake provider serves it: Vertex AI's `streamRawPredict` and
Bedrock's `invoke-with-response-stream` carry Anthropic's Messages API with the model in the
path and an `anthropic_version` in the body; Bedrock frames the stream in AWS's
event-stream and answers errors in its own shape.

(Azure OpenAI needs nothing here: its deployment-scoped URLs carry OpenAI's bodies as they
are, so the server routes them to the OpenAI endpoints.)
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, Literal

from starlette.responses import JSONResponse, Response

from chatd.fake_provider.aws_eventstream import chunk_message, exception_message
from chatd.fake_provider.script import FakeError
from chatd.fake_provider.shapes import InvalidRequest
from chatd.fake_provider.sse import SseEvent

__all__ = [
    "Platform",
    "bedrock_error",
    "bedrock_frame",
    "bedrock_stream_error",
    "check_platform_body",
    "model_in_path",
]

Platform = Literal["direct", "vertex", "bedrock"]

_MODEL_PATHS = {
    "vertex": re.compile(r"/publishers/anthropic/models/(?P<model>[^/:]+):streamRawPredict$"),
    "bedrock": re.compile(r"^/model/(?P<model>[^/]+)/invoke-with-response-stream$"),
}
_BEDROCK_ERRORS = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}
_STREAM_EXCEPTIONS = {
    "rate_limit_error": "throttlingException",
    "overloaded_error": "serviceUnavailableException",
    "api_error": "internalServerException",
}


def model_in_path(platform: Platform, path: str) -> str:
    """The model a Vertex or Bedrock request's path names ("" when it names none)."""
    match = _MODEL_PATHS[platform].search(path) if platform != "direct" else None
    return urllib.parse.unquote(match.group("model")) if match else ""


def check_platform_body(platform: Platform, body: dict[str, Any]) -> None:
    """What the platform checks before Anthropic's own checks: an `anthropic_version` (the
    SDK sends its own), and no `model` in the body (it is in the path)."""
    if platform == "direct":
        return
    version = body.get("anthropic_version")
    if not isinstance(version, str) or not version:
        raise InvalidRequest("anthropic_version: Field required")
    if "model" in body:
        raise InvalidRequest("model: not allowed in the body (the path names the model)")


def bedrock_error(error: FakeError) -> Response:
    """Bedrock's error response: `{"message"}` and the exception's name in a header."""
    status = 503 if error.status == 529 else error.status
    kind = _BEDROCK_ERRORS.get(status, "InternalServerException")
    headers = {"x-amzn-errortype": kind, **error.headers}
    return JSONResponse({"message": error.message}, status_code=status, headers=headers)


def bedrock_frame(event: SseEvent) -> bytes:
    """An Anthropic stream event as a Bedrock `chunk` message."""
    if not isinstance(event.data, dict):
        raise ValueError("a Bedrock chunk holds a JSON event")
    return chunk_message(event.data)


def bedrock_stream_error(error: FakeError) -> bytes:
    """A mid-stream failure as Bedrock's `exception` message."""
    kind = _STREAM_EXCEPTIONS.get(error.type, "modelStreamErrorException")
    return exception_message(kind, error.message)
