"""The JSON error shape `{"error": {"code", "message", "detail"}}` for every failure."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError

__all__ = ["ERROR_RESPONSES", "ApiError", "ErrorBody", "install_error_handlers"]

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
        503: "Temporal or Postgres unreachable, or no worker took the message",
    }.items()
}
"""Documented on every API route so the OpenAPI document says what errors look like."""


class ApiError(Exception):
    """An error answered with `status` and the error shape."""

    def __init__(
        self, status: int, code: str, message: str, detail: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail or {}


def error_response(
    status: int, code: str, message: str, detail: dict[str, Any] | None = None
) -> JSONResponse:
    """A JSONResponse with the error shape; 409s tell generated clients not to retry."""
    headers = {"x-should-retry": "false"} if status == 409 else None
    body = {"error": {"code": code, "message": message, "detail": detail or {}}}
    return JSONResponse(body, status_code=status, headers=headers)


def _validation_detail(err: RequestValidationError) -> dict[str, Any]:
    return {
        "errors": [
            {"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", ""))}
            for e in err.errors()
        ]
    }


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception to the error shape; infrastructure outages are 503, never 500."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, err: ApiError) -> JSONResponse:
        return error_response(err.status, err.code, err.message, err.detail)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        return error_response(400, "invalid_request", "request is invalid", _validation_detail(err))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code, "http_error")
        return error_response(err.status_code, code, str(err.detail))

    @app.exception_handler(RPCError)
    async def temporal_down(_: Request, err: RPCError) -> JSONResponse:
        log.warning("temporal error: %s", err)
        return error_response(503, "temporal_unavailable", "Temporal is unreachable")

    @app.exception_handler(WorkflowUpdateRPCTimeoutOrCancelledError)
    async def update_timed_out(_: Request, err: Exception) -> JSONResponse:
        log.warning("temporal update timed out: %s", err)
        return error_response(503, "worker_unavailable", "no worker answered in time; retry")

    @app.exception_handler(asyncpg.DataError)
    async def unstorable(_: Request, err: Exception) -> JSONResponse:
        return error_response(
            400, "invalid_request", f"the request holds a value the store can't keep: {err}"
        )

    @app.exception_handler(asyncpg.PostgresConnectionError)
    @app.exception_handler(asyncpg.CannotConnectNowError)  # starting up
    @app.exception_handler(asyncpg.AdminShutdownError)
    @app.exception_handler(asyncpg.CrashShutdownError)
    async def postgres_down(_: Request, err: Exception) -> JSONResponse:
        log.warning("postgres error: %s", err)
        return error_response(503, "database_unavailable", "the database is unreachable")

    @app.exception_handler(OSError)
    async def connection_down(_: Request, err: OSError) -> JSONResponse:
        log.warning("connection error: %s", err)
        return error_response(503, "unavailable", "a backing service is unreachable")
