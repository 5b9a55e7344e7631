"""The browser console at `/console`: static ES modules that speak only the public API.

The assets are package data (`static/`), read once when the gateway starts and served from
memory under a strict Content-Security-Policy: no inline script or style, nothing from
another origin, no framing. The console's only server-side input is `config.json`, what an
operator chose to show (the Temporal UI's address, the MCP servers, the model aliases):
no key, no chat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, RedirectResponse, Response

from api.errors import ApiError

__all__ = ["CONSOLE_PATH", "SECURITY_HEADERS", "ConsoleConfig", "console_router"]

CONSOLE_PATH = "/console"

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
"""On every console response (model output is untrusted: a script it smuggles in can't run)."""

_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


@dataclass
class ConsoleConfig:
    """What the console shows besides the API: set by the operator, public to any visitor."""

    temporal_ui_url: str | None = None
    """Where a turn's timeline links its workflow run (the dev banner's UI address)."""
    namespace: str = "default"
    mcp_servers: list[str] = field(default_factory=list)
    model_aliases: dict[str, str] = field(default_factory=dict)
    """Alias -> `provider/name`, offered by the new-chat form."""


def _assets() -> dict[str, tuple[bytes, str]]:
    """Every static file by name, with its media type (read once: nothing else is served)."""
    folder = resources.files(__package__).joinpath("static")
    assets: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _MEDIA_TYPES:
            assets[entry.name] = (entry.read_bytes(), _MEDIA_TYPES[suffix])
    return assets


def _asset(content: bytes, media_type: str) -> Response:
    return Response(content, media_type=media_type, headers=SECURITY_HEADERS)


def console_router(config: ConsoleConfig) -> APIRouter:
    """The console's routes, under `/console` (kept out of the OpenAPI document)."""
    assets = _assets()
    index = assets["index.html"]
    public: dict[str, Any] = {
        "temporal_ui_url": (config.temporal_ui_url or "").rstrip("/") or None,
        "namespace": config.namespace,
        "mcp_servers": config.mcp_servers,
        "model_aliases": config.model_aliases,
    }
    router = APIRouter(prefix=CONSOLE_PATH, include_in_schema=False)

    @router.api_route("", methods=["GET", "HEAD"])
    async def console_root() -> Response:
        return RedirectResponse(f"{CONSOLE_PATH}/", headers=SECURITY_HEADERS)

    @router.api_route("/", methods=["GET", "HEAD"])
    async def console_index() -> Response:
        return _asset(*index)

    @router.get("/config.json")
    async def console_config() -> Response:
        return JSONResponse(public, headers=SECURITY_HEADERS)

    @router.get("/static/{name}")
    async def console_static(name: str) -> Response:
        if name not in assets:
            raise ApiError(404, "not_found", f"no console file {name!r}")
        return _asset(*assets[name])

    return router
