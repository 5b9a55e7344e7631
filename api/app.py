"""The gateway app factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI

from api.errors import install_error_handlers
from api.hub import EventHub
from api.routes import chats, health, messages, stream, turn_control
from api.state import GatewayState
from chatd.settings import TemporalSettings
from chatd.store.db import connect_pool
from workers.client import connect_temporal

__all__ = ["GatewayConfig", "create_app"]

API_PREFIX = "/api/v1"


@dataclass
class GatewayConfig:
    """What the gateway connects to."""

    database_url: str
    temporal: TemporalSettings


def create_app(config: GatewayConfig) -> FastAPI:
    """The FastAPI app; connections open in its lifespan."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await connect_pool(config.database_url)
        hub = EventHub(config.database_url)
        await hub.start()
        client = await connect_temporal(config.temporal)
        app.state.gateway = GatewayState(
            pool=pool, temporal=client, task_queue=config.temporal.task_queue, hub=hub
        )
        try:
            yield
        finally:
            await hub.stop()
            await pool.close()

    app = FastAPI(title="chatd-temporal", version="0.1.0", lifespan=lifespan)
    install_error_handlers(app)
    app.include_router(health.router)
    for module in (chats, messages, stream, turn_control):
        app.include_router(module.router, prefix=API_PREFIX)
    return app
