"""One OpenTelemetry span per gateway request, named by its route template.

OpenTelemetry's ASGI middleware makes the spans and the `http.server` metrics; the route
comes from a table of the app's compiled route paths, filled as routers are included. The
FastAPI instrumentor would find it by walking FastAPI's route tree on every request, which
builds every route's dependencies and fields on an app's first request.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.semconv.attributes.http_attributes import HTTP_ROUTE
from opentelemetry.util.http import parse_excluded_urls, sanitize_method
from starlette.routing import BaseRoute, Route, WebSocketRoute, compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from chatd.telemetry import recording

__all__ = ["RouteTemplates", "SpansWhileRecording", "install_request_spans"]

UNTRACED_PATHS = parse_excluded_urls("healthz,readyz")
"""Probes: a span per health check would drown the requests."""


@dataclass(frozen=True)
class _Template:
    regex: re.Pattern[str]
    path: str
    methods: frozenset[str]
    """Empty for a WebSocket route."""


class RouteTemplates:
    """The app's route paths in the order Starlette matches them: the app's own (FastAPI's
    docs), then each included router's."""

    def __init__(self, app: FastAPI) -> None:
        self._app = app
        self._templates: list[_Template] = []
        self._note(app.routes)

    def include(self, router: APIRouter, prefix: str = "", **options: Any) -> None:
        """`app.include_router`, and its routes' templates noted."""
        self._app.include_router(router, prefix=prefix, **options)
        self._note(router.routes, prefix)

    def _note(self, routes: list[BaseRoute], prefix: str = "") -> None:
        for route in routes:
            if isinstance(route, Route | WebSocketRoute):
                path = prefix + route.path
                methods = frozenset(getattr(route, "methods", None) or ())
                self._templates.append(_Template(compile_path(path)[0], path, methods))

    def route_of(self, scope: Scope) -> str | None:
        """The template of the route Starlette will pick for this request, if any: the
        first whose path and method match, else the first whose path does."""
        path, method = scope.get("path", ""), scope.get("method")
        partial = None
        for template in self._templates:
            if template.regex.match(path):
                if method is None or not template.methods or method in template.methods:
                    return template.path
                partial = partial or template.path
        return partial

    def span_details(self, scope: Scope) -> tuple[str, dict[str, str]]:
        """Span name and attributes as OpenTelemetry's conventions have them:
        `METHOD /route/{param}` with `http.route`; a WebSocket's by its route alone."""
        route = self.route_of(scope)
        method = ""
        if scope["type"] == "http":
            method = sanitize_method(str(scope.get("method", "")).strip())
            method = "HTTP" if method == "_OTHER" else method
        if route is None:
            return method or scope["type"], {}
        return (f"{method} {route}" if method else route), {HTTP_ROUTE: route}


def install_request_spans(app: FastAPI, routes: RouteTemplates) -> None:
    """Trace every request but the probes, around all of the app's middleware (its error
    handlers' responses included); one span per request, not one per ASGI message (an SSE
    stream sends thousands). Only while telemetry is recorded (`SpansWhileRecording`)."""
    build = app.build_middleware_stack

    def build_traced() -> ASGIApp:
        inner = build()
        traced = OpenTelemetryMiddleware(
            inner,
            excluded_urls=UNTRACED_PATHS,
            default_span_details=routes.span_details,
            exclude_spans=["receive", "send"],
        )
        return SpansWhileRecording(traced, inner)

    app.build_middleware_stack = build_traced  # type: ignore[method-assign]


class SpansWhileRecording:
    """Sends a request through the tracing middleware only while an OpenTelemetry provider
    records (`chatd.telemetry.recording`, asked per request: a provider may be installed
    after the app is built). Without one its spans and metrics are no-ops, but the
    middleware's own work, per request and per message of a stream, is not."""

    def __init__(self, traced: ASGIApp, plain: ASGIApp, on: Callable[[], bool] = recording) -> None:
        self._inner = traced
        self._plain = plain
        self._on = on

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._inner if self._on() else self._plain
        await app(scope, receive, send)
