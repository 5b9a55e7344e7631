"""The gateway app factory."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI

from api.auth import install_key_gate
from api.console import ConsoleConfig, console_router
from api.errors import OPENAI_PREFIX, install_error_handlers
from api.limits import BodySizeLimit
from api.open_responses import conversations, model_catalog
from api.open_responses import routes as open_responses
from api.open_responses import sockets as open_responses_sockets
from api.open_responses.model_names import model_aliases
from api.openapi import openapi_document
from api.request_spans import RouteTemplates, install_request_spans
from api.routes import (
    approvals,
    budget,
    chats,
    children,
    forks,
    health,
    messages,
    stream,
    turn_control,
    usage,
    watch,
    webhooks,
)
from api.state import GatewayState
from chatd.mcp.config import CONFIG_ENV, load_mcp_server_names
from chatd.prices import Prices, load_prices
from chatd.settings import TemporalSettings, console_enabled, temporal_ui_url
from chatd.store.db import connect_pool
from chatd.store.events import NOTIFY_CHANNEL
from chatd.store.listen_hub import ListenHub
from chatd.store.recent_events import RecentEvents
from chatd.temporal_client import connect_temporal

__all__ = ["GatewayConfig", "create_app"]

API_PREFIX = "/api/v1"
HAND_OVER_DRAIN_S = 10.0
"""How long a stopping gateway lets its background hand-overs finish (the reconciler hands
over what is left)."""


@dataclass
class GatewayConfig:
    """What the gateway connects to."""

    database_url: str
    temporal: TemporalSettings
    generate_titles: bool = True
    """Ask the turn that starts an untitled chat to name it (as the workers are set up)."""
    mcp_servers: list[str] = field(
        default_factory=lambda: load_mcp_server_names(os.environ.get(CONFIG_ENV))
    )
    """The operator's MCP server names (`CHATD_MCP_CONFIG`, as the workers are set up)."""
    console: bool = field(default_factory=console_enabled)
    """Serve the browser console at `/console` (`CHATD_CONSOLE`; on in `chatd dev`)."""
    temporal_ui_url: str | None = field(default_factory=temporal_ui_url)
    """The Temporal UI the console links turns to (`CHATD_TEMPORAL_UI_URL`)."""
    prices: Prices = field(default_factory=load_prices)
    """What models cost (`CHATD_PRICES`, as the workers are set up): a bad file stops the
    start."""


def create_app(config: GatewayConfig) -> FastAPI:
    """The FastAPI app; connections open in its lifespan."""
    aliases = model_aliases()  # a malformed CHATD_MODEL_ALIASES stops the start here

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await connect_pool(config.database_url)
        stream_pool = await connect_pool(config.database_url, min_size=1, max_size=10)
        hub = ListenHub(
            config.database_url,
            NOTIFY_CHANNEL,
            wake_all_on_reconnect=True,
            recent=RecentEvents(),
        )
        await hub.start()
        client = await connect_temporal(config.temporal)
        app.state.gateway = GatewayState(
            pool=pool,
            stream_pool=stream_pool,
            temporal=client,
            task_queue=config.temporal.task_queue,
            hub=hub,
            generate_titles=config.generate_titles,
            mcp_servers=frozenset(config.mcp_servers),
            model_aliases=aliases,
            prices=config.prices,
        )
        try:
            async with watch.listening(app, config.database_url):
                yield
        finally:
            await app.state.gateway.hand_overs.drain(HAND_OVER_DRAIN_S)
            await hub.stop()
            await stream_pool.close()
            await pool.close()

    app = FastAPI(
        title="chatd-temporal",
        version="0.1.0",
        description="Durable agent chats: every chat turn is a Temporal workflow.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    routes = RouteTemplates(app)
    install_request_spans(app, routes)
    app.add_middleware(BodySizeLimit)
    install_key_gate(app, API_PREFIX)  # after the spans: refusals by key cost no span
    install_key_gate(app, OPENAI_PREFIX)
    routes.include(health.router)
    routers = (
        chats,
        children,
        forks,
        approvals,
        budget,
        messages,
        stream,
        turn_control,
        usage,
        watch,
        webhooks,
    )
    for module in routers:
        routes.include(module.router, prefix=API_PREFIX)
    for openai_module in (open_responses, conversations, model_catalog):
        routes.include(openai_module.router)
    routes.include(open_responses_sockets.router)
    if config.console:
        console = ConsoleConfig(
            temporal_ui_url=config.temporal_ui_url,
            namespace=config.temporal.namespace,
            mcp_servers=sorted(config.mcp_servers),
            model_aliases={alias: model.label for alias, model in aliases.items()},
        )
        routes.include(console_router(console))
    app.openapi = lambda: openapi_document(  # type: ignore[method-assign]
        app, config.mcp_servers, sorted(aliases)
    )
    return app
