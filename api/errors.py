"""The JSON error shape `{"error": {"code", "message", "detail"}}` for every failure."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

__all__ = [
    "ERROR_RESPONSES",
    "OPENAI_ERROR_RESPONSES",
    "OPENAI_PREFIX",
    "ApiError",
    "ErrorBody",
    "OpenAIErrorBody",
    "as_api_error",
    "error_response",
    "install_error_handlers",
    "invalid_request",
    "openai_error_body",
    "update_dropped",
]

log = logging.getLogger("chatd.api")


class ErrorDetail(BaseModel):
    """What went wrong."""

    code: str
    """A stable snake_case code, e.g. `chat_not_found`, `chat_busy`, `invalid_request`."""
    message: str
    detail: dict[str, Any] = Field(default_factory=dict)


class ErrorBody(BaseModel):
    """Every error response."""

    error: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        400: "Malformed or invalid input",
        401: "Missing or invalid API key",
        404: "Unknown, or not yours",
        409: "Wrong state (the current status is in `detail`)",
        410: "Stream cursor expired",
        413: "Request body too large",
        429: "Over a quota (`Retry-After` says when to retry)",
        503: "Temporal or Postgres unreachable, or no worker took the message",
    }.items()
}
"""Documented on every API route so the OpenAPI document says what errors look like."""


class OpenAIErrorDetail(BaseModel):
    """What went wrong, as OpenAI's API says it."""

    message: str
    type: str
    """`invalid_request_error`, `authentication_error`, `rate_limit_error` or `server_error`."""
    param: str | None
    """The request field at fault, if one is."""
    code: str | None


class OpenAIErrorBody(BaseModel):
    """Every error of the Open Responses routes (`/v1`)."""

    error: OpenAIErrorDetail


OPENAI_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": OpenAIErrorBody, "description": description}
    for status, description in {
        400: "Malformed, invalid or unsupported input (`param` names the field)",
        401: "Missing or invalid API key",
        404: "Unknown, deleted, or not yours",
        409: "The previous response is still in progress",
        413: "Request body too large",
        429: "Over a quota (`Retry-After` says when to retry)",
        503: "Temporal or Postgres unreachable",
    }.items()
}
"""Documented on every `/v1` route."""


class ApiError(Exception):
    """An error answered with `status` and the error shape."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        detail: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        pause_s: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail or {}
        self.headers = headers
        self.pause_s = pause_s
        """How long to wait before answering (a refusal by quota, see `api.quotas`)."""


def error_response(
    status: int,
    code: str,
    message: str,
    detail: dict[str, Any] | None = None,
    *,
    retry: bool | None = None,
    headers: dict[str, str] | None = None,
    path: str = "",
) -> JSONResponse:
    """A JSONResponse with the error shape (OpenAI's envelope under `/v1`, see
    `openai_error_body`); 409s (and `retry=False`) tell generated clients not to retry."""
    headers = dict(headers or {})
    if status == 409 or retry is False:
        headers["x-should-retry"] = "false"
    body: dict[str, Any]
    if path.startswith(OPENAI_PREFIX):
        body = openai_error_body(status, code, message, detail or {})
    else:
        body = {"error": {"code": code, "message": message, "detail": detail or {}}}
    return JSONResponse(body, status_code=status, headers=headers or None)


OPENAI_PREFIX = "/v1/"
"""The Open Responses routes, whose errors take OpenAI's envelope."""
_OPENAI_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


def openai_error_body(
    status: int, code: str, message: str, detail: dict[str, Any]
) -> dict[str, Any]:
    """`{"error": {"message", "type", "param", "code"}}`: the type from the status, `param`
    from the detail's (or the first invalid field's) name."""
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    param = detail.get("param")
    if param is None and detail.get("errors"):
        param = ".".join(detail["errors"][0]["loc"][1:]) or None
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def invalid_request(errors: Sequence[Any]) -> ApiError:
    """The 400 for a body that failed validation: `request is invalid: <where>: <what>` for
    the first error, so a client (or a person reading a log) learns which field to fix
    without opening `detail`. Each error's `loc` starts with where the value came from
    (`body`), as FastAPI's do."""
    detail = {
        "errors": [
            {"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", ""))}
            for e in errors
        ]
    }
    if not errors:
        return ApiError(400, "invalid_request", "request is invalid", detail)
    first = errors[0]
    loc = first.get("loc", ())[1:] if first.get("type") != "json_invalid" else ()
    where = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc).lstrip(".")
    what = str(first.get("msg", "")).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    message = f"request is invalid: {where + ': ' if where else ''}{what}{more}"
    return ApiError(400, "invalid_request", message, detail)


