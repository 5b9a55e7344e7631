"""Connection pool and schema migrations."""

from __future__ import annotations

import json
from importlib import resources

import asyncpg

__all__ = ["connect_pool", "migrate"]

_MIGRATION_LOCK = 7_400_001


async def _init_connection(conn: asyncpg.Connection) -> None:
    for jtype in ("json", "jsonb"):
        await conn.set_type_codec(
            jtype, encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )


async def connect_pool(dsn: str, *, min_size: int = 2, max_size: int = 20) -> asyncpg.Pool:
    """A pool whose connections encode/decode JSON columns as Python values."""
    pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init_connection
    )
    assert pool is not None
    return pool


async def migrate(dsn: str) -> list[str]:
    """Apply pending migrations in order (serialised by an advisory lock); return those applied."""
    conn = await asyncpg.connect(dsn)
    applied: list[str] = []
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
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
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK)
        await conn.close()
    return applied
