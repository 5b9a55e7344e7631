"""The database-wide advisory lock keys, in one place so no two jobs share one.

Two jobs on one key elect each other out: a retention round would stand aside whenever a
hand-over pass ran (every few seconds on every worker), and hand-overs would wait for as
long as a round pruned. `unique` refuses a repeated value at import.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

__all__ = ["AdvisoryLock", "try_lock"]


@enum.unique
class AdvisoryLock(enum.IntEnum):
    """One key per job that at most one process may run at a time."""

    MIGRATIONS = 7_400_001
    RECONCILER_SWEEP = 7_400_002
    RETENTION_ROUND = 7_400_003
    HAND_OVER_PASS = 7_400_004


@asynccontextmanager
async def try_lock(pool: asyncpg.Pool, lock: AdvisoryLock) -> AsyncIterator[bool]:
    """Try `lock` for the duration of the block: True if this process holds it.

    A transaction-level lock on a connection of its own (the block's work commits on
    others): it ends with the block, or with the connection if this process dies, so no
    process can keep it from the others.
    """
    async with pool.acquire() as conn, conn.transaction():
        yield bool(await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", lock))
