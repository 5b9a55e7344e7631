"""Request spans are named by the route Starlette picks, from a table noted as routers are
included, so that naming one costs no walk of FastAPI's route tree."""

from __future__ import annotations

import re

import pytest
from fastapi import APIRouter, FastAPI, WebSocket
from fastapi.routing import iter_route_contexts
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.app import GatewayConfig, create_app
from api.request_spans import RouteTemplates, SpansWhileRecording
from chatd.settings import TemporalSettings


def _span_details_of(app: FastAPI) -> OpenTelemetryMiddleware:
    """The tracing middleware inside the app's key gates."""
    layer: ASGIApp = app.build_middleware_stack()
    while not isinstance(layer, OpenTelemetryMiddleware):
        layer = layer._inner  # type: ignore[attr-defined]
    return layer


def _concrete(template: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", template)


def test_every_route_of_the_gateway_names_its_spans() -> None:
    app = create_app(
        GatewayConfig(database_url="postgresql://unused", temporal=TemporalSettings(), console=True)
    )
    spans = _span_details_of(app)
    for context in iter_route_contexts(app.routes):
        path: str = context.path  # type: ignore[attr-defined]
        methods = sorted(getattr(context, "methods", None) or [""])
        scope = {"type": "http", "path": _concrete(path), "method": methods[0] or "GET"}
        name, attributes = spans.default_span_details(scope)
        assert attributes == {"http.route": path}, (path, name)
        assert name == (f"{scope['method']} {path}"), path


@pytest.fixture
def routes() -> RouteTemplates:
    app = FastAPI()
    routes = RouteTemplates(app)
    first, second = APIRouter(), APIRouter(prefix="/things")

    @first.get("/items/{item_id}")
    async def read_item(item_id: str) -> str:
        return item_id

    @first.get("/items/latest")
    async def latest() -> str:  # shadowed by the route above, as in Starlette
        return ""

    @second.post("/{thing_id}")
    async def make_thing(thing_id: str) -> str:
        return thing_id

    @second.delete("/{name}")
    async def drop_thing(name: str) -> str:
        return name

    @second.websocket("/{thing_id}/live")
    async def live(socket: WebSocket, thing_id: str) -> None:
        await socket.close()

    routes.include(first, prefix="/api")
    routes.include(second)
    return routes


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/api/items/7", ("GET /api/items/{item_id}", "/api/items/{item_id}")),
        ("GET", "/api/items/latest", ("GET /api/items/{item_id}", "/api/items/{item_id}")),
        ("POST", "/things/7", ("POST /things/{thing_id}", "/things/{thing_id}")),
        # The path and the method match the second route only: Starlette picks it.
        ("DELETE", "/things/7", ("DELETE /things/{name}", "/things/{name}")),
        # No route takes the method: the first route whose path matches (a 405).
        ("PUT", "/things/7", ("PUT /things/{thing_id}", "/things/{thing_id}")),
        ("GET", "/openapi.json", ("GET /openapi.json", "/openapi.json")),
        ("WHATEVER", "/api/items/7", ("HTTP /api/items/{item_id}", "/api/items/{item_id}")),
    ],
)
def test_a_request_is_named_by_the_route_starlette_picks(
    routes: RouteTemplates, method: str, path: str, expected: tuple[str, str]
) -> None:
    name, attributes = routes.span_details({"type": "http", "path": path, "method": method})
    assert (name, attributes) == (expected[0], {"http.route": expected[1]})


def test_a_websocket_is_named_by_its_route_alone(routes: RouteTemplates) -> None:
    scope = {"type": "websocket", "path": "/things/7/live"}
    assert routes.span_details(scope) == (
        "/things/{thing_id}/live",
        {"http.route": "/things/{thing_id}/live"},
    )


def test_a_path_no_route_takes_is_named_by_its_method(routes: RouteTemplates) -> None:
    assert routes.span_details({"type": "http", "path": "/nowhere", "method": "GET"}) == ("GET", {})


@pytest.mark.parametrize("on", [True, False])
async def test_requests_go_through_the_tracing_middleware_only_while_telemetry_records(
    on: bool,
) -> None:
    reached: list[str] = []

    def app_named(name: str) -> ASGIApp:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            reached.append(name)

        return app

    spans = SpansWhileRecording(app_named("traced"), app_named("plain"), on=lambda: on)
    for _ in range(2):
        await spans({"type": "http", "path": "/"}, _never_receive, _never_send)

    assert reached == ["traced" if on else "plain"] * 2


async def _never_receive() -> Message:
    raise AssertionError("not read")


async def _never_send(message: Message) -> None:
    raise AssertionError("not sent")