_TEMPORAL_OUTAGES = frozenset(
    {
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.ABORTED,
        RPCStatusCode.CANCELLED,
    }
)
"""Statuses of a Temporal that is down, overloaded or interrupted: the same call can succeed
later. Any other status is an answer, and asking again gets the same one."""
_TEMPORAL_REFUSALS = frozenset({RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.OUT_OF_RANGE})
_WORKFLOW_TASK_FAILED = "workflow task failure"
"""In Temporal's answer to an update whose workflow task failed (`WorkflowNotReady`, a
FAILED_PRECONDITION: "... due to unexpected workflow task failure"). The task is retried."""


def update_dropped(err: RPCError) -> bool:
    """Temporal dropped the update: the workflow task that carried it failed on the server
    (a signal landing while the task closed the run, a command it refused). The task is
    retried without the update, so the workflow never saw it; the same call again is a new
    update."""
    return err.status is RPCStatusCode.FAILED_PRECONDITION and _WORKFLOW_TASK_FAILED in err.message


def as_api_error(err: Exception) -> ApiError:
    """What the client is told of an exception raised while serving it (for the HTTP
    handlers and the WebSocket alike): an outage of a backing service is a 503, never a
    500. An exception of no known kind is re-raised."""
    if isinstance(err, ApiError):
        return err
    if isinstance(err, RPCError):
        return _temporal_error(err)
    if isinstance(err, WorkflowUpdateRPCTimeoutOrCancelledError):
        log.warning("temporal update timed out: %s", err)
        return ApiError(503, "worker_unavailable", "no worker answered in time; retry")
    if isinstance(err, asyncpg.DataError):
        message = f"the request holds a value the store can't keep: {err}"
        return ApiError(400, "invalid_request", message)
    if isinstance(err, _POSTGRES_DOWN):
        log.warning("postgres error: %s", err)
        return ApiError(503, "database_unavailable", "the database is unreachable")
    if isinstance(err, OSError):
        log.warning("connection error: %s", err)
        return ApiError(503, "unavailable", "a backing service is unreachable")
    raise err


_POSTGRES_DOWN = (
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,  # starting up
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
)
_NO_RETRY = {"x-should-retry": "false"}


def _temporal_error(err: RPCError) -> ApiError:
    """503 only for an outage. A request Temporal refused is a 400 (every client value that
    reaches Temporal is validated first, so one that still fails its limits is a value we
    let through: the client can change it); any other answer is our bug, a 500. Neither
    tells a client to retry. An update whose workflow task failed (a worker too loaded to
    finish it in time, the task to be retried) is a worker unavailable: a 503 to retry."""
    detail = {"temporal_status": err.status.name}
    if err.status in _TEMPORAL_OUTAGES:
        log.warning("temporal unavailable: %s", err)
        return ApiError(503, "temporal_unavailable", "Temporal is unreachable", detail)
    if update_dropped(err):
        log.warning("an update's workflow task failed: %s", err)
        message = "no worker completed the request's workflow task; retry"
        return ApiError(503, "worker_unavailable", message, detail, headers={"Retry-After": "1"})
    if err.status in _TEMPORAL_REFUSALS:
        log.warning("temporal refused a request: %s", err)
        message = f"Temporal refused the request: {err.message}"
        return ApiError(400, "invalid_request", message, detail, headers=_NO_RETRY)
    log.error("temporal answered %s: %s", err.status.name, err)
    message = f"Temporal answered {err.status.name}: {err.message}"
    return ApiError(500, "temporal_error", message, detail, headers=_NO_RETRY)


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at this path, for a 405's `Allow` (RFC 9110 requires
    it). Starlette's own header names the first matching route's methods only, and a path
    here is often served by one route per method."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": ""})
        if match is not Match.NONE and isinstance(route, Route):
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


_HTTP_ERROR_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


async def _api_error(request: Request, err: ApiError) -> JSONResponse:
    if err.pause_s:
        await asyncio.sleep(err.pause_s)
    return error_response(
        err.status, err.code, err.message, err.detail, headers=err.headers, path=request.url.path
    )


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception to the error shape; infrastructure outages are 503, never 500."""

    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        return await _api_error(request, invalid_request(err.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_ERROR_CODES.get(err.status_code, "http_error")
        headers = dict(err.headers or {})
        if err.status_code == 405:
            headers["Allow"] = _allowed_methods(request)
        return error_response(
            err.status_code, code, str(err.detail), headers=headers, path=request.url.path
        )

    for kind in (
        RPCError,
        WorkflowUpdateRPCTimeoutOrCancelledError,
        asyncpg.DataError,
        *_POSTGRES_DOWN,
        OSError,
    ):
        app.add_exception_handler(kind, _mapped)


async def _mapped(request: Request, err: Exception) -> JSONResponse:
    return await _api_error(request, as_api_error(err))
