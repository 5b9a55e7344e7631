"""Provider error classification tables: SDK exceptions -> ModelError kind/retryable/hints."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from chatd.providers.anthropic import classify_anthropic_error
from chatd.providers.errors import parse_retry_after_ms
from chatd.providers.openai_chat import classify_openai_error, classify_openai_payload

REQUEST = httpx2.Request("POST", "https://api.example.test/v1/messages")
OUR_WORDS = ("auth", "config")
"""Kinds whose message is ours, never the provider's text."""


def response(status: int, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(status, headers=headers or {}, request=REQUEST)


def anthropic_body(error_type: str, message: str = "boom") -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


# --- Anthropic -------------------------------------------------------------------------------

ANTHROPIC_STATUS_CASES = [
    (
        anthropic.BadRequestError,
        400,
        "invalid_request_error",
        "bad field",
        "invalid_request",
        False,
    ),
    (
        anthropic.BadRequestError,
        400,
        "invalid_request_error",
        "prompt is too long: 210000 tokens > 200000 maximum",
        "context_exceeded",
        False,
    ),
    (anthropic.AuthenticationError, 401, "authentication_error", "bad key", "auth", False),
    (anthropic.PermissionDeniedError, 403, "permission_error", "nope", "auth", False),
    (anthropic.NotFoundError, 404, "not_found_error", "model: claude-x", "config", False),
    (anthropic.RequestTimeoutError, 408, "timeout_error", "slow", "timeout", True),
    (anthropic.ConflictError, 409, "api_error", "conflict", "generic", True),
    (anthropic.RateLimitError, 429, "rate_limit_error", "slow down", "rate_limit", True),
    (anthropic.InternalServerError, 500, "api_error", "oops", "generic", True),
    (anthropic.OverloadedError, 529, "overloaded_error", "Overloaded", "overloaded", True),
]


@pytest.mark.parametrize(
    ("cls", "status", "error_type", "message", "kind", "retryable"), ANTHROPIC_STATUS_CASES
)
def test_anthropic_status_errors(
    cls: type[anthropic.APIStatusError],
    status: int,
    error_type: str,
    message: str,
    kind: str,
    retryable: bool,
) -> None:
    exc = cls("Error code", response=response(status), body=anthropic_body(error_type, message))
    error = classify_anthropic_error(exc)
    assert (error.kind, error.retryable, error.status_code) == (kind, retryable, status)
    assert error.provider == "anthropic"
    assert error.message == message or (kind in OUR_WORDS and message not in error.message)
    assert error.detail["type"] == error_type


def test_anthropic_retry_after_seconds() -> None:
    exc = anthropic.RateLimitError(
        "rate limited",
        response=response(429, {"retry-after": "3", "request-id": "req_1"}),
        body=anthropic_body("rate_limit_error"),
    )
    error = classify_anthropic_error(exc, provider="demo")
    assert error.retry_after_ms == 3000
    assert error.provider == "demo"
    assert error.detail["request_id"] == "req_1"


@pytest.mark.parametrize(
    ("error_type", "kind", "retryable"),
    [
        ("overloaded_error", "overloaded", True),
        ("api_error", "generic", True),
        ("rate_limit_error", "rate_limit", True),
        ("invalid_request_error", "invalid_request", False),
        ("something_new", "generic", False),
    ],
)
def test_anthropic_mid_stream_error_events(error_type: str, kind: str, retryable: bool) -> None:
    # What the SDK raises for an `event: error` inside a 200 stream.
    body = anthropic_body(error_type, "stream broke")
    exc = anthropic.APIStatusError(str(body), response=response(200), body=body)
    error = classify_anthropic_error(exc)
    assert (error.kind, error.retryable) == (kind, retryable)
    assert error.status_code is None
    assert error.message == "stream broke"


def test_anthropic_connection_errors() -> None:
    timeout = classify_anthropic_error(anthropic.APITimeoutError(request=REQUEST))
    assert (timeout.kind, timeout.retryable) == ("timeout", True)
    connection = classify_anthropic_error(anthropic.APIConnectionError(request=REQUEST))
    assert (connection.kind, connection.retryable) == ("generic", True)
    raw = classify_anthropic_error(httpx2.RemoteProtocolError("peer closed", request=REQUEST))
    assert (raw.kind, raw.retryable) == ("generic", True)
    read_timeout = classify_anthropic_error(httpx2.ReadTimeout("read", request=REQUEST))
    assert (read_timeout.kind, read_timeout.retryable) == ("timeout", True)


# --- OpenAI ----------------------------------------------------------------------------------


def openai_body(code: str | None, error_type: str, message: str = "boom") -> dict[str, Any]:
    # The SDK unwraps `{"error": {...}}` before constructing the exception.
    return {"message": message, "type": error_type, "code": code, "param": None}


OPENAI_STATUS_CASES = [
    (openai.BadRequestError, 400, None, "invalid_request_error", "invalid_request", False),
    (
        openai.BadRequestError,
        400,
        "context_length_exceeded",
        "invalid_request_error",
        "context_exceeded",
        False,
    ),
    (openai.AuthenticationError, 401, "invalid_api_key", "invalid_request_error", "auth", False),
    (openai.PermissionDeniedError, 403, None, "invalid_request_error", "auth", False),
    (openai.NotFoundError, 404, "model_not_found", "invalid_request_error", "config", False),
    (openai.ConflictError, 409, None, "server_error", "generic", True),
    (openai.RateLimitError, 429, "rate_limit_exceeded", "requests", "rate_limit", True),
    (openai.RateLimitError, 429, "insufficient_quota", "insufficient_quota", "config", False),
    (openai.InternalServerError, 500, None, "server_error", "generic", True),
    (openai.InternalServerError, 503, None, "server_error", "overloaded", True),
    (openai.APIStatusError, 408, None, "timeout", "timeout", True),
]


@pytest.mark.parametrize(
    ("cls", "status", "code", "error_type", "kind", "retryable"), OPENAI_STATUS_CASES
)
def test_openai_status_errors(
    cls: type[openai.APIStatusError],
    status: int,
    code: str | None,
    error_type: str,
    kind: str,
    retryable: bool,
) -> None:
    exc = cls("Error code", response=response(status), body=openai_body(code, error_type))
    error = classify_openai_error(exc)
    assert (error.kind, error.retryable, error.status_code) == (kind, retryable, status)
    assert error.provider == "openai"
    assert error.message == "boom" or (kind in OUR_WORDS and "boom" not in error.message)
    assert error.detail.get("code") == code


def test_openai_wrapped_body_and_retry_after_ms() -> None:
    body = {"error": openai_body("context_length_exceeded", "invalid_request_error")}
    exc = openai.BadRequestError(
        "Error code: 400", response=response(400, {"retry-after-ms": "250"}), body=body
    )
    error = classify_openai_error(exc)
    assert error.kind == "context_exceeded"
    assert error.retry_after_ms == 250


def test_openai_mid_stream_error() -> None:
    exc = openai.APIError(
        "The server had an error", REQUEST, body=openai_body(None, "server_error")
    )
    error = classify_openai_error(exc)
    assert (error.kind, error.retryable, error.status_code) == ("generic", True, None)


def test_openai_connection_errors() -> None:
    timeout = classify_openai_error(openai.APITimeoutError(request=REQUEST))
    assert (timeout.kind, timeout.retryable) == ("timeout", True)
    connection = classify_openai_error(openai.APIConnectionError(request=REQUEST))
    assert (connection.kind, connection.retryable) == ("generic", True)


@pytest.mark.parametrize(
    ("code", "kind", "retryable"),
    [
        ("server_error", "generic", True),
        ("rate_limit_exceeded", "rate_limit", True),
        ("context_length_exceeded", "context_exceeded", False),
        ("invalid_prompt", "generic", False),
        (None, "generic", False),
    ],
)
def test_openai_stream_payloads(code: str | None, kind: str, retryable: bool) -> None:
    error = classify_openai_payload(code, "failed", provider="openai")
    assert (error.kind, error.retryable) == (kind, retryable)


# --- our own words --------------------------------------------------------------------------

OPENAI_401 = (
    "Incorrect API key provided: sk-proj-****************************abcd. You can find your"
    " API key at https://platform.openai.com/account/api-keys."
)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            openai.AuthenticationError(
                "Error code: 401",
                response=response(401),
                body=openai_body("invalid_api_key", "invalid_request_error", OPENAI_401),
            ),
            "the openai API key was refused (401): check the worker's OPENAI_API_KEY",
        ),
        (
            openai.RateLimitError(
                "Error code: 429",
                response=response(429),
                body=openai_body("insufficient_quota", "insufficient_quota", "org-Xyz over quota"),
            ),
            "the openai account has no credit or quota left (429): check its billing",
        ),
        (
            openai.NotFoundError(
                "Error code: 404",
                response=response(404),
                body=openai_body("model_not_found", "invalid_request_error", "org-Xyz: gpt-x"),
            ),
            "the openai API does not know this model or endpoint (404): check the chat's model"
            " and the worker's OPENAI_BASE_URL",
        ),
    ],
    ids=["401", "insufficient_quota", "404"],
)
def test_openai_auth_and_config_errors_say_what_is_wrong_in_our_words(
    exc: openai.APIStatusError, expected: str
) -> None:
    error = classify_openai_error(exc)
    assert error.message == expected
    assert error.status_code == exc.status_code and error.provider == "openai"


