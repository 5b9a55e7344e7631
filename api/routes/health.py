"""Liveness and readiness (no auth)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.state import state_of

__all__ = ["router"]

router = APIRouter(tags=["health"])
_CHECK_TIMEOUT_S = 3.0


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={503: {"description": "Temporal or Postgres unreachable"}},
)
async def readyz(request: Request) -> JSONResponse:
    """Temporal and Postgres are reachable."""
    state = state_of(request)
    checks: dict[str, str] = {}
    try:
        await asyncio.wait_for(state.pool.fetchval("SELECT 1"), _CHECK_TIMEOUT_S)
        checks["postgres"] = "ok"
    except Exception as err:  # any failure means not ready
        checks["postgres"] = f"unavailable: {type(err).__name__}"
    try:
        await asyncio.wait_for(state.temporal.service_client.check_health(), _CHECK_TIMEOUT_S)
        checks["temporal"] = "ok"
    except Exception as err:  # any failure means not ready
        checks["temporal"] = f"unavailable: {type(err).__name__}"
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
