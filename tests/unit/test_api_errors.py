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


ANSWERS: dict[str, tuple[RPCError, int, str]] = {
    "refused": (
        RPCError(
            "search attribute ChatModel value size 5012 exceeds size limit 2048",
            RPCStatusCode.INVALID_ARGUMENT,
            b"",
        ),
        400,
        "invalid_request",
    ),
    "out-of-range": (RPCError("too far", RPCStatusCode.OUT_OF_RANGE, b""), 400, "invalid_request"),
    "not-found": (RPCError("no such run", RPCStatusCode.NOT_FOUND, b""), 500, "temporal_error"),
    "denied": (RPCError("bad cert", RPCStatusCode.PERMISSION_DENIED, b""), 500, "temporal_error"),
    "precondition": (
        RPCError("closed", RPCStatusCode.FAILED_PRECONDITION, b""),
        500,
        "temporal_error",
    ),
}


@pytest.mark.parametrize("name", sorted(ANSWERS))
async def test_a_request_temporal_answers_is_not_reported_as_an_outage(name: str) -> None:
    """Temporal refusing a request is not Temporal down: a 503 would have clients retry the
    same refused request forever."""
    error, status, code = ANSWERS[name]
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/fail")
    async def fail() -> None:
        raise error

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.get("/fail")
    assert response.status_code == status
    assert response.headers["x-should-retry"] == "false"
    body = response.json()["error"]
    assert body["code"] == code
    assert error.message in body["message"]
    assert body["detail"] == {"temporal_status": error.status.name}


@pytest.mark.parametrize(
    "status", [RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.RESOURCE_EXHAUSTED]
)
async def test_an_overloaded_temporal_is_an_outage(status: RPCStatusCode) -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/fail")
    async def fail() -> None:
        raise RPCError("busy", status, b"")

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.get("/fail")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "temporal_unavailable"


async def test_an_update_whose_workflow_task_failed_is_retried_later() -> None:
    """A worker too loaded to finish the update's workflow task (its deadlock detector, a
    task timeout) fails it; Temporal retries the task, so the client may retry the request."""
    app = FastAPI()
    install_error_handlers(app)
    message = "Unable to perform workflow execution update due to unexpected workflow task failure."

    @app.get("/fail")
    async def fail() -> None:
        raise RPCError(message, RPCStatusCode.FAILED_PRECONDITION, b"")

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.get("/fail")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "worker_unavailable"


async def test_a_405_says_which_methods_are_allowed() -> None:
    """RFC 9110: a 405 carries `Allow`; the error shape must not drop the header."""
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/thing")
    async def read() -> None:
        return None

    @app.delete("/thing")
    async def drop() -> None:
        return None

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.post("/thing")
    assert response.status_code == 405
    assert sorted(response.headers["allow"].split(", ")) == ["DELETE", "GET"]
    assert response.json()["error"]["code"] == "method_not_allowed"
