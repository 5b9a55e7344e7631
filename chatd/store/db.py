"""Connection pool and schema migrations."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import asyncpg

from chatd.store.advisory_locks import AdvisoryLock

__all__ = ["connect_pool", "encode_json", "migrate"]


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


def encode_json(value: Any) -> str:
    """JSON for a json/jsonb column; NUL characters (which jsonb can't hold) become U+FFFD."""
    text = json.dumps(value)
    if "\\u0000" in text:  # rare: only then pay for the walk
        text = json.dumps(_without_nul(value))
    return text


async def _init_connection(conn: asyncpg.Connection) -> None:
    for jtype in ("json", "jsonb"):
        await conn.set_type_codec(
            jtype, encoder=encode_json, decoder=json.loads, schema="pg_catalog"
        )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Skip asyncpg's RESET ALL on release: pooled connections keep no session state (LISTEN
    and the migration lock use connections of their own), and the reset is a round trip."""


async def connect_pool(dsn: str, *, min_size: int = 2, max_size: int = 20) -> asyncpg.Pool:
    """A pool whose connections encode/decode JSON columns as Python values."""
    pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init_connection, reset=_keep_session
    )
    assert pool is not None
    return pool


async def migrate(dsn: str) -> list[str]:
    """Apply pending migrations in order (serialised by an advisory lock); return those applied."""
    conn = await asyncpg.connect(dsn)
    applied: list[str] = []
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", AdvisoryLock.MIGRATIONS)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations"
            " (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["name"] for r in await conn.fetch("SELECT name FROM schema_migrations")}
        folder = resources.files("chatd.store") / "migrations"
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".sql") or entry.name in done:
                continue
            async with conn.transaction():
                await conn.execute(entry.read_text())
                await conn.execute("INSERT INTO schema_migrations (name) VALUES ($1)", entry.name)
            applied.append(entry.name)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", AdvisoryLock.MIGRATIONS)
        await conn.close()
    return applied
