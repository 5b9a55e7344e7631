"""Local dev stack: PostgreSQL and the Temporal dev server run as managed child processes."""

from chatd.devstack.ports import free_port
from chatd.devstack.postgres import PostgresError, PostgresProcess
from chatd.devstack.temporal import (
    CHAT_SEARCH_ATTRIBUTES,
    TemporalDevServer,
    TemporalDevServerError,
)

__all__ = [
    "CHAT_SEARCH_ATTRIBUTES",
    "PostgresError",
    "PostgresProcess",
    "TemporalDevServer",
    "TemporalDevServerError",
    "free_port",
]