def test_anthropic_auth_and_config_errors_say_what_is_wrong_in_our_words() -> None:
    key = anthropic.AuthenticationError(
        "Error code: 401",
        response=response(401),
        body=anthropic_body("authentication_error", "invalid x-api-key sk-ant-…Qw"),
    )
    assert classify_anthropic_error(key).message == (
        "the anthropic API key was refused (401): check the worker's ANTHROPIC_API_KEY"
    )
    denied = anthropic.PermissionDeniedError(
        "Error code: 403", response=response(403), body=anthropic_body("permission_error", "org")
    )
    assert classify_anthropic_error(denied).message == (
        "the anthropic API key may not make this request (403): check its permissions"
    )
    billing = anthropic_body("billing_error", "workspace wrk_123 has no credit")
    in_stream = anthropic.APIStatusError(str(billing), response=response(200), body=billing)
    error = classify_anthropic_error(in_stream, provider="demo")
    assert error.message == "the demo account has no credit or quota left: check its billing"
    assert (error.kind, error.status_code, error.detail["type"]) == (
        "config",
        None,
        "billing_error",
    )


def test_openai_stream_payloads_of_auth_kinds_are_described_in_our_words() -> None:
    error = classify_openai_payload("invalid_api_key", OPENAI_401, provider="openai")
    assert error.kind == "auth" and "sk-proj" not in error.message
    assert "OPENAI_API_KEY" in error.message


