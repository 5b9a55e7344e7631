"""Infrastructure failures reach clients as 503 with the error shape, never as a 500."""

from __future__ import annotations

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from api.errors import install_error_handlers

FAILURES: dict[str, tuple[BaseException, str]] = {
    "temporal-down": (
        RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b""),
        "temporal_unavailable",
    ),
    "update-timed-out": (WorkflowUpdateRPCTimeoutOrCancelledError(), "worker_unavailable"),
    "postgres-gone": (asyncpg.ConnectionDoesNotExistError("closed"), "database_unavailable"),
    "postgres-starting": (asyncpg.CannotConnectNowError("starting up"), "database_unavailable"),
    "postgres-stopping": (asyncpg.AdminShutdownError("shutting down"), "database_unavailable"),
    "socket-down": (ConnectionRefusedError("refused"), "unavailable"),
}


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/fail/{name}")
    async def fail(name: str) -> None:
        raise FAILURES[name][0]

    return app


@pytest.mark.parametrize("name", sorted(FAILURES))
async def test_infrastructure_failure_is_503_with_error_shape(name: str) -> None:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.get(f"/fail/{name}")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == FAILURES[name][1]
    assert error["message"]