def test_transport_errors_do_not_name_hosts() -> None:
    internal = "[Errno -2] Name or service not known: llm-proxy.corp.internal:8443"
    raw = classify_anthropic_error(httpx2.ConnectError(internal, request=REQUEST))
    assert raw.message == "the anthropic API could not be reached (ConnectError)"
    try:
        raise openai.APIConnectionError(request=REQUEST) from httpx2.ConnectError(internal)
    except openai.APIConnectionError as exc:
        wrapped = classify_openai_error(exc)
    assert wrapped.message == "the openai API could not be reached (ConnectError)"
    slow = classify_openai_error(openai.APITimeoutError(request=REQUEST))
    assert slow.message == "the openai API did not answer in time (APITimeoutError)"
    assert "corp.internal" not in raw.model_dump_json() + wrapped.model_dump_json()


# --- retry-after -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after-ms": "1500"}, 1500),
        ({"retry-after-ms": "12.3"}, 13),
        ({"retry-after-ms": "200", "retry-after": "9"}, 200),
        ({"retry-after": "3"}, 3000),
        ({"retry-after": "0.5"}, 500),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, 10_000),
        ({"retry-after": "Wed, 21 Oct 2015 07:27:00 GMT"}, 0),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: int | None) -> None:
    now = datetime(2015, 10, 21, 7, 28, 0, tzinfo=UTC)
    assert parse_retry_after_ms(httpx2.Headers(headers), now=now) == expected
